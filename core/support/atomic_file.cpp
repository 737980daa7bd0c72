#include "support/atomic_file.h"

#include "support/huge_pages.h"
#include "support/errors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace memledger {

namespace {

// Renames `from` over `to`; false with errno set when it could not. Over an existing file the two are exchanged
// and the old one is then removed, atomically all the same: a plain rename over a file makes ext4 (its
// auto_da_alloc) start writing the new file's data to the disk before the rename returns, which took 25 ms for a
// 60 MB report here, longer than writing it. Like the plain rename, it never waits for the data to reach the disk.
bool moveIntoPlace(const std::string& from, const std::string& to)
{
#if defined(__linux__) && defined(RENAME_EXCHANGE)
    struct stat st {};
    if (::lstat(to.c_str(), &st) == 0 && S_ISREG(st.st_mode)
        && ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
        ::unlink(from.c_str()); // the old file, now under the temporary name
        return true;
    }
#endif
    return std::rename(from.c_str(), to.c_str()) == 0;
}

} // namespace

AtomicFileWriter::AtomicFileWriter(const std::string& path)
    : path_(path)
    , tmp_(path + ".tmp-" + std::to_string(::getpid()))
{
    file_ = std::fopen(tmp_.c_str(), "wb");
    if (!file_)
        throw std::runtime_error(path_ + ": cannot write: " + std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter()
{
    if (file_) {
        std::fclose(file_);
        std::remove(tmp_.c_str());
    }
}

void AtomicFileWriter::write(const char* data, std::size_t n)
{
    if (!file_)
        throw std::runtime_error(path_ + ": cannot write: the file is closed");
    if (std::fwrite(data, 1, n, file_) != n)
        throw std::runtime_error(path_ + ": cannot write: " + std::strerror(errno));
}

void AtomicFileWriter::commit()
{
    if (!file_)
        throw std::runtime_error(path_ + ": cannot write: the file is closed");
    bool ok = std::fflush(file_) == 0;
    int err = errno;
    ok = std::fclose(file_) == 0 && ok;
    file_ = nullptr;
    if (!ok || !moveIntoPlace(tmp_, path_)) {
        if (ok)
            err = errno;
        std::remove(tmp_.c_str());
        throw std::runtime_error(path_ + ": cannot write: " + std::strerror(err));
    }
}

void writeFileAtomically(const std::string& path, const std::string& contents)
{
    AtomicFileWriter w(path);
    w.write(contents.data(), contents.size());
    w.commit();
}

FileReader::FileReader(const std::string& path)
    : path_(path)
{
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        throw FileError(path, "no such file");
    if (std::filesystem::is_directory(path, ec))
        throw FileError(path, "is a directory");
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
        throw FileError(path, std::string("cannot open for reading: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode))
        size_ = static_cast<std::size_t>(st.st_size);
#if defined(POSIX_FADV_SEQUENTIAL)
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
}

FileReader::~FileReader()
{
    if (fd_ >= 0)
        ::close(fd_);
}

std::size_t FileReader::read(char* dst, std::size_t n)
{
    for (;;) {
        const ssize_t got = ::read(fd_, dst, n);
        if (got >= 0)
            return static_cast<std::size_t>(got);
        if (errno != EINTR)
            throw FileError(path_, std::string("read error: ") + std::strerror(errno));
    }
}

std::string readWholeFile(const std::string& path)
{
    FileReader f(path);
    std::string out;
    out.reserve(f.size());
    adviseHugePages(out.data(), out.capacity());
    out.resize(f.size());
    std::size_t got = 0;
    for (std::size_t n; got < out.size() && (n = f.read(out.data() + got, out.size() - got)) > 0;)
        got += n;
    out.resize(got); // the file shrank meanwhile
    char buf[65536];
    for (std::size_t n; (n = f.read(buf, sizeof buf)) > 0;) // the file grew meanwhile
        out.append(buf, n);
    return out;
}

} // namespace memledger

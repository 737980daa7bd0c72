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
#include <unistd.h>

namespace memledger {

void writeFileAtomically(const std::string& path, const std::string& contents)
{
    std::string tmp = path + ".tmp-" + std::to_string(::getpid());
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f)
        throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
    bool ok = std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
    ok = std::fflush(f) == 0 && ok;
    int err = errno;
    ok = std::fclose(f) == 0 && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        if (ok)
            err = errno;
        std::remove(tmp.c_str());
        throw std::runtime_error(path + ": cannot write: " + std::strerror(err));
    }
}

std::string readWholeFile(const std::string& path)
{
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        throw FileError(path, "no such file");
    if (std::filesystem::is_directory(path, ec))
        throw FileError(path, "is a directory");
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f)
        throw FileError(path, std::string("cannot open for reading: ") + std::strerror(errno));
    std::string out;
    auto size = std::filesystem::file_size(path, ec);
    out.reserve(ec ? 0 : static_cast<std::size_t>(size));
    adviseHugePages(out.data(), out.capacity());
    out.resize(ec ? 0 : static_cast<std::size_t>(size));
    std::size_t got = out.empty() ? 0 : std::fread(out.data(), 1, out.size(), f);
    out.resize(got);
    char buf[65536];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) // the file grew meanwhile
        out.append(buf, n);
    bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed)
        throw FileError(path, "read error");
    return out;
}

} // namespace memledger

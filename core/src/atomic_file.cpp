#include "memledger/atomic_file.h"

#include "memledger/errors.h"

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
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw FileError(path, "cannot open for reading");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

} // namespace memledger

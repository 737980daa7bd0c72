#pragma once
// Runs a command line and captures its output and exit code (for tests of the memledger executable).
#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace memledger::test {

struct CommandResult {
    int exit_code = -1;
    std::string output; // stdout and stderr together
};

inline CommandResult runCommand(const std::string& command)
{
    CommandResult r;
    FILE* p = ::popen((command + " 2>&1").c_str(), "r");
    if (!p)
        return r;
    std::array<char, 4096> buf {};
    std::size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0)
        r.output.append(buf.data(), n);
    int status = ::pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

inline std::string memledgerBinary()
{
    return MEMLEDGER_BINARY;
}

} // namespace memledger::test

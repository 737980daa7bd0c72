#pragma once
// What the benchmarks share: snapshots in PyTorch's own layout written by Python's pickle
// (bench/make_snapshot.py, cached in the temporary folder), and a command run in a fresh process with its wall
// time and peak resident memory.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef MEMLEDGER_SOURCE_DIR
#define MEMLEDGER_SOURCE_DIR "."
#endif

namespace memledger::bench {

// /tmp/memledger-bench-NAME-ENTRIES.pickle, made by make_snapshot.py with `flags` unless it exists.
inline std::string pytorchLayoutSnapshot(const std::string& name, std::size_t entries, const std::string& flags = {})
{
    namespace fs = std::filesystem;
    auto path = (fs::temp_directory_path() / ("memledger-bench-" + name + "-" + std::to_string(entries) + ".pickle"))
                    .string();
    if (!fs::exists(path)) {
        std::string cmd = "/usr/bin/python3 " MEMLEDGER_SOURCE_DIR "/bench/make_snapshot.py '" + path + ".part' --entries "
            + std::to_string(entries) + " " + flags;
        std::printf("making %s\n", path.c_str());
        std::fflush(stdout);
        if (std::system(cmd.c_str()) != 0)
            throw std::runtime_error("could not run " + cmd);
        fs::rename(path + ".part", path);
    }
    return path;
}

// A /proc/self/status field in bytes ("VmRSS", "VmHWM"); 0 when unknown.
inline std::size_t statusBytes(const char* field)
{
    std::ifstream in("/proc/self/status");
    std::string line;
    const std::size_t n = std::strlen(field);
    while (std::getline(in, line))
        if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
            return static_cast<std::size_t>(std::atoll(line.c_str() + n + 1)) * 1024;
    return 0;
}

struct ProcessCost {
    double seconds = -1; // wall time from fork to exit; -1: it failed
    double peak_mib = 0; // the child's peak resident set (ru_maxrss)
};

// Runs argv[0] with argv in a fresh process, its output sent to /dev/null.
inline ProcessCost runProcess(const std::vector<std::string>& argv)
{
    std::vector<char*> args;
    for (const auto& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    auto t0 = std::chrono::steady_clock::now();
    pid_t pid = fork();
    if (pid == 0) {
        std::FILE* null = std::fopen("/dev/null", "w");
        if (null) {
            dup2(fileno(null), 1);
            dup2(fileno(null), 2);
        }
        execvp(args[0], args.data());
        _exit(127);
    }
    ProcessCost cost;
    if (pid < 0)
        return cost;
    int status = 0;
    rusage usage {};
    if (wait4(pid, &status, 0, &usage) != pid)
        return cost;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        cost.seconds = s;
    cost.peak_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
    return cost;
}

} // namespace memledger::bench

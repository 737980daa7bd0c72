// The command a user types, end to end: `memledger analyze SNAPSHOT --json OUT` of a 1,000,000-entry snapshot in
// PyTorch's own layout (bench/make_snapshot.py), in a fresh process, against `python3 -c pickle.load` of the same
// file minus the interpreter's start-up; interleaved, best of 3. Then the start-up of the commands that never run a
// model (--version; analyze, diff and ranks of a 1,000-entry snapshot): wall time and peak resident memory, which
// show that libtorch is not loaded (recording/torch_library.h).
// Targets (issue 20): analyze --json >= 5x faster than pickle.load; start-up under 0.1 s and 50 MB.
// Then `memledger ranks` of eight such files (different seeds), one per rank: time and peak memory.
// Usage: bench_cli [--entries N] [--ranks K (default 8; 0: none)] [FILE]
#include "bench_files.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#ifndef MEMLEDGER_BINARY
#define MEMLEDGER_BINARY "memledger"
#endif

using namespace memledger::bench;

namespace {

// Best wall time of `runs` and the largest peak memory.
ProcessCost best(const std::vector<std::string>& argv, int runs)
{
    ProcessCost b;
    b.seconds = 1e9;
    for (int i = 0; i < runs; ++i) {
        auto c = runProcess(argv);
        if (c.seconds < 0)
            return c;
        b.seconds = std::min(b.seconds, c.seconds);
        b.peak_mib = std::max(b.peak_mib, c.peak_mib);
    }
    return b;
}

} // namespace

int main(int argc, char** argv)
{
    std::size_t entries = 1000000;
    int ranks = 8;
    std::string file;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--entries" && i + 1 < argc)
            entries = std::stoull(argv[++i]);
        else if (a == "--ranks" && i + 1 < argc)
            ranks = std::stoi(argv[++i]);
        else
            file = a;
    }
    std::string small;
    try {
        if (file.empty())
            file = pytorchLayoutSnapshot("pytorch", entries);
        small = pytorchLayoutSnapshot("pytorch", 1000);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cli: %s\n", e.what());
        return 2;
    }
    const std::string bin = MEMLEDGER_BINARY, out = "/tmp/memledger-bench-cli.json";
    const std::vector<std::string> analyze {bin, "analyze", file, "--json", out};
    const std::vector<std::string> load {"/usr/bin/python3", "-c",
        "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))", file};
    const std::vector<std::string> bare {"/usr/bin/python3", "-c", "pass"};
    double ours = 1e9, py = 1e9, start = 1e9, oursMib = 0, pyMib = 0;
    for (int run = 0; run < 3; ++run) {
        auto a = runProcess(analyze), p = runProcess(load), b = runProcess(bare);
        if (a.seconds < 0 || p.seconds < 0 || b.seconds < 0) {
            std::fprintf(stderr, "bench_cli: a run failed (%s analyze %s --json %s, or python3)\n", bin.c_str(),
                file.c_str(), out.c_str());
            return 2;
        }
        ours = std::min(ours, a.seconds);
        py = std::min(py, p.seconds);
        start = std::min(start, b.seconds);
        oursMib = std::max(oursMib, a.peak_mib);
        pyMib = std::max(pyMib, p.peak_mib);
    }
    const double pickle = py - start, ratio = pickle / ours;
    std::printf("%-58s %9s %10s\n", "command (fresh process, best of 3)", "time", "peak RSS");
    std::printf("%-58s %8.3fs %7.0f MiB\n", ("memledger analyze " + std::to_string(entries) + "-entry snapshot --json").c_str(), ours,
        oursMib);
    std::printf("%-58s %8.3fs %7.0f MiB   (python3 start-up %.3fs subtracted)\n", "python3 pickle.load of the same file",
        pickle, pyMib, start);
    std::printf("ratio: %.1fx (target >= 5x)\n\n", ratio);
    bool ok = ratio >= 5.0;

    struct Startup {
        const char* what;
        std::vector<std::string> argv;
    };
    const Startup startups[] = {
        {"memledger --version", {bin, "--version"}},
        {"memledger analyze (1,000-entry snapshot)", {bin, "analyze", small}},
        {"memledger analyze (1,000-entry snapshot) --json", {bin, "analyze", small, "--json", out}},
        {"memledger diff (two 1,000-entry snapshots)", {bin, "diff", small, small}},
        {"memledger ranks (two 1,000-entry snapshots)", {bin, "ranks", small, small}},
    };
    std::printf("%-58s %9s %10s   (targets: < 0.1 s, < 50 MiB)\n", "start-up, no model", "time", "peak RSS");
    for (const auto& s : startups) {
        auto c = best(s.argv, 5);
        if (c.seconds < 0) {
            std::fprintf(stderr, "bench_cli: %s failed\n", s.what);
            return 2;
        }
        std::printf("%-58s %8.3fs %7.1f MiB\n", s.what, c.seconds, c.peak_mib);
        ok = ok && c.seconds < 0.1 && c.peak_mib < 50;
    }

    // A multi-GPU job: eight 1,000,000-entry snapshots (one per rank, each its own trace) compared at once.
    if (ranks > 0) {
        std::vector<std::string> rankArgs {bin, "ranks"};
        try {
            for (int k = 0; k < ranks; ++k)
                rankArgs.push_back(pytorchLayoutSnapshot("rank" + std::to_string(k), entries, "--seed " + std::to_string(k + 1)));
        } catch (const std::exception& e) {
            std::fprintf(stderr, "bench_cli: %s\n", e.what());
            return 2;
        }
        rankArgs.insert(rankArgs.end(), {"--json", out});
        auto c = best(rankArgs, 2);
        if (c.seconds < 0) {
            std::fprintf(stderr, "bench_cli: memledger ranks failed\n");
            return 2;
        }
        std::printf("\n%-58s %8.3fs %7.0f MiB   (this machine: 2 cores, 24 GiB)\n",
            ("memledger ranks, " + std::to_string(ranks) + " files of " + std::to_string(entries) + " entries --json").c_str(),
            c.seconds, c.peak_mib);
    }
    std::printf("%s\n", ok ? "PASS" : "MISSED A TARGET");
    return ok ? 0 : 1;
}

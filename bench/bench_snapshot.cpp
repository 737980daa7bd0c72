// Snapshot import speed and memory on files in PyTorch's own layout, written by Python's pickle
// (bench/make_snapshot.py): memledger's read + decode, in this process, against `/usr/bin/python3 -c
// pickle.load` of the same file minus the interpreter's start-up (`/usr/bin/python3 -c pass`), both timed as
// wall-clock runs side by side, best of 3. Memory: the growth of this process's peak resident set while it
// decodes (VmHWM, reset through /proc/self/clear_refs; it includes the file's bytes, read whole), and what
// the decoded snapshot keeps (its trace columns, streams, interned strings and stacks), per trace entry.
// Targets (issue 12): >= 5x faster than pickle.load, <= 100 bytes per trace entry including the stacks.
// Usage: bench_snapshot [--entries N] [FILE...]   (no FILE: makes the three files of the README's table)
#include "snapshot/snapshot.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#ifndef MEMLEDGER_SOURCE_DIR
#define MEMLEDGER_SOURCE_DIR "."
#endif

using namespace memledger;
namespace fs = std::filesystem;

namespace {

double seconds(std::chrono::steady_clock::duration d)
{
    return std::chrono::duration<double>(d).count();
}

// A /proc/self/status field in bytes ("VmRSS", "VmHWM"); 0 when unknown.
std::size_t statusBytes(const char* field)
{
    std::ifstream in("/proc/self/status");
    std::string line;
    const std::size_t n = std::strlen(field);
    while (std::getline(in, line))
        if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
            return static_cast<std::size_t>(std::atoll(line.c_str() + n + 1)) * 1024;
    return 0;
}

bool resetPeak()
{
    std::ofstream out("/proc/self/clear_refs");
    out << "5";
    return static_cast<bool>(out);
}

double wallOf(const std::string& cmd)
{
    auto t0 = std::chrono::steady_clock::now();
    int rc = std::system(cmd.c_str());
    double s = seconds(std::chrono::steady_clock::now() - t0);
    return rc == 0 ? s : -1.0;
}

struct Result {
    std::string file;
    double mb = 0;
    std::size_t entries = 0, frames = 0, stacks = 0;
    double ours = 0, python = 0, peakPerEntry = 0, keptPerEntry = 0, report = 0, check = 0;
};

Result measure(const std::string& file)
{
    Result r;
    r.file = file;
    r.mb = static_cast<double>(fs::file_size(file)) / 1e6;
    double best = 1e9;
    for (int run = 0; run < 3; ++run) {
        const bool peakKnown = resetPeak();
        const std::size_t before = statusBytes("VmRSS");
        auto t0 = std::chrono::steady_clock::now();
        Snapshot s = readSnapshotFile(file);
        best = std::min(best, seconds(std::chrono::steady_clock::now() - t0));
        const std::size_t peak = statusBytes("VmHWM");
        const auto& t = *s.trace;
        r.entries = t.size();
        r.frames = t.stacks.frameCount();
        r.stacks = t.stacks.stackCount() - 1;
        const double n = static_cast<double>(std::max<std::size_t>(1, t.size()));
        r.keptPerEntry = t.bytesPerEvent()
            + static_cast<double>(s.trace_stream.capacity() * sizeof(std::uint64_t) + t.fixedBytes()) / n;
        r.peakPerEntry = peakKnown && peak > before ? static_cast<double>(peak - before) / n : -1;
        if (run == 0) { // what the window does next: the report its timeline shows, the allocator check
            auto t1 = std::chrono::steady_clock::now();
            Report rep = reportFromSnapshot(std::move(s), file, false);
            auto t2 = std::chrono::steady_clock::now();
            rep = addAllocatorCheck(rep);
            r.report = seconds(t2 - t1);
            r.check = seconds(std::chrono::steady_clock::now() - t2);
        }
    }
    r.ours = best;
    // Python: the same file with pickle.load, and the interpreter alone, interleaved.
    double py = 1e9, bare = 1e9;
    const std::string load = "/usr/bin/python3 -c \"import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))\" " + file;
    for (int run = 0; run < 3; ++run) {
        double a = wallOf(load), b = wallOf("/usr/bin/python3 -c pass");
        if (a < 0 || b < 0)
            return r;
        py = std::min(py, a);
        bare = std::min(bare, b);
    }
    r.python = py - bare;
    return r;
}

} // namespace

int main(int argc, char** argv)
{
    std::size_t entries = 1000000;
    std::vector<std::string> files;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--entries" && i + 1 < argc)
            entries = std::stoull(argv[++i]);
        else
            files.push_back(a);
    }
    if (files.empty()) {
        // PyTorch's sharing, stacks about 30 deep; the same with stacks about 80 deep (12 more levels of a
        // training framework); a list per site shared by all its entries (issue 12's "trace repeated").
        const std::pair<const char*, const char*> kinds[] = {
            {"pytorch", ""}, {"deep-stacks", "--nesting 12"}, {"shared-lists", "--share-lists"}};
        auto dir = fs::temp_directory_path();
        for (const auto& [name, flags] : kinds) {
            auto path = (dir / ("memledger-bench-" + std::string(name) + "-" + std::to_string(entries) + ".pickle"))
                            .string();
            if (!fs::exists(path)) {
                std::string cmd = "/usr/bin/python3 " MEMLEDGER_SOURCE_DIR "/bench/make_snapshot.py " + path
                    + " --entries " + std::to_string(entries) + " " + flags;
                std::printf("making %s\n", path.c_str());
                std::fflush(stdout);
                if (std::system(cmd.c_str()) != 0) {
                    std::fprintf(stderr, "bench_snapshot: could not run %s\n", cmd.c_str());
                    return 2;
                }
            }
            files.push_back(path);
        }
    }
    bool ok = true;
    std::printf("%-44s %8s %9s %7s %7s %9s %9s %6s %10s %10s\n", "file", "MB", "entries", "frames", "stacks",
        "memledger", "pickle", "ratio", "peak B/e", "kept B/e");
    for (const auto& f : files) {
        Result r;
        try {
            r = measure(f);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "bench_snapshot: %s\n", e.what());
            return 2;
        }
        const double ratio = r.python > 0 ? r.python / r.ours : 0;
        std::printf("%-44s %8.1f %9zu %7zu %7zu %8.3fs %8.3fs %5.1fx %10.0f %10.0f   (report %.3fs, check %.3fs)\n",
            fs::path(r.file).filename().string().c_str(), r.mb, r.entries, r.frames, r.stacks, r.ours, r.python,
            ratio, r.peakPerEntry, r.keptPerEntry, r.report, r.check);
        ok = ok && (r.python <= 0 || ratio >= 5.0) && r.keptPerEntry <= 100.0;
    }
    std::printf("memledger: read + decode in this process; pickle: python3 pickle.load minus python3 start-up.\n"
                "peak B/e: growth of peak RSS while decoding (the file's bytes included) per trace entry;\n"
                "kept B/e: trace columns + streams + interned strings and stacks per trace entry.\n"
                "targets: ratio >= 5, kept <= 100 bytes per entry\n%s\n",
        ok ? "PASS" : "MISSED A TARGET");
    return ok ? 0 : 1;
}

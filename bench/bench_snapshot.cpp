// Snapshot import speed and memory on files in PyTorch's own layout, written by Python's pickle
// (bench/make_snapshot.py): memledger's read + decode, in a fresh process each time (this program run with
// --child), against `/usr/bin/python3 -c pickle.load` of the same file minus the interpreter's start-up
// (`/usr/bin/python3 -c pass`), all timed side by side, interleaved, best of 3. Memory: how much the fresh
// process's peak resident set (VmHWM) grows while it reads, and its resident set once read with the snapshot
// alive, per trace entry: everything the read touched, stacks and strings included.
// Targets (issue 12): >= 5x faster than pickle.load, <= 100 bytes per trace entry including the stacks.
// Usage: bench_snapshot [--entries N] [FILE...]   (no FILE: makes the three files of the README's table, and a
// real training trace of ../shared/snapshots repeated to N entries by bench/make_real_layout.py)
#include "bench_files.h"
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

using namespace memledger;
namespace fs = std::filesystem;

namespace {

double seconds(std::chrono::steady_clock::duration d)
{
    return std::chrono::duration<double>(d).count();
}

struct Result {
    std::string file;
    double mb = 0;
    std::size_t entries = 0, frames = 0, stacks = 0;
    double ours = 0, python = 0, peakPerEntry = 0, keptPerEntry = 0, report = 0, check = 0;
};

// In a child process (a fresh one each time, as the user's is): read the file once and print the time, the
// memory, and what the window does next (the report its timeline shows, the allocator check).
int child(const std::string& file)
{
    const std::size_t before = bench::statusBytes("VmRSS");
    auto t0 = std::chrono::steady_clock::now();
    Snapshot s = readSnapshotFile(file);
    const double read = seconds(std::chrono::steady_clock::now() - t0);
    const std::size_t peak = bench::statusBytes("VmHWM"), kept = bench::statusBytes("VmRSS");
    const auto& t = *s.trace;
    const std::size_t entries = t.size(), frames = t.stacks.frameCount(), stacks = t.stacks.stackCount() - 1;
    auto t1 = std::chrono::steady_clock::now();
    Report rep = reportFromSnapshot(std::move(s), file, false);
    auto t2 = std::chrono::steady_clock::now();
    rep = addAllocatorCheck(rep);
    std::printf("%.6f %zu %zu %zu %zu %zu %.6f %.6f\n", read, peak > before ? peak - before : 0,
        kept > before ? kept - before : 0, entries, frames, stacks, seconds(t2 - t1),
        seconds(std::chrono::steady_clock::now() - t2));
    return 0;
}

std::string selfPath()
{
    std::error_code ec;
    auto p = fs::read_symlink("/proc/self/exe", ec);
    return ec ? std::string("bench_snapshot") : p.string();
}

Result measure(const std::string& file)
{
    Result r;
    r.file = file;
    r.mb = static_cast<double>(fs::file_size(file)) / 1e6;
    // Python: the same file with pickle.load, and the interpreter alone. All three interleaved, best of 3;
    // memory: the largest of the three children's.
    const std::string ours = "'" + selfPath() + "' --child '" + file + "'";
    const std::vector<std::string> load {
        "/usr/bin/python3", "-c", "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))", file};
    double best = 1e9, py = 1e9, bare = 1e9;
    std::size_t peak = 0, kept = 0;
    for (int run = 0; run < 3; ++run) {
        std::FILE* p = ::popen(ours.c_str(), "r");
        if (!p)
            throw std::runtime_error("cannot run " + ours);
        double t = 0, rep = 0, chk = 0;
        std::size_t pk = 0, kp = 0;
        const int got = std::fscanf(p, "%lf %zu %zu %zu %zu %zu %lf %lf", &t, &pk, &kp, &r.entries, &r.frames,
            &r.stacks, &rep, &chk);
        if (::pclose(p) != 0 || got != 8)
            throw std::runtime_error("the child run failed: " + ours);
        best = std::min(best, t);
        peak = std::max(peak, pk);
        kept = std::max(kept, kp);
        if (run == 0) {
            r.report = rep;
            r.check = chk;
        }
        double a = bench::runProcess(load).seconds, b = bench::runProcess({"/usr/bin/python3", "-c", "pass"}).seconds;
        if (a < 0 || b < 0)
            continue;
        py = std::min(py, a);
        bare = std::min(bare, b);
    }
    r.ours = best;
    r.python = py < 1e9 ? py - bare : 0;
    const double n = static_cast<double>(std::max<std::size_t>(1, r.entries));
    r.peakPerEntry = static_cast<double>(peak) / n;
    r.keptPerEntry = static_cast<double>(kept) / n;
    return r;
}

} // namespace

int main(int argc, char** argv)
{
    std::size_t entries = 1000000;
    std::vector<std::string> files;
    if (argc == 3 && std::string(argv[1]) == "--child") {
        try {
            return child(argv[2]);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "bench_snapshot: %s\n", e.what());
            return 2;
        }
    }
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
        for (const auto& [name, flags] : kinds) {
            std::string path;
            try {
                path = bench::pytorchLayoutSnapshot(name, entries, flags);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "bench_snapshot: %s\n", e.what());
                return 2;
            }
            files.push_back(path);
        }
        // A real training trace (../shared/snapshots) repeated to the same count, frames shared as PyTorch
        // shares them (bench/make_real_layout.py): issue 31's real layout.
        const std::string source
            = MEMLEDGER_SOURCE_DIR "/../shared/snapshots/training-loop-annotations-python-frames.pickle";
        if (fs::exists(source)) {
            const auto path
                = (fs::temp_directory_path() / ("memledger-bench-real-layout-" + std::to_string(entries) + ".pickle"))
                      .string();
            if (!fs::exists(path)) {
                const std::string cmd = "/usr/bin/python3 " MEMLEDGER_SOURCE_DIR "/bench/make_real_layout.py '" + path
                    + ".part' --entries " + std::to_string(entries) + " --source '" + source + "'";
                std::printf("making %s\n", path.c_str());
                std::fflush(stdout);
                if (std::system(cmd.c_str()) != 0) {
                    std::fprintf(stderr, "bench_snapshot: could not run %s\n", cmd.c_str());
                    return 2;
                }
                fs::rename(path + ".part", path);
            }
            files.push_back(path);
        } else {
            std::printf("(no %s: the real layout's row is left out)\n", source.c_str());
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
        ok = ok && (r.python <= 0 || ratio >= 5.0) && r.peakPerEntry <= 100.0;
    }
    std::printf("memledger: read + decode in a fresh process; pickle: python3 pickle.load minus python3 start-up.\n"
                "peak B/e: growth of the process's peak resident memory while it reads, per trace entry;\n"
                "kept B/e: growth of its resident memory once read (the snapshot alive), per trace entry.\n"
                "targets: ratio >= 5, peak <= 100 bytes per entry\n%s\n",
        ok ? "PASS" : "MISSED A TARGET");
    return ok ? 0 : 1;
}

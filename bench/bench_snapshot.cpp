// Snapshot import speed: writes a snapshot of N trace entries (default 1,000,000) with memledger's writer,
// then times memledger's open + decode + report against Python's pickle.load of the same file (Debian's
// /usr/bin/python3), best of 5 each. Targets: >= 5x faster, <= 64 bytes per event, <= 2 s.
// Usage: bench_snapshot [ENTRIES] [FILE]
#include "support/atomic_file.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_writer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

using namespace memledger;

namespace {

// A training-loop-like trace: alloc, free_requested, free_completed of tensors whose sizes repeat per layer.
Trace makeTrace(std::size_t entries)
{
    Trace t;
    t.reserve(entries);
    std::vector<std::uint32_t> frames;
    for (int i = 0; i < 64; ++i)
        frames.push_back(t.strings.intern("/home/user/project/model.py:" + std::to_string(100 + i) + " forward"));
    struct Live {
        std::uint64_t addr;
        std::int64_t size;
        std::uint32_t where;
    };
    std::vector<Live> live;
    std::uint64_t nextAddr = 0x7f0000000000;
    std::uint32_t seed = 1;
    auto rnd = [&] { return seed = seed * 1664525u + 1013904223u; };
    std::int64_t time = 0;
    while (t.size() + 3 <= entries) {
        time += 1000 + (rnd() % 4000);
        bool doAlloc = live.size() < 64 || (live.size() < 4096 && rnd() % 2 == 0);
        if (doAlloc) {
            auto layer = rnd() % 64;
            std::int64_t size = (std::int64_t {1} << (9 + layer % 16)) + (layer % 5) * 4096;
            std::uint64_t addr = nextAddr;
            nextAddr += static_cast<std::uint64_t>(size + 4096);
            auto i = t.push(time, size, addr, Action::Alloc, 0);
            t.where[i] = frames[layer];
            live.push_back({addr, size, frames[layer]});
        } else {
            auto k = rnd() % live.size();
            auto l = live[k];
            live[k] = live.back();
            live.pop_back();
            auto r = t.push(time, l.size, l.addr, Action::FreeRequested, 0);
            t.where[r] = l.where;
            auto f = t.push(time + 10, l.size, l.addr, Action::Free, 0);
            t.where[f] = l.where;
        }
    }
    while (t.size() < entries)
        t.push(time, 0, 0, Action::Snapshot, 0);
    return t;
}

double seconds(std::chrono::steady_clock::duration d)
{
    return std::chrono::duration<double>(d).count();
}

} // namespace

int main(int argc, char** argv)
{
    std::size_t entries = argc > 1 ? std::stoull(argv[1]) : 1000000;
    std::string file
        = argc > 2 ? argv[2] : (std::filesystem::temp_directory_path() / "memledger-bench-snapshot.pickle").string();
    {
        Trace t = makeTrace(entries);
        auto t0 = std::chrono::steady_clock::now();
        writeFileAtomically(file, encodeSnapshot(t));
        std::printf("wrote %s: %zu trace entries, %.1f MB, in %.2f s\n", file.c_str(), t.size(),
            static_cast<double>(std::filesystem::file_size(file)) / 1e6,
            seconds(std::chrono::steady_clock::now() - t0));
    }

    // What the timeline needs: read, decode, report. The allocator check (segment sizes the model reproduces)
    // is timed on its own.
    double ours = 1e9, check = 1e9, bytesPerEvent = 0, withStreams = 0;
    for (int run = 0; run < 5; ++run) {
        auto t0 = std::chrono::steady_clock::now();
        Report r = readSnapshotReport(file, false);
        ours = std::min(ours, seconds(std::chrono::steady_clock::now() - t0));
        auto t1 = std::chrono::steady_clock::now();
        r = addAllocatorCheck(r);
        check = std::min(check, seconds(std::chrono::steady_clock::now() - t1));
        bytesPerEvent = r.trace->bytesPerEvent();
        withStreams = bytesPerEvent
            + static_cast<double>(r.snapshot->trace_stream.capacity() * sizeof(std::uint64_t))
                / static_cast<double>(std::max<std::size_t>(1, r.trace->size()));
        if (run == 0)
            std::printf("memledger: %zu events, peak %lld bytes, allocator model %lld segments\n", r.trace->size(),
                static_cast<long long>(r.peak_bytes), static_cast<long long>(r.snapshot->allocator_check.model_total));
    }

    std::string cmd = "/usr/bin/python3 -c \"import pickle, sys, time\n"
                      "best = 1e9\n"
                      "for _ in range(5):\n"
                      "    f = open(sys.argv[1], 'rb')\n"
                      "    t = time.perf_counter(); pickle.load(f); best = min(best, time.perf_counter() - t)\n"
                      "    f.close()\n"
                      "print(best)\" "
        + file;
    double python = -1;
    if (FILE* p = popen(cmd.c_str(), "r")) {
        char buf[64] = {0};
        if (std::fgets(buf, sizeof buf, p))
            python = std::atof(buf);
        pclose(p);
    }
    std::printf(
        "memledger open+decode+report: %.3f s   (target <= 2 s); the allocator check besides: %.3f s\n", ours, check);
    std::printf(
        "trace memory: %.1f bytes/event (%.1f with the stream column)   (target <= 64)\n", bytesPerEvent, withStreams);
    if (python > 0)
        std::printf("python pickle.load: %.3f s   ratio %.1fx   (target >= 5x)\n", python, python / ours);
    else
        std::printf("python pickle.load: /usr/bin/python3 did not run\n");
    bool ok = ours <= 2.0 && withStreams <= 64.0 && (python <= 0 || python / ours >= 5.0);
    std::printf("%s\n", ok ? "PASS" : "MISSED A TARGET");
    return ok ? 0 : 1;
}

// Recorder overhead: recorded run time over plain run time, interleaved in one process (median of pairs),
// and the recorder's memory per event. Usage: bench_recorder MODEL.pt [INPUT] [BATCH] [PAIRS]
#include "support/format.h"
#include "cli_options.h"
#include "recording/model.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

using namespace memledger;

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_recorder MODEL.pt [INPUT=1x3x224x224] [BATCH=8] [PAIRS=7]\n");
        return 2;
    }
    auto model = Model::open(argv[1]);
    RunOptions plain;
    plain.inputs = parseShapes(argc > 2 ? argv[2] : "1x3x224x224");
    plain.batch = argc > 3 ? std::stoll(argv[3]) : 8;
    int pairs = argc > 4 ? std::stoi(argv[4]) : 7;
    plain.record = false;
    RunOptions recorded = plain;
    recorded.record = true;
    recorded.warm_up = false;
    model.run(plain); // warm-up for both
    std::vector<double> ratios, plainMs, recMs;
    RawRun last;
    for (int i = 0; i < pairs; ++i) {
        auto p = model.run(plain).info.duration_ms;
        last = model.run(recorded);
        auto r = last.info.duration_ms;
        plainMs.push_back(p);
        recMs.push_back(r);
        ratios.push_back(r / p);
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    std::printf("model %s batch %lld, %d interleaved pairs\n", argv[1], static_cast<long long>(*plain.batch), pairs);
    std::printf("plain run    median %.2f ms\n", median(plainMs));
    std::printf("recorded run median %.2f ms\n", median(recMs));
    std::printf("recorded/plain ratio (median of pairs): %.3f (target <= 1.05)\n", median(ratios));
    std::printf("events %zu, recorder bytes per event: %.1f (target <= 64), plus %zu bytes of interned strings "
                "for the whole run\n",
        last.trace.size(), last.trace.bytesPerEvent(), last.trace.fixedBytes());
    return 0;
}

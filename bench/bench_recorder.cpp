// Recorder overhead: recorded run time over plain run time, interleaved in one process (median of pairs),
// and the recorder's memory per event.
// Usage: bench_recorder MODEL.pt [INPUT] [BATCH] [PAIRS] [--mode inference|train] [--optimizer sgd|adam|adamw|none]
// In train mode both sides time one training step (forward, loss, backward, optimizer) after their own warm-up
// step: the plain side is RunOptions.record = false, whose info.duration_ms is the step alone.
#include "support/format.h"
#include "cli_options.h"
#include "recording/model.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace memledger;

int main(int argc, char** argv)
{
    std::vector<std::string> positional;
    std::string mode = "inference";
    std::string optimizer = "sgd";
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if ((a == "--mode" || a == "--optimizer") && i + 1 < argc)
            (a == "--mode" ? mode : optimizer) = argv[++i];
        else if (a.rfind("--mode=", 0) == 0)
            mode = a.substr(7);
        else if (a.rfind("--optimizer=", 0) == 0)
            optimizer = a.substr(12);
        else
            positional.push_back(a);
    }
    if (positional.empty() || (mode != "inference" && mode != "train")) {
        std::fprintf(stderr,
            "usage: bench_recorder MODEL.pt [INPUT=1x3x224x224] [BATCH=8] [PAIRS=7] [--mode inference|train] "
            "[--optimizer sgd|adam|adamw|none]\n");
        return 2;
    }
    const bool train = mode == "train";
    auto model = Model::open(positional[0]);
    RunOptions plain;
    plain.inputs = parseShapes(positional.size() > 1 ? positional[1] : "1x3x224x224");
    plain.batch = positional.size() > 2 ? std::stoll(positional[2]) : 8;
    int pairs = positional.size() > 3 ? std::stoi(positional[3]) : 7;
    plain.mode = train ? RunMode::Train : RunMode::Inference;
    plain.optimizer = optimizer;
    plain.record = false;
    RunOptions recorded = plain;
    recorded.record = true;
    recorded.warm_up = false; // inference: the plain run before it warmed up; train: every run warms up itself
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
    const char* what = train ? "step" : "run";
    std::printf("model %s batch %lld, mode %s%s%s, %d interleaved pairs\n", positional[0].c_str(),
        static_cast<long long>(*plain.batch), mode.c_str(), train ? ", optimizer " : "", train ? optimizer.c_str() : "",
        pairs);
    std::printf("plain %s    median %.2f ms\n", what, median(plainMs));
    std::printf("recorded %s median %.2f ms\n", what, median(recMs));
    std::printf("recorded/plain ratio (median of pairs): %.3f (target <= 1.05)\n", median(ratios));
    std::printf("events %zu, recorder bytes per event: %.1f (target <= 64), plus %zu bytes of interned strings "
                "for the whole run\n",
        last.trace.size(), last.trace.bytesPerEvent(), last.trace.fixedBytes());
    return 0;
}

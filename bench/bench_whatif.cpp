// Re-predicting a 1,000,000-event run, as a batch slider does on every move (target: <= 50 ms).
// bench_whatif --ranks MODEL.pt2 [INPUT]: the What if panel's GPUs, Sharding and Precision rows on a training step
// recorded on meta (a 7B Llama at 1x4096: bench/make_meta_llama.py), as the panel answers a change of one of them:
// rank 0's figures at once (predictRank, no reserve), then the reserve when the rows rest (target: <= 100 ms each,
// issue 29), over every precision x strategy x GPU count 1..1024; and the fit table the GPUs tab shows, made off the
// GUI thread (target: <= 10 s).
#include "../tests/synthetic_run.h"
#include "recording/model.h"
#include "support/format.h"
#include "whatif/gpu_fit.h"
#include "whatif/whatif.h"
#include "whatif/whatif_policy.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

using namespace memledger;
using Clock = std::chrono::steady_clock;

namespace {

double ms(Clock::time_point a, Clock::time_point b)
{
    return std::chrono::duration<double, std::milli>(b - a).count();
}

int rankRowsBench(const std::string& file, const std::string& input)
{
    auto model = Model::open(file);
    RunOptions base;
    auto parsed = parseInputs(input);
    base.inputs = parsed.shapes;
    base.input_types = parsed.types;
    base.device = "meta";
    base.mode = RunMode::Train;
    base.optimizer = "adamw";
    WhatIfRequest records; // what the window records for a training step
    records.dtypes = windowWhatIfDtypes(RunMode::Train);
    auto t0 = Clock::now();
    auto w = recordWhatIf(model, base, records);
    std::printf("%s at %s: the window's what-if (%zu precisions) recorded on meta in %.0f ms\n", file.c_str(),
        input.c_str(), w.dtypes().size(), ms(t0, Clock::now()));
    const auto budget = *parseBudget("H100-80GB");
    double worst = 0, total = 0, worstReserve = 0, totalReserve = 0;
    int n = 0;
    std::string slowest;
    std::int64_t checksum = 0;
    for (const char* precision : {"bfloat16-mixed", "bfloat16", "float32"})
        for (const char* shard : {"fsdp", "zero2", "zero1", "ddp"})
            for (int gpus = 1; gpus <= 1024; gpus *= 2) {
                auto plan = planFor(GpuFitRequest {}, precision, *shardingFromName(shard), gpus);
                auto a = Clock::now();
                auto p = w.predictRank(1, plan, false);
                const double t = ms(a, Clock::now());
                a = Clock::now();
                auto r = w.predictRank(1, plan, true, budget);
                const double tr = ms(a, Clock::now());
                if (t + tr > worst + worstReserve)
                    slowest = std::string(precision) + " " + shard + " on " + std::to_string(gpus);
                worst = std::max(worst, t);
                worstReserve = std::max(worstReserve, tr);
                total += t;
                totalReserve += tr;
                ++n;
                checksum += p.predicted_peak_total_bytes + r.predicted_reserved_bytes;
            }
    std::printf("rank 0 at once (predictRank): mean %.1f ms, worst %.1f ms over %d row changes (target <= 100 ms) %s\n",
        total / n, worst, n, worst <= 100.0 ? "OK" : "TOO SLOW");
    std::printf("with the reserve, when the rows rest: mean %.1f ms, worst %.1f ms (target <= 100 ms) %s; slowest: %s\n",
        totalReserve / n, worstReserve, worstReserve <= 100.0 ? "OK" : "TOO SLOW", slowest.c_str());
    GpuFitRequest request;
    request.budget = budget;
    auto a = Clock::now();
    auto table = makeGpuFitTable(w, request);
    const double fit = ms(a, Clock::now());
    std::printf("the GPUs tab's fit table (%zu answers, 1..1024 GPUs): %.0f ms (target <= 10000 ms) %s\n",
        table.answers.size(), fit, fit <= 10000.0 ? "OK" : "TOO SLOW");
    const bool ok = worst <= 100.0 && worstReserve <= 100.0 && fit <= 10000.0;
    if (!ok)
        std::printf("MISSED A TARGET\n");
    return checksum > 0 && ok ? 0 : 1;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc >= 3 && std::string(argv[1]) == "--ranks")
        return rankRowsBench(argv[2], argc >= 4 ? argv[3] : "1x4096:int64");
    const int layers = 215000; // about 4.7 events a layer
    auto t0 = Clock::now();
    auto w = WhatIf::fromRuns({}, {}, test::syntheticRun(1, layers), 1, test::syntheticRun(2, layers), 2);
    std::printf(
        "events replayed per prediction: %zu (fit in %.0f ms)\n", w.eventCount("float32"), ms(t0, Clock::now()));

    double worst = 0, total = 0;
    int n = 0;
    std::int64_t checksum = 0;
    for (std::int64_t batch = 1; batch <= 1024; batch *= 2)
        for (const char* dtype : {"float32", "bfloat16"}) {
            auto a = Clock::now();
            auto p = w.predict(batch * 3, dtype, false);
            double t = ms(a, Clock::now());
            worst = std::max(worst, t);
            total += t;
            ++n;
            checksum += p.predicted_peak_bytes;
        }
    std::printf("predict (peak, ledgers): mean %.1f ms, worst %.1f ms over %d slider moves (target <= 50 ms) %s\n",
        total / n, worst, n, worst <= 50.0 ? "OK" : "TOO SLOW");
    // With the simulated GPU reserve: the first move pays for the replay's buffers, later moves reuse them.
    auto a = Clock::now();
    auto p = w.predict(64, "float32", true);
    double first = ms(a, Clock::now()), later = 0, laterWorst = 0;
    const int moves = 10;
    for (int i = 1; i <= moves; ++i) {
        a = Clock::now();
        checksum += w.predict(64 * i, "float32", true).predicted_reserved_bytes;
        double t = ms(a, Clock::now());
        later += t;
        laterWorst = std::max(laterWorst, t);
    }
    std::printf("predict with the caching-allocator replay (reserved %s): first move %.1f ms, then mean %.1f ms, "
                "worst %.1f ms over %d moves\n",
        formatBytes(p.predicted_reserved_bytes).c_str(), first, later / moves, laterWorst, moves);
    a = Clock::now();
    auto mb = w.maxBatch("float32", std::int64_t {16} << 30, false);
    std::printf("maxBatch(16 GiB) = %lld: %.1f ms\n", static_cast<long long>(mb), ms(a, Clock::now()));
    return checksum > 0 ? 0 : 1;
}

// Re-predicting a 1,000,000-event run, as a batch slider does on every move (target: <= 50 ms).
#include "../tests/synthetic_run.h"
#include "memledger/format.h"
#include "memledger/whatif.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

using namespace memledger;
using Clock = std::chrono::steady_clock;

int main()
{
    const int layers = 215000; // about 4.7 events a layer
    auto t0 = Clock::now();
    auto w = WhatIf::fromRuns({}, {}, test::syntheticRun(1, layers), 1, test::syntheticRun(2, layers), 2);
    auto ms = [](Clock::time_point a, Clock::time_point b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
    };
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
    auto a = Clock::now();
    auto p = w.predict(64, "float32", true);
    std::printf("predict with the caching-allocator replay (reserved %s): %.1f ms\n",
        formatBytes(p.predicted_reserved_bytes).c_str(), ms(a, Clock::now()));
    a = Clock::now();
    auto mb = w.maxBatch("float32", std::int64_t {16} << 30, false);
    std::printf("maxBatch(16 GiB) = %lld: %.1f ms\n", static_cast<long long>(mb), ms(a, Clock::now()));
    return checksum > 0 ? 0 : 1;
}

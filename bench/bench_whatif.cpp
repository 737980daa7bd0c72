// Re-predicting a 1,000,000-event run, as a batch slider does on every move (target: <= 50 ms).
#include "../tests/synthetic_run.h"
#include "support/format.h"
#include "whatif/whatif.h"

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

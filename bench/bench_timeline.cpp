// Not a test: prints how long the timeline takes to build and replot a 1,000,000-event trace.
// Target: a replot (reduce to the pixels + draw) within 16 ms.
#include "qt_test_app.h"
#include "synthetic_report.h"
#include "timeline_plot.h"

#include <QElapsedTimer>

#include <cstdio>

int main()
{
    using namespace memledger;
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen"); // no display needed
    qtTestApp();
    QElapsedTimer clock;
    clock.start();
    auto report = std::make_shared<const Report>(makeSyntheticReport(1000000));
    std::printf("synthetic trace: %zu events in %lld ms\n", report->trace->size(), clock.restart());
    TimelinePlot plot;
    plot.resize(1400, 500);
    plot.show();
    plot.setReport(report);
    plot.replot(QCustomPlot::rpImmediateRefresh);
    std::printf("setReport + first replot: %lld ms\n", clock.restart());

    const int rounds = 30;
    double worst = 0, total = 0;
    auto full = plot.xAxis->range();
    for (int i = 0; i < rounds; ++i) {
        // Alternate the whole run and a zoomed-in window so each round reduces afresh.
        QElapsedTimer one;
        one.start();
        if (i % 2)
            plot.xAxis->setRange(full);
        else
            plot.xAxis->setRange(full.lower + full.size() * i / 100.0, full.lower + full.size() * (i / 100.0 + 0.3));
        plot.replot(QCustomPlot::rpImmediateRefresh);
        double ms = static_cast<double>(one.nsecsElapsed()) / 1e6;
        worst = std::max(worst, ms);
        total += ms;
    }
    std::printf("replot after a range change: mean %.2f ms, worst %.2f ms over %d rounds (%d points plotted)\n",
        total / rounds, worst, rounds, plot.plottedPointCount());
    clock.restart();
    for (int i = 0; i < 10; ++i)
        plot.xAxis->setRange(full.lower + i, full.upper - i);
    std::printf("reduce alone: %.2f ms\n", clock.nsecsElapsed() / 1e7);
    clock.restart();
    for (int i = 0; i < 10; ++i)
        for (int b = 0; b < TimelineSeries::kBands; ++b)
            if (plot.series().present[b])
                reduceSteps(plot.series().keys, plot.series().tops[b], full.lower + i, full.upper - i, 2800);
    std::printf("reduceSteps alone: %.2f ms\n", clock.nsecsElapsed() / 1e7);
    clock.restart();
    for (int i = 0; i < 10; ++i)
        plot.replot(QCustomPlot::rpImmediateRefresh);
    std::printf("draw alone: %.2f ms\n", clock.nsecsElapsed() / 1e7);
    std::printf("%s\n", total / rounds <= 16 ? "within the 16 ms target" : "OVER the 16 ms target");
    return 0;
}

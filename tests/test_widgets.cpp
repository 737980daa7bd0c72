// Widgets on their own: the byte ticker, the per-column reduction, the layer tree model, PNG rendering.
#include "byte_axis_ticker.h"
#include "exports/ledger_palette.h"
#include "layer_tree_model.h"
#include "layer_tree_panel.h"
#include "ledger_colors.h"
#include "ledger_summary.h"
#include "qt_test_app.h"
#include "report/build_report.h"
#include "report/timeline_series.h"
#include "support/format.h"
#include "synthetic_report.h"
#include "synthetic_run.h"
#include "timeline_plot.h"
#include "timeline_png.h"
#include "whatif/whatif.h"
#include "whatif_panel.h"

#include <QAbstractItemModelTester>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QSlider>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTreeView>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

using namespace memledger;

namespace {

std::shared_ptr<const Report> syntheticReport(std::size_t events)
{
    return std::make_shared<const Report>(makeSyntheticReport(events));
}

QStringList tickLabels(double lo, double hi)
{
    ByteAxisTicker ticker;
    QVector<double> ticks, subTicks;
    QVector<QString> labels;
    static_cast<QCPAxisTicker&>(ticker).generate(
        QCPRange(lo, hi), QLocale::c(), QLatin1Char('g'), 6, ticks, &subTicks, &labels);
    return QStringList(labels.begin(), labels.end());
}

} // namespace

TEST(ByteAxisTicker, LabelsInTheUnitOfTheRange)
{
    auto mib = tickLabels(0, 40.0 * 1024 * 1024);
    ASSERT_GE(mib.size(), 3);
    EXPECT_EQ(mib.front(), "0");
    EXPECT_TRUE(mib.contains("10 MiB")) << mib.join(" | ").toStdString();
    auto gib = tickLabels(0, 20.0 * 1024 * 1024 * 1024);
    EXPECT_TRUE(gib.contains("10 GiB") || gib.contains("5 GiB")) << gib.join(" | ").toStdString();
    auto kib = tickLabels(0, 3000);
    EXPECT_TRUE(kib.last().endsWith("KiB")) << kib.join(" | ").toStdString();
    auto bytes = tickLabels(0, 600);
    EXPECT_TRUE(bytes.last().endsWith(" B")) << bytes.join(" | ").toStdString();
    auto fine = tickLabels(1.0 * 1024 * 1024, 1.5 * 1024 * 1024);
    EXPECT_TRUE(fine.contains("1.2 MiB") || fine.contains("1.25 MiB") || fine.contains("1.1 MiB"))
        << fine.join(" | ").toStdString();
}

TEST(ReduceSteps, KeepsEveryColumnsExtremesAndFewPoints)
{
    std::mt19937 rng(3);
    std::vector<double> keys, values;
    double k = 0, v = 0;
    for (int i = 0; i < 200000; ++i) {
        k += (rng() % 10) * 0.01;
        v = std::max(0.0, v + static_cast<double>(static_cast<int>(rng() % 2001) - 1000));
        keys.push_back(k);
        values.push_back(v);
    }
    for (auto [lo, hi] : {std::pair {keys.front(), keys.back()}, std::pair {100.0, 250.0}}) {
        const int columns = 500;
        auto r = reduceSteps(keys, values, lo, hi, columns);
        EXPECT_LE(r.keys.size(), static_cast<std::size_t>(columns) * 4 + 2);
        EXPECT_TRUE(std::is_sorted(r.keys.begin(), r.keys.end()));
        double brute = 0, reduced = 0, bruteMin = 1e300, reducedMin = 1e300;
        for (std::size_t i = 0; i < keys.size(); ++i)
            if (keys[i] >= lo && keys[i] <= hi) {
                brute = std::max(brute, values[i]);
                bruteMin = std::min(bruteMin, values[i]);
            }
        for (double x : r.values) {
            reduced = std::max(reduced, x);
            reducedMin = std::min(reducedMin, x);
        }
        EXPECT_EQ(reduced, brute);
        EXPECT_LE(reducedMin, bruteMin);
        // The value at the end of each column survives, so the step is right between columns.
        double width = (hi - lo) / columns;
        for (int c = 0; c < columns; c += 37) {
            double edge = lo + (c + 1) * width;
            auto i = std::upper_bound(keys.begin(), keys.end(), edge - 1e-9) - keys.begin();
            auto j = std::upper_bound(r.keys.begin(), r.keys.end(), edge - 1e-9) - r.keys.begin();
            if (i > 0 && j > 0 && keys[static_cast<std::size_t>(i - 1)] >= lo)
                EXPECT_EQ(values[static_cast<std::size_t>(i - 1)], r.values[static_cast<std::size_t>(j - 1)]) << c;
        }
    }
}

TEST(TimelineSeries, StacksLedgersAndFindsThePeak)
{
    auto report = makeSyntheticReport(5000);
    auto s = TimelineSeries::build(report, TimelineAxis::Milliseconds);
    ASSERT_EQ(s.keys.size(), report.trace->size() + 1);
    auto live = liveBytesAfterEachEvent(*report.trace);
    double base = static_cast<double>(report.weight_bytes + report.input_bytes);
    double peak = base;
    for (std::size_t i = 0; i < live.size(); ++i) {
        ASSERT_EQ(s.tops[TimelineSeries::kBands - 1][i + 1], base + static_cast<double>(live[i])) << i;
        peak = std::max(peak, base + static_cast<double>(live[i]));
    }
    EXPECT_EQ(s.peak_value, peak);
    EXPECT_EQ(s.tops[0][0], static_cast<double>(report.weight_bytes));
    auto ops = TimelineSeries::build(report, TimelineAxis::OpSequence);
    EXPECT_TRUE(std::is_sorted(ops.keys.begin(), ops.keys.end()));
    EXPECT_EQ(ops.peak_value, peak);
}

TEST(LayerTreeModel, PassesTheModelTester)
{
    qtTestApp();
    LayerTreeModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setReport(syntheticReport(200));
    EXPECT_EQ(model.rowCount(), 1);
    auto root = model.index(0, 0);
    EXPECT_EQ(model.rowCount(root), 2);
    auto conv = model.indexForPath("head.conv");
    ASSERT_TRUE(conv.isValid());
    EXPECT_EQ(conv.data().toString(), "conv");
    EXPECT_EQ(conv.parent().data(LayerTreeModel::PathRole).toString(), "head");
    EXPECT_EQ(model.indexForPath("head.conv.weight_fake").data(LayerTreeModel::PathRole).toString(), "head.conv");
    auto weights = model.index(0, LayerTreeModel::Weights);
    EXPECT_DOUBLE_EQ(weights.data(LayerTreeModel::BarFractionRole).toDouble(), 1.0);
    EXPECT_EQ(weights.data(LayerTreeModel::SortRole).toLongLong(), 7000);
    model.setReport(nullptr);
    EXPECT_EQ(model.rowCount(), 0);
}

TEST(LayerTreePanel, ProxyPassesTheModelTesterWhileFiltering)
{
    qtTestApp();
    LayerTreePanel panel;
    QAbstractItemModelTester tester(panel.proxy(), QAbstractItemModelTester::FailureReportingMode::Fatal);
    panel.setReport(syntheticReport(200));
    panel.filterEdit()->setText("relu");
    // Recursive filtering keeps the parents of a match.
    auto root = panel.proxy()->index(0, 0);
    ASSERT_TRUE(root.isValid());
    EXPECT_EQ(panel.proxy()->rowCount(root), 2); // features (features.1 ReLU) and head (head.relu)
    panel.filterEdit()->setText("head");
    EXPECT_EQ(panel.proxy()->rowCount(root), 1);
    EXPECT_EQ(panel.proxy()->rowCount(panel.proxy()->index(0, 0, root)), 2); // its children stay
    panel.filterEdit()->clear();
    panel.view()->sortByColumn(LayerTreeModel::Activations, Qt::DescendingOrder);
    auto first = panel.proxy()->index(0, 0, root);
    EXPECT_EQ(first.data(LayerTreeModel::PathRole).toString(), "head");
    panel.selectModule("head.relu");
    EXPECT_EQ(panel.view()->currentIndex().data(LayerTreeModel::PathRole).toString(), "head.relu");
}

TEST(TimelinePlot, ReducesAMillionEventsToThePixels)
{
    qtTestApp();
    TimelinePlot plot;
    plot.resize(1200, 400);
    plot.setReport(syntheticReport(1000000));
    EXPECT_LE(plot.plottedPointCount(), 5 * 4 * 2 * 1200 + 20);
    EXPECT_GT(plot.plottedPointCount(), 100);
    EXPECT_DOUBLE_EQ(plot.yAxis->range().upper >= plot.series().peak_value, true);
    // Zoomed in on the first events, the tooltip names an allocation with its module.
    plot.xAxis->setRange(0, 0.02);
    plot.replot(QCustomPlot::rpImmediateRefresh);
    const auto& t = *plot.report()->trace;
    std::size_t a = 0;
    while (t.action[a] != Action::Alloc || t.ledger[a] != Ledger::Activations)
        ++a;
    double key = plot.series().keys[a + 1];
    double y = plot.series().tops[static_cast<int>(Ledger::Inputs)][a + 1] + 1;
    QString path;
    auto text = plot.describeAt(key, y, &path);
    EXPECT_TRUE(text.contains("activations")) << text.toStdString();
    EXPECT_EQ(path, QString::fromStdString(t.strings.at(t.where[a])));
    EXPECT_TRUE(plot.describeAt(key, 10).contains("weights"));
    plot.highlightModule("head");
    EXPECT_EQ(plot.highlightedModule(), "head");
}

TEST(TimelinePng, HasTheSizeAskedForAndIsNotBlank)
{
    qtTestApp();
    QTemporaryDir dir;
    auto path = dir.filePath("timeline.png");
    auto report = makeSyntheticReport(3000);
    ASSERT_EQ(renderTimelinePng(report, path, QSize(900, 360)), QString());
    QImage image(path);
    ASSERT_FALSE(image.isNull());
    EXPECT_EQ(image.size(), QSize(900, 360));
    EXPECT_GT(pixelsUnlike(image, image.pixel(0, 0)), 900 * 360 / 10);
    auto error = renderTimelinePng(report, dir.filePath("no/such/dir/x.png"));
    EXPECT_TRUE(error.contains("no/such/dir/x.png")) << error.toStdString();
}

TEST(LedgerSummary, ShowsTheLoadTax)
{
    qtTestApp();
    LedgerSummary summary;
    summary.setReport(syntheticReport(100));
    EXPECT_EQ(summary.loadTaxText(), "file 2.00 MiB float16, resident 5.00 MiB as float32");
    EXPECT_FALSE(summary.grab().isNull());
}

TEST(TimelinePlot, PeakLabelStaysInsideThePlotAndPanningStopsAtTheFirstEvent)
{
    qtTestApp();
    TimelinePlot plot;
    plot.resize(900, 320);
    plot.setReport(syntheticReport(3000));
    for (auto axis : {TimelineAxis::OpSequence, TimelineAxis::Milliseconds}) {
        plot.setAxis(axis);
        plot.replot(QCustomPlot::rpImmediateRefresh);
        auto label = plot.peakLabelRect();
        ASSERT_FALSE(label.isEmpty());
        QRectF area = plot.axisRect()->rect();
        EXPECT_TRUE(area.adjusted(-1, -1, 1, 1).contains(label))
            << "label " << label.x() << "," << label.y() << " " << label.width() << "x" << label.height() << " in "
            << area.x() << "," << area.y() << " " << area.width() << "x" << area.height();
    }
    // A drag past the start stops at the first key, keeping the width; zooming out stops at the whole run.
    double first = plot.series().firstKey(), last = plot.series().lastKey();
    plot.xAxis->setRange(first - (last - first) / 2, first + (last - first) / 4);
    EXPECT_DOUBLE_EQ(plot.xAxis->range().lower, first);
    EXPECT_NEAR(plot.xAxis->range().size(), (last - first) * 0.75, 1e-9 * (last - first));
    plot.xAxis->setRange(first - 10 * (last - first), last + 10 * (last - first));
    EXPECT_DOUBLE_EQ(plot.xAxis->range().lower, first);
    EXPECT_DOUBLE_EQ(plot.xAxis->range().upper, last);
}

TEST(TimelinePlot, HidingTheWeightsStartsTheAxisAtTheirTop)
{
    qtTestApp();
    TimelinePlot plot;
    plot.resize(900, 320);
    auto report = syntheticReport(3000);
    plot.setReport(report);
    EXPECT_EQ(plot.yAxis->range().lower, 0);
    plot.setWeightsHidden(true);
    EXPECT_DOUBLE_EQ(plot.yAxis->range().lower, static_cast<double>(report->weight_bytes));
    EXPECT_GT(plot.yAxis->range().upper, plot.series().peak_value);
    plot.setWeightsHidden(false);
    EXPECT_EQ(plot.yAxis->range().lower, 0);
}

TEST(LedgerColors, TheWindowDrawsTheExportsColours)
{
    for (auto l : {Ledger::Weights, Ledger::Inputs, Ledger::Activations, Ledger::Temporaries, Ledger::Unattributed})
        EXPECT_EQ(ledgerColor(l).name(), QString::fromLatin1(ledgerColourHex(l))) << ledgerName(l);
    EXPECT_EQ(reservedColor().name(), QString::fromLatin1(kReservedColourHex));
}

TEST(TimelinePng, CarriesTheModelAndTheRunSettings)
{
    auto report = makeSyntheticReport(100);
    report.model.type = "TinyNet";
    report.model.path = "/models/tiny.pt";
    report.run.input_shapes = {{4, 3, 32, 32}};
    report.run.batch = 4;
    report.run.dtype = "bfloat16";
    EXPECT_EQ(timelinePngTitle(report), "TinyNet (tiny.pt)");
    auto settings = timelinePngSettings(report);
    for (const char* part : {"inputs 4x3x32x32", "batch 4", "bfloat16", "cpu", "inference"})
        EXPECT_TRUE(settings.contains(part)) << settings.toStdString();
}

TEST(WhatIfPanel, ShowsThePredictionAtTheChosenBatchAndWhetherItFits)
{
    qtTestApp();
    auto whatIf = std::make_shared<const WhatIf>(
        WhatIf::fromRuns({}, {}, test::syntheticRun(1, 12), 1, test::syntheticRun(2, 12), 2));
    WhatIfPanel panel;
    panel.setBatch(4); // the window starts it at the batch of the run it shows
    panel.setWhatIf(whatIf);
    EXPECT_EQ(panel.batch(), 4);
    auto shown = [&](std::int64_t batch) {
        auto p = whatIf->predict(batch, "float32", false);
        return formatBytes(p.predicted_peak_total_bytes) + (p.method == "measured" ? "  (measured)" : "  (predicted)");
    };
    EXPECT_EQ(panel.peakTotalText().toStdString(), shown(4));

    panel.batchSlider()->setValue(5); // 2^5
    EXPECT_EQ(panel.batch(), 32);
    EXPECT_EQ(panel.peakTotalText().toStdString(), shown(32));
    panel.batchSpinBox()->setValue(100);
    EXPECT_EQ(panel.batchSlider()->value(), 6);
    EXPECT_EQ(panel.peakTotalText().toStdString(), shown(100));
    EXPECT_NE(shown(100), shown(32));

    panel.setBudget("16 GiB");
    EXPECT_TRUE(panel.fitsBudget());
    EXPECT_TRUE(panel.fitsText().startsWith("fits in")) << panel.fitsText().toStdString();
    EXPECT_TRUE(panel.decidesText().contains("peak total")) << panel.decidesText().toStdString();
    QLabel* fits = nullptr;
    for (auto* l : panel.findChildren<QLabel*>())
        if (l->text() == panel.fitsText())
            fits = l;
    ASSERT_TRUE(fits);
    auto normal = fits->palette().color(QPalette::WindowText);

    panel.setBudget("1 KiB");
    EXPECT_FALSE(panel.fitsBudget());
    EXPECT_TRUE(panel.fitsText().startsWith("does not fit in 1")) << panel.fitsText().toStdString();
    auto warning = fits->palette().color(QPalette::WindowText);
    EXPECT_NE(warning, normal);
    EXPECT_GT(warning.red(), warning.green()); // red-ish

    // Notes name the chosen precision only: the rescaled bfloat16 speaks when bfloat16 is chosen.
    EXPECT_FALSE(panel.notesText().contains("bfloat16")) << panel.notesText().toStdString();
    panel.setDtype("bfloat16");
    EXPECT_TRUE(panel.notesText().contains("bfloat16")) << panel.notesText().toStdString();
}

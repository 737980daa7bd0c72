// Widgets on their own: the byte ticker, the per-column reduction, the layer tree model, PNG rendering.
#include "byte_axis_ticker.h"
#include "layer_tree_model.h"
#include "layer_tree_panel.h"
#include "ledger_summary.h"
#include "report/build_report.h"
#include "qt_test_app.h"
#include "synthetic_report.h"
#include "timeline_plot.h"
#include "timeline_png.h"
#include "report/timeline_series.h"

#include <QAbstractItemModelTester>
#include <QImage>
#include <QLineEdit>
#include <QSortFilterProxyModel>
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

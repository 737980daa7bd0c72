// Widgets on their own: the byte ticker, the per-column reduction, the layer tree model, PNG rendering, and a
// training step made by hand in each view.
#include "byte_axis_ticker.h"
#include "bytes_text.h"
#include "gpu_fit_view.h"
#include "exports/ledger_palette.h"
#include "exports/report_html.h"
#include "exports/report_text.h"
#include "layer_tree_model.h"
#include "layer_tree_panel.h"
#include "ledger_colors.h"
#include "ledger_summary.h"
#include "qt_test_app.h"
#include "recording/build_report.h"
#include "analysis/timeline_series.h"
#include "support/format.h"
#include "synthetic_report.h"
#include "synthetic_run.h"
#include "timeline_plot.h"
#include "timeline_png.h"
#include "whatif/whatif.h"
#include "whatif_panel.h"

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QSlider>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTimer>
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
    const auto opKeys = ops.keys.toVector();
    EXPECT_TRUE(std::is_sorted(opKeys.begin(), opKeys.end()));
    EXPECT_EQ(ops.peak_value, peak);
}

// The series keeps a byte an event and every band's bytes at each block's start: each band, replayed from there, is
// the stack of the ledgers' live bytes counted event by event here, and reducing it through the block summaries gives
// the points a scan of every value gives, over the whole run and zoomed in down to a few events a column.
TEST(TimelineSeries, ReplayedBandsAreTheLedgersStackedAndReduceAsEveryValueDoes)
{
    auto report = makeSyntheticReport(30000);
    const auto& t = *report.trace;
    auto s = TimelineSeries::build(report, TimelineAxis::Milliseconds);
    ASSERT_EQ(s.keys.size(), t.size() + 1);
    std::array<double, TimelineSeries::kBands> bytes {};
    bytes[static_cast<int>(Ledger::Weights)] = static_cast<double>(report.weight_bytes);
    bytes[static_cast<int>(Ledger::Inputs)] = static_cast<double>(report.input_bytes);
    std::array<std::vector<double>, TimelineSeries::kBands> truth;
    for (std::size_t p = 0; p <= t.size(); ++p) {
        if (p > 0) {
            const auto i = p - 1;
            const auto l = static_cast<std::size_t>(t.ledger[i]);
            if (t.action[i] == Action::Alloc)
                bytes[l] += static_cast<double>(t.bytes[i]);
            else if (t.action[i] == Action::Free && t.partner[i] != kNoPartner)
                bytes[l] -= static_cast<double>(t.bytes[i]);
        }
        double top = 0;
        for (int b : TimelineSeries::kStackOrder) {
            top += bytes[static_cast<std::size_t>(b)];
            truth[static_cast<std::size_t>(b)].push_back(top);
        }
    }
    const auto keys = s.keys.toVector();
    std::mt19937 rng(11);
    for (int b = 0; b < TimelineSeries::kBands; ++b) {
        SCOPED_TRACE(b);
        const auto& band = s.tops[static_cast<std::size_t>(b)];
        ASSERT_EQ(band.toVector(), truth[static_cast<std::size_t>(b)]);
        for (std::size_t p = 0; p < keys.size(); p += 997)
            EXPECT_EQ(band[p], truth[static_cast<std::size_t>(b)][p]) << p;
        for (int round = 0; round < 6; ++round) {
            const double span = (keys.back() - keys.front()) / (1 << (3 * round));
            const double lo = keys.front() + std::uniform_real_distribution<double>(0, keys.back() - keys.front() - span)(rng);
            const int columns = 50 + static_cast<int>(rng() % 3000);
            auto blocked = reduceSteps(s.keys, band, lo, lo + span, columns);
            auto scanned = reduceSteps(keys, truth[static_cast<std::size_t>(b)], lo, lo + span, columns);
            EXPECT_EQ(blocked.keys, scanned.keys) << round;
            EXPECT_EQ(blocked.values, scanned.values) << round;
        }
    }
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

// The report's notes (a converted program, a meta run, the lifetimes, a rank's layout) are one line away in the
// window, as they are in the text report and the HTML: a count that opens them, with them as its tooltip.
TEST(LedgerSummary, OffersTheReportsNotes)
{
    qtTestApp();
    LedgerSummary summary;
    summary.resize(300, 500);
    auto plain = syntheticReport(100);
    auto* notes = summary.findChild<QLabel*>(QStringLiteral("runNotes"));
    ASSERT_NE(notes, nullptr);
    auto noted = std::make_shared<Report>(*plain);
    noted->notes = {"converted: exported in float32, run in bfloat16", "lifetimes: graph <not eager>"};
    summary.setReport(noted);
    summary.show();
    EXPECT_TRUE(notes->isVisible());
    EXPECT_EQ(summary.notesLinkText(), "2 notes about this run");
    EXPECT_EQ(summary.notesText(), "converted: exported in float32, run in bfloat16\nlifetimes: graph <not eager>");
    EXPECT_TRUE(notes->toolTip().contains("lifetimes: graph &lt;not eager&gt;")) << notes->toolTip().toStdString();
    // A click opens them, selectable, in a box of their own.
    QString shown;
    QTimer::singleShot(0, [&shown] {
        if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget())) {
            shown = box->text() + "\n" + box->informativeText();
            box->accept();
        }
    });
    emit notes->linkActivated(QStringLiteral("#notes"));
    EXPECT_EQ(shown.toStdString(),
        "2 notes about this run\nconverted: exported in float32, run in bfloat16\n\nlifetimes: graph <not eager>");
    noted = std::make_shared<Report>(*plain);
    noted->notes.clear();
    summary.setReport(noted);
    EXPECT_FALSE(notes->isVisible());
    EXPECT_TRUE(summary.notesLinkText().isEmpty());
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
    // A short plot keeps the label above the peak, off the curve (it used to hang below the marker, over it).
    plot.resize(900, 150);
    plot.setAxis(TimelineAxis::OpSequence);
    plot.replot(QCustomPlot::rpImmediateRefresh);
    plot.replot(QCustomPlot::rpImmediateRefresh);
    {
        auto label = plot.peakLabelRect();
        ASSERT_FALSE(label.isEmpty());
        const double peakY = plot.yAxis->coordToPixel(plot.series().peak_value);
        EXPECT_LE(label.bottom(), peakY + 1) << "the label covers the curve under the peak";
        EXPECT_TRUE(QRectF(plot.axisRect()->rect()).adjusted(-1, -1, 1, 1).contains(label));
    }
    plot.resize(900, 320);
    plot.replot(QCustomPlot::rpImmediateRefresh);
    // A drag past the start stops at the first key, keeping the width; zooming out stops at the whole run.
    double first = plot.series().firstKey(), last = plot.series().lastKey();
    plot.xAxis->setRange(first - (last - first) / 2, first + (last - first) / 4);
    EXPECT_DOUBLE_EQ(plot.xAxis->range().lower, first);
    EXPECT_NEAR(plot.xAxis->range().size(), (last - first) * 0.75, 1e-9 * (last - first));
    plot.xAxis->setRange(first - 10 * (last - first), last + 10 * (last - first));
    EXPECT_DOUBLE_EQ(plot.xAxis->range().lower, first);
    EXPECT_DOUBLE_EQ(plot.xAxis->range().upper, last);
}

// A predicted step drawn over the run (a checkpoint box ticked) keeps the user's zoom; over the whole run, the view
// grows to the predicted step where it runs longer.
TEST(TimelinePlot, APredictedStepKeepsTheZoom)
{
    qtTestApp();
    TimelinePlot plot;
    plot.resize(900, 320);
    plot.setReport(syntheticReport(3000));
    plot.setAxis(TimelineAxis::OpSequence);
    const double first = plot.series().firstKey(), last = plot.series().lastKey();
    const double lo = first + (last - first) / 4, hi = first + (last - first) / 2;
    plot.xAxis->setRange(lo, hi);
    auto longer = syntheticReport(4000);
    plot.setPredictedReport(longer, QStringLiteral("checkpointed"));
    EXPECT_DOUBLE_EQ(plot.xAxis->range().lower, lo);
    EXPECT_DOUBLE_EQ(plot.xAxis->range().upper, hi);
    plot.setPredictedReport(nullptr, QString());
    EXPECT_DOUBLE_EQ(plot.xAxis->range().lower, lo);
    EXPECT_DOUBLE_EQ(plot.xAxis->range().upper, hi);
    plot.resetZoom();
    plot.setPredictedReport(longer, QStringLiteral("checkpointed"));
    EXPECT_DOUBLE_EQ(plot.xAxis->range().lower, first);
    EXPECT_GT(plot.xAxis->range().upper, last);
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
        // Beyond the largest record (batch 2 here) a figure is extrapolated and says so.
        return formatBytes(p.predicted_peak_total_bytes)
            + (p.method == FigureMethod::Measured ? "  (measured)"
                    : p.extrapolated  ? "  (extrapolated)"
                                      : "  (interpolated)");
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

namespace {

// A training step made by hand: forward (activations saved for the backward, a temporary), loss, backward
// (autograd nodes named in outer_op, attributed to their forward's module in `where`, gradients) and the
// optimizer, with the phases that bound them.
struct TrainStep {
    Report report;
    std::size_t gradientEvent = 0; // an alloc of head.conv's gradient, made by ConvolutionBackward0
};

TrainStep makeTrainStep()
{
    TrainStep step;
    Report& r = step.report;
    r = makeSyntheticReport(0);
    r.run.mode = RunMode::Train;
    r.run.optimizer = "sgd";
    r.run.loss = "cross_entropy";
    r.run.threads = 2;
    auto t = std::make_shared<Trace>();
    std::uint32_t seq = 0;
    auto alloc = [&](Ledger ledger, std::int64_t bytes, const char* where, const char* outer, const char* inner) {
        auto a
            = t->push(static_cast<std::int64_t>(t->size()) * 1000, bytes, 0x1000 + t->size() * 64, Action::Alloc, -1);
        t->ledger[a] = ledger;
        t->where[a] = t->strings.intern(where);
        t->outer_op[a] = t->strings.intern(outer);
        t->inner_op[a] = inner[0] ? t->strings.intern(inner) : 0;
        t->op_seq[a] = ++seq;
        return a;
    };
    auto release = [&](std::size_t a) {
        auto f = t->push(static_cast<std::int64_t>(t->size()) * 1000, t->bytes[a], t->address[a], Action::Free, -1);
        t->partner[f] = static_cast<std::int32_t>(a);
        t->partner[a] = static_cast<std::int32_t>(f);
        t->ledger[f] = t->ledger[a];
        t->where[f] = t->where[a];
        t->outer_op[f] = t->outer_op[a];
        t->op_seq[f] = ++seq;
    };
    std::vector<std::size_t> bounds {0};
    // forward
    auto saved0 = alloc(Ledger::SavedActivations, 1 << 20, "features.0", "aten::conv2d", "aten::mkldnn_convolution");
    auto scratch = alloc(Ledger::Temporaries, 256 << 10, "features.0", "aten::conv2d", "aten::mkldnn_convolution");
    release(scratch);
    auto saved1 = alloc(Ledger::SavedActivations, 512 << 10, "head.conv", "aten::conv2d", "");
    bounds.push_back(t->size());
    // loss
    auto loss = alloc(Ledger::Activations, 4096, "", "aten::cross_entropy_loss", "");
    bounds.push_back(t->size());
    // backward
    auto work = alloc(Ledger::Temporaries, 2 << 20, "head.conv", "ConvolutionBackward0", "aten::convolution_backward");
    release(work);
    step.gradientEvent
        = alloc(Ledger::Gradients, 64 << 10, "head.conv", "ConvolutionBackward0", "aten::convolution_backward");
    release(saved1);
    alloc(Ledger::Gradients, 128 << 10, "features.0", "ConvolutionBackward0", "aten::convolution_backward");
    release(saved0);
    release(loss);
    bounds.push_back(t->size());
    // optimizer
    auto update = alloc(Ledger::Temporaries, 64 << 10, "", "aten::add_", "");
    release(update);
    bounds.push_back(t->size());
    const char* names[] = {"forward", "loss", "backward", "optimizer"};
    for (std::size_t i = 0; i < 4; ++i) {
        Phase p;
        p.name = names[i];
        p.first_event = static_cast<std::uint32_t>(bounds[i]);
        p.end_event = static_cast<std::uint32_t>(bounds[i + 1]);
        p.start_ns = static_cast<std::int64_t>(bounds[i]) * 1000;
        p.end_ns = static_cast<std::int64_t>(bounds[i + 1]) * 1000;
        p.peak_bytes = static_cast<std::int64_t>(i + 1) << 20;
        r.phases.push_back(p);
    }
    r.trace = t;
    r.gradient_bytes = 192 << 10;
    r.optimizer_state_bytes = 192 << 10;
    r.ledgers[static_cast<int>(Ledger::SavedActivations)] = {1536 << 10, 1536 << 10};
    r.ledgers[static_cast<int>(Ledger::Gradients)] = {64 << 10, 192 << 10};
    r.ledgers[static_cast<int>(Ledger::OptimizerState)] = {192 << 10, 192 << 10};
    r.ledgers[static_cast<int>(Ledger::Temporaries)] = {0, (2 << 20) + (320 << 10)};
    for (auto& l : r.layers) {
        l.gradient_bytes = l.weight_bytes;
        l.saved_activation_bytes = l.activation_bytes / 2;
        l.backward_temporary_peak_bytes = 2 << 20;
        l.backward_peak_bytes = 3 << 20;
    }
    return step;
}

QStringList legendNames(const QCustomPlot& plot)
{
    QStringList names;
    for (int i = 0; i < plot.legend->itemCount(); ++i)
        if (auto* item = qobject_cast<QCPPlottableLegendItem*>(plot.legend->item(i)))
            names << item->plottable()->name();
    return names;
}

} // namespace

TEST(TrainStep, TimelineShadesThePhasesOnBothAxesAndStacksEveryLedger)
{
    qtTestApp();
    auto step = makeTrainStep();
    auto report = std::make_shared<const Report>(step.report);
    TimelinePlot plot;
    plot.resize(900, 320);
    plot.setReport(report);
    plot.replot(QCustomPlot::rpImmediateRefresh);
    ASSERT_EQ(plot.phaseBandCount(), 4);
    for (int i = 0; i < 4; ++i) {
        const auto& phase = report->phases[static_cast<std::size_t>(i)];
        EXPECT_EQ(plot.phaseBandName(i).toStdString(), phase.name);
        if (i > 0)
            EXPECT_DOUBLE_EQ(plot.phaseBandRange(i).lower, static_cast<double>(phase.start_ns) / 1e6);
        if (i < 3)
            EXPECT_DOUBLE_EQ(plot.phaseBandRange(i).upper, static_cast<double>(phase.end_ns) / 1e6);
    }
    EXPECT_TRUE(plot.phaseLabelVisible(2)); // the backward is wide enough for its name
    // On the op axis a phase spans its events' keys.
    plot.setAxis(TimelineAxis::OpSequence);
    plot.replot(QCustomPlot::rpImmediateRefresh);
    ASSERT_EQ(plot.phaseBandCount(), 4);
    const auto& backward = report->phases[2];
    EXPECT_DOUBLE_EQ(plot.phaseBandRange(2).lower, plot.series().keys[backward.first_event + 1]);
    EXPECT_DOUBLE_EQ(plot.phaseBandRange(2).upper, plot.series().keys[backward.end_event + 1]);
    EXPECT_DOUBLE_EQ(plot.phaseBandRange(1).upper, plot.phaseBandRange(2).lower);

    // Every ledger that holds bytes is in the legend, as people read it; none that holds none.
    auto names = legendNames(plot);
    for (const char* name :
        {"weights", "optimizer state", "inputs", "saved for backward", "activations", "gradients", "temporaries"})
        EXPECT_TRUE(names.contains(name)) << name << " in " << names.join(", ").toStdString();
    EXPECT_FALSE(names.contains("unattributed")) << names.join(", ").toStdString();
    EXPECT_FALSE(names.contains("saved_activations"));

    // Hovering a gradient names its module and, in the backward, the autograd node that made it.
    auto e = step.gradientEvent;
    const auto& s = plot.series();
    auto band = static_cast<int>(Ledger::Gradients);
    double y = (s.bottomOf(band, e + 1) + s.tops[static_cast<std::size_t>(band)][e + 1]) / 2;
    QString path;
    auto text = plot.describeAt(s.keys[e + 1], y, &path);
    EXPECT_TRUE(text.contains("gradients")) << text.toStdString();
    EXPECT_TRUE(text.contains("autograd node: ConvolutionBackward0")) << text.toStdString();
    EXPECT_TRUE(text.contains("backward")) << text.toStdString();
    EXPECT_EQ(path, "head.conv");

    // Selecting a module shades its backward allocations too: they carry its path.
    plot.highlightModule("head");
    auto shade = moduleLiveSeries(*report->trace, "head", 0);
    EXPECT_EQ(shade[e + 1] - shade[e], static_cast<double>(report->trace->bytes[e]));

    // Inference has no phases.
    plot.setReport(syntheticReport(300));
    EXPECT_EQ(plot.phaseBandCount(), 0);
    EXPECT_FALSE(legendNames(plot).contains("gradients"));
}

TEST(TrainStep, LayerTreeShowsTheTrainingColumnsOnlyInTrainMode)
{
    qtTestApp();
    auto step = makeTrainStep();
    auto report = std::make_shared<const Report>(step.report);
    LayerTreePanel panel;
    QAbstractItemModelTester tester(panel.model(), QAbstractItemModelTester::FailureReportingMode::Fatal);
    panel.setReport(report);
    for (int c : {LayerTreeModel::Gradients, LayerTreeModel::SavedForBackward, LayerTreeModel::BackwardTemporaries,
             LayerTreeModel::BackwardPeakDelta})
        EXPECT_FALSE(panel.view()->isColumnHidden(c)) << c;
    auto conv = panel.model()->indexForPath("head.conv");
    auto layer = report->layers[static_cast<std::size_t>(report->findLayer("head.conv"))];
    EXPECT_EQ(conv.siblingAtColumn(LayerTreeModel::Gradients).data(LayerTreeModel::SortRole).toLongLong(),
        layer.gradient_bytes);
    EXPECT_EQ(conv.siblingAtColumn(LayerTreeModel::SavedForBackward).data(LayerTreeModel::SortRole).toLongLong(),
        layer.saved_activation_bytes);
    EXPECT_EQ(panel.model()->headerData(LayerTreeModel::SavedForBackward, Qt::Horizontal).toString().simplified(),
        "Saved for backward");
    panel.setReport(syntheticReport(100));
    for (int c = LayerTreeModel::kFirstTrainingColumn; c < LayerTreeModel::ColumnCount; ++c)
        EXPECT_TRUE(panel.view()->isColumnHidden(c)) << c;
    EXPECT_FALSE(panel.view()->isColumnHidden(LayerTreeModel::PeakDelta));
}

TEST(TrainStep, SummaryListsTheLedgersThatHoldBytesWithGradientsAndOptimizerState)
{
    qtTestApp();
    LedgerSummary summary;
    summary.resize(300, 400);
    summary.setReport(syntheticReport(100));
    EXPECT_EQ(summary.rowNames(), QStringList({"weights", "inputs", "activations", "temporaries"}));
    EXPECT_TRUE(summary.trainingText().isEmpty());
    auto step = makeTrainStep();
    summary.setReport(std::make_shared<const Report>(step.report));
    EXPECT_EQ(summary.rowNames(),
        QStringList(
            {"weights", "optimizer state", "inputs", "saved for backward", "activations", "gradients", "temporaries"}));
    auto text = summary.trainingText();
    EXPECT_TRUE(text.contains("gradients 192.0 KiB")) << text.toStdString();
    EXPECT_TRUE(text.contains("optimizer state 192.0 KiB")) << text.toStdString();
    EXPECT_FALSE(summary.grab().isNull());
}

TEST(TrainStep, PngShowsThePhasesAndTheRunSettings)
{
    qtTestApp();
    auto step = makeTrainStep();
    auto settings = timelinePngSettings(step.report);
    EXPECT_TRUE(settings.contains("training step (optimizer sgd, loss cross_entropy)")) << settings.toStdString();
    QTemporaryDir dir;
    auto path = dir.filePath("train.png");
    ASSERT_EQ(renderTimelinePng(step.report, path, QSize(900, 360)), QString());
    QImage image(path);
    ASSERT_EQ(image.size(), QSize(900, 360));
    EXPECT_GT(pixelsUnlike(image, image.pixel(0, 0)), 900 * 360 / 10);
}

TEST(TrainStep, TextAndHtmlReportsSayTheModeAndThePhases)
{
    auto step = makeTrainStep();
    auto text = reportToText(step.report, 3);
    for (const char* part : {"train on cpu (optimizer sgd, loss cross_entropy, 2 threads)", "Phases:", "backward",
             "gradients", "saved for backward", "optimizer state", "after the step", "saved bwd"})
        EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
    auto html = reportToHtml(step.report);
    for (const char* part : {"optimizer sgd", "loss cross_entropy", "<table id=phases>", "\"phases\":", "gradients",
             "saved for backward", "backward peak delta"})
        EXPECT_NE(html.find(part), std::string::npos) << part;
    // An inference report lists its four ledgers and no training columns, as before.
    auto inference = makeSyntheticReport(100);
    auto plain = reportToText(inference, 3);
    EXPECT_EQ(plain.find("saved_activations"), std::string::npos) << plain;
    EXPECT_EQ(plain.find("Phases:"), std::string::npos);
    EXPECT_NE(plain.find("  temporaries "), std::string::npos) << plain;
    auto page = reportToHtml(inference);
    EXPECT_EQ(page.find("<table id=phases>"), std::string::npos);
    EXPECT_EQ(page.find("saved for backward"), std::string::npos);
}

// The GPUs tab shows what the fit table says of an accumulating, offloaded job: the micro-batch times the micro-steps
// (the global batch in its tooltip) and the host's pinned memory for the ranks a node holds.
TEST(GpuFitView, ShowsTheMicroStepsAndTheHostShare)
{
    qtTestApp();
    GpuFitTable t;
    t.budget_bytes = std::int64_t {80} << 30;
    t.gpu_counts = {1, 2};
    t.offload = "params";
    t.gpus_per_node = 8;
    GpuFitAnswer a;
    a.precision = "bfloat16-mixed";
    a.shard = "fsdp";
    a.fewest_gpus = 2;
    a.micro_batch = 16;
    a.grad_accum = 4;
    a.offload = "params"; // each answer's own offload, as makeGpuFitTable gives it
    Prediction p;
    p.host_bytes = 1000;
    p.host_bytes_per_node = 2000; // two ranks on the node
    a.at = p;
    t.answers.push_back(a);
    GpuFitView view;
    view.setTable(t, 0);
    ASSERT_EQ(view.answers()->rowCount(), 1);
    EXPECT_EQ(view.answers()->item(0, 4)->text().toStdString(), "16 × 4");
    EXPECT_TRUE(view.answers()->item(0, 4)->toolTip().contains(QStringLiteral("global batch 128")));
    EXPECT_EQ(view.answers()->item(0, 10)->text(), bytesText(std::int64_t {2000})); // two ranks on the node
    t.offload.clear();
    t.answers.front().offload.clear();
    view.setTable(t, 0);
    EXPECT_EQ(view.answers()->item(0, 10)->text(), QStringLiteral("—"));
    EXPECT_EQ(view.answers()->item(0, 1)->text(), QStringLiteral("fsdp"));
    t.answers.front().offload = "optimizer";
    t.answers.front().shard = "ds-zero2";
    view.setTable(t, 0);
    EXPECT_EQ(view.answers()->item(0, 1)->text(), QStringLiteral("ds-zero2, offload optimizer"));
}

// The "What would help" panel offscreen: rows ranked as given, a Measure button only where a real run can
// check the prediction, the measured figure and its error in place of the button, the tile request; and the
// window's tab end to end on a real model (remedies computed and measured off the GUI thread).
#include "fixture_paths.h"
#include "main_window.h"
#include "qt_test_app.h"
#include "remedies_panel.h"
#include "support/format.h"

#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTabWidget>
#include <QTest>

#include <gtest/gtest.h>

using namespace memledger;

namespace {

std::vector<Remedy> handMade()
{
    Remedy fold;
    fold.kind = RemedyKind::FoldBatchNorm;
    fold.title = "Fold BatchNorm into the convolution (1)";
    fold.change = "fold each BatchNorm into the convolution before it";
    fold.details = {"bn1 into conv1"};
    fold.peak_total_before = 3000000;
    fold.peak_total_after = 2000000;
    fold.reserve_before = 20 << 20;
    fold.reserve_after = 20 << 20;
    fold.measure_how = MeasureHow::Variant;
    Remedy bf16 = fold;
    bf16.kind = RemedyKind::LowerPrecision;
    bf16.title = "Run in bfloat16";
    bf16.change = "convert to bfloat16";
    bf16.details = {};
    bf16.peak_total_after = 2500000;
    bf16.dtype = "bfloat16";
    bf16.measure_how = MeasureHow::Run;
    Remedy alloc = fold;
    alloc.kind = RemedyKind::AllocatorSettings;
    alloc.title = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";
    alloc.peak_total_after = alloc.peak_total_before;
    alloc.reserve_after = 10 << 20;
    alloc.measure_how = MeasureHow::None;
    return {fold, bf16, alloc};
}

} // namespace

TEST(RemediesPanel, MeasureButtonsOnlyWhereARunCanCheck)
{
    qtTestApp();
    RemediesPanel panel;
    panel.resize(900, 500);
    panel.setRemedies(handMade());
    ASSERT_EQ(panel.table()->rowCount(), 3);
    EXPECT_EQ(panel.table()->item(0, 1)->text().toStdString(), "Fold BatchNorm into the convolution (1)");
    EXPECT_NE(panel.measureButton(0), nullptr);
    EXPECT_NE(panel.measureButton(1), nullptr);
    EXPECT_EQ(panel.measureButton(2), nullptr) << "an allocator setting needs a GPU process: no Measure here";
    // The saving is shown with the figure after the change.
    EXPECT_TRUE(panel.table()->item(0, 2)->text().contains(QString::fromStdString(formatBytes(1000000))));
    EXPECT_TRUE(panel.detailsText().contains(QStringLiteral("bn1 into conv1")));

    QSignalSpy spy(&panel, &RemediesPanel::measureRequested);
    QTest::mouseClick(panel.measureButton(1), Qt::LeftButton);
    ASSERT_EQ(spy.count(), 1);
    EXPECT_EQ(spy.at(0).at(0).toInt(), 1);
    EXPECT_FALSE(panel.measureButton(1)->isEnabled()) << "a measure in flight is not asked twice";

    auto measured = panel.remedies()[1];
    measured.method = FigureMethod::Measured;
    measured.measured_peak_total = 2450000;
    measured.measured_reserve = 20 << 20;
    panel.showMeasured(1, measured);
    EXPECT_EQ(panel.measureButton(1), nullptr);
    auto text = panel.table()->item(1, RemediesPanel::kMeasuredColumn)->text();
    EXPECT_TRUE(text.contains(QString::fromStdString(formatBytes(2450000)))) << text.toStdString();
    EXPECT_TRUE(text.contains(QStringLiteral("+2.04%"))) << text.toStdString(); // (2.5 - 2.45) / 2.45
    panel.showMeasureFailed(0, QStringLiteral("the edited model has no forward"));
    EXPECT_TRUE(panel.statusText().contains(QStringLiteral("no forward")));
}

TEST(RemediesPanel, TileRequest)
{
    qtTestApp();
    RemediesPanel panel;
    QSignalSpy spy(&panel, &RemediesPanel::tileRequested);
    auto* edit = panel.findChild<QLineEdit*>();
    ASSERT_NE(edit, nullptr);
    edit->setText(QStringLiteral("512x"));
    QTest::keyClick(edit, Qt::Key_Return);
    EXPECT_EQ(spy.count(), 0);
    edit->setText(QStringLiteral("512x384"));
    QTest::keyClick(edit, Qt::Key_Return);
    ASSERT_EQ(spy.count(), 1);
    EXPECT_EQ(spy.at(0).at(0).value<std::vector<std::int64_t>>(), (std::vector<std::int64_t> {512, 384}));
}

// The window: the tab fills in once the what-if records are made, and Measure runs the model off the GUI
// thread and shows the measured figure next to the prediction.
TEST(RemediesWindow, ComputesAndMeasuresOffTheGuiThread)
{
    qtTestApp();
    MainWindow window;
    window.resize(1400, 900);
    window.show();
    QSignalSpy ready(&window, &MainWindow::remediesReady);
    window.openFile(QString::fromStdString(test::fixture("remedies/base.pt")));
    auto* panel = window.remediesPanel();
    ASSERT_NE(panel, nullptr);
    EXPECT_NE(window.tabs()->indexOf(panel), -1);
    bool complete = false;
    for (int i = 0; i < 600 && !complete; ++i) {
        QTest::qWait(200);
        for (const auto& args : ready)
            complete = complete || args.at(0).toBool();
    }
    ASSERT_TRUE(complete) << "no remedies with the what-if within two minutes";
    int row = -1;
    for (int r = 0; r < static_cast<int>(panel->remedies().size()); ++r)
        if (panel->remedies()[static_cast<std::size_t>(r)].kind == RemedyKind::LowerPrecision
            && panel->remedies()[static_cast<std::size_t>(r)].dtype == "bfloat16")
            row = r;
    ASSERT_GE(row, 0);
    ASSERT_NE(panel->measureButton(row), nullptr);
    QTest::mouseClick(panel->measureButton(row), Qt::LeftButton);
    for (int i = 0; i < 600 && !panel->remedies()[static_cast<std::size_t>(row)].measured_peak_total; ++i)
        QTest::qWait(100);
    const auto& m = panel->remedies()[static_cast<std::size_t>(row)];
    ASSERT_TRUE(m.measured_peak_total.has_value());
    EXPECT_EQ(m.method, FigureMethod::Measured);
    // A real bfloat16 run against the prediction from the what-if records.
    EXPECT_LE(std::abs(static_cast<double>(m.peak_total_after - *m.measured_peak_total)), 0.01 * *m.measured_peak_total);
    EXPECT_TRUE(panel->table()->item(row, RemediesPanel::kMeasuredColumn)->text().contains(QStringLiteral("error")));
    // Saved with the report.
    EXPECT_TRUE(window.reportForExport().remedies);
}

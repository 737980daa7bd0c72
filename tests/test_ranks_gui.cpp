// File > Open ranks…: the Ranks view with real snapshots (one per rank): its rows hold what compareRanks and
// analyze of each file alone say, the overlay has a curve per rank, a click on a row or a curve opens that
// rank's file in the main views, and a bad file fails with its name while the window keeps working.
#include "main_window.h"
#include "qt_test_app.h"
#include "ranks_view.h"
#include "window_wait.h"

#include "session/open_file.h"
#include "session/ranks.h"
#include "exports/ranks_export.h"

#include <qcustomplot.h>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QHeaderView>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>

#include <gtest/gtest.h>

using namespace memledger;

namespace {

// MEMLEDGER_SNAPSHOTS in the environment names another folder (a worktree's ../shared is elsewhere).
QString snapshotDir()
{
    auto env = qEnvironmentVariable("MEMLEDGER_SNAPSHOTS");
    return env.isEmpty() ? QStringLiteral(MEMLEDGER_SNAPSHOTS) : env;
}

QString snapshot(const char* name)
{
    return snapshotDir() + QStringLiteral("/") + QString::fromLatin1(name);
}

#define SKIP_WITHOUT_SNAPSHOTS()                                                                                       \
    if (!QDir(snapshotDir()).exists())                                                                                 \
    GTEST_SKIP() << "no snapshot folder at " << snapshotDir().toStdString()

const char* kFiles[] = {"training-step-annotated.pickle", "training-loop-annotations-python-frames.pickle",
    "torch-compile-run.pickle"};

// Opens the ranks and waits for the Ranks view (true) or the failure (false).
bool openRanksAndWait(MainWindow& w, const QStringList& paths)
{
    QSignalSpy shown(&w, &MainWindow::ranksShown);
    QSignalSpy failed(&w, &MainWindow::ranksFailed);
    w.openRanks(paths);
    QElapsedTimer clock;
    clock.start();
    while (shown.isEmpty() && failed.isEmpty() && clock.elapsed() < 120000)
        shown.wait(50);
    return !shown.isEmpty();
}

QString cellText(QTableWidget* t, int row, int column)
{
    return t->item(row, column) ? t->item(row, column)->text() : QString();
}

} // namespace

TEST(RanksGui, TheTableHoldsEachFilesFiguresAndTheOverlayACurvePerRank)
{
    qtTestApp();
    SKIP_WITHOUT_SNAPSHOTS();
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    QStringList paths;
    std::vector<std::string> files;
    for (const char* f : kFiles) {
        paths << snapshot(f);
        files.push_back(snapshot(f).toStdString());
    }
    ASSERT_TRUE(openRanksAndWait(w, paths)) << w.errorText().toStdString();
    auto* view = w.ranksView();
    EXPECT_EQ(w.tabs()->currentWidget(), view);
    const auto truth = compareRanks(files, 1);
    const auto& shown = *view->table();
    ASSERT_EQ(shown.ranks.size(), 3u);
    EXPECT_EQ(shown.highest_peak_rank, truth.highest_peak_rank);
    EXPECT_DOUBLE_EQ(shown.peak_spread, truth.peak_spread);
    auto* table = view->tableWidget();
    ASSERT_EQ(table->rowCount(), 3);
    for (int rank = 0; rank < 3; ++rank) {
        const auto& want = truth.ranks[static_cast<std::size_t>(rank)];
        // analyze of the file alone says the same peak total.
        auto alone = openFile(files[static_cast<std::size_t>(rank)]);
        ASSERT_TRUE(alone.report);
        EXPECT_EQ(want.peak_total_bytes, alone.report->peak_total_bytes);
        const int row = view->rowOf(rank);
        ASSERT_GE(row, 0);
        auto value = [&](int column) { return table->item(row, column)->data(RanksView::kValueRole).toDouble(); };
        EXPECT_EQ(static_cast<std::int64_t>(value(RanksView::PeakTotal)), want.peak_total_bytes) << rank;
        EXPECT_EQ(static_cast<std::int64_t>(value(RanksView::ReservedPeak)), want.reserved_peak_bytes) << rank;
        EXPECT_DOUBLE_EQ(value(RanksView::PeakAt), static_cast<double>(want.peak_time_ns) / 1e6) << rank;
        EXPECT_EQ(cellText(table, row, RanksView::Phase),
            want.peak_phase.empty() ? QStringLiteral("-") : QString::fromStdString(want.peak_phase));
        EXPECT_EQ(table->item(row, RanksView::File)->toolTip(), paths[rank]);
        // The highest peak's row is marked, and the heading names it with the spread.
        EXPECT_EQ(table->item(row, RanksView::Rank)->font().bold(), rank == truth.highest_peak_rank);
        EXPECT_EQ(cellText(table, row, RanksView::Rank).contains(QStringLiteral("highest")),
            rank == truth.highest_peak_rank);
        // One curve per rank, its points those compareRanks thinned.
        auto* g = view->graphOf(rank);
        ASSERT_NE(g, nullptr);
        EXPECT_EQ(g->dataCount(), static_cast<int>(want.timeline.size()));
        EXPECT_EQ(g->pen().color(), QColor(QString::fromUtf8(rankColourHex(static_cast<std::size_t>(rank)))));
    }
    EXPECT_EQ(view->plot()->graphCount(), 3);
    EXPECT_EQ(view->plot()->legend->itemCount(), 3);
    EXPECT_TRUE(view->heading()->text().contains(QStringLiteral("rank %1").arg(truth.highest_peak_rank)));
    EXPECT_TRUE(view->heading()->text().contains(QString::number(truth.peak_spread, 'f', 3)));
}

TEST(RanksGui, ARowClickAndACurveClickOpenThatRanksFile)
{
    qtTestApp();
    SKIP_WITHOUT_SNAPSHOTS();
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    ASSERT_TRUE(openRanksAndWait(w, {snapshot(kFiles[0]), snapshot(kFiles[2])}));
    auto* view = w.ranksView();
    auto* table = view->tableWidget();
    const int row = view->rowOf(1);
    auto rect = table->visualRect(table->model()->index(row, RanksView::File));
    QSignalSpy shown(&w, &MainWindow::reportChanged);
    QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, rect.center());
    ASSERT_TRUE(waitForReport(w));
    EXPECT_EQ(w.currentFile(), snapshot(kFiles[2]));
    EXPECT_TRUE(w.fileIsSnapshot());
    EXPECT_EQ(w.tabs()->currentWidget(), view); // the ranks stay in sight while the timeline shows the rank
    EXPECT_EQ(table->currentRow(), row);

    // A click on rank 0's curve, at its peak, opens rank 0.
    auto* plot = view->plot();
    plot->replot();
    auto* g = view->graphOf(0);
    const auto& r0 = view->table()->ranks[0];
    std::size_t top = 0;
    for (std::size_t k = 0; k < r0.timeline.size(); ++k)
        if (r0.timeline[k].second > r0.timeline[top].second)
            top = k;
    QPoint at(static_cast<int>(g->keyAxis()->coordToPixel(r0.timeline[top].first)),
        static_cast<int>(g->valueAxis()->coordToPixel(r0.timeline[top].second)));
    QTest::mouseClick(plot, Qt::LeftButton, {}, at);
    ASSERT_TRUE(waitForReport(w));
    EXPECT_EQ(w.currentFile(), snapshot(kFiles[0]));
    EXPECT_EQ(table->currentRow(), view->rowOf(0));
}

TEST(RanksGui, ABadFileFailsWithItsNameAndTheWindowKeepsWorking)
{
    qtTestApp();
    SKIP_WITHOUT_SNAPSHOTS();
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    QTemporaryDir dir;
    auto bad = dir.filePath(QStringLiteral("rank1.pickle"));
    QFile f(bad);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write("\x80\x04not a snapshot at all");
    f.close();
    // Alone, it fails with its name; beside a good file, it is left out and named, the good one ranked.
    EXPECT_FALSE(openRanksAndWait(w, {bad}));
    EXPECT_TRUE(w.errorText().contains(bad)) << w.errorText().toStdString();
    EXPECT_FALSE(w.tabs()->isTabVisible(w.tabs()->indexOf(w.ranksView())));
    ASSERT_TRUE(openRanksAndWait(w, {snapshot(kFiles[2]), bad}));
    EXPECT_EQ(w.ranksView()->tableWidget()->rowCount(), 1);
    ASSERT_EQ(w.ranksView()->table()->left_out.size(), 1u);
    EXPECT_EQ(w.ranksView()->table()->left_out[0].file, bad.toStdString());
    EXPECT_TRUE(w.ranksView()->heading()->text().contains(QStringLiteral("Left out: ")))
        << w.ranksView()->heading()->text().toStdString();
    EXPECT_TRUE(w.ranksView()->heading()->text().contains(bad)) << w.ranksView()->heading()->text().toStdString();
    // A folder of good files opens afterwards.
    QTemporaryDir good;
    ASSERT_TRUE(QFile::link(snapshot(kFiles[2]), good.filePath(QStringLiteral("rank0.pickle"))));
    ASSERT_TRUE(QFile::link(snapshot(kFiles[2]), good.filePath(QStringLiteral("rank1.pickle"))));
    ASSERT_TRUE(openRanksAndWait(w, {good.path()}));
    EXPECT_EQ(w.ranksView()->tableWidget()->rowCount(), 2);
    EXPECT_DOUBLE_EQ(w.ranksView()->table()->peak_spread, 1.0);
    EXPECT_TRUE(w.errorText().isEmpty());
    EXPECT_TRUE(openAndWait(w, snapshot(kFiles[2]))); // the window still opens files
}

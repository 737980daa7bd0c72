// File > Watch… / --watch offscreen: the window follows a snapshot or a report that is rewritten in place and by
// an atomic replace (os.replace), keeps the zoom, the selection and the tab, marks the previous load and says what
// changed; a file caught mid-write keeps the last good view. And the "What would help" tab during a new run: the
// previous run's remedies greyed with a busy mark until the new ones arrive (issue 31).
#include "cli_options.h"
#include "layer_tree_panel.h"
#include "main_window.h"
#include "qt_test_app.h"
#include "reload_marks.h"
#include "remedies_panel.h"
#include "synthetic_report.h"
#include "timeline_plot.h"
#include "watch_controller.h"
#include "window_wait.h"

#include "exports/report_json.h"
#include "session/open_file.h"
#include "snapshot/snapshot_writer.h"

#include <QApplication>
#include <QFile>
#include <QLocale>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>

using namespace memledger;

namespace {

constexpr int kTimeoutMs = 120000;

// Waits, with the event loop running, until `done` holds (true) or kTimeoutMs passed (false).
bool waitUntil(const std::function<bool()>& done)
{
    QElapsedTimer clock;
    clock.start();
    while (!done()) {
        if (clock.elapsed() > kTimeoutMs)
            return false;
        QTest::qWait(20);
    }
    return true;
}

// A snapshot pickle of a synthetic forward pass of `events` allocation events.
QByteArray snapshotBytes(std::size_t events, unsigned seed = 7)
{
    auto r = makeSyntheticReport(events, seed);
    return QByteArray::fromStdString(encodeSnapshot(*r.trace));
}

QByteArray reportBytes(std::size_t events, unsigned seed = 7)
{
    return QByteArray::fromStdString(reportToJsonText(makeSyntheticReport(events, seed)));
}

// As a job that rewrites its file in place: truncated, then written.
void writeInPlace(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly | QIODevice::Truncate)) << path.toStdString();
    ASSERT_EQ(f.write(bytes), bytes.size());
    f.close();
}

// As os.replace: a new file written beside it, then renamed over it.
void writeByReplace(const QString& path, const QByteArray& bytes)
{
    const auto tmp = path + QStringLiteral(".tmp");
    writeInPlace(tmp, bytes);
    ASSERT_EQ(std::rename(QFile::encodeName(tmp).constData(), QFile::encodeName(path).constData()), 0);
}

// The events the file holds, as memledger's reader (the one `analyze` uses) reads the same bytes elsewhere.
std::size_t eventsIn(const QByteArray& bytes, const QString& suffix)
{
    QTemporaryDir dir;
    const auto path = dir.filePath(QStringLiteral("copy") + suffix);
    QFile f(path);
    f.open(QIODevice::WriteOnly);
    f.write(bytes);
    f.close();
    auto file = openFile(path.toStdString());
    return file.report && file.report->trace ? file.report->trace->size() : 0;
}

std::size_t shownEvents(const MainWindow& w)
{
    return w.report() && w.report()->trace ? w.report()->trace->size() : 0;
}

QString groupedCount(std::int64_t n)
{
    QLocale c = QLocale::c();
    c.setNumberOptions(QLocale::DefaultNumberOptions);
    return c.toString(static_cast<qlonglong>(n));
}

QString signedEvents(std::int64_t n)
{
    return (n >= 0 ? QStringLiteral("+") : QStringLiteral("\u2212")) + groupedCount(std::abs(n))
        + QStringLiteral(" events");
}

} // namespace

TEST(WatchGui, FollowsASnapshotRewrittenInPlaceAndByReplaceKeepingTheView)
{
    qtTestApp();
    QTemporaryDir dir;
    const auto path = dir.filePath(QStringLiteral("job.pickle"));
    const auto first = snapshotBytes(2000), second = snapshotBytes(3000, 8), third = snapshotBytes(4000, 9);
    writeInPlace(path, first);

    MainWindow w;
    w.resize(1400, 900);
    w.show();
    w.watchFile(path);
    auto* watch = w.watcher();
    ASSERT_TRUE(waitUntil([&] { return watch->loads() == 1; })) << watch->noticeText().toStdString();
    ASSERT_EQ(shownEvents(w), eventsIn(first, QStringLiteral(".pickle")));
    EXPECT_TRUE(w.errorText().isEmpty());
    EXPECT_TRUE(watch->noticeText().contains(QStringLiteral("Watching job.pickle")))
        << watch->noticeText().toStdString();
    EXPECT_FALSE(watch->marks()->peakShown()); // nothing to compare with yet

    // What the user looks at: a range selected, zoomed into part of the run, the Layers tab.
    auto* plot = w.timeline();
    plot->setRange(300, 600);
    const double lower = plot->series().keys[200], upper = plot->series().keys[900];
    plot->xAxis->setRange(lower, upper);
    w.tabs()->setCurrentIndex(0);
    QTest::qWait(50);
    ASSERT_DOUBLE_EQ(plot->xAxis->range().lower, lower);
    const auto firstPeak = plot->series().peak_value;
    auto expectViewKept = [&] {
        EXPECT_DOUBLE_EQ(plot->xAxis->range().lower, lower);
        EXPECT_DOUBLE_EQ(plot->xAxis->range().upper, upper);
        EXPECT_EQ(plot->rangeFirst(), 300u);
        EXPECT_EQ(plot->rangeEnd(), 600u);
        EXPECT_FALSE(w.rangeStatusText().isEmpty());
        EXPECT_EQ(w.tabs()->currentIndex(), 0);
    };

    // 1. Rewritten in place.
    writeInPlace(path, second);
    const auto secondEvents = eventsIn(second, QStringLiteral(".pickle"));
    ASSERT_TRUE(waitUntil([&] { return watch->loads() == 2 && shownEvents(w) == secondEvents; }))
        << watch->noticeText().toStdString();
    expectViewKept();
    EXPECT_TRUE(watch->marks()->peakShown());
    EXPECT_DOUBLE_EQ(watch->marks()->peakValue(), firstPeak); // the previous load's peak, where it was drawn
    EXPECT_TRUE(watch->marks()->endShown()); // the job went on past the previous load's end
    const auto notice = watch->noticeText();
    EXPECT_TRUE(notice.contains(QStringLiteral("reloaded"))) << notice.toStdString();
    EXPECT_TRUE(notice.contains(signedEvents(static_cast<std::int64_t>(secondEvents)
        - static_cast<std::int64_t>(eventsIn(first, QStringLiteral(".pickle"))))))
        << notice.toStdString();
    EXPECT_TRUE(notice.contains(QStringLiteral("peak"))) << notice.toStdString();

    // 2. Replaced atomically: another inode at the same path, which the watcher must find again.
    const auto secondPeak = plot->series().peak_value;
    writeByReplace(path, third);
    const auto thirdEvents = eventsIn(third, QStringLiteral(".pickle"));
    ASSERT_TRUE(waitUntil([&] { return watch->loads() == 3 && shownEvents(w) == thirdEvents; }))
        << watch->noticeText().toStdString();
    expectViewKept();
    EXPECT_DOUBLE_EQ(watch->marks()->peakValue(), secondPeak);
    EXPECT_TRUE(watch->noticeText().contains(signedEvents(static_cast<std::int64_t>(thirdEvents - secondEvents))))
        << watch->noticeText().toStdString();

    // 3. Caught mid-write: half a pickle. The last good load stays, with no error over the window.
    QSignalSpy failed(watch, &WatchController::readFailed);
    const auto fourth = snapshotBytes(5000, 10);
    writeInPlace(path, fourth.left(fourth.size() / 2));
    ASSERT_TRUE(waitUntil([&] { return !failed.isEmpty(); }));
    EXPECT_EQ(watch->loads(), 3);
    EXPECT_EQ(shownEvents(w), thirdEvents);
    EXPECT_TRUE(w.errorText().isEmpty()) << w.errorText().toStdString();
    EXPECT_EQ(QApplication::activeModalWidget(), nullptr);
    EXPECT_TRUE(watch->noticeText().contains(QStringLiteral("could not read it"))) << watch->noticeText().toStdString();
    EXPECT_TRUE(watch->noticeText().contains(QStringLiteral("still showing the load of")));
    expectViewKept();

    // ... and the rest of the write: shown.
    writeInPlace(path, fourth);
    const auto fourthEvents = eventsIn(fourth, QStringLiteral(".pickle"));
    ASSERT_TRUE(waitUntil([&] { return watch->loads() == 4 && shownEvents(w) == fourthEvents; }))
        << watch->noticeText().toStdString();
    EXPECT_FALSE(watch->lastReadFailed());
    expectViewKept();

    // The previous peak's label keeps off the current peak's: a previous load that peaked at the same height, with
    // the current peak at the left edge (where both labels would sit), in the middle and at the right edge.
    LoadFigures same;
    same.plotted_peak = plot->series().peak_value;
    same.peak_bytes = static_cast<std::int64_t>(same.plotted_peak);
    watch->marks()->show(same);
    // A window narrow enough to hold the peak at its left edge inside the data (the plot keeps its range there).
    const double peakKey = plot->series().peak_key;
    const double width = std::min({upper - lower, 0.9 * (plot->series().lastKey() - peakKey), 0.9 * (peakKey - plot->series().firstKey())});
    ASSERT_GT(width, 0);
    plot->yAxis->setRange(0, same.plotted_peak * 1.5); // room above the peak for both labels
    for (double at : {0.0, 0.005, 0.5, 0.995}) {
        SCOPED_TRACE(at);
        plot->xAxis->setRange(peakKey - at * width, peakKey + (1 - at) * width);
        plot->replot();
        ASSERT_NEAR(plot->xAxis->range().lower, peakKey - at * width, 1e-9);
        const auto previous = watch->marks()->peakLabelRect(), current = plot->peakLabelRect();
        ASSERT_FALSE(previous.isEmpty());
        ASSERT_FALSE(current.isEmpty());
        EXPECT_FALSE(previous.intersects(current)) << "previous " << previous.x() << "," << previous.y() << " current "
                                                   << current.x() << "," << current.y();
    }

    // Opening another file stops watching: its notice and marks go.
    w.openFile(QStringLiteral("/nonexistent/other.pickle"));
    EXPECT_FALSE(watch->isWatching());
    EXPECT_TRUE(watch->noticeText().isEmpty());
    EXPECT_FALSE(watch->marks()->peakShown());
}

TEST(WatchGui, KeepsTheSelectedModuleAndTabOfAReportAndFollowsItsEndUnzoomed)
{
    qtTestApp();
    QTemporaryDir dir;
    const auto path = dir.filePath(QStringLiteral("run.memledger.json"));
    writeInPlace(path, reportBytes(1500));
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    w.watchFile(path);
    auto* watch = w.watcher();
    ASSERT_TRUE(waitUntil([&] { return watch->loads() == 1; })) << watch->noticeText().toStdString();
    w.layerTree()->selectModule(QStringLiteral("features.0"));
    ASSERT_EQ(w.timeline()->highlightedModule(), QStringLiteral("features.0"));
    const int tab = w.tabs()->indexOf(w.remediesPanel());
    ASSERT_GE(tab, 0);
    w.tabs()->setCurrentIndex(tab);

    writeByReplace(path, reportBytes(2500, 11));
    ASSERT_TRUE(waitUntil([&] { return watch->loads() == 2 && shownEvents(w) == 2500; }))
        << watch->noticeText().toStdString();
    EXPECT_EQ(w.timeline()->highlightedModule(), QStringLiteral("features.0"));
    EXPECT_EQ(w.tabs()->currentIndex(), tab);
    // Not zoomed before: the view takes in the whole of the new run.
    EXPECT_DOUBLE_EQ(w.timeline()->xAxis->range().upper, w.timeline()->series().lastKey());
    EXPECT_TRUE(watch->noticeText().contains(QStringLiteral("+1,000 events"))) << watch->noticeText().toStdString();
}

TEST(WatchGui, AFileThatIsNotThereYetIsShownWhenWritten)
{
    qtTestApp();
    QTemporaryDir dir;
    const auto path = dir.filePath(QStringLiteral("later.pickle"));
    MainWindow w;
    w.resize(1280, 720);
    w.show();
    w.watchFile(path);
    auto* watch = w.watcher();
    EXPECT_TRUE(watch->noticeText().contains(QStringLiteral("waiting for it to be written")))
        << watch->noticeText().toStdString();
    EXPECT_TRUE(w.errorText().isEmpty());
    const auto bytes = snapshotBytes(1000);
    writeByReplace(path, bytes);
    ASSERT_TRUE(waitUntil([&] { return watch->loads() == 1; })) << watch->noticeText().toStdString();
    EXPECT_EQ(shownEvents(w), eventsIn(bytes, QStringLiteral(".pickle")));
    EXPECT_EQ(w.currentFile(), path);
}

TEST(WatchGui, ModelsAreNotWatched)
{
    qtTestApp();
    QTemporaryDir dir;
    const auto path = dir.filePath(QStringLiteral("model.pt"));
    writeInPlace(path, QByteArray("PK\x03\x04 not a real archive", 26));
    MainWindow w;
    w.show();
    QSignalSpy failed(w.watcher(), &WatchController::readFailed);
    w.watchFile(path);
    ASSERT_TRUE(waitUntil([&] { return !failed.isEmpty(); }));
    EXPECT_TRUE(failed.front().front().toString().contains(QStringLiteral("model.pt")))
        << failed.front().front().toString().toStdString();
    EXPECT_TRUE(failed.front().front().toString().contains(QStringLiteral("--watch")));
    EXPECT_EQ(w.report(), nullptr);
}

TEST(WatchCli, WatchIsForTheWindowAndOneFile)
{
    auto o = parseCli({"--watch", "/tmp/job.pickle"});
    EXPECT_EQ(o.command, "gui");
    EXPECT_TRUE(o.watch);
    EXPECT_EQ(o.model, "/tmp/job.pickle");
    EXPECT_THROW(parseCli({"analyze", "--watch", "/tmp/job.pickle"}), std::invalid_argument);
    EXPECT_THROW(parseCli({"--watch"}), std::invalid_argument);
    EXPECT_THROW(parseCli({"--watch", "a.pickle", "b.pickle"}), std::invalid_argument);
    EXPECT_THROW(parseCli({"--watch", "demo:gpt.pt2"}), std::invalid_argument);
}

// Issue 31: a new run greys the remedies of the one before and shows a busy mark until its own arrive.
TEST(RemediesDuringANewRun, GreyedWithABusyMarkUntilTheNewOnesArrive)
{
    qtTestApp();
    QTemporaryDir dir;
    const auto a = dir.filePath(QStringLiteral("a.pickle")), b = dir.filePath(QStringLiteral("b.pickle"));
    writeInPlace(a, snapshotBytes(2000));
    writeInPlace(b, snapshotBytes(3000, 12));
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    QSignalSpy ready(&w, &MainWindow::remediesReady);
    ASSERT_TRUE(openAndWait(w, a));
    ASSERT_TRUE(waitUntil([&] { return !ready.isEmpty(); }));
    auto* panel = w.remediesPanel();
    EXPECT_FALSE(panel->isBusy());
    EXPECT_FALSE(panel->isStale());
    EXPECT_TRUE(panel->table()->isEnabled());
    const auto shownFor = w.report();

    ready.clear();
    w.openFile(b);
    // At once, before the new file is even read: the old remedies are marked as the old run's.
    EXPECT_TRUE(panel->isStale());
    EXPECT_TRUE(panel->isBusy()) << panel->busyText().toStdString();
    EXPECT_FALSE(panel->table()->isEnabled());
    ASSERT_TRUE(waitUntil([&] { return !ready.isEmpty(); }));
    EXPECT_NE(w.report(), shownFor);
    EXPECT_FALSE(panel->isStale());
    EXPECT_FALSE(panel->isBusy());
    EXPECT_TRUE(panel->table()->isEnabled());
    // What is saved never carries another run's remedies.
    ASSERT_FALSE(panel->remedies().empty());
    EXPECT_NE(w.reportForExport().remedies, nullptr);

    // A file that fails to open leaves the shown report, and its remedies, current again.
    QSignalSpy failed(&w, &MainWindow::runFailed);
    w.openFile(dir.filePath(QStringLiteral("missing.pickle")));
    EXPECT_TRUE(panel->isBusy());
    ASSERT_TRUE(waitUntil([&] { return !failed.isEmpty(); }));
    EXPECT_FALSE(panel->isStale());
    EXPECT_FALSE(panel->isBusy());
    EXPECT_TRUE(panel->table()->isEnabled());
}

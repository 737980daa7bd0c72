// The window with real CUDA memory snapshots: timeline, segment timeline, segment map, OOM marker, bad files.
#include "layer_tree_model.h"
#include "layer_tree_panel.h"
#include "ledger_summary.h"
#include "main_window.h"
#include "qt_test_app.h"
#include "window_wait.h"
#include "run_panel.h"
#include "run_worker.h"
#include "segment_map_view.h"
#include "segment_timeline.h"
#include "timeline_plot.h"

#include "snapshot/segment_state.h"
#include "snapshot/snapshot.h"

#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QPushButton>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <map>

using namespace memledger;

namespace {

constexpr int kTimeoutMs = 120000;

QString snapshotDir()
{
    auto env = qEnvironmentVariable("MEMLEDGER_SNAPSHOTS");
    return env.isEmpty() ? QStringLiteral(MEMLEDGER_SNAPSHOTS) : env;
}


#define SKIP_WITHOUT_SNAPSHOTS()                                                                                       \
    if (!QDir(snapshotDir()).exists())                                                                                 \
    GTEST_SKIP() << "no snapshot folder at " << snapshotDir().toStdString()

// Figures from ../shared/snapshots/README.md, read there with an independent pickle reader: reserved = the
// segments' total_size, allocated = the active_allocated blocks.
struct SnapshotTruth {
    const char* file;
    std::int64_t reserved;
    std::int64_t allocated;
};
const SnapshotTruth kSnapshots[] = {{"bare-segment-list.pkl", 3649044480, 3353639424},
    {"legacy-history-format.pickle", 11844714496, 11840159744}, {"many-segments.pickle", 14180941824, 1377753600},
    {"oom-expandable-segments.pickle", 114628231168, 28728827904},
    {"segment-alloc-and-free.pickle", 22194159616, 1332177408}, {"small-alloc-free.pickle", 262144000, 8704},
    {"tiny-segment-alloc.pickle", 3781165056, 31719936}, {"torch-2.1-era-format.pickle", 6471811072, 2297283072}};

// Per ledger at the report's peak, from the trace alone: the bytes alive (a block alive before the trace is in the
// ledger of its free in the trace, the rest of those bytes resident) and, of them, those whose free is requested but
// not yet completed.
struct LedgersAtPeak {
    std::array<std::int64_t, kLedgerKinds> live {}, pending {};
};

LedgersAtPeak ledgersAtPeak(const Report& r)
{
    LedgersAtPeak out;
    const auto& t = *r.trace;
    std::int64_t told = 0;
    for (std::size_t i = 0; i < t.size(); ++i)
        if (t.action[i] == Action::Free && t.partner[i] == kNoPartner) {
            out.live[static_cast<std::size_t>(t.ledger[i])] += t.bytes[i];
            told += t.bytes[i];
        }
    auto& resident = out.live[static_cast<std::size_t>(Ledger::Resident)];
    resident = std::max<std::int64_t>(0, aliveBeforeTrace(*r.snapshot) - told + resident);
    struct Open {
        Ledger ledger;
        std::int64_t pending; // bytes of its requested free
    };
    std::map<std::pair<int, std::uint64_t>, Open> open;
    for (std::int64_t i = 0; i <= r.peak_event; ++i) {
        const auto k = static_cast<std::size_t>(i);
        const auto key = std::make_pair(static_cast<int>(t.device[k]), t.address[k]);
        if (t.action[k] == Action::Alloc) {
            out.live[static_cast<std::size_t>(t.ledger[k])] += t.bytes[k];
            open[key] = {t.ledger[k], 0};
        } else if (t.action[k] == Action::Free) {
            out.live[static_cast<std::size_t>(t.ledger[k])] -= t.bytes[k];
            open.erase(key);
        } else if (t.action[k] == Action::FreeRequested) {
            auto it = open.find(key);
            if (it == open.end()) { // alive before the trace: the ledger of its free, if the trace has it
                Ledger l = Ledger::Resident;
                for (auto j = k + 1; j < t.size(); ++j)
                    if (t.device[j] == t.device[k] && t.address[j] == t.address[k]
                        && t.action[j] != Action::FreeRequested) {
                        if (t.action[j] == Action::Free && t.partner[j] == kNoPartner)
                            l = t.ledger[j];
                        break;
                    }
                it = open.emplace(key, Open {l, 0}).first;
            }
            it->second.pending = t.bytes[k];
        }
    }
    for (const auto& entry : open)
        out.pending[static_cast<std::size_t>(entry.second.ledger)] += entry.second.pending;
    return out;
}

// At the report's peak, the timeline's stacked bands sum to the peak and are the report's ledgers, as the trace
// tells them (a ledger's blocks whose free is requested lie in the pending free band).
void expectBandsAreTheLedgersAtThePeak(const Report& r, const TimelineSeries& series)
{
    if (!r.trace || r.peak_event < 0)
        return;
    const auto p = static_cast<std::size_t>(r.peak_event) + 1;
    ASSERT_LT(p, series.keys.size());
    const auto truthAtPeak = ledgersAtPeak(r);
    double sum = 0;
    std::int64_t pending = 0;
    for (int l = 0; l < kLedgerKinds; ++l) {
        const auto band = series.tops[static_cast<std::size_t>(l)][p] - series.bottomOf(l, p);
        sum += band;
        const auto k = static_cast<std::size_t>(l);
        pending += truthAtPeak.pending[k];
        EXPECT_EQ(r.ledgers[k].at_peak, truthAtPeak.live[k]) << ledgerName(static_cast<Ledger>(l));
        EXPECT_EQ(band, static_cast<double>(truthAtPeak.live[k] - truthAtPeak.pending[k]))
            << ledgerName(static_cast<Ledger>(l));
    }
    const auto pendingBand
        = series.tops[TimelineSeries::kPendingFree][p] - series.bottomOf(TimelineSeries::kPendingFree, p);
    EXPECT_EQ(pendingBand, static_cast<double>(pending));
    EXPECT_EQ(sum + pendingBand, static_cast<double>(r.peak_bytes));
}

void PrintTo(const SnapshotTruth& t, std::ostream* os)
{
    *os << t.file;
}

} // namespace

class SnapshotWindow : public ::testing::TestWithParam<SnapshotTruth> { };

TEST_P(SnapshotWindow, ShowsTheSnapshotAsTheCoreReadsIt)
{
    SKIP_WITHOUT_SNAPSHOTS();
    qtTestApp();
    MainWindow w;
    w.show();
    QAbstractItemModelTester treeTester(w.layerTree()->model(), QAbstractItemModelTester::FailureReportingMode::Fatal);
    QAbstractItemModelTester proxyTester(w.layerTree()->proxy(), QAbstractItemModelTester::FailureReportingMode::Fatal);
    const auto& truth = GetParam();
    auto path = snapshotDir() + QLatin1Char('/') + QString::fromUtf8(truth.file);
    w.openFile(path);
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    EXPECT_TRUE(w.fileIsSnapshot());
    auto report = w.report();
    ASSERT_TRUE(report);
    ASSERT_TRUE(report->snapshot);
    const auto& s = *report->snapshot;

    // The run panel has nothing to run.
    EXPECT_FALSE(w.runPanel()->runButton()->isEnabled());

    // Timeline: the ledgers and pending free peak where the report says.
    const auto& series = w.timeline()->series();
    EXPECT_EQ(series.peak_value, static_cast<double>(report->peak_bytes));
    EXPECT_EQ(series.keys.size(), (report->trace ? report->trace->size() : 0) + 1);
    expectBandsAreTheLedgersAtThePeak(*report, series);

    // Segment map: a bar per segment; its blocks add up to the snapshot's figures.
    auto* map = w.segmentMap();
    EXPECT_EQ(map->barCount(), static_cast<int>(s.segments.size()));
    EXPECT_EQ(map->barBytes(), truth.reserved);
    EXPECT_EQ(map->bytesIn(BlockState::ActiveAllocated), truth.allocated);
    std::int64_t inBlocks = map->bytesIn(BlockState::ActiveAllocated) + map->bytesIn(BlockState::ActivePendingFree)
        + map->bytesIn(BlockState::Inactive);
    EXPECT_LE(inBlocks, s.reservedBytes());
    auto bar = map->barRect(0);
    ASSERT_TRUE(bar.isValid());
    EXPECT_FALSE(map->describeAt(bar.center()).isEmpty());

    // Segment timeline: reserved ends at what the segments hold; the cause of fragmentation is named.
    const auto& h = w.segmentTimeline()->history();
    ASSERT_EQ(h.reserved.size(), h.keys.size());
    if (!h.simulated)
        EXPECT_EQ(h.reserved.back(), static_cast<double>(truth.reserved));
    for (std::size_t p = 0; p < h.keys.size(); ++p)
        ASSERT_GE(h.fragmentation[p], 0.0);
    EXPECT_FALSE(w.segmentTimeline()->causeText().isEmpty());
    EXPECT_EQ(w.tabs()->currentIndex(), 1);
    if (report->trace && report->trace->size() > 0)
        EXPECT_GT(w.layerTree()->model()->rowCount(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Shared, SnapshotWindow, ::testing::ValuesIn(kSnapshots), [](const ::testing::TestParamInfo<SnapshotTruth>& info) {
        std::string name = info.param.file;
        for (auto& c : name)
            if (!std::isalnum(static_cast<unsigned char>(c)))
                c = '_';
        return name;
    });

// The training steps, whose ledgers are many: the window's timeline stacks them as the report tells them at the
// peak, and the peak panel lists them.
TEST(SnapshotWindowLedgers, TheTimelineStacksTheReportsLedgersAtThePeak)
{
    SKIP_WITHOUT_SNAPSHOTS();
    qtTestApp();
    for (const char* file : {"training-step-annotated.pickle", "training-loop-annotations-python-frames.pickle"}) {
        SCOPED_TRACE(file);
        MainWindow w;
        ASSERT_TRUE(openAndWait(w, snapshotDir() + QLatin1Char('/') + QString::fromUtf8(file)))
            << w.errorText().toStdString();
        const auto& r = *w.report();
        const auto& series = w.timeline()->series();
        EXPECT_EQ(series.peak_value, static_cast<double>(r.peak_bytes));
        expectBandsAreTheLedgersAtThePeak(r, series);
        int ledgersAtPeak = 0;
        for (int l = 0; l < kLedgerKinds; ++l)
            ledgersAtPeak += r.ledgers[static_cast<std::size_t>(l)].at_peak > 0 ? 1 : 0;
        EXPECT_GE(ledgersAtPeak, 3); // weights or resident, activations, gradients, ...
        // The peak panel: a row per band that holds bytes at the peak, as the timeline stacks them.
        const auto rows = w.ledgerSummary()->rowNames();
        const auto p = static_cast<std::size_t>(r.peak_event) + 1;
        for (int band : TimelineSeries::kStackOrder)
            if (series.tops[static_cast<std::size_t>(band)][p] > series.bottomOf(band, p))
                EXPECT_TRUE(rows.contains(QString::fromUtf8(TimelineSeries::bandName(band))))
                    << TimelineSeries::bandName(band) << " in " << rows.join(QStringLiteral(", ")).toStdString();
        EXPECT_FALSE(rows.contains(QStringLiteral("allocated in the trace")));
    }
}

// A click on the timeline shows the segment map at that moment, as the core rebuilds it; "Show end" goes back.
TEST(SnapshotWindowMoment, AClickOnTheTimelineMovesTheSegmentMap)
{
    SKIP_WITHOUT_SNAPSHOTS();
    qtTestApp();
    MainWindow w;
    ASSERT_TRUE(openAndWait(w, snapshotDir() + QStringLiteral("/segment-alloc-and-free.pickle"))) << w.errorText().toStdString();
    const auto& s = *w.report()->snapshot;
    auto* map = w.segmentMap();
    auto* plot = w.timeline();
    EXPECT_TRUE(map->atEnd());
    EXPECT_TRUE(map->noteText().startsWith(QStringLiteral("At the end"))) << map->noteText().toStdString();

    // Click where the middle event of the trace is drawn.
    const auto& keys = plot->series().keys;
    const std::size_t middle = keys.size() / 2;
    plot->xAxis->setRange(keys.front(), keys.back());
    plot->replot();
    QPoint at(static_cast<int>(plot->xAxis->coordToPixel(keys[middle])), plot->axisRect()->rect().center().y());
    const std::size_t expected = plot->series().pointAt(plot->xAxis->pixelToCoord(at.x()));
    ASSERT_GT(expected, 0u);
    ASSERT_LT(expected, s.trace->size());
    QSignalSpy clicked(plot, &TimelinePlot::momentClicked);
    QTest::mouseClick(plot, Qt::LeftButton, {}, at);
    ASSERT_EQ(clicked.size(), 1);
    EXPECT_EQ(map->moment(), expected);
    EXPECT_FALSE(map->atEnd());
    EXPECT_TRUE(map->noteText().contains(QStringLiteral(" ms (event %1 of ").arg(expected)))
        << map->noteText().toStdString();

    // The map's bars and bytes are those of segmentsAt at that moment.
    auto then = segmentsAt(s, expected);
    EXPECT_EQ(map->barCount(), static_cast<int>(then.size()));
    std::int64_t reserved = 0;
    std::array<std::int64_t, 3> inState {};
    for (const auto& g : then) {
        reserved += g.total_size;
        for (const auto& b : g.blocks)
            if (b.state != BlockState::Other)
                inState[static_cast<std::size_t>(b.state)] += b.size;
    }
    EXPECT_EQ(map->barBytes(), reserved);
    EXPECT_EQ(map->bytesIn(BlockState::ActiveAllocated), inState[0]);
    EXPECT_EQ(map->bytesIn(BlockState::ActivePendingFree), inState[1]);
    EXPECT_EQ(map->bytesIn(BlockState::Inactive), inState[2]);
    EXPECT_NE(map->barBytes(), s.reservedBytes()); // this trace grows its segments after the middle
    ASSERT_GT(map->barCount(), 0);
    EXPECT_FALSE(map->describeAt(map->barRect(0).center()).isEmpty());
    EXPECT_TRUE(plot->momentMarkerVisible());

    // "Show end" (or a double-click on the map) goes back to the end state.
    auto* end = map->findChild<QPushButton*>();
    ASSERT_TRUE(end);
    EXPECT_TRUE(end->isEnabled());
    end->click();
    EXPECT_TRUE(map->atEnd());
    EXPECT_FALSE(end->isEnabled());
    EXPECT_FALSE(plot->momentMarkerVisible());
    EXPECT_EQ(map->barBytes(), 22194159616); // the README's reserved and allocated bytes of this file
    EXPECT_EQ(map->bytesIn(BlockState::ActiveAllocated), 1332177408);
    map->setMoment(expected);
    QTest::mouseDClick(map->viewport(), Qt::LeftButton, {}, map->barRect(0).center());
    EXPECT_TRUE(map->atEnd());
}

TEST(SnapshotWindowOom, MarksTheOomAndSelectsDevices)
{
    SKIP_WITHOUT_SNAPSHOTS();
    qtTestApp();
    MainWindow w;
    w.show();
    w.openFile(snapshotDir() + QStringLiteral("/oom-expandable-segments.pickle"));
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    const auto& s = *w.report()->snapshot;
    ASSERT_GE(w.timeline()->oomMarkerCount(), 1);
    auto text = w.timeline()->oomMarkerText(0);
    EXPECT_TRUE(text.contains(QStringLiteral("requested")) && text.contains(QStringLiteral("free")))
        << text.toStdString();
    // Four devices: the selector offers each and "all".
    ASSERT_GT(s.devices.size(), 1u);
    EXPECT_EQ(w.deviceSelector()->count(), static_cast<int>(s.devices.size()) + 1);
    double all = w.timeline()->series().peak_value;
    std::int64_t segments = 0;
    for (int d : s.devices) {
        w.setDevice(d);
        EXPECT_LE(w.timeline()->series().peak_value, all);
        segments += w.segmentMap()->barCount();
    }
    EXPECT_EQ(segments, static_cast<std::int64_t>(s.segments.size()));
    w.setDevice(TimelineSeries::kAllDevices);
    EXPECT_EQ(w.timeline()->series().peak_value, static_cast<double>(w.report()->peak_bytes));
}

TEST(SnapshotWindowErrors, ABadPickleNamesTheFileAndTheWindowStaysUsable)
{
    SKIP_WITHOUT_SNAPSHOTS();
    qtTestApp();
    QTemporaryDir dir;
    auto bad = dir.filePath(QStringLiteral("broken.pickle"));
    {
        QFile f(bad);
        ASSERT_TRUE(f.open(QIODevice::WriteOnly));
        f.write(QByteArray("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94(garbage", 24));
    }
    ASSERT_TRUE(looksLikePickleFile(bad.toStdString()));
    MainWindow w;
    w.show();
    QSignalSpy failed(&w, &MainWindow::runFailed);
    w.openFile(bad);
    EXPECT_FALSE(waitForReport(w));
    ASSERT_EQ(failed.size(), 1);
    EXPECT_TRUE(w.errorText().contains(QStringLiteral("broken.pickle"))) << w.errorText().toStdString();
    EXPECT_FALSE(w.isRunning());
    w.openFile(snapshotDir() + QStringLiteral("/tiny-segment-alloc.pickle"));
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    EXPECT_TRUE(w.errorText().isEmpty());
    EXPECT_EQ(w.segmentMap()->barCount(), static_cast<int>(w.report()->snapshot->segments.size()));
}

TEST(SnapshotWindowModel, AModelRunShowsTheSimulatedGpuReserve)
{
    qtTestApp();
    MainWindow w;
    w.show();
    w.openDemo();
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    EXPECT_TRUE(w.timeline()->hasReservedLine());
    const auto& h = w.segmentTimeline()->history();
    EXPECT_TRUE(h.simulated);
    ASSERT_EQ(h.reserved.size(), h.keys.size());
    // The allocator never holds less than what is live.
    for (std::size_t p = 1; p < h.keys.size(); ++p)
        ASSERT_GE(h.reserved[p], h.allocated[p]) << p;
    // The segment map shows the segments the model leaves at the end, as big as the simulated reserve there.
    auto* map = w.segmentMap();
    EXPECT_GT(map->barCount(), 0);
    EXPECT_EQ(static_cast<double>(map->barBytes()), h.reserved.back());
    EXPECT_TRUE(
        map->noteText().contains(QStringLiteral("simulated GPU segments at the end of the run"), Qt::CaseInsensitive))
        << map->noteText().toStdString();
    EXPECT_LE(map->bytesIn(BlockState::ActiveAllocated), map->barBytes());
}

// A large snapshot in PyTorch's layout (bench/make_snapshot.py): the Run panel shows how much of it is read,
// Cancel stops the reading and shows nothing of it, and the file opens afterwards as a whole.
TEST(SnapshotWindowReading, ShowsProgressAndCancelStopsIt)
{
    qtTestApp();
    QTemporaryDir dir;
    ASSERT_TRUE(dir.isValid());
    const auto path = dir.filePath(QStringLiteral("large.pickle"));
    const std::string cmd = "/usr/bin/python3 " MEMLEDGER_SOURCE_DIR "/bench/make_snapshot.py " + path.toStdString()
        + " --entries 400000 --nesting 12 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    MainWindow w;
    w.show();
    QSignalSpy shown(&w, &MainWindow::reportChanged);
    // The reader reports its bytes as it goes, each report an event queued on the GUI thread before the file's
    // report. Cancel is clicked while the first one is on show, from its own signal: polling the bar's text
    // instead raced with the events after it (they can all arrive in one pass on a loaded machine).
    auto* worker = w.findChild<RunWorker*>();
    ASSERT_TRUE(worker);
    auto* bar = w.runPanel()->progressBar();
    int reads = 0;
    QString firstRead;
    bool cancelEnabled = false;
    QObject::connect(worker, &RunWorker::reading, &w, [&] {
        if (reads++ > 0)
            return;
        firstRead = bar->format(); // the Run panel's slot, connected first, has shown this report
        cancelEnabled = w.runPanel()->cancelButton()->isEnabled();
        w.runPanel()->cancelButton()->click(); // as a user does while "Reading" shows
    });
    w.openFile(path);
    EXPECT_TRUE(QTest::qWaitFor([&] { return reads > 0 || !shown.isEmpty(); }, kTimeoutMs));
    ASSERT_TRUE(shown.isEmpty()) << "read before its progress was seen";
    ASSERT_EQ(reads, 1) << "no progress while reading, or more after Cancel";
    EXPECT_TRUE(firstRead.startsWith(QStringLiteral("Reading"))) << firstRead.toStdString();
    EXPECT_TRUE(firstRead.endsWith(QStringLiteral(" MB"))) << firstRead.toStdString();
    EXPECT_TRUE(cancelEnabled);
    EXPECT_FALSE(w.isRunning());
    QTest::qWait(1500);
    EXPECT_TRUE(shown.isEmpty());
    EXPECT_FALSE(w.report());
    EXPECT_TRUE(w.errorText().isEmpty()) << w.errorText().toStdString();

    w.openFile(path);
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    ASSERT_TRUE(w.report() && w.report()->trace);
    EXPECT_EQ(w.report()->trace->size(), 400000u);
}

// A range of a report's events (analysis/report_range.h): the ledgers, the tree and the tables for what the
// range allocated and the peak inside it. Truths: sums made here by hand over the trace's events, a hand-made
// run with known answers, and a real CUDA snapshot read by Python's pickle (tests/range_truths.py).
#include "recording/build_report.h"
#include "analysis/report_range.h"
#include "analysis/timeline_series.h"
#include "analysis/segment_history.h"
#include "snapshot/snapshot.h"
#include "exports/report_html.h"

#include "run_command.h"
#include "synthetic_run.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>

using namespace memledger;
using namespace memledger::test;

namespace {

std::string snapshotPath(const std::string& name)
{
    return std::string(MEMLEDGER_SNAPSHOTS) + "/" + name;
}

#define SKIP_WITHOUT_SNAPSHOTS()                                                                                   \
    if (!std::filesystem::exists(MEMLEDGER_SNAPSHOTS))                                                             \
    GTEST_SKIP() << "no snapshot folder at " << MEMLEDGER_SNAPSHOTS

nlohmann::json pythonTruths(const std::string& file, const std::string& range = "")
{
    auto r = runCommand("/usr/bin/python3 " + std::string(MEMLEDGER_SOURCE_DIR) + "/tests/range_truths.py "
        + snapshotPath(file) + (range.empty() ? "" : " " + range));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
}

ModelInfo modelOf(const RawRun&)
{
    ModelInfo m;
    m.type = "Synthetic";
    return m;
}

std::vector<LayerStats> modulesOf(const std::vector<std::string>& paths)
{
    std::vector<LayerStats> layers(1);
    layers[0].name = "Synthetic";
    for (const auto& p : paths) {
        LayerStats l;
        l.path = l.name = p;
        l.parent = 0;
        l.depth = 1;
        layers[0].children.push_back(static_cast<int>(layers.size()));
        layers.push_back(l);
    }
    return layers;
}

std::int64_t ledgerTotal(const Report& r, Ledger l)
{
    return r.ledgers[static_cast<std::size_t>(l)].total;
}
std::int64_t ledgerAtPeak(const Report& r, Ledger l)
{
    return r.ledgers[static_cast<std::size_t>(l)].at_peak;
}

} // namespace

// A run whose answers are known: op "a" makes a 100 B activation and a 50 B temporary; op "b" a 200 B activation
// and a 300 B temporary; op "c" frees both activations.
TEST(RangeReport, AHandMadeRunGivesTheKnownAnswers)
{
    RunBuilder rb;
    rb.beginOp("a", "aten::a");
    auto a = rb.alloc(100, "aten::empty"); // event 0
    auto ta = rb.alloc(50, "aten::empty"); // 1
    rb.free(ta); // 2
    rb.endOp();
    rb.beginOp("b", "aten::b");
    auto b = rb.alloc(200, "aten::empty"); // 3
    auto tb = rb.alloc(300, "aten::empty"); // 4
    rb.free(tb); // 5
    rb.endOp();
    rb.beginOp("c", "aten::c");
    rb.free(a); // 6
    rb.free(b); // 7
    rb.endOp();
    auto raw = rb.r;
    auto whole = buildReport(modelOf(raw), modulesOf({"a", "b", "c"}), raw);
    EXPECT_EQ(whole.peak_bytes, 600); // 100 + 200 + 300 at event 4
    EXPECT_FALSE(isRangeReport(whole));

    // Op b's events: 3, 4, 5.
    auto r = reportForRange(whole, 3, 6);
    EXPECT_TRUE(isRangeReport(r));
    EXPECT_EQ(r.range_first, 3u);
    EXPECT_EQ(r.range_end, 6u);
    EXPECT_EQ(ledgerTotal(r, Ledger::Activations), 200);
    EXPECT_EQ(ledgerTotal(r, Ledger::Temporaries), 300);
    EXPECT_EQ(r.peak_bytes, 600);
    EXPECT_EQ(r.peak_event, 4);
    EXPECT_EQ(ledgerAtPeak(r, Ledger::Activations), 300); // a's 100, made before the range, is alive then
    EXPECT_EQ(ledgerAtPeak(r, Ledger::Temporaries), 300);
    ASSERT_EQ(r.alive_at_peak.size(), 3u);
    EXPECT_EQ(r.alive_at_peak[0].bytes, 300);
    const auto& la = r.layers[static_cast<std::size_t>(r.findLayer("a"))];
    const auto& lb = r.layers[static_cast<std::size_t>(r.findLayer("b"))];
    EXPECT_EQ(la.activation_bytes, 0); // a allocated nothing in the range
    EXPECT_EQ(la.calls, 0);
    EXPECT_EQ(lb.activation_bytes, 200);
    EXPECT_EQ(lb.temporary_peak_bytes, 300);
    EXPECT_EQ(lb.calls, 1);
    EXPECT_EQ(lb.peak_bytes, 500); // live 100 when b began, 600 at its top
    EXPECT_EQ(r.layers[0].activation_bytes, 200);

    // Only the frees of op c: nothing allocated, the peak is where the range begins.
    auto c = reportForRange(whole, 6, 8);
    EXPECT_EQ(ledgerTotal(c, Ledger::Activations), 0);
    EXPECT_EQ(c.peak_bytes, 300);
    EXPECT_EQ(c.peak_event, 5);

    // Out of bounds is clipped; an empty range has nothing allocated.
    auto clipped = reportForRange(whole, 6, 1000);
    EXPECT_EQ(clipped.range_end, 8u);
    auto empty = reportForRange(whole, 5, 5);
    EXPECT_EQ(ledgerTotal(empty, Ledger::Temporaries), 0);
}

// Ranges of a longer recorded run: every figure against sums made here over the trace's events.
TEST(RangeReport, RangesOfARunMatchSumsOverTheirEvents)
{
    auto raw = syntheticRun(4, 30);
    std::vector<std::string> paths;
    for (int k = 0; k < 30; ++k)
        paths.push_back("layer" + std::to_string(k));
    auto whole = buildReport(modelOf(raw), modulesOf(paths), raw);
    const Trace& t = *whole.trace;
    const auto n = static_cast<std::uint32_t>(t.size());
    ASSERT_GT(n, 100u);

    // Whole run as a range: the same figures as the report itself.
    auto all = reportForRange(whole, 0, n);
    EXPECT_FALSE(isRangeReport(all));
    EXPECT_EQ(all.peak_bytes, whole.peak_bytes);
    for (int l = 0; l < kLedgerCount; ++l) {
        EXPECT_EQ(all.ledgers[static_cast<std::size_t>(l)].total, whole.ledgers[static_cast<std::size_t>(l)].total);
        EXPECT_EQ(all.ledgers[static_cast<std::size_t>(l)].at_peak, whole.ledgers[static_cast<std::size_t>(l)].at_peak);
    }
    for (std::size_t m = 0; m < whole.layers.size(); ++m) {
        EXPECT_EQ(all.layers[m].activation_bytes, whole.layers[m].activation_bytes) << m;
        EXPECT_EQ(all.layers[m].calls, whole.layers[m].calls) << m;
        EXPECT_EQ(all.layers[m].peak_bytes, whole.layers[m].peak_bytes) << m;
        EXPECT_EQ(all.layers[m].temporary_peak_bytes, whole.layers[m].temporary_peak_bytes) << m;
    }

    // Live bytes by hand.
    std::vector<std::int64_t> live(n);
    std::int64_t now = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
        if (t.action[i] == Action::Alloc)
            now += t.bytes[i];
        else if (t.action[i] == Action::Free)
            now -= t.bytes[i];
        live[i] = now;
    }
    for (auto [first, end] : std::vector<std::pair<std::uint32_t, std::uint32_t>> {
             {0, 10}, {7, 40}, {n / 3, n / 2}, {n / 2, n}, {n - 5, n}}) {
        SCOPED_TRACE(std::to_string(first) + ".." + std::to_string(end));
        auto r = reportForRange(whole, first, end);
        std::map<Ledger, std::int64_t> totals;
        std::map<std::string, std::int64_t> byModule;
        std::int64_t peak = first > 0 ? live[first - 1] : 0;
        std::int64_t peakAt = static_cast<std::int64_t>(first) - 1;
        for (std::uint32_t i = first; i < end; ++i) {
            if (t.action[i] == Action::Alloc) {
                totals[t.ledger[i]] += t.bytes[i];
                if (t.ledger[i] == Ledger::Activations)
                    byModule[t.strings.at(t.where[i])] += t.bytes[i];
            }
            if (live[i] > peak) {
                peak = live[i];
                peakAt = i;
            }
        }
        EXPECT_EQ(r.peak_bytes, peak);
        EXPECT_EQ(r.peak_event, peakAt);
        EXPECT_EQ(r.peak_total_bytes, r.weight_bytes + r.input_bytes + peak);
        for (auto l : {Ledger::Activations, Ledger::Temporaries})
            EXPECT_EQ(ledgerTotal(r, l), totals[l]) << ledgerName(l);
        // At the peak: every allocation made by then and not yet freed, wherever it was made.
        std::map<Ledger, std::int64_t> atPeak;
        for (std::int64_t i = 0; i <= peakAt; ++i) {
            auto k = static_cast<std::size_t>(i);
            if (t.action[k] == Action::Alloc && (t.partner[k] == kNoPartner || t.partner[k] > peakAt))
                atPeak[t.ledger[k]] += t.bytes[k];
        }
        for (auto l : {Ledger::Activations, Ledger::Temporaries})
            EXPECT_EQ(ledgerAtPeak(r, l), atPeak[l]) << ledgerName(l);
        std::int64_t listed = 0;
        for (const auto& item : r.alive_at_peak)
            listed += item.bytes;
        EXPECT_EQ(listed, peak);
        for (const auto& p : paths) {
            const auto& layer = r.layers[static_cast<std::size_t>(r.findLayer(p))];
            EXPECT_EQ(layer.activation_bytes, byModule[p]) << p;
        }
    }
}

// A real snapshot: a range of its trace against Python's pickle.
TEST(RangeReport, ASnapshotRangeMatchesPythonsPickle)
{
    SKIP_WITHOUT_SNAPSHOTS();
    auto truth = pythonTruths("many-segments.pickle", "1000 3000");
    auto whole = readSnapshotReport(snapshotPath("many-segments.pickle"), false);
    ASSERT_EQ(whole.trace->size(), truth["entries"].get<std::size_t>());
    auto r = reportForRange(whole, 1000, 3000);
    const auto& range = truth["range"];
    EXPECT_EQ(r.peak_bytes, range["peak"].get<std::int64_t>());
    ASSERT_FALSE(r.layers.empty());
    EXPECT_EQ(r.layers[0].activation_bytes, range["allocated"].get<std::int64_t>());
    EXPECT_EQ(r.layers[0].calls, range["count"].get<std::int64_t>());
    EXPECT_EQ(r.layers[0].largest_block_bytes, range["largest"].get<std::int64_t>());
    EXPECT_EQ(r.layers[0].peak_bytes, r.peak_bytes);
    // The tree's children add up to its root: the peak's bytes in frames and "alive before the trace".
    std::int64_t atPeak = 0, allocated = 0;
    for (int c : r.layers[0].children) {
        atPeak += r.layers[static_cast<std::size_t>(c)].peak_bytes;
        allocated += r.layers[static_cast<std::size_t>(c)].activation_bytes;
    }
    EXPECT_EQ(atPeak, r.peak_bytes);
    EXPECT_EQ(allocated, range["allocated"].get<std::int64_t>());
    // The whole trace as a range: the whole report's peak.
    auto all = reportForRange(whole, 0, static_cast<std::uint32_t>(whole.trace->size()));
    EXPECT_EQ(all.peak_bytes, whole.peak_bytes);
    EXPECT_FALSE(isRangeReport(all));
}

// A snapshot whose trace has no allocations: its segments' blocks are the state, in the rows of their frames.
TEST(RangeReport, ASnapshotWithoutATraceShowsItsBlocksAsTheEndState)
{
    SKIP_WITHOUT_SNAPSHOTS();
    for (const char* file : {"bare-segment-list.pkl", "legacy-history-format.pickle"}) {
        SCOPED_TRACE(file);
        auto truth = pythonTruths(file);
        auto r = readSnapshotReport(snapshotPath(file), false);
        const auto allocated = truth["allocated"].get<std::int64_t>();
        std::int64_t blocks = 0, largest = 0;
        for (const auto& [dev, d] : truth["devices"].items()) {
            blocks += d["blocks"].get<std::int64_t>();
            largest = std::max(largest, d["largest"].get<std::int64_t>());
        }
        EXPECT_EQ(r.peak_bytes, allocated);
        ASSERT_GT(r.layers.size(), 2u);
        EXPECT_EQ(r.layers[0].peak_bytes, allocated);
        EXPECT_EQ(r.layers[0].activation_bytes, allocated);
        EXPECT_EQ(r.layers[0].calls, blocks);
        EXPECT_EQ(r.layers[0].largest_block_bytes, largest);
        // The module tree's top rows (forward frames, "(outside any forward)") hold every block.
        std::int64_t rows = 0;
        for (int c : r.layers[0].children)
            rows += r.layers[static_cast<std::size_t>(c)].peak_bytes;
        EXPECT_EQ(rows, allocated);
    }
}

// A trace without timestamps: the axis is the events' order, in the core (keys) and the HTML.
TEST(RangeReport, ATraceWithoutTimestampsIsLaidOutInOrder)
{
    SKIP_WITHOUT_SNAPSHOTS();
    auto truth = pythonTruths("torch-2.1-era-format.pickle");
    ASSERT_FALSE(truth["has_time"].get<bool>());
    auto r = readSnapshotReport(snapshotPath("torch-2.1-era-format.pickle"), false);
    EXPECT_FALSE(timelineHasTime(r));
    EXPECT_EQ(timelineAxisLabel(r, TimelineAxis::Milliseconds).find("ms"), std::string::npos);
    auto series = TimelineSeries::build(r, TimelineAxis::Milliseconds);
    EXPECT_DOUBLE_EQ(series.lastKey(), static_cast<double>(truth["entries"].get<std::size_t>() - 1));
    auto html = reportToHtml(r);
    EXPECT_NE(html.find("\"x_unit\":\"\""), std::string::npos);
    EXPECT_NE(html.find("\"x_label\":\"event (in order"), std::string::npos);
    EXPECT_NE(html.find("the trace has no timestamps"), std::string::npos);
    EXPECT_EQ(r.run.duration_ms, 0.0);

    auto timed = readSnapshotReport(snapshotPath("tiny-segment-alloc.pickle"), false);
    EXPECT_TRUE(timelineHasTime(timed));
    EXPECT_EQ(timelineAxisLabel(timed, TimelineAxis::Milliseconds), "time (ms)");
}

// The segment chart and the sentence under it agree about the end: fragmentation at the end (reserved minus
// what the blocks alive hold in the trace's unit, the bytes requested, as Python's pickle counts it per device) is
// never called "no fragmentation".
TEST(RangeReport, TheFragmentationSentenceNeverContradictsTheChart)
{
    SKIP_WITHOUT_SNAPSHOTS();
    for (const char* file : {"bare-segment-list.pkl", "legacy-history-format.pickle", "many-segments.pickle",
             "oom-expandable-segments.pickle", "segment-alloc-and-free.pickle", "small-alloc-free.pickle",
             "tiny-segment-alloc.pickle", "torch-2.1-era-format.pickle"}) {
        SCOPED_TRACE(file);
        auto truth = pythonTruths(file);
        auto r = readSnapshotReport(snapshotPath(file), true);
        std::vector<int> devices {TimelineSeries::kAllDevices};
        for (int d : r.snapshot->devices)
            devices.push_back(d);
        for (int d : devices) {
            SCOPED_TRACE(d);
            std::int64_t frag = 0;
            for (const auto& [dev, v] : truth["devices"].items())
                if (d == TimelineSeries::kAllDevices || std::stoi(dev) == d)
                    frag += v["reserved"].get<std::int64_t>() - v["requested"].get<std::int64_t>();
            auto h = SegmentHistory::build(r, TimelineAxis::Milliseconds, d);
            ASSERT_FALSE(h.fragmentation.empty());
            // Read a block at a time, every point is what the segments held: those at the end (Python's count),
            // walked back over the trace's segment events; fragmentation is what is reserved but not allocated.
            const auto reserved = h.reserved.toVector(), allocated = h.allocated.toVector();
            const auto fragmentation = h.fragmentation.toVector();
            ASSERT_EQ(reserved.size(), h.keys.size());
            if (!h.simulated) {
                std::int64_t bytes = 0;
                for (const auto& [dev, v] : truth["devices"].items())
                    if (d == TimelineSeries::kAllDevices || std::stoi(dev) == d)
                        bytes += v["reserved"].get<std::int64_t>();
                const auto& t = *r.trace;
                for (std::size_t p = reserved.size(); p-- > 0;) {
                    ASSERT_EQ(reserved[p], static_cast<double>(bytes)) << p;
                    if (p == 0 || (d != TimelineSeries::kAllDevices && t.device[p - 1] != d))
                        continue;
                    const auto a = t.action[p - 1];
                    const auto delta = a == Action::SegmentAlloc || a == Action::SegmentMap ? t.bytes[p - 1]
                        : a == Action::SegmentFree || a == Action::SegmentUnmap             ? -t.bytes[p - 1]
                                                                                           : 0;
                    bytes = std::max<std::int64_t>(0, bytes - delta);
                }
            }
            for (std::size_t p = 0; p < fragmentation.size(); ++p)
                ASSERT_EQ(fragmentation[p], std::max(0.0, reserved[p] - allocated[p])) << p;
            for (const auto* values : {&reserved, &fragmentation}) {
                const auto e = (values == &reserved ? h.reserved : h.fragmentation).extremes();
                EXPECT_EQ(e.high, *std::max_element(values->begin(), values->end()));
                EXPECT_EQ(e.low, *std::min_element(values->begin(), values->end()));
            }
            EXPECT_EQ(h.cause.rfind("No fragmentation", 0) == 0, frag == 0) << h.cause;
            if (!h.simulated)
                EXPECT_EQ(static_cast<std::int64_t>(h.fragmentation.back()), frag);
            else if (static_cast<std::int64_t>(h.fragmentation.back()) != frag)
                EXPECT_NE(h.cause.find("simulated"), std::string::npos) << h.cause;
        }
    }
}

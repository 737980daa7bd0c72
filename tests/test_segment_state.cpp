#include "snapshot/segment_state.h"
#include "snapshot/snapshot.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <tuple>

using namespace memledger;

namespace {

#define SKIP_WITHOUT_SNAPSHOTS()                                                                                       \
    if (!std::filesystem::is_directory(MEMLEDGER_SNAPSHOTS))                                                           \
    GTEST_SKIP() << "the shared snapshots folder " MEMLEDGER_SNAPSHOTS " is absent: real-snapshot checks skipped"

const char* const kTraced[]
    = {"many-segments.pickle", "oom-expandable-segments.pickle", "segment-alloc-and-free.pickle",
        "small-alloc-free.pickle", "tiny-segment-alloc.pickle", "torch-2.1-era-format.pickle"};

Snapshot load(const std::string& name)
{
    return readSnapshotFile(std::string(MEMLEDGER_SNAPSHOTS) + "/" + name);
}

struct Sums {
    std::int64_t reserved = 0, allocated = 0, pending = 0, inactive = 0, requested = 0;
};

Sums sums(const std::vector<SnapshotSegment>& segments)
{
    Sums s;
    for (const auto& g : segments) {
        s.reserved += g.total_size;
        for (const auto& b : g.blocks) {
            if (b.state == BlockState::ActiveAllocated)
                s.allocated += b.size;
            else if (b.state == BlockState::ActivePendingFree)
                s.pending += b.size;
            else if (b.state == BlockState::Inactive)
                s.inactive += b.size;
            if (b.state == BlockState::ActiveAllocated || b.state == BlockState::ActivePendingFree)
                s.requested += b.requested_size;
        }
    }
    return s;
}

// Blocks cover their segment, in address order, without gaps, and no two inactive blocks touch.
void expectWellFormed(const std::vector<SnapshotSegment>& segments, const std::string& where)
{
    for (const auto& g : segments) {
        std::uint64_t at = g.address;
        const SnapshotBlock* prev = nullptr;
        for (const auto& b : g.blocks) {
            EXPECT_EQ(b.address, at) << where << ": segment 0x" << std::hex << g.address;
            EXPECT_GT(b.size, 0) << where;
            if (prev && b.address == at)
                EXPECT_FALSE(prev->state == BlockState::Inactive && b.state == BlockState::Inactive)
                    << where << ": two free blocks side by side at 0x" << std::hex << b.address;
            at = b.address + static_cast<std::uint64_t>(b.size);
            prev = &b;
        }
        EXPECT_EQ(at, g.address + static_cast<std::uint64_t>(g.total_size)) << where;
    }
}

} // namespace

TEST(SegmentState, AtTheEndOfTheTraceItIsTheEndState)
{
    SKIP_WITHOUT_SNAPSHOTS();
    for (const char* name : kTraced) {
        auto s = load(name);
        auto at = segmentsAt(s, s.trace->size());
        ASSERT_EQ(at.size(), s.segments.size()) << name;
        std::map<std::pair<int, std::uint64_t>, const SnapshotSegment*> byPlace;
        for (const auto& g : s.segments)
            byPlace[{g.device, g.address}] = &g;
        for (const auto& g : at) {
            auto it = byPlace.find({g.device, g.address});
            ASSERT_NE(it, byPlace.end()) << name;
            EXPECT_EQ(g.total_size, it->second->total_size) << name;
            EXPECT_EQ(g.blocks.size(), it->second->blocks.size()) << name;
        }
        auto a = sums(at);
        EXPECT_EQ(a.reserved, s.reservedBytes()) << name;
        EXPECT_EQ(a.allocated, s.allocatedBytes()) << name;
        auto e = sums(s.segments);
        EXPECT_EQ(a.pending, e.pending) << name;
        EXPECT_EQ(a.inactive, e.inactive) << name;
    }
}

// The trace counts requested bytes (alloc and free_completed carry the request, not the rounded block) and
// reportFromSnapshot starts from aliveBeforeTrace: the end state's allocated block bytes minus what the trace
// added. Rewinding undoes each event on a block whose requested_size is that same request, so the requested
// bytes of the active blocks (allocated or pending free: the trace counts a block live until free_completed)
// follow the trace's live bytes exactly; they differ by one constant, the end state's requested minus its
// allocated bytes, which is the rounding of the blocks alive before the trace (and of those still alive at the
// end). Block bytes do not follow it: a block rebuilt from a free is as big as the allocator rounds the request,
// and the end state's blocks can be bigger than that (a remainder too small to split stays in the block).
TEST(SegmentState, ActiveRequestedBytesFollowTheTracesLiveBytes)
{
    SKIP_WITHOUT_SNAPSHOTS();
    for (const char* name : kTraced) {
        // small-alloc-free's trace does not fit its segments (its blocks lie outside them, it frees more than
        // is reserved): every event is skipped there, so only its being well-formed is checked.
        const bool fits = std::string(name) != "small-alloc-free.pickle";
        auto s = load(name);
        const auto& t = *s.trace;
        const auto before = aliveBeforeTrace(s);
        // The blocks' requested bytes less the trace's live bytes stay the same all along (the blocks pending
        // free at the end hold requests the live bytes no longer count).
        std::int64_t liveAtEnd = before;
        for (std::size_t i = 0; i < t.size(); ++i)
            liveAtEnd += t.action[i] == Action::Alloc ? t.bytes[i] : t.action[i] == Action::Free ? -t.bytes[i] : 0;
        const auto constant = sums(s.segments).requested - liveAtEnd;
        std::int64_t live = before;
        std::size_t k = 0;
        for (int tenth = 0; tenth <= 10; ++tenth) {
            std::size_t m = t.size() * static_cast<std::size_t>(tenth) / 10;
            for (; k < m; ++k)
                live += t.action[k] == Action::Alloc ? t.bytes[k] : t.action[k] == Action::Free ? -t.bytes[k] : 0;
            auto at = segmentsAt(s, m);
            const auto where = std::string(name) + " after " + std::to_string(m) + " events";
            auto a = sums(at);
            if (!fits) {
                EXPECT_EQ(a.reserved, s.reservedBytes()) << where;
                continue;
            }
            expectWellFormed(at, where);
            EXPECT_EQ(a.requested - live, constant) << where;
            EXPECT_LE(a.allocated + a.pending, a.reserved) << where;
        }
    }
}

namespace {

// One 2 MiB segment at 0x100000 made by the trace, a second one freed by its last event, and an event on an
// address outside both (skipped).
Snapshot tinySnapshot()
{
    constexpr std::uint64_t kSeg = 0x100000, kGone = 0x400000;
    constexpr std::int64_t kMiB2 = 2 << 20;
    Snapshot s;
    s.layout = "dict";
    s.devices = {0};
    auto t = std::make_shared<Trace>();
    auto add = [&](Action a, std::uint64_t addr, std::int64_t size, const char* where = "") {
        auto i = t->push(static_cast<std::int64_t>(t->size()) * 1000, size, addr, a, 0);
        t->where[i] = t->strings.intern(where);
        s.trace_stream.push_back(7);
        return static_cast<std::int32_t>(i);
    };
    add(Action::SegmentAlloc, kSeg, kMiB2); // 0
    auto a = add(Action::Alloc, kSeg, 512, "train.py:10 forward"); // 1: A
    add(Action::Alloc, kSeg + 512, 1000, "train.py:11 forward"); // 2: B, rounded to 1024
    add(Action::FreeRequested, kSeg, 512); // 3
    auto fa = add(Action::Free, kSeg, 512); // 4
    add(Action::Alloc, 0x9000000, 512, "elsewhere.py:1 f"); // 5: outside every segment
    add(Action::Alloc, kSeg, 256, "train.py:20 step"); // 6: C, rounded to 512
    add(Action::SegmentFree, kGone, kMiB2); // 7
    t->partner[static_cast<std::size_t>(a)] = fa;
    t->partner[static_cast<std::size_t>(fa)] = a;
    s.trace = t;

    SnapshotSegment g;
    g.address = kSeg;
    g.total_size = kMiB2;
    g.stream = 7;
    g.segment_type = "small";
    SnapshotBlock c {kSeg, 512, 256, BlockState::ActiveAllocated, {{"train.py", 20, "step"}}};
    SnapshotBlock b {kSeg + 512, 1024, 1000, BlockState::ActiveAllocated, {{"train.py", 11, "forward (end)"}}};
    SnapshotBlock rest {kSeg + 1536, kMiB2 - 1536, 0, BlockState::Inactive, {}};
    g.blocks = {c, b, rest};
    g.allocated_size = g.active_size = 1536;
    g.requested_size = 1256;
    s.segments = {g};
    return s;
}

// A segment as "address:size:state ..." with states a(llocated), p(ending), i(nactive), for exact checks.
std::string layout(const std::vector<SnapshotSegment>& segments)
{
    std::string out;
    for (const auto& g : segments) {
        out += out.empty() ? "" : " | ";
        char head[64];
        std::snprintf(head, sizeof head, "%llx/%lld:", static_cast<unsigned long long>(g.address),
            static_cast<long long>(g.total_size));
        out += head;
        for (const auto& b : g.blocks) {
            char text[64];
            std::snprintf(text, sizeof text, " %llx+%lld%c", static_cast<unsigned long long>(b.address),
                static_cast<long long>(b.size),
                b.state == BlockState::ActiveAllocated         ? 'a'
                    : b.state == BlockState::ActivePendingFree ? 'p'
                                                               : 'i');
            out += text;
        }
    }
    return out;
}

} // namespace

TEST(SegmentState, HandMadeSnapshotAtEachMoment)
{
    auto s = tinySnapshot();
    const std::string seg = "100000/2097152:";
    const std::string gone = " | 400000/2097152: 400000+2097152i";
    EXPECT_EQ(layout(segmentsAt(s, 8)), seg + " 100000+512a 100200+1024a 100600+2095616i");
    EXPECT_EQ(layout(segmentsAt(s, 7)), seg + " 100000+512a 100200+1024a 100600+2095616i" + gone);
    EXPECT_EQ(layout(segmentsAt(s, 6)), seg + " 100000+512i 100200+1024a 100600+2095616i" + gone);
    EXPECT_EQ(layout(segmentsAt(s, 5)), layout(segmentsAt(s, 6)));
    EXPECT_EQ(layout(segmentsAt(s, 4)), seg + " 100000+512p 100200+1024a 100600+2095616i" + gone);
    EXPECT_EQ(layout(segmentsAt(s, 3)), seg + " 100000+512a 100200+1024a 100600+2095616i" + gone);
    EXPECT_EQ(layout(segmentsAt(s, 2)), seg + " 100000+512a 100200+2096640i" + gone);
    EXPECT_EQ(layout(segmentsAt(s, 1)), seg + " 100000+2097152i" + gone);
    EXPECT_EQ(layout(segmentsAt(s, 0)), "400000/2097152: 400000+2097152i");

    // Frames: kept where the block is the end state's, the trace's top frame where it was rebuilt.
    auto at3 = segmentsAt(s, 3);
    ASSERT_EQ(at3.size(), 2u);
    const auto& blocks = at3[0].blocks;
    ASSERT_EQ(blocks[0].frames.size(), 1u);
    EXPECT_EQ(blocks[0].frames[0].filename, "train.py");
    EXPECT_EQ(blocks[0].frames[0].line, 10);
    EXPECT_EQ(blocks[0].frames[0].name, "forward");
    EXPECT_EQ(blocks[0].requested_size, 512);
    EXPECT_EQ(blocks[1].frames.at(0).name, "forward (end)");
    EXPECT_EQ(at3[0].allocated_size, 1536);
    EXPECT_EQ(at3[0].requested_size, 1512);
    EXPECT_EQ(at3[1].segment_type, "small");
    EXPECT_EQ(at3[1].stream, 7u);
}

TEST(SegmentState, ExpandableRangesComeAndGo)
{
    // One expandable segment of 6 MiB at the end, mapped in three 2 MiB steps; its middle range was unmapped
    // once and mapped again.
    constexpr std::uint64_t kBase = 0x7000000;
    constexpr std::int64_t kMiB2 = 2 << 20;
    Snapshot s;
    auto t = std::make_shared<Trace>();
    auto add = [&](Action a, std::uint64_t addr, std::int64_t size) {
        t->push(static_cast<std::int64_t>(t->size()), size, addr, a, 0);
        s.trace_stream.push_back(0);
    };
    add(Action::SegmentMap, kBase, kMiB2); // 0
    add(Action::SegmentMap, kBase + kMiB2, kMiB2); // 1
    add(Action::SegmentMap, kBase + 2 * kMiB2, kMiB2); // 2
    add(Action::SegmentUnmap, kBase + kMiB2, kMiB2); // 3
    add(Action::SegmentMap, kBase + kMiB2, kMiB2); // 4
    add(Action::Alloc, kBase + kMiB2, kMiB2); // 5
    s.trace = t;
    SnapshotSegment g;
    g.address = kBase;
    g.total_size = 3 * kMiB2;
    g.is_expandable = true;
    g.segment_type = "large";
    g.blocks
        = {{kBase, kMiB2, 0, BlockState::Inactive, {}}, {kBase + kMiB2, kMiB2, kMiB2, BlockState::ActiveAllocated, {}},
            {kBase + 2 * kMiB2, kMiB2, 0, BlockState::Inactive, {}}};
    s.segments = {g};
    EXPECT_EQ(layout(segmentsAt(s, 5)), "7000000/6291456: 7000000+6291456i");
    EXPECT_EQ(layout(segmentsAt(s, 4)), "7000000/2097152: 7000000+2097152i | 7400000/2097152: 7400000+2097152i");
    EXPECT_EQ(layout(segmentsAt(s, 3)), "7000000/6291456: 7000000+6291456i");
    EXPECT_EQ(layout(segmentsAt(s, 2)), "7000000/4194304: 7000000+4194304i");
    EXPECT_EQ(layout(segmentsAt(s, 1)), "7000000/2097152: 7000000+2097152i");
    EXPECT_EQ(layout(segmentsAt(s, 0)), "");
}

TEST(SegmentState, NoTraceIsTheEndState)
{
    Snapshot s;
    SnapshotSegment g;
    g.address = 0x10;
    g.total_size = 512;
    s.segments = {g};
    EXPECT_EQ(segmentsAt(s, 0).size(), 1u);
}

TEST(SegmentState, EveryMomentOfASmallTraceIsWellFormed)
{
    SKIP_WITHOUT_SNAPSHOTS();
    auto s = load("tiny-segment-alloc.pickle");
    for (std::size_t m = 0; m <= s.trace->size(); ++m)
        expectWellFormed(segmentsAt(s, m), "tiny-segment-alloc.pickle after " + std::to_string(m) + " events");
    // Before its first segment_alloc the trace had no segments at all.
    EXPECT_TRUE(segmentsAt(s, 0).empty());
}

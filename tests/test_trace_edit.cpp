// The trace editor's rules (core/report/trace_edit.h) on hand-made traces: copies and moved events keep their
// recorded columns, the order of what is placed at one position, a free's address, device and ledger from its
// alloc, the pairing of a recorder's allocs and frees by address, and one ledger for an alloc and its free.
// (TraceEdit.PlacesEventsAndCarriesRanges, in test_parallel.cpp, covers placing new events and the ranges.)
#include "report/report_summary.h"
#include "report/trace_edit.h"

#include <gtest/gtest.h>

using namespace memledger;

namespace {

// alloc a (100 B, in "conv"), alloc b (50 B), free a, free b; a's events on device 0.
Trace fourEvents()
{
    Trace t;
    auto a = t.push(10, 100, 0x10, Action::Alloc, 0);
    auto b = t.push(20, 50, 0x20, Action::Alloc, 0);
    auto fa = t.push(30, 100, 0x10, Action::Free, 0);
    auto fb = t.push(40, 50, 0x20, Action::Free, 0);
    t.partner[a] = static_cast<std::int32_t>(fa);
    t.partner[fa] = static_cast<std::int32_t>(a);
    t.partner[b] = static_cast<std::int32_t>(fb);
    t.partner[fb] = static_cast<std::int32_t>(b);
    t.where[a] = t.strings.intern("conv");
    t.outer_op[a] = t.inner_op[a] = t.strings.intern("aten::conv2d");
    t.op_seq[a] = 3;
    t.ledger[a] = t.ledger[fa] = Ledger::Activations;
    t.ledger[b] = t.ledger[fb] = Ledger::Temporaries;
    return t;
}

} // namespace

TEST(TraceEdit, CopiesMovesAndOrdersWhatIsPlacedAtOnePosition)
{
    const Trace t = fourEvents();
    TraceEdit e(t);
    // A recomputation of a before the free of b: its copy and the copy's free; the free of a moved after b's.
    auto c = e.copy(3, 0);
    auto cf = e.addFree(3, c);
    e.move(2, 4);
    // At position 3, the copy's free is asked to come before the copy: order() decides, not placement.
    e.order(cf, 1, 0);
    e.order(c, 0, 0);
    auto out = e.build(nullptr, nullptr);
    ASSERT_EQ(out.size(), 6u);
    // a, b, copy of a, its free, b's free, a's moved free.
    EXPECT_EQ(out.action[2], Action::Alloc);
    EXPECT_EQ(out.bytes[2], 100);
    EXPECT_EQ(out.strings.at(out.where[2]), "conv"); // a copy keeps the recorded columns
    EXPECT_EQ(out.strings.at(out.outer_op[2]), "aten::conv2d");
    EXPECT_EQ(out.op_seq[2], 3u);
    EXPECT_EQ(out.ledger[2], Ledger::Activations);
    EXPECT_EQ(out.action[3], Action::Free);
    EXPECT_EQ(out.partner[3], 2);
    EXPECT_EQ(out.partner[2], 3);
    EXPECT_EQ(out.ledger[3], Ledger::Activations);
    EXPECT_EQ(out.address[3], out.address[2]);
    EXPECT_EQ(out.action[4], Action::Free); // b's own free, where it was
    EXPECT_EQ(out.partner[4], 1);
    EXPECT_EQ(out.action[5], Action::Free); // a's free, moved past the end
    EXPECT_EQ(out.partner[5], 0);
    EXPECT_EQ(out.partner[0], 5);
    auto live = liveBytesAfterEachEvent(out);
    EXPECT_EQ(live[3], 150); // a and b alive, the copy made and freed
    EXPECT_EQ(live.back(), 0);
    // builtFrom says which handle each new event was made from.
    const auto& from = e.builtFrom();
    ASSERT_EQ(from.size(), 6u);
    EXPECT_EQ(from[2], c);
    EXPECT_EQ(from[3], cf);
    EXPECT_EQ(from[5], 2u);
}

TEST(TraceEdit, ANewFreeTakesItsAllocsDeviceAndLedger)
{
    const Trace t = fourEvents();
    TraceEdit e(t);
    auto g = e.addAlloc(1, 64, Ledger::SavedActivations, "conv", "aten::get_rng_state", std::int8_t {-1});
    e.addFree(3, g);
    auto out = e.build(nullptr, nullptr);
    ASSERT_EQ(out.size(), 6u);
    EXPECT_EQ(out.device[1], -1); // the device asked for, not the device of the event at its position
    EXPECT_EQ(out.action[4], Action::Free);
    EXPECT_EQ(out.partner[4], 1);
    EXPECT_EQ(out.device[4], -1);
    EXPECT_EQ(out.ledger[4], Ledger::SavedActivations);
    EXPECT_EQ(out.address[4], out.address[1]);
    EXPECT_EQ(out.strings.at(out.where[4]), "conv");
}

TEST(TraceEdit, PairingByAddressAndOneLedgerPerPair)
{
    Trace t;
    AllocFreePairing pairs;
    auto a = t.push(0, 100, 0x10, Action::Alloc, -1);
    pairs.add(t, a);
    ASSERT_TRUE(pairs.liveAt(0x10));
    EXPECT_EQ(*pairs.liveAt(0x10), 0u);
    auto lost = t.push(1, 8, 0x30, Action::Free, -1); // allocated before the recording: no alloc to pair with
    pairs.add(t, lost);
    auto fa = t.push(2, 100, 0x10, Action::Free, -1);
    pairs.add(t, fa);
    EXPECT_EQ(t.partner[a], static_cast<std::int32_t>(fa));
    EXPECT_EQ(t.partner[fa], static_cast<std::int32_t>(a));
    EXPECT_EQ(t.partner[lost], kNoPartner);
    EXPECT_FALSE(pairs.liveAt(0x10));
    setLedger(t, a, Ledger::Gradients);
    EXPECT_EQ(t.ledger[fa], Ledger::Gradients);
}

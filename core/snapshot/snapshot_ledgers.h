#pragma once
// The ledger of every allocation of a CUDA memory snapshot, told from what PyTorch leaves in the file: each
// trace entry's call stack, the order and times of allocs and frees, and the record_function ranges of
// external_annotations (Optimizer.step#..., Optimizer.zero_grad#...). docs/snapshots.md lists the rules.
#include "report/report.h"

#include <array>
#include <cstdint>
#include <string>

namespace memledger {

struct Snapshot;

// Writes Trace::ledger of every alloc and free_completed of `t`, the trace of `s` (a free gets the ledger of its
// block). A free without its alloc (the block was alive before the trace began) gets Resident unless the trace
// tells what the block was: freed by zero_grad, a gradient; freed by the backward, a saved activation; freed by
// the optimizer's step, optimizer state.
void assignSnapshotLedgers(Trace& t, const Snapshot& s);

// What the program was doing at event `i` of a snapshot's trace, as the ledgers' rules tell it (its stack, an
// annotation, else the last event that told): "forward", "backward", "optimizer", "zero_grad", "setup", or ""
// where nothing tells.
std::string snapshotPhaseAt(const Trace& t, const Snapshot& s, std::size_t i);

// The ledgers' figures for the events [first, end) of a snapshot's classified trace: at_peak after event
// `peakEvent` (-1: before the first), total what the range allocated (Resident: the blocks alive before the
// trace that no free in it told more of), max the most alive at once in the range. `aliveBefore`: the bytes
// alive when the trace began (aliveBeforeTrace).
std::array<LedgerFigure, kLedgerKinds> snapshotLedgerFigures(
    const Trace& t, std::int64_t aliveBefore, std::uint32_t first, std::uint32_t end, std::int32_t peakEvent);

} // namespace memledger

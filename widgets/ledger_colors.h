#pragma once
#include "report/trace.h"

#include <QColor>

namespace memledger {

// One colour per ledger, shared by the timeline, the layer tree bars and the summary bar.
QColor ledgerColor(Ledger ledger);
// CUDA snapshots and the allocator model.
QColor aliveBeforeColor(); // blocks alive before the trace began
QColor pendingFreeColor(); // freed by the caller, not yet by the stream
QColor reservedColor(); // bytes the allocator holds in segments
QColor fragmentationColor(); // reserved but not allocated

} // namespace memledger

#pragma once
#include "report/trace.h"

#include <QColor>

class QCustomPlot;
class QPalette;

namespace memledger {

// One colour per ledger, shared by the timeline, the layer tree bars and the summary bar.
QColor ledgerColor(Ledger ledger);
// CUDA snapshots and the allocator model.
QColor aliveBeforeColor(); // blocks alive before the trace began
QColor pendingFreeColor(); // freed by the caller, not yet by the stream
QColor reservedColor(); // bytes the allocator holds in segments
QColor fragmentationColor(); // reserved but not allocated

// A plot in the window's palette (light or dark): background, axes, grid and legend. The timeline and the
// segment timeline both; each then colours its own items.
void applyPlotPalette(QCustomPlot* plot, const QPalette& palette);

} // namespace memledger

#pragma once
#include "memledger/trace.h"

#include <QColor>

namespace memledger {

// One colour per ledger, shared by the timeline, the layer tree bars and the summary bar.
QColor ledgerColor(Ledger ledger);

} // namespace memledger

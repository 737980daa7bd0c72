#include "ledger_colors.h"

namespace memledger {

QColor ledgerColor(Ledger ledger)
{
    // Colour-blind-safe hues that read on light and dark backgrounds alike.
    switch (ledger) {
    case Ledger::Weights:
        return QColor(0x4c, 0x72, 0xb0);
    case Ledger::Inputs:
        return QColor(0x81, 0x72, 0xb3);
    case Ledger::Activations:
        return QColor(0x55, 0xa8, 0x68);
    case Ledger::Temporaries:
        return QColor(0xdd, 0x84, 0x52);
    case Ledger::Unattributed:
        break;
    }
    return QColor(0x93, 0x78, 0x60);
}

QColor aliveBeforeColor()
{
    return QColor(0xa8, 0xa8, 0xa8);
}
QColor pendingFreeColor()
{
    return QColor(0xda, 0x8b, 0xc3);
}
QColor reservedColor()
{
    return QColor(0x2b, 0x5d, 0x8c);
}
QColor fragmentationColor()
{
    return QColor(0xc4, 0x4e, 0x52);
}

} // namespace memledger

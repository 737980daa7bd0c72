#include "ledger_colors.h"

#include "exports/ledger_palette.h"

namespace memledger {

// The hues live in core so that the window, the PNG and the HTML export draw the same colours.
static QColor fromHex(const char* hex)
{
    return QColor(QString::fromLatin1(hex));
}

QColor ledgerColor(Ledger ledger)
{
    return fromHex(ledgerColourHex(ledger));
}

QColor aliveBeforeColor()
{
    return fromHex(kAliveBeforeColourHex);
}
QColor pendingFreeColor()
{
    return fromHex(kPendingFreeColourHex);
}
QColor reservedColor()
{
    return fromHex(kReservedColourHex);
}
QColor fragmentationColor()
{
    return fromHex(kFragmentationColourHex);
}

} // namespace memledger

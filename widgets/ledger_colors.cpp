#include "ledger_colors.h"

#include <qcustomplot.h>

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

void applyPlotPalette(QCustomPlot* plot, const QPalette& pal)
{
    auto text = pal.color(QPalette::WindowText);
    plot->setBackground(pal.color(QPalette::Base));
    for (auto* axis : {plot->xAxis, plot->yAxis}) {
        axis->setBasePen(QPen(text, 1));
        axis->setTickPen(QPen(text, 1));
        axis->setSubTickPen(QPen(text, 1));
        axis->setTickLabelColor(text);
        axis->setLabelColor(text);
        auto grid = text;
        grid.setAlpha(40);
        axis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
    }
    auto legendBack = pal.color(QPalette::Base);
    legendBack.setAlpha(220);
    plot->legend->setBrush(legendBack);
    plot->legend->setTextColor(text);
    plot->legend->setBorderPen(QPen(pal.color(QPalette::Mid)));
}

} // namespace memledger

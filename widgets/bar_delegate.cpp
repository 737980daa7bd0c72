#include "bar_delegate.h"

#include "layer_tree_model.h"

#include <QApplication>
#include <QPainter>

#include <algorithm>

namespace memledger {

void BarDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const
{
    auto fraction = index.data(LayerTreeModel::BarFractionRole);
    if (fraction.isValid()) {
        QStyleOptionViewItem background = option;
        initStyleOption(&background, index);
        background.text.clear();
        auto* style = option.widget ? option.widget->style() : QApplication::style();
        style->drawControl(QStyle::CE_ItemViewItem, &background, painter, option.widget);
        auto colour = index.data(LayerTreeModel::BarColorRole).value<QColor>();
        colour.setAlpha(110);
        QRect bar = option.rect.adjusted(2, 3, -2, -3);
        bar.setWidth(static_cast<int>(bar.width() * std::clamp(fraction.toDouble(), 0.0, 1.0)));
        painter->fillRect(bar, colour);
        QStyleOptionViewItem text = option;
        initStyleOption(&text, index);
        text.backgroundBrush = Qt::NoBrush;
        text.state &= ~QStyle::State_Selected;
        text.palette.setColor(QPalette::Text,
            option.state & QStyle::State_Selected ? option.palette.color(QPalette::HighlightedText)
                                                  : option.palette.color(QPalette::Text));
        // Too narrow a column loses the front of the figure, never its unit: "…2.34 MiB", not "12.34 M".
        QRect textRect = option.rect.adjusted(4, 0, -4, 0);
        auto shown = option.fontMetrics.elidedText(text.text, Qt::ElideLeft, textRect.width());
        style->drawItemText(
            painter, textRect, Qt::AlignRight | Qt::AlignVCenter, text.palette, true, shown, QPalette::Text);
        return;
    }
    QStyledItemDelegate::paint(painter, option, index);
}

} // namespace memledger

#pragma once
#include <QStyledItemDelegate>

namespace memledger {

// Draws a bar behind the cell's text, as long as LayerTreeModel::BarFractionRole says, in BarColorRole.
class BarDelegate : public QStyledItemDelegate {
public:
    using QStyledItemDelegate::QStyledItemDelegate;
    void paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
};

} // namespace memledger

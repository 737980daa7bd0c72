#include "context_table.h"
#include "bytes_text.h"

#include "snapshot/snapshot_contexts.h"

#include <QHeaderView>

namespace memledger {

namespace {

// Sorts numbers by their value, not their text (the byte columns hold bytes in UserRole).
class FigureItem : public QTreeWidgetItem {
public:
    using QTreeWidgetItem::QTreeWidgetItem;
    bool operator<(const QTreeWidgetItem& other) const override
    {
        const int c = treeWidget() ? treeWidget()->sortColumn() : 0;
        if (c == ContextTable::Value)
            return QTreeWidgetItem::operator<(other);
        return data(c, Qt::UserRole).toLongLong() < other.data(c, Qt::UserRole).toLongLong();
    }
};

void setFigure(QTreeWidgetItem* item, int column, std::int64_t value, bool bytes)
{
    item->setText(column, bytes ? bytesText(value) : QString::number(value));
    item->setData(column, Qt::UserRole, static_cast<qlonglong>(value));
    item->setTextAlignment(column, Qt::AlignRight | Qt::AlignVCenter);
}

} // namespace

ContextTable::ContextTable(QWidget* parent)
    : QTreeWidget(parent)
{
    setColumnCount(ColumnCount);
    setHeaderLabels({tr("Value"), tr("Allocations"), tr("Allocated"), tr("At the peak")});
    setRootIsDecorated(true);
    setUniformRowHeights(true);
    setAlternatingRowColors(true);
    header()->setSectionResizeMode(Value, QHeaderView::Stretch);
    header()->setStretchLastSection(false);
}

void ContextTable::setReport(const std::shared_ptr<const Report>& report)
{
    setSortingEnabled(false);
    clear();
    if (!report)
        return;
    for (auto kind : {ContextKind::UserMetadata, ContextKind::CompileContext}) {
        const auto figures = contextFigures(*report, kind);
        if (figures.empty())
            continue;
        auto* group = new FigureItem(this);
        group->setText(Value, QString::fromLatin1(contextKindName(kind)));
        std::int64_t count = 0, allocated = 0, peak = 0;
        for (const auto& f : figures) {
            auto* row = new FigureItem(group);
            const auto value = QString::fromStdString(f.value);
            row->setText(Value, f.value.empty() ? tr("(none)") : value);
            row->setToolTip(Value, f.value.empty() ? tr("allocations without a %1").arg(group->text(Value)) : value);
            setFigure(row, Allocations, f.allocations, false);
            setFigure(row, Allocated, f.allocated_bytes, true);
            setFigure(row, AtPeak, f.peak_bytes, true);
            count += f.allocations;
            allocated += f.allocated_bytes;
            peak += f.peak_bytes;
        }
        setFigure(group, Allocations, count, false);
        setFigure(group, Allocated, allocated, true);
        setFigure(group, AtPeak, peak, true);
        group->setExpanded(true);
    }
    setSortingEnabled(true);
    sortByColumn(Allocated, Qt::DescendingOrder);
    resizeColumnToContents(Allocations);
    resizeColumnToContents(Allocated);
    resizeColumnToContents(AtPeak);
}

} // namespace memledger

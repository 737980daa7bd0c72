#include "layer_tree_panel.h"
#include "tree_sorting.h"

#include "bar_delegate.h"
#include "checkpoint_bar.h"
#include "layer_tree_model.h"

#include <QHeaderView>
#include <QLineEdit>
#include <QSortFilterProxyModel>
#include <QTreeView>
#include <QVBoxLayout>

#include <algorithm>

namespace memledger {

namespace {
constexpr int kMinByteColumnWidth = 96; // "-123.45 MiB" with its bar
} // namespace

LayerTreePanel::LayerTreePanel(QWidget* parent)
    : QWidget(parent)
    , model_(new LayerTreeModel(this))
    , proxy_(new QSortFilterProxyModel(this))
    , view_(new QTreeView(this))
    , filter_(new QLineEdit(this))
    , checkpoints_(new CheckpointBar(model_, this))
{
    proxy_->setSourceModel(model_);
    proxy_->setSortRole(LayerTreeModel::SortRole);
    proxy_->setFilterRole(LayerTreeModel::FilterRole);
    proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);
    proxy_->setRecursiveFilteringEnabled(true); // a match deep down keeps its parents
    proxy_->setAutoAcceptChildRows(true); // and a matching module keeps its children

    filter_->setPlaceholderText(tr("Filter modules by name, path or type"));
    filter_->setClearButtonEnabled(true);
    connect(filter_, &QLineEdit::textChanged, this, [this](const QString& text) {
        proxy_->setFilterFixedString(text);
        if (!text.isEmpty())
            view_->expandAll();
    });

    view_->setModel(proxy_);
    view_->setSortingEnabled(true);
    view_->sortByColumn(-1, Qt::AscendingOrder); // model order (execution order) until a header is clicked
    sortLargestFirstOnFirstClick(view_, [](int column) { return column >= LayerTreeModel::Weights; });
    view_->setUniformRowHeights(true);
    view_->setAlternatingRowColors(true);
    view_->setSelectionMode(QAbstractItemView::SingleSelection);
    view_->setSelectionBehavior(QAbstractItemView::SelectRows);
    auto* bars = new BarDelegate(view_);
    for (int c = LayerTreeModel::Weights; c < LayerTreeModel::ColumnCount; ++c)
        view_->setItemDelegateForColumn(c, bars);
    view_->header()->setStretchLastSection(false);
    view_->header()->setSectionResizeMode(QHeaderView::Interactive);
    view_->header()->setMinimumSectionSize(kMinByteColumnWidth / 2);
    view_->setColumnWidth(LayerTreeModel::Name, 220);
    view_->setColumnWidth(LayerTreeModel::Type, 140);
    view_->setColumnWidth(LayerTreeModel::OutputShape, 130);
    for (int c = LayerTreeModel::Weights; c < LayerTreeModel::ColumnCount; ++c)
        view_->setColumnWidth(c, kMinByteColumnWidth);

    connect(view_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
        emit moduleSelected(current.isValid() ? current.data(LayerTreeModel::PathRole).toString() : QString());
    });

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(filter_);
    layout->addWidget(checkpoints_);
    layout->addWidget(view_);
}

void LayerTreePanel::setReport(std::shared_ptr<const Report> report)
{
    model_->setReport(report);
    checkpoints_->setReport(std::move(report));
    for (int c = 0; c < LayerTreeModel::ColumnCount; ++c)
        view_->setColumnHidden(c, !model_->columnApplies(c));
    view_->expandToDepth(1);
    fitColumns();
}

void LayerTreePanel::fitColumns()
{
    // Wide enough for the figures and their units ("-12.34 MiB"), and for the header; names get a cap.
    for (int c = 0; c < LayerTreeModel::ColumnCount; ++c) {
        view_->resizeColumnToContents(c);
        int width = view_->columnWidth(c) + 12;
        if (c >= LayerTreeModel::Weights)
            width = std::max(width, kMinByteColumnWidth);
        else
            width = std::clamp(width, 80, c == LayerTreeModel::Name ? 320 : 200);
        view_->setColumnWidth(c, width);
    }
}

void LayerTreePanel::selectModule(const QString& path)
{
    auto source = model_->indexForPath(path);
    auto index = proxy_->mapFromSource(source);
    if (!index.isValid())
        return;
    view_->scrollTo(index);
    view_->selectionModel()->setCurrentIndex(index, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
}

} // namespace memledger

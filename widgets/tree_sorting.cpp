#include "tree_sorting.h"

#include <QHeaderView>
#include <QTreeView>

#include <memory>

namespace memledger {

void sortLargestFirstOnFirstClick(QTreeView* view, std::function<bool(int column)> numeric)
{
    auto* header = view->header();
    auto last = std::make_shared<int>(header->sortIndicatorSection());
    QObject::connect(header, &QHeaderView::sortIndicatorChanged, view,
        [header, last, numeric = std::move(numeric)](int section, Qt::SortOrder order) {
            if (section == *last)
                return; // a second click on the same column turns the order round, as Qt does
            *last = section;
            if (section >= 0 && order == Qt::AscendingOrder && numeric(section))
                header->setSortIndicator(section, Qt::DescendingOrder); // the view sorts again, largest first
        });
}

} // namespace memledger

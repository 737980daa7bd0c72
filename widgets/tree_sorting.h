#pragma once
// Sorting by a header click as a memory tool's user expects it: a column of bytes or counts sorts largest first
// on its first click (Qt sorts every new column ascending), and the next click turns it round.
#include <functional>

class QTreeView;

namespace memledger {

// `numeric(column)`: whether that column holds sizes or counts. Call after view->setSortingEnabled(true).
void sortLargestFirstOnFirstClick(QTreeView* view, std::function<bool(int column)> numeric);

} // namespace memledger

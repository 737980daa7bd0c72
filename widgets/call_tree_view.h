#pragma once
// The call tree of a snapshot's allocations (analysis/call_tree.h), top-down or bottom-up, as heaptrack shows
// it: allocated bytes, bytes alive at the peak, allocations and the largest one per frame, with inline bars,
// sorting and a filter box. A trace without call stacks (a model run) says so instead.
#include "analysis/call_tree.h"
#include "report/report.h"

#include <QAbstractItemModel>
#include <QWidget>

#include <memory>

class QComboBox;
class QLabel;
class QLineEdit;
class QSortFilterProxyModel;
class QStackedWidget;
class QTreeView;

namespace memledger {

class CallTreeModel : public QAbstractItemModel {
    Q_OBJECT
public:
    enum Column { Frame, Allocated, AtPeak, Count, Largest, ColumnCount };
    enum Role {
        SortRole = Qt::UserRole + 1, // the same roles as LayerTreeModel's, for BarDelegate
        BarFractionRole,
        BarColorRole,
        NodeRole = Qt::UserRole + 10, // index into CallTree::nodes
    };
    using QAbstractItemModel::QAbstractItemModel;
    void setTree(std::shared_ptr<const CallTree> tree);
    const std::shared_ptr<const CallTree>& tree() const { return tree_; }

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::shared_ptr<const CallTree> tree_;
    std::vector<int> row_; // each node's row under its parent
};

class CallTreeView : public QWidget {
    Q_OBJECT
public:
    explicit CallTreeView(QWidget* parent = nullptr);
    void setReport(std::shared_ptr<const Report> report);
    void setDevice(int device); // CallTreeOptions::kAllDevices: all
    // The events [first, last) whose allocations count (the peak is the range's); default: the whole trace.
    void setRange(std::size_t first, std::size_t last);
    void setBottomUp(bool bottomUp);
    void setFrames(CallTreeFrames frames);
    // A top level per user_metadata or compile_context value (a snapshot that has them); nullopt: none.
    void setGroup(std::optional<ContextKind> group);

    bool hasStacks() const; // the trace has call stacks: the view has something to show
    const CallTreeOptions& options() const { return options_; }
    CallTreeModel* model() const { return model_; }
    QSortFilterProxyModel* proxy() const { return proxy_; }
    QTreeView* view() const { return view_; }
    QLineEdit* filterEdit() const { return filter_; }
    QComboBox* directionBox() const { return direction_; }
    QComboBox* framesBox() const { return frames_; }
    QComboBox* groupBox() const { return group_; }

signals:
    // A node was selected: its frames innermost first (the bottom-up path as it is, the top-down one reversed).
    void nodeSelected(const QString& title, const std::vector<memledger::CallTreeLabel>& frames);
    void framesChanged(memledger::CallTreeFrames frames);

private:
    void rebuild();

    std::shared_ptr<const Report> report_;
    CallTreeOptions options_;
    CallTreeModel* model_;
    QSortFilterProxyModel* proxy_;
    QTreeView* view_;
    QLineEdit* filter_;
    QComboBox* direction_;
    QComboBox* frames_;
    QComboBox* group_;
    QLabel* summary_;
    QLabel* empty_;
    QStackedWidget* stack_;
};

} // namespace memledger

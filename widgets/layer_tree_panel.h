#pragma once
#include "report/report.h"

#include <QWidget>

#include <memory>

class QLineEdit;
class QSortFilterProxyModel;
class QTreeView;

namespace memledger {

class LayerTreeModel;
class CheckpointBar;

// The layer tree with a filter box; sorting and recursive filtering go through a QSortFilterProxyModel.
class LayerTreePanel : public QWidget {
    Q_OBJECT
public:
    explicit LayerTreePanel(QWidget* parent = nullptr);
    void setReport(std::shared_ptr<const Report> report);

    LayerTreeModel* model() const { return model_; }
    QSortFilterProxyModel* proxy() const { return proxy_; }
    QTreeView* view() const { return view_; }
    QLineEdit* filterEdit() const { return filter_; }
    CheckpointBar* checkpointBar() const { return checkpoints_; } // a training step's checkpointing what-if

public slots:
    // Selects the module of `path` (or its nearest enclosing module) and scrolls to it.
    void selectModule(const QString& path);

signals:
    void moduleSelected(const QString& path); // "" when the selection is cleared

private:
    void fitColumns();

    LayerTreeModel* model_;
    QSortFilterProxyModel* proxy_;
    QTreeView* view_;
    QLineEdit* filter_;
    CheckpointBar* checkpoints_;
};

} // namespace memledger

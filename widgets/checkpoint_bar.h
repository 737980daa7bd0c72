#pragma once
// The checkpointing what-if above the layer tree of a training step: the modules ticked in the tree, the
// implementation, the predicted peak (plainly when it is worse) and an auto plan for a budget. Each change
// predicts at once (whatif/checkpoint.h) and hands the predicted step on, for the timeline to draw over the
// recorded one.
#include "report/report.h"

#include <QWidget>

#include <memory>

class QComboBox;
class QLabel;
class QPushButton;

namespace memledger {

class LayerTreeModel;
struct CheckpointPrediction;

class CheckpointBar : public QWidget {
    Q_OBJECT
public:
    explicit CheckpointBar(LayerTreeModel* model, QWidget* parent = nullptr);
    void setReport(std::shared_ptr<const Report> report); // hidden unless a training step with forward uses
    QString predictionText() const;
    QPushButton* autoPlanButton() const { return autoPlan_; }
    // The auto plan for `budget` bytes of peak total (what the button runs after asking for the budget).
    void planFor(std::int64_t budget);

signals:
    // The predicted step, or nullptr when nothing is ticked.
    void predicted(std::shared_ptr<const memledger::Report> report, const QString& summary);

private:
    void update();
    void askBudget();

    LayerTreeModel* model_;
    std::shared_ptr<const Report> report_;
    QComboBox* impl_;
    QLabel* label_;
    QPushButton* autoPlan_;
    QPushButton* clear_;
    bool active_ = false; // a training step whose modules can be checkpointed
};

} // namespace memledger

#pragma once
// The what-if panel: batch, precision and memory budget in, predicted peak, reserved memory and the largest
// batch that fits out. Every figure comes from a WhatIf (no model runs here); Measure asks the window to run.
#include "whatif/whatif.h"

#include <QWidget>

#include <map>
#include <tuple>
#include <memory>
#include <optional>
#include <vector>

class QComboBox;
class QLabel;
class QPushButton;
class QSlider;
class QSpinBox;
class QCheckBox;
class QTableWidget;
class QTimer;

namespace memledger {

class WhatIfPanel : public QWidget {
    Q_OBJECT
public:
    explicit WhatIfPanel(QWidget* parent = nullptr);

    void setWhatIf(std::shared_ptr<const WhatIf> whatIf); // nullptr: nothing recorded yet
    // No what-if, but the Memory budget box stays usable: a generation's GPUs tab answers for it (serving). The next
    // what-if (setWhatIf) gives every row back.
    void setBudgetOnly();
    // A model with token inputs: the what-if along the sequence length (at the run's batch) and the run's
    // sequence. The Sequence row shows; away from `baseSeq` the figures are the sequence what-if's, at its batch.
    void setSeqWhatIf(std::shared_ptr<const WhatIf> seqWhatIf, std::int64_t baseSeq);
    std::int64_t seq() const; // 0 without a sequence what-if
    void setSeq(std::int64_t seq);
    bool seqActive() const; // the figures are the sequence what-if's (the sequence is not the run's)
    std::shared_ptr<const WhatIf> activeWhatIf() const; // the one the figures come from
    // The result of a measureRequested() run, made off the GUI thread by the window.
    void showMeasurement(const Prediction& measured);
    void showMeasurementFailed(const QString& reason);

    std::int64_t batch() const;
    QString dtype() const; // what the forward and backward compute in ("bfloat16 mixed": bfloat16)
    // A training step's: the precision as chosen ("bfloat16-mixed", "bfloat16", ...), its master dtype (the
    // weights', gradients' and optimizer state's), and the data-parallel job one rank of which is shown: GPUs
    // and strategy (gpus() 1 and shard() empty: one device).
    QString precision() const;
    QString masterDtype() const;
    int gpus() const;
    QString shard() const;
    void setGpus(int gpus);
    void setShard(const QString& shard); // "" (one device), fsdp, zero2, zero1, ddp
    // A training step's activation checkpointing (none, selective, full: each repeated block): the figures, the
    // rank and the fewest GPUs are the checkpointed step's (WhatIf::withCheckpoint).
    QString checkpoint() const;
    void setCheckpoint(const QString& checkpoint);
    QComboBox* checkpointBox() const { return checkpointBox_; }
    // Gradient accumulation: micro-batches per optimizer step (WhatIf::withGradAccum), a training step's; 1: none.
    int gradAccum() const;
    void setGradAccum(int microBatches);
    QSpinBox* gradAccumBox() const { return gradAccumBox_; }
    // CPU offload of a sharded rank (FSDP2's CPUOffloadPolicy: --offload params): "params" when ticked with fsdp or
    // zero2, else "".
    bool offloadAsked() const; // the CPU offload box is ticked (each strategy's own offload: offload())
    std::string offload() const;
    void setOffload(bool on);
    QCheckBox* offloadBox() const { return offloadBox_; }
    // The plan of the rank shown; nullopt: one device.
    std::optional<ParallelPlan> rankPlan() const;
    QString gpuFitText() const; // the fewest GPUs per strategy for the precision and budget, as shown
    // The fit table the window made for this what-if and budget (its GPUs tab's, made off the GUI thread): the
    // panel shows the rows of its precision. nullptr: none yet.
    void setGpuFitTable(std::shared_ptr<const GpuFitTable> table);
    void requestRank(); // "Show this rank", as if clicked (when a rank is chosen)
    std::int64_t budget() const; // 0 if the typed text is not a size
    // What judges "fits": the allocator's share of the budget on the chosen rank's GPUs (DeviceOverheads, as the
    // what-if table, the fit and the remedies judge); 0 without a budget.
    std::int64_t allocatorBudget() const;
    void setBatch(std::int64_t batch);
    void setDtype(const QString& dtype); // a compute dtype, or a precision ("bfloat16-mixed")
    void setBudget(const QString& text); // "16 GiB", as typed in the budget box

    // What the panel shows, for tests and the window: the predicted peak total, "fits in ..." or
    // "does not fit in ...", and the sentence that says which figure decides.
    QString peakTotalText() const;
    QString fitsText() const;
    QString decidesText() const;
    QString notesText() const; // the notes of the chosen precision
    bool fitsBudget() const { return fitsBudget_; }
    QSlider* batchSlider() const { return slider_; }
    QSpinBox* batchSpinBox() const { return batchBox_; }
    QSpinBox* seqSpinBox() const { return seqBox_; }
    QComboBox* budgetBox() const { return budgetBox_; } // presets: the common GPUs' memory

protected:
    void changeEvent(QEvent* event) override;
    bool eventFilter(QObject* watched, QEvent* event) override;

signals:
    void measureRequested(std::int64_t batch, const QString& dtype);
    // The budget typed or chosen, once it rests (What would help uses the same budget).
    void budgetChanged(std::int64_t bytes);
    // The Checkpointing row changed: the window's GPUs tab answers for the new choice.
    void checkpointChanged();
    // Batch or precision changed; the window may show predictedReport() in its other views.
    void predictionChanged(const memledger::Prediction& prediction);
    // "Show this rank": the window shows the predicted step of one rank (timeline, tree, ledgers) at this batch.
    void rankRequested(std::int64_t batch, const memledger::ParallelPlan& plan);

private:
    void repredict();
    void updateReserved();
    void updateFitTable();
    void updateGpuFit(); // the fewest GPUs per strategy of the chosen precision, from gpuFitTable_
    void updateParallelRows();
    void showPrediction(const Prediction& p, bool reservedKnown);
    void applyFitsColour();

    // `w` with the chosen checkpointing (made once per what-if and choice); `w` itself for none, or where the model
    // cannot be checkpointed so (said in the Checkpointing row's tooltip).
    std::shared_ptr<const WhatIf> staged(const std::shared_ptr<const WhatIf>& w) const;

    std::shared_ptr<const WhatIf> whatIf_;
    QList<QWidget*> budgetOnlyOff_; // what setBudgetOnly disabled
    std::shared_ptr<const WhatIf> seqWhatIf_;
    mutable std::map<std::tuple<const WhatIf*, std::string, int>, std::shared_ptr<const WhatIf>> checkpointed_;
    QLabel* gradAccumLabel_ = nullptr;
    QSpinBox* gradAccumBox_ = nullptr;
    QLabel* offloadLabel_ = nullptr;
    QCheckBox* offloadBox_ = nullptr;
    QLabel* checkpointLabel_ = nullptr;
    QComboBox* checkpointBox_ = nullptr;
    std::int64_t baseSeq_ = 0;
    QWidget* seqRow_ = nullptr;
    QLabel* seqLabel_ = nullptr;
    QSlider* seqSlider_ = nullptr;
    QSpinBox* seqBox_ = nullptr;
    QLabel* fitTableTitle_ = nullptr;
    Prediction current_;
    QSlider* slider_ = nullptr;
    QSpinBox* batchBox_ = nullptr;
    QComboBox* dtypeBox_ = nullptr;
    QComboBox* budgetBox_ = nullptr;
    QLabel* peak_ = nullptr;
    QLabel* total_ = nullptr;
    QLabel* reserved_ = nullptr;
    QLabel* fits_ = nullptr;
    QLabel* decides_ = nullptr;
    bool fitsBudget_ = true;
    QLabel* method_ = nullptr;
    QLabel* notes_ = nullptr;
    QPushButton* measure_ = nullptr;
    QTableWidget* fitTable_ = nullptr;
    QLabel* gpusLabel_ = nullptr;
    QLabel* shardLabel_ = nullptr;
    QSpinBox* gpusBox_ = nullptr;
    QComboBox* shardBox_ = nullptr;
    QPushButton* showRank_ = nullptr;
    QLabel* gpuFitTitle_ = nullptr;
    QTableWidget* gpuFit_ = nullptr;
    std::shared_ptr<const GpuFitTable> gpuFitTable_;
    QTimer* reservedTimer_ = nullptr; // the allocator replay waits until the slider rests
    QTimer* fitTimer_ = nullptr;
    QTimer* budgetTimer_ = nullptr;
    // The fit table's largest size per precision, for the budget and axis it was found for: a size above it is
    // never called fits here either (the same verdict as the table's, monotone along the batch).
    struct Largest {
        std::string dtype;
        std::int64_t budget = 0;
        bool seq = false;
        std::int64_t n = 0;
    };
    std::vector<Largest> largest_;
};

} // namespace memledger

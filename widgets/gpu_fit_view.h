#pragma once
// The GPUs tab: the fit table of a training step (whatif/gpu_fit.h) for the What if panel's budget: per precision
// and strategy, the fewest GPUs on which a rank fits and the largest micro-batch there, with rank 0's figures,
// and the largest micro-batch per GPU count. The same table as `memledger fit` and its HTML page.
#include "report/whatif_table.h"
#include "whatif/serving.h"

#include <QWidget>

#include <cstdint>

class QLabel;
class QPushButton;
class QTableWidget;

namespace memledger {

class GpuFitView : public QWidget {
    Q_OBJECT
public:
    explicit GpuFitView(QWidget* parent = nullptr);
    // `recordUpTo` > 0: an answer lies beyond the records and this machine may record that far: a button offers it
    // (recordFurtherRequested); 0: none (every answer inside its records, or the records went as far as they could).
    void setTable(const GpuFitTable& table, std::int64_t recordUpTo = 0);
    void clear(const QString& why); // nothing to show, and why ("a training step's question", ...)
    // A generation's question instead (fit --serve's answer for the run's context and batch): the layout of one GPU
    // as a serving engine takes it, and how many sequences fit.
    // `plans`: the answer on each tensor-parallel GPU count, a row each; the first one's layout is shown in full.
    void setServePlan(const std::vector<ServePlan>& plans, const QString& model);
    QTableWidget* serving() const { return serving_; }
    QTableWidget* servingByGpus() const { return servingByGpus_; }
    QTableWidget* answers() const { return answers_; }
    QTableWidget* byGpus() const { return byGpus_; }
    QString headerText() const;
    QString notesText() const; // the table's notes (the program's range, FSDP2's padding), one "Note:" line each
    QPushButton* recordFurtherButton() const { return recordFurther_; }

signals:
    // "Record up to micro-batch N": the what-if's records to reach the answers (whatif/gpu_fit.h, fitRecordsWanted).
    void recordFurtherRequested(qint64 microBatch);

private:
    QLabel* header_;
    QTableWidget* answers_;
    QTableWidget* byGpus_;
    QLabel* byGpusLabel_;
    QTableWidget* serving_; // the serving layout (setServePlan), shown instead of the fit tables
    QTableWidget* servingByGpus_; // serving on 1, 2, 4, 8 tensor-parallel GPUs
    QLabel* notes_;
    QPushButton* recordFurther_;
    std::int64_t recordUpTo_ = 0;
};

} // namespace memledger

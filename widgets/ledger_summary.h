#pragma once
#include "report/report.h"

#include <QStringList>
#include <QWidget>

#include <memory>

class QLabel;

namespace memledger {

// What is alive at the peak, as one bar stacked by ledger with the numbers beneath (only the ledgers that hold
// bytes), a training step's gradients and optimizer state, and the load tax:
// "file 2.61 MiB float16, resident 5.21 MiB as float32".
class LedgerSummary : public QWidget {
    Q_OBJECT
public:
    explicit LedgerSummary(QWidget* parent = nullptr);
    void setReport(std::shared_ptr<const Report> report);
    QString loadTaxText() const;
    // A training step: the gradients and optimizer state the step leaves behind; "" otherwise.
    QString trainingText() const;
    // The rows under the bar: the ledgers that hold bytes, bottom of the stack first ("weights", ...).
    QStringList rowNames() const;
    QSize sizeHint() const override;

protected:
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    void keepLoadTaxVisible();

    int rowsHeight() const;

    std::shared_ptr<const Report> report_;
    QLabel* training_;
    QLabel* loadTax_;
};

// The load-tax line of a report; empty when the report has no weights.
QString loadTaxLine(const Report& report);

} // namespace memledger

#pragma once
#include "report/report.h"

#include <QWidget>

#include <memory>

class QLabel;

namespace memledger {

// What is alive at the peak, as one bar stacked by ledger with the numbers beneath, and the load tax:
// "file 2.61 MiB float16, resident 5.21 MiB as float32".
class LedgerSummary : public QWidget {
    Q_OBJECT
public:
    explicit LedgerSummary(QWidget* parent = nullptr);
    void setReport(std::shared_ptr<const Report> report);
    QString loadTaxText() const;
    QSize sizeHint() const override;

protected:
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    void keepLoadTaxVisible();

    std::shared_ptr<const Report> report_;
    QLabel* loadTax_;
};

// The load-tax line of a report; empty when the report has no weights.
QString loadTaxLine(const Report& report);

} // namespace memledger

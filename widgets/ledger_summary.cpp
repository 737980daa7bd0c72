#include "ledger_summary.h"

#include "ledger_colors.h"
#include "report/timeline_series.h"
#include "snapshot/snapshot.h"
#include "support/format.h"

#include <QLabel>
#include <QPainter>
#include <QVBoxLayout>

#include <vector>

namespace memledger {

namespace {

QString bytesText(std::int64_t bytes)
{
    return QString::fromStdString(formatBytes(bytes));
}

constexpr int kBarTop = 26;
constexpr int kBarHeight = 22;
constexpr int kRowHeight = 18;

} // namespace

QString loadTaxLine(const Report& r)
{
    const auto& t = r.load_tax;
    if (t.file_tensor_bytes <= 0 && t.resident_bytes <= 0)
        return {};
    return QObject::tr("file %1 %2, resident %3 as %4")
        .arg(bytesText(t.file_tensor_bytes), QString::fromStdString(t.file_dtype.empty() ? "-" : t.file_dtype),
            bytesText(t.resident_bytes), QString::fromStdString(t.resident_dtype));
}

namespace {

struct SummaryRow {
    QString name;
    std::int64_t bytes;
    QColor colour;
};

// A ledger of a run has a row when it holds bytes at the peak or over the run; the four of an inference run
// always do, as they always have.
bool holdsBytes(const Report& r, Ledger l)
{
    const auto& f = r.ledgers[static_cast<std::size_t>(l)];
    bool classic = l == Ledger::Weights || l == Ledger::Inputs || l == Ledger::Activations || l == Ledger::Temporaries;
    return classic || f.at_peak > 0 || f.total > 0;
}

// A model run: its ledgers at the peak, in the timeline's stacking order. A snapshot: what its segments hold
// at the end.
std::vector<SummaryRow> summaryRows(const Report& r, QString* title)
{
    std::vector<SummaryRow> rows;
    if (r.snapshot) {
        auto reserved = r.snapshot->reservedBytes(), allocated = r.snapshot->allocatedBytes();
        *title = QObject::tr("Reserved at the end: %1").arg(bytesText(reserved));
        rows.push_back({QObject::tr("allocated"), allocated, ledgerColor(Ledger::Unattributed)});
        rows.push_back({QObject::tr("reserved, not allocated"), reserved - allocated, fragmentationColor()});
        return rows;
    }
    *title = QObject::tr("At the peak: %1").arg(bytesText(r.peak_total_bytes));
    for (int band : TimelineSeries::kStackOrder) {
        if (band >= kLedgerCount)
            continue;
        auto l = static_cast<Ledger>(band);
        if (holdsBytes(r, l))
            rows.push_back(
                {QString::fromUtf8(ledgerLabel(l)), r.ledgers[static_cast<std::size_t>(band)].at_peak, ledgerColor(l)});
    }
    return rows;
}

} // namespace

LedgerSummary::LedgerSummary(QWidget* parent)
    : QWidget(parent)
    , training_(new QLabel(this))
    , loadTax_(new QLabel(this))
{
    for (auto* label : {training_, loadTax_}) {
        label->setWordWrap(true);
        label->setTextInteractionFlags(Qt::TextSelectableByMouse);
    }
    training_->hide();
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, rowsHeight(), 6, 6);
    layout->addWidget(training_);
    layout->addWidget(loadTax_);
    layout->addStretch(1);
    setMinimumWidth(220);
}

int LedgerSummary::rowsHeight() const
{
    // Four rows before a report arrives: an inference run's, so the dock does not jump when one does.
    QString title;
    auto rows = report_ ? static_cast<int>(summaryRows(*report_, &title).size()) : 4;
    return kBarTop + kBarHeight + 8 + kRowHeight * rows + 6;
}

void LedgerSummary::setReport(std::shared_ptr<const Report> report)
{
    report_ = std::move(report);
    layout()->setContentsMargins(6, rowsHeight(), 6, 6);
    training_->setText(trainingText());
    training_->setVisible(!training_->text().isEmpty());
    loadTax_->setText(report_ ? tr("Load tax: %1").arg(loadTaxLine(*report_)) : QString());
    loadTax_->setVisible(report_ && !loadTaxLine(*report_).isEmpty());
    keepLoadTaxVisible();
    updateGeometry();
    update();
}

QString LedgerSummary::trainingText() const
{
    if (!report_ || report_->snapshot || report_->run.mode != "train")
        return {};
    auto optimizer = QString::fromStdString(report_->run.optimizer);
    return tr("Training step: gradients %1 (every parameter's .grad after the step), optimizer state %2%3")
        .arg(bytesText(report_->gradient_bytes), bytesText(report_->optimizer_state_bytes),
            optimizer.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(optimizer));
}

QStringList LedgerSummary::rowNames() const
{
    QStringList names;
    QString title;
    if (report_)
        for (const auto& row : summaryRows(*report_, &title))
            names << row.name;
    return names;
}

void LedgerSummary::resizeEvent(QResizeEvent* event)
{
    QWidget::resizeEvent(event);
    keepLoadTaxVisible();
}

void LedgerSummary::keepLoadTaxVisible()
{
    // A dock does not ask for height-for-width: without this, a short screen cuts the wrapped load-tax line.
    if (layout()->hasHeightForWidth())
        setMinimumHeight(layout()->heightForWidth(width()));
}

QString LedgerSummary::loadTaxText() const
{
    return report_ ? loadTaxLine(*report_) : QString();
}

QSize LedgerSummary::sizeHint() const
{
    return {280, rowsHeight() + 34};
}

void LedgerSummary::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    auto text = palette().color(QPalette::WindowText);
    p.setPen(text);
    if (!report_) {
        p.drawText(rect().adjusted(6, 6, -6, -6), Qt::AlignLeft | Qt::AlignTop, tr("No report yet"));
        return;
    }
    QString title;
    auto rows = summaryRows(*report_, &title);
    std::int64_t total = 0;
    for (const auto& row : rows)
        total += row.bytes;
    auto titleFont = font();
    titleFont.setBold(true);
    p.setFont(titleFont);
    p.drawText(QRect(6, 4, width() - 12, kBarTop - 6), Qt::AlignLeft | Qt::AlignVCenter, title);
    p.setFont(font());

    QRect bar(6, kBarTop, width() - 12, kBarHeight);
    double x = bar.left();
    for (const auto& row : rows) {
        double w = total > 0 ? bar.width() * static_cast<double>(row.bytes) / static_cast<double>(total) : 0;
        p.fillRect(QRectF(x, bar.top(), w, bar.height()), row.colour);
        x += w;
    }
    p.setPen(palette().color(QPalette::Mid));
    p.drawRect(bar.adjusted(0, 0, -1, -1));

    int y = bar.bottom() + 8;
    for (const auto& row : rows) {
        p.fillRect(QRect(6, y + 4, 10, 10), row.colour);
        p.setPen(text);
        p.drawText(QRect(22, y, width() - 28, kRowHeight), Qt::AlignLeft | Qt::AlignVCenter, row.name);
        QString figure = bytesText(row.bytes);
        if (total > 0)
            figure += QStringLiteral("  %1%").arg(
                100.0 * static_cast<double>(row.bytes) / static_cast<double>(total), 0, 'f', 0);
        p.drawText(QRect(22, y, width() - 28, kRowHeight), Qt::AlignRight | Qt::AlignVCenter, figure);
        y += kRowHeight;
    }
}

} // namespace memledger

#include "remedies_panel.h"
#include "bytes_text.h"

#include "support/format.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QCheckBox>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>

#include <cmath>

namespace memledger {

namespace {

// How a remedy's "after" figures are known: predicted until Measure (tiling is measured when computed); a
// snapshot's remedy is an estimate by a stated rule.
// `meta`: the report is a meta-device run, whose runs compute figures from shapes and never measure them.
QString figureText(const Remedy& m, bool meta)
{
    if (m.method == FigureMethod::Estimate)
        return QObject::tr("estimate");
    if (m.kind == RemedyKind::Tiling)
        return QObject::tr(figureMethodText(m.method, meta));
    return QObject::tr("predicted");
}

// "1.52 MiB (−936 KiB)"
QString afterAndSaving(std::int64_t before, std::int64_t after)
{
    return QStringLiteral("%1 (%2)").arg(bytesText(after), QString::fromStdString(formatByteChange(before, after, "\u2212")));
}

QString errorText(std::int64_t predicted, std::int64_t measured)
{
    if (measured <= 0)
        return QString();
    double e = 100.0 * static_cast<double>(predicted - measured) / static_cast<double>(measured);
    return QStringLiteral("%1%2%").arg(e >= 0 ? QStringLiteral("+") : QString()).arg(e, 0, 'f', 2);
}

} // namespace

RemediesPanel::RemediesPanel(QWidget* parent)
    : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    auto* title = new QLabel(tr("<b>What would help</b> &mdash; ranked by the saving on the peak total, then on "
                                "the reserve (the caching-allocator model's replay of the run or the snapshot)"));
    title->setWordWrap(true);
    layout->addWidget(title);
    status_ = new QLabel;
    status_->setWordWrap(true);
    status_->setVisible(false);
    layout->addWidget(status_);
    busyRow_ = new QWidget;
    auto* busyRow = new QHBoxLayout(busyRow_);
    busyRow->setContentsMargins(0, 0, 0, 0);
    busyBar_ = new QProgressBar;
    busyBar_->setRange(0, 0); // no end known: the bar moves until the remedies arrive
    busyBar_->setTextVisible(false);
    busyBar_->setMaximumWidth(120);
    busyBar_->setMaximumHeight(12);
    busyRow->addWidget(busyBar_);
    busyText_ = new QLabel;
    busyRow->addWidget(busyText_, 1);
    busyRow_->setVisible(false);
    layout->addWidget(busyRow_);
    staleNote_ = new QLabel(tr("<i>These are the previous run's remedies, greyed until this run's replace them.</i>"));
    staleNote_->setWordWrap(true);
    staleNote_->setVisible(false);
    layout->addWidget(staleNote_);

    table_ = new QTableWidget(0, 6);
    table_->setHorizontalHeaderLabels(
        {tr("#"), tr("Remedy"), tr("Peak total after"), tr("Reserve after"), tr("Figure"), tr("Measured")});
    table_->verticalHeader()->setVisible(false);
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::SingleSelection);
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    table_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
    table_->horizontalHeader()->setStretchLastSection(false);
    layout->addWidget(table_, 3);
    showAll_ = new QCheckBox;
    showAll_->setVisible(false);
    layout->addWidget(showAll_);
    connect(showAll_, &QCheckBox::toggled, this, [this] { hideMinorRows(); });

    details_ = new QTextBrowser;
    details_->setOpenLinks(false);
    layout->addWidget(details_, 2);

    tileRow_ = new QWidget;
    auto* tileRow = new QHBoxLayout(tileRow_);
    tileRow->setContentsMargins(0, 0, 0, 0);
    tileRow->addWidget(new QLabel(tr("Tile (last input dimensions):")));
    tile_ = new QLineEdit;
    tile_->setPlaceholderText(QStringLiteral("512x512"));
    tile_->setMaximumWidth(140);
    tileRow->addWidget(tile_);
    tileButton_ = new QPushButton(tr("Measure tile"));
    tileButton_->setToolTip(tr("Runs the model at the tile shape and shows its peak against the full input"));
    tileRow->addWidget(tileButton_);
    tileError_ = new QLabel;
    tileRow->addWidget(tileError_, 1);
    layout->addWidget(tileRow_);

    connect(table_, &QTableWidget::itemSelectionChanged, this, &RemediesPanel::showDetails);
    auto askTile = [this] {
        std::vector<std::int64_t> tile;
        bool ok = !tile_->text().trimmed().isEmpty();
        for (const auto& part : tile_->text().trimmed().split(QLatin1Char('x'))) {
            bool good = false;
            auto v = part.toLongLong(&good);
            ok = ok && good && v > 0;
            tile.push_back(v);
        }
        tileError_->setText(ok ? QString() : tr("a tile is like 512x512"));
        if (ok)
            emit tileRequested(tile);
    };
    connect(tileButton_, &QPushButton::clicked, this, askTile);
    connect(tile_, &QLineEdit::returnPressed, this, askTile);
}

void RemediesPanel::hideMinorRows()
{
    int minor = 0;
    for (int row = 0; row < table_->rowCount(); ++row) {
        const bool hide = remedies_[static_cast<std::size_t>(row)].minor() && !showAll_->isChecked();
        minor += remedies_[static_cast<std::size_t>(row)].minor();
        table_->setRowHidden(row, hide);
    }
    showAll_->setText(tr("Show all (%n remedies save under 1% of the peak total)", nullptr, minor));
    showAll_->setVisible(minor > 0);
}

void RemediesPanel::setModelActions(bool model)
{
    tileRow_->setVisible(model);
}

void RemediesPanel::setStatus(const QString& text)
{
    status_->setText(text);
    status_->setVisible(!text.isEmpty());
}

void RemediesPanel::setBusy(const QString& text)
{
    busyText_->setText(text);
    busyRow_->setVisible(!text.isEmpty());
}

bool RemediesPanel::isBusy() const
{
    return !busyRow_->isHidden();
}

QString RemediesPanel::busyText() const
{
    return isBusy() ? busyText_->text() : QString();
}

void RemediesPanel::setStale(bool stale)
{
    stale_ = stale;
    const bool greyed = stale && !remedies_.empty();
    table_->setEnabled(!stale);
    details_->setEnabled(!stale);
    showAll_->setEnabled(!stale);
    staleNote_->setVisible(greyed);
}

QString RemediesPanel::statusText() const
{
    return status_->text();
}

void RemediesPanel::setTile(const QString& text)
{
    tile_->setText(text);
}

void RemediesPanel::setMetaRun(bool meta)
{
    meta_ = meta;
}

void RemediesPanel::setRemedies(const std::vector<Remedy>& remedies)
{
    remedies_ = remedies;
    table_->clearContents();
    table_->setRowCount(static_cast<int>(remedies_.size()));
    for (int row = 0; row < table_->rowCount(); ++row)
        fillRow(row);
    hideMinorRows();
    if (!remedies_.empty())
        table_->selectRow(0);
    else
        details_->setHtml(tr("<p>Nothing found that would help without changing the result.</p>"));
}

void RemediesPanel::fillRow(int row)
{
    const auto& m = remedies_[static_cast<std::size_t>(row)];
    auto item = [](const QString& text, bool right = false) {
        auto* i = new QTableWidgetItem(text);
        if (right)
            i->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        return i;
    };
    table_->setItem(row, 0, item(QString::number(row + 1), true));
    table_->setItem(row, 1, item(QString::fromStdString(m.title)));
    table_->setItem(row, 2, item(afterAndSaving(m.peak_total_before, m.peak_total_after), true));
    table_->setItem(row, 3,
        item(m.reserve_after > 0 ? afterAndSaving(m.reserve_before, m.reserve_after) : QStringLiteral("-"), true));
    // A remedy measured when it was computed (tiling) says so; a prediction says predicted until Measure.
    const bool measuredNow = m.measured_peak_total.has_value();
    table_->setItem(row, 4, item(figureText(m, meta_)));
    table_->removeCellWidget(row, kMeasuredColumn);
    if (measuredNow && m.kind != RemedyKind::Tiling) {
        auto text = bytesText(*m.measured_peak_total) + QStringLiteral("  ")
            + tr("error %1").arg(errorText(m.peak_total_after, *m.measured_peak_total))
            + (meta_ ? tr(" (computed on meta)") : QString());
        table_->setItem(row, kMeasuredColumn, item(text, true));
        table_->item(row, kMeasuredColumn)->setToolTip(QString::fromStdString(m.measure_note));
    } else if ((m.measure_how == MeasureHow::Run || m.measure_how == MeasureHow::Variant) && m.kind != RemedyKind::Tiling) {
        table_->setItem(row, kMeasuredColumn, item(QString()));
        auto* button = new QPushButton(m.measure_how == MeasureHow::Variant ? tr("Measure\u2026") : tr("Measure"));
        button->setToolTip(m.measure_how == MeasureHow::Variant
                ? tr("Runs the edited model (you choose its file) at this run's setting")
                : tr("Runs the model at the changed setting"));
        connect(button, &QPushButton::clicked, this, [this, row] {
            if (row < static_cast<int>(remedies_.size())) {
                if (auto* b = measureButton(row)) {
                    b->setEnabled(false);
                    b->setText(tr("Measuring\u2026"));
                }
                emit measureRequested(row, remedies_[static_cast<std::size_t>(row)]);
            }
        });
        table_->setCellWidget(row, kMeasuredColumn, button);
    } else {
        table_->setItem(row, kMeasuredColumn,
            item(m.kind == RemedyKind::Tiling ? tr("(run at the tile)")
                 : m.kind == RemedyKind::AllocatorSettings ? tr("needs a GPU") : QStringLiteral("-")));
    }
}

QPushButton* RemediesPanel::measureButton(int row) const
{
    return qobject_cast<QPushButton*>(table_->cellWidget(row, kMeasuredColumn));
}

void RemediesPanel::showMeasured(int row, const Remedy& measured)
{
    if (row < 0 || row >= static_cast<int>(remedies_.size()))
        return;
    remedies_[static_cast<std::size_t>(row)] = measured;
    fillRow(row);
    if (table_->currentRow() == row)
        showDetails();
}

void RemediesPanel::showMeasureFailed(int row, const QString& reason)
{
    if (row < 0 || row >= static_cast<int>(remedies_.size()))
        return;
    fillRow(row);
    auto* i = new QTableWidgetItem(tr("failed"));
    i->setToolTip(reason);
    table_->removeCellWidget(row, kMeasuredColumn);
    table_->setItem(row, kMeasuredColumn, i);
    setStatus(tr("Measuring \u201c%1\u201d failed: %2")
                  .arg(QString::fromStdString(remedies_[static_cast<std::size_t>(row)].title), reason));
}

void RemediesPanel::selectRow(int row)
{
    table_->selectRow(row);
}

void RemediesPanel::showDetails()
{
    int row = table_->currentRow();
    if (row < 0 || row >= static_cast<int>(remedies_.size())) {
        details_->clear();
        return;
    }
    const auto& m = remedies_[static_cast<std::size_t>(row)];
    QString html = QStringLiteral("<p><b>%1</b></p><p>%2</p>")
                       .arg(QString::fromStdString(m.title).toHtmlEscaped(),
                           QString::fromStdString(m.change).toHtmlEscaped());
    html += tr("<p>Peak total %1 &rarr; %2").arg(bytesText(m.peak_total_before), bytesText(m.peak_total_after));
    if (m.reserve_after > 0)
        html += tr(", reserve %1 &rarr; %2").arg(bytesText(m.reserve_before), bytesText(m.reserve_after));
    html += tr(" (%1)</p>").arg(figureText(m, meta_));
    if (m.measured_peak_total && m.kind != RemedyKind::Tiling)
        html += (meta_ ? tr("<p>Computed on meta: peak total %1%2 &mdash; %3</p>")
                       : tr("<p>Measured: peak total %1%2 &mdash; %3</p>"))
                    .arg(bytesText(*m.measured_peak_total),
                        m.measured_reserve ? tr(", reserve %1").arg(bytesText(*m.measured_reserve)) : QString(),
                        QString::fromStdString(m.measure_note).toHtmlEscaped());
    if (!m.details.empty()) {
        html += QStringLiteral("<ul>");
        for (const auto& d : m.details)
            html += QStringLiteral("<li>%1</li>").arg(QString::fromStdString(d).toHtmlEscaped());
        html += QStringLiteral("</ul>");
    }
    details_->setHtml(html);
}

QString RemediesPanel::detailsText() const
{
    return details_->toPlainText();
}

} // namespace memledger

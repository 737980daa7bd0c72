#include "ranks_view.h"
#include "bytes_text.h"

#include "byte_axis_ticker.h"
#include "exports/ranks_export.h"
#include "report/trace.h"

#include <qcustomplot.h>

#include <QFileInfo>
#include <QFontMetrics>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QScrollBar>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>

namespace memledger {

namespace {

QColor rankColour(std::size_t rank)
{
    return QColor(QString::fromUtf8(rankColourHex(rank)));
}

// A cell that sorts by the number it holds, not by its text.
class NumberItem : public QTableWidgetItem {
public:
    NumberItem(const QString& text, double value)
        : QTableWidgetItem(text)
    {
        setData(RanksView::kValueRole, value);
        setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    }
    bool operator<(const QTableWidgetItem& other) const override
    {
        return data(RanksView::kValueRole).toDouble() < other.data(RanksView::kValueRole).toDouble();
    }
};

QString msText(std::int64_t ns)
{
    return QStringLiteral("%1 ms").arg(static_cast<double>(ns) / 1e6, 0, 'f', 1);
}

// The ledgers holding bytes at the peak, largest first: "activations 1.20 GiB, weights 300 MiB".
QString ledgersText(const RankRow& r, int most)
{
    std::vector<int> order;
    for (int l = 0; l < kLedgerCount; ++l)
        if (r.ledgers_at_peak[static_cast<std::size_t>(l)] > 0)
            order.push_back(l);
    std::stable_sort(order.begin(), order.end(), [&r](int a, int b) {
        return r.ledgers_at_peak[static_cast<std::size_t>(a)] > r.ledgers_at_peak[static_cast<std::size_t>(b)];
    });
    QStringList parts;
    for (int k = 0; k < static_cast<int>(order.size()) && k < most; ++k)
        parts << QStringLiteral("%1 %2").arg(QString::fromUtf8(ledgerLabel(static_cast<Ledger>(order[k]))),
            bytesText(r.ledgers_at_peak[static_cast<std::size_t>(order[k])]));
    if (static_cast<int>(order.size()) > most)
        parts << QStringLiteral("…");
    return parts.join(most > 64 ? QStringLiteral("\n") : QStringLiteral(", "));
}

} // namespace

RanksView::RanksView(QWidget* parent)
    : QWidget(parent)
    , heading_(new QLabel)
    , close_(new QPushButton(tr("Close ranks")))
    , rows_(new QTableWidget)
    , plot_(new QCustomPlot)
{
    heading_->setTextFormat(Qt::RichText);
    heading_->setWordWrap(true);
    heading_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    close_->setToolTip(tr("Hide the ranks (the file shown stays)"));
    connect(close_, &QPushButton::clicked, this, &RanksView::closeRequested);
    auto* head = new QHBoxLayout;
    head->addWidget(heading_, 1);
    head->addWidget(close_, 0, Qt::AlignTop);

    rows_->setColumnCount(ColumnCount);
    rows_->setHorizontalHeaderLabels({tr("Rank"), tr("File"), tr("Peak total"), tr("Reserved peak"), tr("Peak at"),
        tr("Ledgers at the peak"), tr("Annotation at the peak")});
    rows_->horizontalHeaderItem(Phase)->setToolTip(tr("The record_function range (or a model run's phase) holding the peak"));
    rows_->horizontalHeaderItem(ReservedPeak)
        ->setToolTip(tr("The most the caching allocator held; ~: simulated, the file records no segment events"));
    rows_->horizontalHeaderItem(PeakAt)->setToolTip(tr("When the peak falls, from the trace's start"));
    rows_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    rows_->setSelectionBehavior(QAbstractItemView::SelectRows);
    rows_->setSelectionMode(QAbstractItemView::SingleSelection);
    rows_->verticalHeader()->setVisible(false);
    rows_->verticalHeader()->setDefaultSectionSize(rows_->fontMetrics().height() + 6);
    rows_->setAlternatingRowColors(true);
    rows_->setWordWrap(false);
    rows_->setTextElideMode(Qt::ElideMiddle);
    rows_->setSortingEnabled(true);
    rows_->horizontalHeader()->setStretchLastSection(true);
    rows_->setToolTip(tr("Click a rank to open its file in the main views"));
    connect(rows_, &QTableWidget::cellClicked, this, [this](int row, int) {
        auto* item = rows_->item(row, Rank);
        if (!table_ || !item)
            return;
        auto rank = item->data(kRankRole).toInt();
        emphasize(rank);
        emit rankChosen(QString::fromStdString(table_->ranks[static_cast<std::size_t>(rank)].file));
    });

    // The legend a row above the curves, never over them; ranks side by side, as many as the width takes.
    setUpCurvesPlot(plot_, 160);
    plot_->xAxis->setLabel(tr("ms from each trace's start"));
    plot_->legend->setSelectableParts(QCPLegend::spNone);
    connect(plot_, &QCustomPlot::plottableClick, this, [this](QCPAbstractPlottable* p, int, QMouseEvent*) {
        auto it = std::find(graphs_.begin(), graphs_.end(), p);
        if (!table_ || it == graphs_.end())
            return;
        auto rank = static_cast<int>(it - graphs_.begin());
        rows_->selectRow(rowOf(rank));
        emphasize(rank);
        emit rankChosen(QString::fromStdString(table_->ranks[static_cast<std::size_t>(rank)].file));
    });
    connect(plot_, &QCustomPlot::mouseDoubleClick, this, [this] {
        plot_->rescaleAxes();
        plot_->yAxis->setRangeLower(0);
        plot_->replot();
    });

    // The table over the curves: both take the tab's whole width, the table as tall as its rows (up to eight).
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    layout->addLayout(head);
    layout->addWidget(rows_);
    layout->addWidget(plot_, 1);
}

void RanksView::setTable(std::shared_ptr<const RankTable> table)
{
    table_ = std::move(table);
    emphasized_ = -1;
    if (table_ && table_->highest_peak_rank >= 0) {
        const auto& h = table_->ranks[static_cast<std::size_t>(table_->highest_peak_rank)];
        const auto spread = table_->peak_spread > 0
            ? QStringLiteral("%1&times;").arg(table_->peak_spread, 0, 'f', 3)
            : tr("not defined"); // a rank holds nothing
        heading_->setText(tr("<b>%1 ranks.</b> Highest peak: <b>rank %2</b> (%3), %4; spread <b>%5</b> "
                             "(highest / lowest peak total). Click a rank to open it.")
                              .arg(table_->ranks.size())
                              .arg(table_->highest_peak_rank)
                              .arg(QFileInfo(QString::fromStdString(h.file)).fileName().toHtmlEscaped(),
                                  bytesText(h.peak_total_bytes), spread));
    } else {
        heading_->setText(table_ ? tr("No ranks") : QString());
    }
    if (table_)
        for (const auto& l : table_->left_out) // files that could not be read: named, the others shown
            heading_->setText(heading_->text() + QStringLiteral("<br><span style=\"color:#b03030\">")
                + tr("Left out: %1").arg(QString::fromStdString(l.reason).toHtmlEscaped()) + QStringLiteral("</span>"));
    fillRows();
    plotTimelines();
}

void RanksView::fillRows()
{
    rows_->setSortingEnabled(false);
    rows_->clearContents();
    rows_->setRowCount(table_ ? static_cast<int>(table_->ranks.size()) : 0);
    if (!table_)
        return;
    for (std::size_t i = 0; i < table_->ranks.size(); ++i) {
        const auto& r = table_->ranks[i];
        const int row = static_cast<int>(i);
        const bool top = row == table_->highest_peak_rank;
        auto* rank = new NumberItem(top ? tr("%1  highest").arg(i) : QString::number(i), static_cast<double>(i));
        rank->setTextAlignment(Qt::AlignLeft | Qt::AlignVCenter);
        rank->setData(kRankRole, row);
        rank->setData(Qt::DecorationRole, rankColour(i));
        auto file = QString::fromStdString(r.file);
        auto* name = new QTableWidgetItem(QFileInfo(file).fileName());
        name->setToolTip(file);
        auto* peak = new NumberItem(bytesText(r.peak_total_bytes), static_cast<double>(r.peak_total_bytes));
        auto* reserved = new NumberItem(bytesText(r.reserved_peak_bytes) + (r.reserved_simulated ? "~" : ""),
            static_cast<double>(r.reserved_peak_bytes));
        if (r.reserved_simulated)
            reserved->setToolTip(tr("Simulated by the caching-allocator model: the file records no segment events"));
        auto* at = new NumberItem(msText(r.peak_time_ns), static_cast<double>(r.peak_time_ns) / 1e6);
        auto phase = QString::fromStdString(r.peak_phase);
        auto* phaseItem = new QTableWidgetItem(phase.isEmpty() ? QStringLiteral("-") : phase);
        phaseItem->setToolTip(phase);
        auto* ledgers = new QTableWidgetItem(ledgersText(r, 2));
        ledgers->setToolTip(ledgersText(r, kLedgerCount + 100));
        QTableWidgetItem* items[ColumnCount] = {rank, name, peak, reserved, at, ledgers, phaseItem};
        for (int c = 0; c < ColumnCount; ++c) {
            if (top) {
                auto f = items[c]->font();
                f.setBold(true);
                items[c]->setFont(f);
            }
            rows_->setItem(row, c, items[c]);
        }
    }
    rows_->setSortingEnabled(true);
    rows_->sortItems(Rank, Qt::AscendingOrder);
    rows_->resizeColumnsToContents();
    rows_->setColumnWidth(File, std::min(rows_->columnWidth(File), 240));
    rows_->setColumnWidth(Ledgers, std::min(rows_->columnWidth(Ledgers), 300));
    // As tall as its rows, up to eight (then it scrolls); the curves take the rest.
    const int shown = std::clamp(rows_->rowCount(), 1, 8);
    rows_->setMinimumHeight(rows_->horizontalHeader()->height() + rows_->verticalHeader()->defaultSectionSize() * std::min(shown, 2) + 4);
    rows_->setMaximumHeight(rows_->horizontalHeader()->sizeHint().height()
        + rows_->verticalHeader()->defaultSectionSize() * shown + 2 * rows_->frameWidth()
        + rows_->horizontalScrollBar()->sizeHint().height());
}

void RanksView::plotTimelines()
{
    plot_->clearGraphs();
    plot_->clearItems();
    graphs_.clear();
    if (!table_) {
        plot_->replot();
        return;
    }
    double end = 1e-9;
    for (std::size_t i = 0; i < table_->ranks.size(); ++i) {
        const auto& r = table_->ranks[i];
        auto* g = plot_->addGraph();
        // "rank 1  training-loop-…-frames.pickle": short enough for several ranks on one legend row.
        auto name = QFileInfo(QString::fromStdString(r.file)).fileName();
        g->setName(tr("rank %1  %2").arg(i).arg(QFontMetrics(plot_->legend->font()).elidedText(name, Qt::ElideMiddle, 220)));
        g->setPen(QPen(rankColour(i), 1.4));
        QVector<double> keys, values;
        for (const auto& [x, y] : r.timeline) {
            keys << x;
            values << y;
            end = std::max(end, x);
        }
        g->setData(keys, values, true);
        graphs_.push_back(g);
        // The peak, on the curve at the moment it falls.
        auto* peak = new QCPItemTracer(plot_);
        peak->setGraph(g);
        peak->setGraphKey(static_cast<double>(r.peak_time_ns) / 1e6);
        peak->setInterpolating(true);
        peak->setStyle(QCPItemTracer::tsCircle);
        peak->setSize(7);
        peak->setPen(QPen(rankColour(i), 1.5));
        peak->setBrush(rankColour(i));
    }
    plot_->rescaleAxes();
    plot_->yAxis->setRangeLower(0);
    plot_->yAxis->setRangeUpper(plot_->yAxis->range().upper * 1.05);
    plot_->replot();
}

QCPGraph* RanksView::graphOf(int rank) const
{
    return rank >= 0 && rank < static_cast<int>(graphs_.size()) ? graphs_[static_cast<std::size_t>(rank)] : nullptr;
}

int RanksView::rowOf(int rank) const
{
    for (int row = 0; row < rows_->rowCount(); ++row)
        if (auto* item = rows_->item(row, Rank); item && item->data(kRankRole).toInt() == rank)
            return row;
    return -1;
}

void RanksView::emphasize(int rank)
{
    if (rank == emphasized_)
        return;
    emphasized_ = rank;
    for (std::size_t i = 0; i < graphs_.size(); ++i) {
        const bool on = static_cast<int>(i) == rank;
        graphs_[i]->setPen(QPen(rankColour(i), on ? 2.4 : 1.4));
        // The chosen rank's curve is drawn last, so that no other rank's hides it.
        graphs_[i]->setLayer(on ? QStringLiteral("overlay") : QStringLiteral("main"));
    }
    plot_->replot();
}

void RanksView::setCurrentFile(const QString& file)
{
    if (!table_)
        return;
    for (std::size_t i = 0; i < table_->ranks.size(); ++i)
        if (!file.isEmpty() && QFileInfo(QString::fromStdString(table_->ranks[i].file)) == QFileInfo(file)) {
            rows_->selectRow(rowOf(static_cast<int>(i)));
            emphasize(static_cast<int>(i));
            return;
        }
    rows_->clearSelection();
    emphasize(-1);
}

} // namespace memledger

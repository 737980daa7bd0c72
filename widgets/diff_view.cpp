#include "diff_view.h"
#include "bytes_text.h"

#include "byte_axis_ticker.h"
#include "exports/diff_palette.h"
#include "exports/diff_text.h"
#include "support/format.h"

#include <qcustomplot.h>

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QScrollBar>
#include <QSplitter>
#include <QRegularExpression>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cstdlib>

namespace memledger {

namespace {

// A cell that sorts by the number it shows, not by its text.
class NumberItem : public QTableWidgetItem {
public:
    NumberItem(const QString& text, double value)
        : QTableWidgetItem(text)
    {
        setData(Qt::UserRole, value);
        setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    }
    bool operator<(const QTableWidgetItem& other) const override
    {
        return data(Qt::UserRole).toDouble() < other.data(Qt::UserRole).toDouble();
    }
};

QTableWidgetItem* deltaItem(std::int64_t delta, bool bytes = true)
{
    auto text = bytes ? QString::fromStdString(formatByteDelta(delta))
                      : (delta > 0 ? QStringLiteral("+%1").arg(delta) : QString::number(delta));
    auto* item = new NumberItem(text, static_cast<double>(delta));
    if (delta > 0)
        item->setForeground(QColor(QString::fromUtf8(kDiffGrewColourHex)));
    else if (delta < 0)
        item->setForeground(QColor(QString::fromUtf8(kDiffShrankColourHex)));
    return item;
}

QTableWidgetItem* textItem(const QString& text, const QString& tooltip = {})
{
    auto* item = new QTableWidgetItem(text);
    item->setToolTip(tooltip.isEmpty() ? text : tooltip);
    return item;
}

// A site "file:line name" shown as "name  file:line": elided in the middle, two sites of one function keep
// their lines apart (the whole site is the tooltip).
QString siteText(const QString& where)
{
    static const QRegularExpression site(QStringLiteral("^(.*:\\d+) (.+)$"));
    auto m = site.match(where);
    return m.hasMatch() ? QStringLiteral("%1  %2").arg(m.captured(2), m.captured(1)) : where;
}

QString percentText(const DiffFigure& f)
{
    if (f.a == 0 || f.delta() == 0)
        return {};
    return QStringLiteral("%1%2%").arg(f.delta() > 0 ? "+" : "").arg(
        100.0 * static_cast<double>(f.delta()) / static_cast<double>(f.a), 0, 'f', 1);
}

void setUpTable(QTableWidget* t)
{
    t->setEditTriggers(QAbstractItemView::NoEditTriggers);
    t->setSelectionBehavior(QAbstractItemView::SelectRows);
    t->verticalHeader()->setVisible(false);
    t->verticalHeader()->setDefaultSectionSize(t->fontMetrics().height() + 6);
    t->setAlternatingRowColors(true);
    t->setWordWrap(false);
}

} // namespace

DiffView::DiffView(QWidget* parent)
    : QWidget(parent)
    , heading_(new QLabel)
    , axisNote_(new QLabel)
    , close_(new QPushButton(tr("Close comparison")))
    , plot_(new QCustomPlot)
    , totals_(new QTableWidget)
    , entries_(new QTableWidget)
    , tables_(new QSplitter(Qt::Horizontal))
{
    heading_->setTextFormat(Qt::RichText);
    heading_->setWordWrap(true);
    heading_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    axisNote_->setWordWrap(true);
    axisNote_->setEnabled(false);
    close_->setToolTip(tr("Return to the report of A"));
    connect(close_, &QPushButton::clicked, this, &DiffView::closeRequested);

    auto* head = new QHBoxLayout;
    head->addWidget(heading_, 1);
    head->addWidget(close_, 0, Qt::AlignTop);

    setUpCurvesPlot(plot_, 180);
    const char* colours[] = {kDiffAColourHex, kDiffBColourHex};
    for (int k = 0; k < 2; ++k) {
        QColor colour(QString::fromUtf8(colours[k]));
        graphs_[k] = plot_->addGraph();
        graphs_[k]->setLineStyle(QCPGraph::lsStepLeft);
        graphs_[k]->setPen(QPen(colour, 1.6));
        graphs_[k]->setAdaptiveSampling(false); // reduceToView() keeps a few points per pixel column
        peaks_[k] = new QCPItemTracer(plot_);
        peaks_[k]->setStyle(QCPItemTracer::tsCircle);
        peaks_[k]->setSize(8);
        peaks_[k]->setPen(QPen(colour, 1.5));
        peaks_[k]->setBrush(colour);
    }
    connect(plot_->xAxis, QOverload<const QCPRange&>::of(&QCPAxis::rangeChanged), this, [this](const QCPRange& r) {
        // Keep the view inside the data, then draw only what a pixel column can show.
        if (r.lower < lo_ || r.upper > hi_) {
            auto size = std::min(r.size(), hi_ - lo_);
            auto lower = std::clamp(r.lower, lo_, hi_ - size);
            plot_->xAxis->setRange(lower, lower + size);
            return;
        }
        reduceToView();
    });
    connect(plot_, &QCustomPlot::mouseDoubleClick, this, [this] { resetZoom(); });

    setUpTable(totals_);
    setUpTable(entries_);
    entries_->setSortingEnabled(true);
    entries_->setTextElideMode(Qt::ElideMiddle); // a long stack frame keeps its file's start and its line

    auto* top = new QWidget;
    auto* topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    topLayout->addLayout(head);
    topLayout->addWidget(axisNote_);
    topLayout->addWidget(plot_, 1);

    tables_->addWidget(totals_);
    tables_->addWidget(entries_);
    tables_->setStretchFactor(0, 0);
    tables_->setStretchFactor(1, 1);

    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(top);
    split->addWidget(tables_);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    layout->addWidget(split);
}

void DiffView::setDiff(std::shared_ptr<const ReportDiff> diff)
{
    diff_ = std::move(diff);
    if (!diff_) {
        heading_->clear();
        axisNote_->clear();
        totals_->clear();
        entries_->clear();
        for (auto* g : graphs_)
            g->data()->clear();
        plot_->replot();
        return;
    }
    auto side = [](const char* colour, const char* letter, const DiffSide& s) {
        return QStringLiteral("<span style=\"color:%1\">&#9632;</span> <b>%2</b> %3 <span style=\"color:gray\">(%4)</span>")
            .arg(QString::fromUtf8(colour), QString::fromUtf8(letter), QString::fromStdString(s.name).toHtmlEscaped(),
                QString::fromStdString(s.describe()).toHtmlEscaped());
    };
    heading_->setText(tr("<b>Comparison</b> (deltas are B &minus; A)<br>") + side(kDiffAColourHex, "A", diff_->a)
        + QStringLiteral("<br>") + side(kDiffBColourHex, "B", diff_->b));
    axisNote_->setText(tr("x: %1 — %2")
                           .arg(diff_->axis == TimelineAxis::OpSequence ? tr("op sequence") : tr("milliseconds since each run began"),
                               QString::fromStdString(diff_->axis_reason)));
    fillTotals();
    fillEntries();
    plotSeries();
}

void DiffView::fillTotals()
{
    const auto& d = *diff_;
    totals_->clear();
    totals_->setColumnCount(5);
    totals_->setHorizontalHeaderLabels({tr("figure"), tr("A"), tr("B"), tr("delta"), tr("%")});
    struct Row {
        QString label;
        DiffFigure f;
    };
    std::vector<Row> rows;
    for (const auto& t : d.totals) {
        if (t.figure.a == 0 && t.figure.b == 0 && t.name != "peak_bytes" && t.name != "peak_total_bytes")
            continue;
        auto label = QString::fromStdString(t.label);
        if (t.name == "reserved_bytes" && d.a.reserved_kind != ReserveKind::None)
            label += QStringLiteral(" (%1)").arg(QString::fromLatin1(nameOf(d.a.reserved_kind)));
        rows.push_back({label, t.figure});
    }
    for (const auto& l : d.ledgers)
        rows.push_back({tr("%1 at the peak").arg(QString::fromStdString(l.label)), l.at_peak});
    for (const auto& l : d.ledgers)
        rows.push_back({tr("%1 allocated").arg(QString::fromStdString(l.label)), l.total});
    totals_->setRowCount(static_cast<int>(rows.size()));
    for (int r = 0; r < static_cast<int>(rows.size()); ++r) {
        const auto& row = rows[static_cast<std::size_t>(r)];
        totals_->setItem(r, 0, textItem(row.label));
        totals_->setItem(r, 1, new NumberItem(bytesText(row.f.a), static_cast<double>(row.f.a)));
        totals_->setItem(r, 2, new NumberItem(bytesText(row.f.b), static_cast<double>(row.f.b)));
        totals_->setItem(r, 3, deltaItem(row.f.delta()));
        totals_->setItem(r, 4, new NumberItem(percentText(row.f), 0));
    }
    totals_->resizeColumnsToContents();
    // The figures keep the width they need; the entries take the rest.
    const int wanted = totals_->horizontalHeader()->length() + totals_->frameWidth() * 2
        + totals_->verticalScrollBar()->sizeHint().width();
    totals_->setMinimumWidth(std::min(wanted, 520));
}

void DiffView::fillEntries()
{
    const auto& d = *diff_;
    entries_->setSortingEnabled(false);
    entries_->clear();
    const int fixed = 3; // name, type, change
    const int columns = fixed + static_cast<int>(d.columns.size()) + 1;
    entries_->setColumnCount(columns);
    QStringList headers {d.entry_kind == DiffEntryKind::Module ? tr("module") : tr("site (top stack frame)"), tr("type"),
        tr("change")};
    for (const auto& c : d.columns)
        headers << QString::fromStdString(c.label);
    headers << tr("A → B of the change");
    entries_->setHorizontalHeaderLabels(headers);
    std::vector<const DiffEntry*> changed;
    for (const auto& e : d.entries)
        if (e.changed())
            changed.push_back(&e);
    entries_->setRowCount(static_cast<int>(changed.size()));
    for (int r = 0; r < static_cast<int>(changed.size()); ++r) {
        const auto& e = *changed[static_cast<std::size_t>(r)];
        auto name = siteText(QString::fromStdString(e.label));
        if (!e.in_a || !e.in_b)
            name += e.in_b ? tr(" (added)") : tr(" (removed)");
        entries_->setItem(r, 0, textItem(name, QString::fromStdString(e.key)));
        entries_->setItem(r, 1, textItem(QString::fromStdString(e.type)));
        // "change" sorts by magnitude, as the entries come: the largest change first, grown or shrunk.
        auto* change = deltaItem(e.change);
        change->setData(Qt::UserRole, static_cast<double>(std::llabs(e.change)));
        entries_->setItem(r, 2, change);
        for (std::size_t c = 0; c < d.columns.size(); ++c)
            entries_->setItem(r, fixed + static_cast<int>(c), deltaItem(e.figures[c].delta(), d.columns[c].bytes));
        QString ab;
        if (e.change_column >= 0) {
            const auto& f = e.figures[static_cast<std::size_t>(e.change_column)];
            ab = QStringLiteral("%1: %2 → %3")
                     .arg(QString::fromStdString(d.columns[static_cast<std::size_t>(e.change_column)].label),
                         bytesText(f.a), bytesText(f.b));
        }
        entries_->setItem(r, columns - 1, textItem(ab));
    }
    entries_->setSortingEnabled(true);
    entries_->sortItems(2, Qt::DescendingOrder);
    entries_->resizeColumnsToContents();
    entries_->setColumnWidth(0, std::min(entries_->columnWidth(0), 360));
}

void DiffView::plotSeries()
{
    const auto& d = *diff_;
    const DiffSeries* sides[] = {&d.series_a, &d.series_b};
    const DiffSide* who[] = {&d.a, &d.b};
    bool any = false;
    double top = 0;
    for (const auto* s : sides)
        if (!s->keys.empty()) {
            lo_ = any ? std::min(lo_, s->keys.front()) : s->keys.front();
            hi_ = any ? std::max(hi_, s->keys.back()) : s->keys.back();
            top = std::max(top, s->peak_value);
            any = true;
        }
    if (!any)
        lo_ = 0, hi_ = 1;
    if (hi_ <= lo_)
        hi_ = lo_ + 1;
    for (int k = 0; k < 2; ++k) {
        graphs_[k]->setName(QStringLiteral("%1  %2  (peak %3)")
                                .arg(QString::fromLatin1(k == 0 ? "A" : "B"), QString::fromStdString(who[k]->name),
                                    bytesText(static_cast<std::int64_t>(sides[k]->peak_value))));
        peaks_[k]->position->setCoords(sides[k]->peak_key, sides[k]->peak_value);
        peaks_[k]->setVisible(!sides[k]->keys.empty());
    }
    plot_->xAxis->setLabel(d.axis == TimelineAxis::OpSequence ? tr("op sequence") : tr("time (ms)"));
    plot_->yAxis->setRange(0, std::max(1.0, top * 1.08));
    resetZoom();
}

void DiffView::resetZoom()
{
    plot_->xAxis->setRange(lo_, hi_);
    reduceToView();
}

void DiffView::reduceToView()
{
    if (!diff_)
        return;
    const DiffSeries* sides[] = {&diff_->series_a, &diff_->series_b};
    const auto range = plot_->xAxis->range();
    const int columns = std::max(200, plot_->axisRect()->width());
    for (int k = 0; k < 2; ++k) {
        const auto& s = *sides[k];
        auto r = reduceSteps(s.keys, s.values, range.lower, range.upper, columns);
        // A step series ends on its last value: hold it to the series' end so the line does not stop short.
        if (!r.keys.empty() && !s.keys.empty() && r.keys.back() < std::min(range.upper, s.keys.back())) {
            r.keys.push_back(std::min(range.upper, s.keys.back()));
            r.values.push_back(r.values.back());
        }
        QVector<double> keys(r.keys.begin(), r.keys.end()), values(r.values.begin(), r.values.end());
        graphs_[k]->setData(keys, values, true);
    }
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

} // namespace memledger

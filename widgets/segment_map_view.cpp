#include "segment_map_view.h"
#include "snapshot/snapshot.h"
#include "bytes_text.h"

#include "ledger_colors.h"
#include "stack_pane.h"
#include "support/format.h"
#include "allocator/gpu_replay.h"
#include "snapshot/frames.h"
#include "snapshot/segment_state.h"
#include "analysis/timeline_series.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QVBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QPaintEvent>
#include <QPainter>
#include <QPushButton>
#include <QScrollBar>
#include <QToolTip>

#include <algorithm>
#include <cmath>

namespace memledger {

namespace {

constexpr int kRowHeight = 18;
constexpr int kRowGap = 4;
constexpr int kMargin = 6;
constexpr int kMinBarWidth = 6;

QString hex(std::uint64_t a)
{
    return QStringLiteral("0x") + QString::number(a, 16);
}

// The segments the caching-allocator model leaves at the end of a model run, as snapshot segments.
std::vector<SnapshotSegment> simulatedSegments(const Report& r)
{
    if (!r.trace || r.trace->size() == 0)
        return {};
    const auto held = simulatedGpuOf(r); // keeps a fresh replay alive while it is read
    return segmentsOfReplay(*r.trace, held->replay, held->preloaded);
}

} // namespace

SegmentMapView::SegmentMapView(QWidget* parent)
    : QAbstractScrollArea(parent)
    , device_(TimelineSeries::kAllDevices)
    , header_(new QWidget(this))
    , note_(new QLabel)
    , endButton_(new QPushButton(tr("Show end")))
    , logBox_(new QCheckBox(tr("log widths")))
{
    // The note on its own lines across the whole width (it wraps, never clips), the controls under it.
    auto* layout = new QVBoxLayout(header_);
    layout->setContentsMargins(kMargin, 2, kMargin, 2);
    layout->setSpacing(2);
    layout->addWidget(note_, 1);
    note_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred); // a narrow map wraps it, never widens
    note_->setWordWrap(true);
    note_->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    note_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* controls = new QHBoxLayout;
    controls->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(controls);
    endButton_->setToolTip(tr("Show the segments at the end of the snapshot (double-click the map does too); "
                              "a click on the timeline shows them at that moment"));
    endButton_->setEnabled(false);
    connect(endButton_, &QPushButton::clicked, this, &SegmentMapView::showEnd);
    controls->addWidget(endButton_);
    controls->addWidget(logBox_);
    controls->addStretch(1);
    logBox_->setChecked(log_);
    connect(logBox_, &QCheckBox::toggled, this, &SegmentMapView::setLogScale);
    // Up to three lines of note (the moment, then the figures, wrapped on a narrow map), then the controls.
    headerHeight_ = 3 * fontMetrics().lineSpacing() + endButton_->sizeHint().height() + 10;
    setViewportMargins(0, headerHeight_, 0, 0);
    viewport()->setMouseTracking(true);
    horizontalScrollBar()->setRange(0, 0);
    setMinimumHeight(120);
}

QColor SegmentMapView::stateColor(BlockState state)
{
    switch (state) {
    case BlockState::ActiveAllocated:
        return ledgerColor(Ledger::Activations);
    case BlockState::ActivePendingFree:
        return pendingFreeColor();
    case BlockState::Inactive:
    case BlockState::Other:
        break;
    }
    return QColor(0xe8, 0xe8, 0xe8);
}

void SegmentMapView::setReport(std::shared_ptr<const Report> report)
{
    report_ = std::move(report);
    device_ = TimelineSeries::kAllDevices;
    simulated_ = report_ && !report_->snapshot;
    moment_ = traceSize();
    if (!report_)
        segments_.clear();
    else if (report_->snapshot)
        segments_ = segmentsAt(*report_->snapshot, moment_);
    else
        segments_ = simulatedSegments(*report_);
    rebuild();
}

std::size_t SegmentMapView::traceSize() const
{
    if (!report_ || !report_->snapshot || !report_->snapshot->trace)
        return 0;
    return report_->snapshot->trace->size();
}

bool SegmentMapView::atEnd() const
{
    return moment_ >= traceSize();
}

void SegmentMapView::setMoment(std::size_t events)
{
    if (!report_ || !report_->snapshot)
        return;
    events = std::min(events, traceSize());
    if (events == moment_)
        return;
    moment_ = events;
    segments_ = segmentsAt(*report_->snapshot, moment_);
    int scroll = verticalScrollBar()->value();
    rebuild();
    verticalScrollBar()->setValue(scroll); // the same place, another moment
    emit momentChanged(moment_);
}

void SegmentMapView::showEnd()
{
    setMoment(traceSize());
}

void SegmentMapView::mouseDoubleClickEvent(QMouseEvent*)
{
    showEnd();
}

QString SegmentMapView::momentText() const
{
    const auto& s = *report_->snapshot;
    const auto n = traceSize();
    if (n == 0)
        return tr("At the end (no trace)");
    if (atEnd())
        return tr("At the end (%1 events)").arg(n);
    if (moment_ == 0)
        return tr("Before the first of %1 events").arg(n);
    if (!s.trace_has_time)
        return tr("After event %1 of %2").arg(moment_).arg(n);
    double ms = static_cast<double>(s.trace->time_ns[moment_ - 1]) / 1e6;
    return tr("At %1 ms (event %2 of %3)").arg(ms, 0, 'f', ms < 100 ? 2 : 1).arg(moment_).arg(n);
}

QString SegmentMapView::noteText() const
{
    return note_->text();
}

void SegmentMapView::setDevice(int device)
{
    device_ = device;
    rebuild();
}

void SegmentMapView::setLogScale(bool log)
{
    log_ = log;
    logBox_->setChecked(log);
    viewport()->update();
}

void SegmentMapView::rebuild()
{
    rows_.clear();
    for (const auto& g : segments_)
        if (simulated_ || device_ == TimelineSeries::kAllDevices || g.device == device_)
            rows_.push_back(&g);
    std::stable_sort(rows_.begin(), rows_.end(), [](const SnapshotSegment* a, const SnapshotSegment* b) {
        return std::tie(a->device, a->address) < std::tie(b->device, b->address);
    });
    minSize_ = maxSize_ = 1;
    if (!rows_.empty()) {
        minSize_ = maxSize_ = std::max<std::int64_t>(1, rows_.front()->total_size);
        for (const auto* g : rows_) {
            minSize_ = std::min(minSize_, std::max<std::int64_t>(1, g->total_size));
            maxSize_ = std::max(maxSize_, g->total_size);
        }
    }
    if (!report_)
        note_->clear();
    else if (simulated_ && rows_.empty())
        note_->setText(tr("No segments: the run allocated nothing the caching-allocator model could place."));
    else if (simulated_)
        note_->setText(tr("Simulated GPU segments at the end of the run:\n%1 segments, %2 reserved, %3 allocated")
                           .arg(rows_.size())
                           .arg(bytesText(barBytes()), bytesText(bytesIn(BlockState::ActiveAllocated))));
    else
        note_->setText(tr("%1:\n%2 segments, %3 reserved, %4 allocated")
                           .arg(momentText())
                           .arg(rows_.size())
                           .arg(bytesText(barBytes()), bytesText(bytesIn(BlockState::ActiveAllocated))));
    endButton_->setVisible(!simulated_);
    endButton_->setEnabled(report_ && report_->snapshot && !atEnd());
    note_->setToolTip(note_->text());
    labelWidth_ = 60;
    for (const auto* g : rows_)
        labelWidth_ = std::max(labelWidth_, fontMetrics().horizontalAdvance(labelOf(*g)) + 10);
    verticalScrollBar()->setValue(0);
    updateScrollBars();
    viewport()->update();
}

std::int64_t SegmentMapView::bytesIn(BlockState state) const
{
    std::int64_t n = 0;
    for (const auto* g : rows_)
        for (const auto& b : g->blocks)
            if (b.state == state)
                n += b.size;
    return n;
}

std::int64_t SegmentMapView::barBytes() const
{
    std::int64_t n = 0;
    for (const auto* g : rows_)
        n += g->total_size;
    return n;
}

QString SegmentMapView::labelOf(const SnapshotSegment& g) const
{
    bool multiDevice = report_ && report_->snapshot && report_->snapshot->devices.size() > 1;
    return QStringLiteral("%1%2  %3")
        .arg(multiDevice ? QString::fromStdString(snapshotDeviceName(g.device)) + QLatin1Char(' ') : QString(), hex(g.address),
            bytesText(g.total_size));
}

int SegmentMapView::barWidth(std::int64_t size) const
{
    int avail = std::max(kMinBarWidth, viewport()->width() - labelWidth_ - 2 * kMargin);
    double f;
    if (log_) {
        double lo = std::log2(static_cast<double>(minSize_)), hi = std::log2(static_cast<double>(maxSize_));
        f = hi > lo ? (std::log2(static_cast<double>(std::max<std::int64_t>(1, size))) - lo + 1) / (hi - lo + 1) : 1.0;
    } else {
        f = static_cast<double>(size) / static_cast<double>(maxSize_);
    }
    return std::max(kMinBarWidth, static_cast<int>(std::lround(f * avail)));
}

QRect SegmentMapView::barRect(int row) const
{
    if (row < 0 || row >= barCount())
        return {};
    int y = kMargin + row * (kRowHeight + kRowGap) - verticalScrollBar()->value();
    return QRect(kMargin + labelWidth_, y, barWidth(rows_[static_cast<std::size_t>(row)]->total_size), kRowHeight);
}

void SegmentMapView::updateScrollBars()
{
    int content = 2 * kMargin + barCount() * (kRowHeight + kRowGap);
    verticalScrollBar()->setRange(0, std::max(0, content - viewport()->height()));
    verticalScrollBar()->setPageStep(viewport()->height());
    verticalScrollBar()->setSingleStep(kRowHeight + kRowGap);
}

void SegmentMapView::resizeEvent(QResizeEvent* event)
{
    QAbstractScrollArea::resizeEvent(event);
    header_->setGeometry(0, 0, width(), headerHeight_);
    updateScrollBars();
}

void SegmentMapView::scrollContentsBy(int, int)
{
    viewport()->update();
}

void SegmentMapView::paintEvent(QPaintEvent* event)
{
    QPainter p(viewport());
    auto pal = palette();
    p.fillRect(event->rect(), pal.color(QPalette::Base));
    if (rows_.empty())
        return;
    int step = kRowHeight + kRowGap;
    int scroll = verticalScrollBar()->value();
    int first = std::max(0, (event->rect().top() + scroll - kMargin) / step);
    int last = std::min(barCount() - 1, (event->rect().bottom() + scroll - kMargin) / step);
    p.setPen(pal.color(QPalette::WindowText));
    for (int row = first; row <= last; ++row) {
        const auto& g = *rows_[static_cast<std::size_t>(row)];
        auto bar = barRect(row);
        QString label = labelOf(g);
        p.setPen(pal.color(QPalette::WindowText));
        p.drawText(QRect(kMargin, bar.y(), labelWidth_ - 6, kRowHeight), Qt::AlignVCenter | Qt::AlignRight, label);
        p.fillRect(bar, stateColor(BlockState::Inactive));
        double scale = g.total_size > 0 ? bar.width() / static_cast<double>(g.total_size) : 0;
        for (const auto& b : g.blocks) {
            if (b.state == BlockState::Inactive || b.address < g.address)
                continue;
            int x0 = bar.x() + static_cast<int>(std::floor(static_cast<double>(b.address - g.address) * scale));
            int x1 = bar.x() + static_cast<int>(std::ceil(static_cast<double>(b.address - g.address + b.size) * scale));
            x1 = std::min(std::max(x1, x0 + 1), bar.right() + 1);
            p.fillRect(QRect(x0, bar.y(), x1 - x0, bar.height()), stateColor(b.state));
        }
        p.setPen(QPen(pal.color(QPalette::Mid), 1));
        p.setBrush(Qt::NoBrush);
        p.drawRect(bar.adjusted(0, 0, -1, -1));
    }
}

QString SegmentMapView::describeAt(const QPoint& pos) const
{
    if (rows_.empty())
        return {};
    int step = kRowHeight + kRowGap;
    int row = (pos.y() + verticalScrollBar()->value() - kMargin) / step;
    auto bar = barRect(row);
    if (!bar.isValid() || pos.y() < bar.top() || pos.y() > bar.bottom() || pos.x() < bar.left() - labelWidth_
        || pos.x() > bar.right())
        return {};
    const auto& g = *rows_[static_cast<std::size_t>(row)];
    QString segment = tr("segment %1 on %2<br>%3 reserved, %4 allocated, %5 active, %6%7")
                          .arg(hex(g.address))
                          .arg(QString::fromStdString(snapshotDeviceName(g.device)))
                          .arg(bytesText(g.total_size), bytesText(g.allocated_size), bytesText(g.active_size),
                              QString::fromStdString(g.segment_type.empty() ? "" : g.segment_type + " pool"),
                              g.is_expandable ? tr(", expandable") : QString());
    if (pos.x() < bar.left())
        return segment;
    auto offset = static_cast<std::uint64_t>(
        static_cast<double>(pos.x() - bar.left()) / bar.width() * static_cast<double>(g.total_size));
    auto at = g.address + offset;
    const SnapshotBlock* best = nullptr;
    for (const auto& b : g.blocks)
        if (at >= b.address && at < b.address + static_cast<std::uint64_t>(b.size))
            best = &b;
    // A block narrower than a pixel: take the one drawn at that pixel.
    if (!best) {
        double perPixel = static_cast<double>(g.total_size) / bar.width();
        for (const auto& b : g.blocks)
            if (b.state != BlockState::Inactive
                && std::abs(static_cast<double>(b.address) - static_cast<double>(at)) < perPixel)
                best = &b;
    }
    if (!best)
        return segment;
    auto frame = QString::fromStdString(allocationSite(best->frames));
    std::vector<FrameView> views;
    for (const auto& f : best->frames)
        views.push_back({f.filename, f.line, f.name});
    auto stack = stackTooltipHtml(views);
    if (!stack.isEmpty())
        stack = tr("<br><br>call stack, innermost first:<br>") + stack;
    return tr("<b>%1</b> %2<br>address %3, requested %4<br>%5%6<hr>%7")
        .arg(bytesText(best->size), QString::fromUtf8(blockStateName(best->state)), hex(best->address),
            bytesText(best->requested_size), frame.isEmpty() ? tr("(no stack)") : frame.toHtmlEscaped(), stack,
            segment);
}

bool SegmentMapView::viewportEvent(QEvent* event)
{
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        auto text = describeAt(help->pos());
        if (text.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(help->globalPos(), text, viewport());
        return true;
    }
    return QAbstractScrollArea::viewportEvent(event);
}

} // namespace memledger

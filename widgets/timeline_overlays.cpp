// TimelinePlot, what it draws over the ledgers: the predicted and reserved lines, OOM markers, the moment and
// peak markers, the selected range, and a training step's phase bands with their names.
#include "timeline_plot.h"
#include "timeline_text.h"

#include "ledger_colors.h"
#include "snapshot/snapshot.h"

#include <algorithm>

namespace memledger {

void TimelinePlot::setPredictedReport(std::shared_ptr<const Report> predicted, const QString& name)
{
    // A view of the whole step grows to the predicted one, which may run longer; a zoom the user chose is kept
    // (ticking a checkpoint box, or moving the What if panel, must not lose it).
    double lo = series_->firstKey(), hi = series_->lastKey();
    if (predicted_ && !predictedSeries_.keys.empty())
        hi = std::max(hi, predictedSeries_.lastKey());
    const auto shown = xAxis->range();
    const double slack = 1e-9 * std::max(1.0, hi - lo);
    const bool whole = shown.lower <= lo + slack && shown.upper >= hi - slack;
    predicted_ = std::move(predicted);
    predictedGraph_->setName(name);
    rebuildPredicted();
    fitLegend();
    if (whole) {
        resetZoom();
    } else {
        reduceToView();
        replot(rpQueuedReplot);
    }
}

// The predicted step's stacked total, built by the same series code as the recorded one.
void TimelinePlot::rebuildPredicted()
{
    predictedSeries_ = predicted_ ? TimelineSeries::build(*predicted_, axis_) : TimelineSeries {};
    // The highest top of the bands present at each point.
    predictedTotal_ = StepValues(predictedSeries_.keys.size(),
        [tops = predictedSeries_.tops, present = predictedSeries_.present](
            std::size_t first, std::size_t count, double* out) {
            double top[StepBlocks::kSize];
            std::fill_n(out, count, 0.0);
            for (int b = 0; b < TimelineSeries::kBands; ++b)
                if (present[static_cast<std::size_t>(b)]) {
                    tops[static_cast<std::size_t>(b)].read(first, count, top);
                    for (std::size_t k = 0; k < count; ++k)
                        out[k] = std::max(out[k], top[k]);
                }
        });
    bool show = predicted_ && !predictedTotal_.empty();
    predictedGraph_->setVisible(show);
    if (show)
        predictedGraph_->addToLegend();
    else
        predictedGraph_->removeFromLegend();
}

void TimelinePlot::setReservedLine(StepValues values, const QString& name)
{
    reserved_ = std::move(values);
    bool show = !reserved_.empty() && reserved_.size() == series_->keys.size();
    reservedGraph_->setVisible(show);
    reservedGraph_->setName(name);
    if (show)
        reservedGraph_->addToLegend();
    else
        reservedGraph_->removeFromLegend();
    fitLegend();
    autoValueRange_ = true;
    reduceToView();
    replot(rpQueuedReplot);
}

QString TimelinePlot::oomMarkerText(int i) const
{
    return i >= 0 && i < oomMarkerCount() ? oomLabels_[static_cast<std::size_t>(i)]->text() : QString();
}

void TimelinePlot::updateOomMarkers()
{
    for (auto* item : oomLines_)
        removeItem(item);
    for (auto* item : oomLabels_)
        removeItem(item);
    oomLines_.clear();
    oomLabels_.clear();
    if (!report_ || !report_->snapshot || !report_->trace)
        return;
    const auto& t = *report_->trace;
    const auto& ooms = report_->snapshot->ooms;
    std::size_t k = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.action[i] != Action::Oom)
            continue;
        const SnapshotOom* oom = k < ooms.size() ? &ooms[k] : nullptr;
        ++k;
        if (device_ != TimelineSeries::kAllDevices && t.device[i] != device_)
            continue;
        double key = series_->keys[i + 1];
        auto* line = new QCPItemStraightLine(this);
        line->point1->setCoords(key, 0);
        line->point2->setCoords(key, 1);
        line->setPen(QPen(fragmentationColor(), 2));
        auto* label = new QCPItemText(this);
        label->position->setTypeX(QCPItemPosition::ptPlotCoords);
        label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(key, 0.3); // below the peak marker, which is often near
        label->setPositionAlignment(Qt::AlignTop | Qt::AlignRight);
        label->setPadding(QMargins(4, 2, 4, 2));
        label->setColor(fragmentationColor().darker(150));
        label->setBrush(palette().color(QPalette::Base));
        label->setPen(QPen(fragmentationColor()));
        std::int64_t requested = oom ? oom->bytes_requested : t.bytes[i];
        QString text = tr("out of memory on %1: %2 requested")
                           .arg(QString::fromStdString(snapshotDeviceName(t.device[i])))
                           .arg(bytesText(static_cast<double>(requested)));
        if (oom)
            text += tr(", %1 free").arg(bytesText(static_cast<double>(oom->device_free)));
        label->setText(text);
        oomLines_.push_back(line);
        oomLabels_.push_back(label);
    }
}

void TimelinePlot::setMomentMarker(std::size_t events)
{
    moment_ = events;
    updateMomentMarker();
    replot(QCustomPlot::rpQueuedReplot);
}

void TimelinePlot::updateMomentMarker()
{
    bool show = momentMarkerVisible();
    momentLine_->setVisible(show);
    if (!show)
        return;
    double key = series_->keys[moment_];
    momentLine_->point1->setCoords(key, 0);
    momentLine_->point2->setCoords(key, 1);
}

bool TimelinePlot::momentMarkerVisible() const
{
    return report_ && report_->snapshot && report_->trace && moment_ < report_->trace->size()
        && moment_ < series_->keys.size();
}

void TimelinePlot::updatePeakMarker()
{
    bool show = report_ && series_->peak_value > 0 && !showsEndStateOnly();
    peakTracer_->setVisible(show);
    peakLabel_->setVisible(show);
    if (!show)
        return;
    peakTracer_->position->setCoords(series_->peak_key, series_->peak_value);
    peakLabel_->setText(tr("peak %1").arg(bytesText(series_->peak_value)));
}

void TimelinePlot::placePeakLabel()
{
    if (!peakLabel_->visible())
        return;
    // Above the marker and centred, unless that would cut it at an edge of the axis rect: then it hangs to
    // the side that has room, or below the marker.
    QRectF area = axisRect()->rect();
    QPointF at = peakTracer_->position->pixelPosition();
    QFontMetricsF metrics(peakLabel_->font());
    auto padding = peakLabel_->padding();
    double w = metrics.horizontalAdvance(peakLabel_->text()) + padding.left() + padding.right();
    double h = metrics.height() + padding.top() + padding.bottom();
    const double gap = 6;
    Qt::Alignment horizontal = Qt::AlignHCenter;
    if (at.x() + w / 2 > area.right())
        horizontal = Qt::AlignRight;
    else if (at.x() - w / 2 < area.left())
        horizontal = Qt::AlignLeft;
    bool below = at.y() - gap - h < area.top();
    peakLabel_->setPositionAlignment(horizontal | (below ? Qt::AlignTop : Qt::AlignBottom));
    double dx = horizontal == Qt::AlignRight ? -gap : horizontal == Qt::AlignLeft ? gap : 0;
    peakLabel_->position->setCoords(dx, below ? gap : -gap);
}

QRectF TimelinePlot::peakLabelRect() const
{
    if (!peakLabel_->visible())
        return {};
    return QRectF(peakLabel_->topLeft->pixelPosition(), peakLabel_->bottomRight->pixelPosition()).normalized();
}

void TimelinePlot::setRangeMode(bool on)
{
    rangeMode_ = on;
    setCursor(on ? Qt::IBeamCursor : Qt::ArrowCursor);
}

void TimelinePlot::setRange(std::uint32_t first, std::uint32_t end)
{
    const auto events = static_cast<std::uint32_t>(series_->keys.empty() ? 0 : series_->keys.size() - 1);
    end = std::min(end, events);
    if (first >= end)
        first = end = 0;
    const bool changed = first != rangeFirst_ || end != rangeEnd_;
    rangeFirst_ = first;
    rangeEnd_ = end;
    updateRangeShade();
    if (changed)
        emit rangeChanged(first, end);
}

void TimelinePlot::clearRange()
{
    setRange(0, 0);
}

std::pair<std::uint32_t, std::uint32_t> TimelinePlot::eventsBetween(double a, double b) const
{
    const auto& k = series_->keys; // k[0]: the start; k[i + 1]: event i
    if (k.size() < 2 || b < a)
        return {0, 0};
    const auto first = k.lowerBound(a, 1) - 1, end = k.upperBound(b, 1) - 1;
    return {static_cast<std::uint32_t>(first), static_cast<std::uint32_t>(std::max(first, end))};
}

QCPRange TimelinePlot::rangeShade() const
{
    if (!hasRange() || !rangeRect_->visible())
        return {};
    return QCPRange(rangeRect_->topLeft->coords().x(), rangeRect_->bottomRight->coords().x());
}

QString TimelinePlot::rangeText() const
{
    if (!hasRange() || !report_ || !report_->trace)
        return {};
    const auto& t = *report_->trace;
    auto last = rangeEnd_ - 1;
    QString events = tr("events %1 – %2").arg(rangeFirst_).arg(last);
    if (!timelineHasTime(*report_))
        return events;
    return tr("%1 – %2 ms (%3)")
        .arg(static_cast<double>(t.time_ns[rangeFirst_]) / 1e6, 0, 'f', 3)
        .arg(static_cast<double>(t.time_ns[last]) / 1e6, 0, 'f', 3)
        .arg(events);
}

void TimelinePlot::updateRangeShade()
{
    const bool show = hasRange() && series_->keys.size() > rangeEnd_;
    rangeRect_->setVisible(show);
    rangeLabel_->setVisible(show);
    if (show) {
        double a = series_->keys[rangeFirst_ + 1], b = series_->keys[rangeEnd_];
        rangeRect_->topLeft->setCoords(a, 0);
        rangeRect_->bottomRight->setCoords(b, 1);
        rangeLabel_->position->setCoords((a + b) / 2, 1);
        rangeLabel_->setText(tr("range · Esc clears"));
    }
    replot(rpQueuedReplot);
}

const Phase* TimelinePlot::phaseOfEvent(std::size_t event) const
{
    if (!report_)
        return nullptr;
    for (const auto& phase : report_->phases)
        if (event >= phase.first_event && event < phase.end_event)
            return &phase;
    return nullptr;
}

void TimelinePlot::updatePhaseBands()
{
    for (auto* item : phaseRects_)
        removeItem(item);
    for (auto* item : phaseLabels_)
        removeItem(item);
    for (auto* item : phaseDividers_)
        removeItem(item);
    phaseRects_.clear();
    phaseLabels_.clear();
    phaseDividers_.clear();
    if (!report_ || series_->keys.empty())
        return;
    // A training step's phases tile the run; a snapshot's record_function ranges (external_annotations) are bands
    // where the file has them. On the op axis a band spans its events' keys: from its first event to the first
    // event after it.
    const auto events = series_->keys.size() - 1;
    auto eventKey = [&](std::uint32_t e) { return e < events ? series_->keys[e + 1] : series_->lastKey(); };
    struct Band {
        std::string name;
        std::int64_t start_ns, end_ns;
        std::uint32_t first_event, end_event;
    };
    std::vector<Band> phases;
    const bool tiled = !report_->snapshot;
    if (tiled) {
        for (const auto& p : report_->phases)
            phases.push_back({p.name, p.start_ns, p.end_ns, p.first_event, p.end_event});
    } else if (report_->snapshot->trace_has_time && report_->trace) {
        const auto& time = report_->trace->time_ns;
        auto eventAt = [&](std::int64_t ns) {
            return static_cast<std::uint32_t>(std::lower_bound(time.begin(), time.end(), ns) - time.begin());
        };
        const auto& snapshot = *report_->snapshot;
        const auto last = time.empty() ? 0 : time.back();
        for (const auto& a : snapshot.annotations) {
            if (device_ != TimelineSeries::kAllDevices && a.device != device_)
                continue;
            std::int64_t start = snapshot.startNs(a), end = a.end_us >= 0 ? snapshot.endNs(a) : last;
            if (end < 0 || start > last)
                continue; // outside the trace
            phases.push_back({a.name, start, end, eventAt(start), eventAt(end)});
        }
    }
    for (std::size_t i = 0; i < phases.size(); ++i) {
        const auto& phase = phases[i];
        double start = axis_ == TimelineAxis::Milliseconds ? static_cast<double>(phase.start_ns) / 1e6
                                                           : eventKey(phase.first_event);
        double end
            = axis_ == TimelineAxis::Milliseconds ? static_cast<double>(phase.end_ns) / 1e6 : eventKey(phase.end_event);
        if (i == 0 && tiled)
            start = std::min(start, series_->firstKey());
        if (i + 1 == phases.size() && tiled)
            end = std::max(end, series_->lastKey());
        auto* rect = new QCPItemRect(this);
        rect->setLayer(QStringLiteral("phases"));
        rect->setSelectable(false);
        for (auto* corner : {rect->topLeft, rect->bottomRight}) {
            corner->setTypeX(QCPItemPosition::ptPlotCoords);
            corner->setTypeY(QCPItemPosition::ptAxisRectRatio);
        }
        rect->topLeft->setCoords(start, 0);
        rect->bottomRight->setCoords(end, 1);
        auto* label = new QCPItemText(this);
        label->setLayer(QStringLiteral("phaseLabels"));
        label->setSelectable(false);
        label->position->setTypeX(QCPItemPosition::ptPlotCoords);
        label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords((start + end) / 2, 0);
        label->setPositionAlignment(Qt::AlignTop | Qt::AlignHCenter);
        label->setPadding(QMargins(2, 2, 2, 2));
        label->setText(QString::fromStdString(phase.name));
        phaseRects_.push_back(rect);
        phaseLabels_.push_back(label);
        if (i > 0 || !tiled) {
            auto* divider = new QCPItemLine(this);
            divider->setLayer(QStringLiteral("phases"));
            divider->setSelectable(false);
            for (auto* end : {divider->start, divider->end}) {
                end->setTypeX(QCPItemPosition::ptPlotCoords);
                end->setTypeY(QCPItemPosition::ptAxisRectRatio);
            }
            divider->start->setCoords(start, 0);
            divider->end->setCoords(start, 1);
            phaseDividers_.push_back(divider);
        }
    }
    applyPalette();
}

void TimelinePlot::placePhaseLabels()
{
    // Each name centred on the visible part of its band; hidden where the band is too narrow to hold it (the
    // loss, usually), where hovering the band still names it.
    auto range = xAxis->range();
    for (std::size_t i = 0; i < phaseLabels_.size(); ++i) {
        auto* label = phaseLabels_[i];
        double start = std::max(phaseRects_[i]->topLeft->coords().x(), range.lower);
        double end = std::min(phaseRects_[i]->bottomRight->coords().x(), range.upper);
        double pixels = xAxis->coordToPixel(end) - xAxis->coordToPixel(start);
        double needed = QFontMetricsF(label->font()).horizontalAdvance(label->text()) + 8;
        label->setVisible(end > start && pixels >= needed);
        label->position->setCoords((start + end) / 2, 0);
    }
}

QString TimelinePlot::phaseBandName(int i) const
{
    return i >= 0 && i < phaseBandCount() ? phaseLabels_[static_cast<std::size_t>(i)]->text() : QString();
}

QCPRange TimelinePlot::phaseBandRange(int i) const
{
    if (i < 0 || i >= phaseBandCount())
        return {};
    const auto* rect = phaseRects_[static_cast<std::size_t>(i)];
    return QCPRange(rect->topLeft->coords().x(), rect->bottomRight->coords().x());
}

bool TimelinePlot::phaseLabelVisible(int i) const
{
    return i >= 0 && i < phaseBandCount() && phaseLabels_[static_cast<std::size_t>(i)]->visible();
}

} // namespace memledger

#include "timeline_plot.h"

#include "byte_axis_ticker.h"
#include "ledger_colors.h"
#include "snapshot/snapshot.h"
#include "stack_pane.h"
#include "step_area_graph.h"
#include "support/format.h"

#include <QToolTip>

#include <algorithm>

namespace memledger {

namespace {

QString bytesText(double bytes)
{
    return QString::fromStdString(formatBytes(static_cast<std::int64_t>(bytes)));
}

// When an event happened, as the axis measures it: "12.345 ms (op 7)" for a model run, "12.345 ms" for a
// snapshot, "event 1234" for a trace without timestamps.
QString keyText(const Report& r, std::size_t event)
{
    const auto& t = *r.trace;
    if (!timelineHasTime(r))
        return QObject::tr("event %1").arg(event);
    auto ms = static_cast<double>(t.time_ns[event]) / 1e6;
    if (r.snapshot)
        return QObject::tr("%1 ms").arg(ms, 0, 'f', 3);
    return QObject::tr("%1 ms (op %2)").arg(ms, 0, 'f', 3).arg(t.op_seq[event]);
}

} // namespace

TimelinePlot::TimelinePlot(QWidget* parent)
    : QCustomPlot(parent)
{
    setMouseTracking(true);
    setNoAntialiasingOnDrag(true);
    setPlottingHints(QCP::phCacheLabels | QCP::phFastPolylines);
    setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    axisRect()->setRangeDrag(Qt::Horizontal);
    axisRect()->setRangeZoom(Qt::Horizontal);
    addLayer(QStringLiteral("cursor"), layer(QStringLiteral("main")), QCustomPlot::limAbove);
    layer(QStringLiteral("cursor"))->setMode(QCPLayer::lmBuffered);
    // Phase bands lie behind the grid and the stack; their names above the stack.
    addLayer(QStringLiteral("phases"), layer(QStringLiteral("grid")), QCustomPlot::limBelow);
    addLayer(QStringLiteral("phaseLabels"), layer(QStringLiteral("main")), QCustomPlot::limAbove);

    // Top band first, so each lower band is drawn over the one above it and the legend reads top-down.
    for (int k = TimelineSeries::kBands - 1; k >= 0; --k) {
        int b = TimelineSeries::kStackOrder[static_cast<std::size_t>(k)];
        auto* g = new StepAreaGraph(xAxis, yAxis);
        auto colour = b == TimelineSeries::kAliveBefore ? aliveBeforeColor()
            : b == TimelineSeries::kPendingFree         ? pendingFreeColor()
                                                        : ledgerColor(static_cast<Ledger>(b));
        g->setName(b < kLedgerCount ? QString::fromUtf8(ledgerLabel(static_cast<Ledger>(b))) : QString());
        g->setPen(QPen(colour.darker(130), 1));
        g->setBrush(colour);
        g->setAdaptiveSampling(false); // reduceToView() already keeps a few points per pixel column
        g->setAntialiased(false);
        g->setAntialiasedFill(false);
        bands_[static_cast<std::size_t>(b)] = g;
    }
    reservedGraph_ = new QCPGraph(xAxis, yAxis);
    reservedGraph_->setLineStyle(QCPGraph::lsStepLeft);
    reservedGraph_->setPen(QPen(reservedColor(), 1.5, Qt::DashLine));
    reservedGraph_->setAdaptiveSampling(false);
    reservedGraph_->setVisible(false);
    reservedGraph_->removeFromLegend();
    predictedGraph_ = new QCPGraph(xAxis, yAxis);
    predictedGraph_->setLineStyle(QCPGraph::lsStepLeft);
    predictedGraph_->setPen(QPen(QColor(0xb0, 0x00, 0x20), 2.0));
    predictedGraph_->setAdaptiveSampling(false);
    predictedGraph_->setVisible(false);
    predictedGraph_->removeFromLegend();
    highlight_ = new StepAreaGraph(xAxis, yAxis); // filled down to weights + inputs, not to zero
    highlight_->setName(tr("selected module"));
    highlight_->setAdaptiveSampling(false);
    highlight_->removeFromLegend();
    highlight_->setVisible(false);

    peakTracer_ = new QCPItemTracer(this);
    peakTracer_->setStyle(QCPItemTracer::tsCircle);
    peakTracer_->setSize(8);
    peakLabel_ = new QCPItemText(this);
    peakLabel_->position->setParentAnchor(peakTracer_->position);
    peakLabel_->position->setCoords(0, -6);
    peakLabel_->setPositionAlignment(Qt::AlignBottom | Qt::AlignHCenter);
    peakLabel_->setPadding(QMargins(3, 1, 3, 1));

    emptyLabel_ = new QCPItemText(this);
    emptyLabel_->position->setType(QCPItemPosition::ptAxisRectRatio);
    emptyLabel_->position->setCoords(0.5, 0.5);
    emptyLabel_->setText(tr("No allocation events in this report"));
    emptyLabel_->setVisible(false);

    cursorLine_ = new QCPItemStraightLine(this);
    cursorLine_->setLayer(QStringLiteral("cursor"));
    cursorLine_->setVisible(false);
    momentLine_ = new QCPItemStraightLine(this);
    momentLine_->setVisible(false);
    addLayer(QStringLiteral("range"), layer(QStringLiteral("main")), QCustomPlot::limAbove);
    rangeRect_ = new QCPItemRect(this);
    rangeRect_->setLayer(QStringLiteral("range"));
    rangeRect_->setSelectable(false);
    for (auto* corner : {rangeRect_->topLeft, rangeRect_->bottomRight}) {
        corner->setTypeX(QCPItemPosition::ptPlotCoords);
        corner->setTypeY(QCPItemPosition::ptAxisRectRatio);
    }
    rangeRect_->setVisible(false);
    rangeLabel_ = new QCPItemText(this);
    rangeLabel_->setLayer(QStringLiteral("range"));
    rangeLabel_->setSelectable(false);
    rangeLabel_->position->setTypeX(QCPItemPosition::ptPlotCoords);
    rangeLabel_->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
    rangeLabel_->setPositionAlignment(Qt::AlignBottom | Qt::AlignHCenter);
    rangeLabel_->setPadding(QMargins(3, 1, 3, 1));
    rangeLabel_->setClipToAxisRect(true);
    rangeLabel_->setVisible(false);
    setFocusPolicy(Qt::ClickFocus); // Esc clears the range

    yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new ByteAxisTicker));
    yAxis->setLabel(tr("live bytes"));
    // The legend sits in a row above the plot, where it never hides the peak marker.
    legend->setVisible(true);
    legend->setFillOrder(QCPLegend::foColumnsFirst);
    plotLayout()->insertRow(0);
    plotLayout()->addElement(0, 0, legend);
    plotLayout()->setRowStretchFactor(0, 0.001);
    legend->setMargins(QMargins(4, 2, 4, 2));

    connect(xAxis, QOverload<const QCPRange&>::of(&QCPAxis::rangeChanged), this, [this] {
        clampKeyRange();
        reduceToView();
    });
    // After the layout, before drawing: the axis rect's size is final, so the label can be kept inside it.
    connect(this, &QCustomPlot::afterLayout, this, &TimelinePlot::placePeakLabel);
    connect(this, &QCustomPlot::afterLayout, this, &TimelinePlot::placePhaseLabels);
    applyPalette();
    setAxis(TimelineAxis::Milliseconds);
}

void TimelinePlot::setReport(std::shared_ptr<const Report> report)
{
    report_ = std::move(report);
    // A module selected in the previous report is not this one's: its band and legend entry go.
    highlighted_.clear();
    highlightSeries_.clear();
    highlightBlocks_ = StepBlocks::build(highlightSeries_);
    highlight_->setName(tr("selected module"));
    highlight_->removeFromLegend();
    moment_ = report_ && report_->trace ? report_->trace->size() : 0;
    reserved_.clear();
    reservedGraph_->setVisible(false);
    reservedGraph_->removeFromLegend();
    predicted_.reset();
    predictedGraph_->setVisible(false);
    predictedGraph_->removeFromLegend();
    device_ = TimelineSeries::kAllDevices;
    const bool hadRange = hasRange();
    rangeFirst_ = rangeEnd_ = 0;
    rangeDragging_ = false;
    rebuildSeries();
    if (hadRange)
        emit rangeChanged(0, 0);
}

void TimelinePlot::setPredictedReport(std::shared_ptr<const Report> predicted, const QString& name)
{
    predicted_ = std::move(predicted);
    predictedGraph_->setName(name);
    rebuildPredicted();
    fitLegend();
    resetZoom(); // the predicted step may run longer than the recorded one
}

// The predicted step's stacked total, built by the same series code as the recorded one.
void TimelinePlot::rebuildPredicted()
{
    predictedSeries_ = predicted_ ? TimelineSeries::build(*predicted_, axis_) : TimelineSeries {};
    predictedTotal_.assign(predictedSeries_.keys.size(), 0.0);
    for (int b = 0; b < TimelineSeries::kBands; ++b)
        if (predictedSeries_.present[static_cast<std::size_t>(b)])
            for (std::size_t p = 0; p < predictedTotal_.size(); ++p)
                predictedTotal_[p] = std::max(predictedTotal_[p], predictedSeries_.tops[static_cast<std::size_t>(b)][p]);
    predictedBlocks_ = StepBlocks::build(predictedTotal_);
    bool show = predicted_ && !predictedTotal_.empty();
    predictedGraph_->setVisible(show);
    if (show)
        predictedGraph_->addToLegend();
    else
        predictedGraph_->removeFromLegend();
}

void TimelinePlot::setDevice(int device)
{
    if (device == device_)
        return;
    device_ = device;
    rebuildSeries();
}

void TimelinePlot::setReservedLine(std::vector<double> values, const QString& name)
{
    reserved_ = std::move(values);
    reservedBlocks_ = StepBlocks::build(reserved_);
    bool show = !reserved_.empty() && reserved_.size() == series_.keys.size();
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
        double key = series_.keys[i + 1];
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
        QString text = tr("out of memory on cuda:%1: %2 requested")
                           .arg(static_cast<int>(t.device[i]))
                           .arg(bytesText(static_cast<double>(requested)));
        if (oom)
            text += tr(", %1 free").arg(bytesText(static_cast<double>(oom->device_free)));
        label->setText(text);
        oomLines_.push_back(line);
        oomLabels_.push_back(label);
    }
}

void TimelinePlot::setAxis(TimelineAxis axis)
{
    axis_ = axis;
    xAxis->setLabel(axis == TimelineAxis::Milliseconds ? tr("time (ms)") : tr("op sequence"));
    rebuildSeries();
}

void TimelinePlot::rebuildSeries()
{
    series_ = report_ ? TimelineSeries::build(*report_, axis_, device_) : TimelineSeries {};
    for (int b = 0; b < TimelineSeries::kBands; ++b) {
        auto* g = bands_[static_cast<std::size_t>(b)];
        g->setVisible(series_.present[static_cast<std::size_t>(b)]);
        if (report_) // the ledgers as people read them ("saved for backward"); a snapshot's bands as they are
            g->setName(QString::fromUtf8(
                b < kLedgerCount ? ledgerLabel(static_cast<Ledger>(b)) : TimelineSeries::bandName(*report_, b)));
        if (g->visible())
            g->addToLegend();
        else
            g->removeFromLegend();
    }
    if (!highlighted_.isEmpty() && report_ && report_->trace) {
        highlightSeries_ = moduleLiveSeries(*report_->trace, highlighted_.toStdString(), residentBytes());
        highlightBlocks_ = StepBlocks::build(highlightSeries_);
    }
    emptyLabel_->setVisible(report_ && (!report_->trace || report_->trace->size() == 0));
    if (report_)
        xAxis->setLabel(QString::fromStdString(timelineAxisLabel(*report_, axis_)));
    showEndStateOnly();
    updateRangeShade();
    const auto& weights = series_.tops[static_cast<std::size_t>(Ledger::Weights)];
    weightsTop_ = series_.present[static_cast<std::size_t>(Ledger::Weights)] && !weights.empty()
        ? *std::min_element(weights.begin(), weights.end())
        : 0;
    if (reserved_.size() != series_.keys.size()) {
        reservedGraph_->setVisible(false);
        reservedGraph_->removeFromLegend();
    }
    if (predicted_)
        rebuildPredicted(); // on the new axis
    fitLegend();
    updateOomMarkers();
    updatePhaseBands();
    updatePeakMarker();
    updateMomentMarker();
    resetZoom();
}

bool TimelinePlot::showsEndStateOnly() const
{
    if (!report_ || !report_->snapshot)
        return false;
    const auto& a = report_->trace ? report_->trace->action : std::vector<Action> {};
    return std::none_of(a.begin(), a.end(), [](Action x) { return x == Action::Alloc || x == Action::Free; });
}

void TimelinePlot::showEndStateOnly()
{
    // A snapshot without allocations in its trace (a bare segment list, a legacy file): its segments' blocks
    // are all it shows, drawn as the state at the end across the plot.
    const bool endOnly = showsEndStateOnly();
    if (!endStateRect_) {
        endStateRect_ = new QCPItemRect(this);
        endStateRect_->setLayer(QStringLiteral("phases")); // behind the grid and the text over it
        endStateRect_->setSelectable(false);
    }
    endStateRect_->setVisible(endOnly);
    xAxis->setTickLabels(!endOnly);
    if (!endOnly) {
        emptyLabel_->setText(tr("No allocation events in this report"));
        emptyLabel_->setBrush(Qt::NoBrush);
        return;
    }
    const auto& before = series_.tops[TimelineSeries::kAliveBefore];
    const double bytes = before.empty() ? 0 : before.back();
    std::int64_t blocks = 0;
    for (const auto& seg : report_->snapshot->segments)
        if (device_ == TimelineSeries::kAllDevices || seg.device == device_)
            for (const auto& b : seg.blocks)
                blocks += b.state == BlockState::ActiveAllocated ? 1 : 0;
    endStateRect_->topLeft->setCoords(0, bytes);
    endStateRect_->bottomRight->setCoords(1, 0);
    endStateRect_->setBrush(aliveBeforeColor());
    endStateRect_->setPen(QPen(aliveBeforeColor().darker(130), 1));
    bands_[TimelineSeries::kAliveBefore]->setName(tr("allocated at the end"));
    xAxis->setLabel(tr("the state at the end (the snapshot has no trace)"));
    emptyLabel_->setText(tr("The snapshot has no trace: its segments hold %1 in %2 blocks at the end")
                             .arg(bytesText(bytes))
                             .arg(blocks));
    emptyLabel_->setBrush(palette().color(QPalette::Base));
    emptyLabel_->setPadding(QMargins(6, 3, 6, 3));
    emptyLabel_->setVisible(true);
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
    double key = series_.keys[moment_];
    momentLine_->point1->setCoords(key, 0);
    momentLine_->point2->setCoords(key, 1);
}

bool TimelinePlot::momentMarkerVisible() const
{
    return report_ && report_->snapshot && report_->trace && moment_ < report_->trace->size()
        && moment_ < series_.keys.size();
}

void TimelinePlot::updatePeakMarker()
{
    bool show = report_ && series_.peak_value > 0 && !showsEndStateOnly();
    peakTracer_->setVisible(show);
    peakLabel_->setVisible(show);
    if (!show)
        return;
    peakTracer_->position->setCoords(series_.peak_key, series_.peak_value);
    peakLabel_->setText(tr("peak %1").arg(bytesText(series_.peak_value)));
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

void TimelinePlot::clampKeyRange()
{
    // No panning before the first event or after the last: there is nothing there, not even negative time.
    double lo = series_.firstKey(), hi = series_.lastKey();
    if (predicted_ && !predictedSeries_.keys.empty()) // a predicted step runs longer (its recomputation)
        hi = std::max(hi, predictedSeries_.lastKey());
    if (hi <= lo)
        return;
    auto range = xAxis->range();
    double width = std::min(range.size(), hi - lo);
    double lower = std::clamp(range.lower, lo, hi - width);
    if (lower == range.lower && lower + width == range.upper)
        return;
    xAxis->setRange(lower, lower + width);
}

void TimelinePlot::setWeightsHidden(bool hidden)
{
    if (hidden == weightsHidden_)
        return;
    weightsHidden_ = hidden;
    yAxis->setLabel(hidden ? tr("live bytes (axis starts at the weights)") : tr("live bytes"));
    autoValueRange_ = true;
    reduceToView();
    replot(rpQueuedReplot);
}

void TimelinePlot::resetZoom()
{
    double lo = series_.firstKey(), hi = series_.lastKey();
    if (predicted_ && !predictedSeries_.keys.empty())
        hi = std::max(hi, predictedSeries_.lastKey());
    if (hi <= lo)
        hi = lo + 1;
    autoValueRange_ = true;
    xAxis->setRange(lo, hi);
    reduceToView();
    replot(rpQueuedReplot);
}

void TimelinePlot::reduceToView()
{
    if (reducing_)
        return;
    reducing_ = true;
    auto range = xAxis->range();
    int columns = 2 * std::max(100, axisRect()->width() > 0 ? axisRect()->width() : width());
    double top = 0;
    auto plot = [&](QCPGraph* g, const std::vector<double>& values, const StepBlocks& blocks) {
        auto r = reduceSteps(series_.keys, values, range.lower, range.upper, columns, &blocks);
        g->setData(
            QVector<double>(r.keys.begin(), r.keys.end()), QVector<double>(r.values.begin(), r.values.end()), true);
        for (double v : r.values)
            top = std::max(top, v);
    };
    for (int b = 0; b < TimelineSeries::kBands; ++b)
        if (series_.present[static_cast<std::size_t>(b)])
            plot(bands_[static_cast<std::size_t>(b)], series_.tops[static_cast<std::size_t>(b)],
                series_.blocks[static_cast<std::size_t>(b)]);
    if (reservedGraph_->visible())
        plot(reservedGraph_, reserved_, reservedBlocks_);
    if (predictedGraph_->visible()) {
        auto r = reduceSteps(predictedSeries_.keys, predictedTotal_, range.lower, range.upper, columns, &predictedBlocks_);
        predictedGraph_->setData(
            QVector<double>(r.keys.begin(), r.keys.end()), QVector<double>(r.values.begin(), r.values.end()), true);
        for (double v : r.values)
            top = std::max(top, v);
    }
    bool highlighting = !highlighted_.isEmpty() && highlightSeries_.size() == series_.keys.size();
    highlight_->setVisible(highlighting);
    if (highlighting) {
        plot(highlight_, highlightSeries_, highlightBlocks_);
        highlight_->setFillBase(residentBytes());
    }
    if (autoValueRange_) {
        double bottom = weightsHidden_ && weightsTop_ < top ? weightsTop_ : 0;
        // Phase names sit at the top of the plot: more headroom keeps the peak label below them.
        double headroom = phaseRects_.empty() ? 1.12 : 1.25;
        yAxis->setRange(bottom, top > bottom ? bottom + (top - bottom) * headroom : bottom + 1024);
    }
    reducing_ = false;
}

int TimelinePlot::plottedPointCount() const
{
    int n = 0;
    for (auto* g : bands_)
        if (g->visible())
            n += g->dataCount();
    return n;
}

void TimelinePlot::highlightModule(const QString& path)
{
    if (path == highlighted_)
        return;
    highlighted_ = path;
    highlightSeries_.clear();
    if (!path.isEmpty() && report_ && report_->trace)
        highlightSeries_ = moduleLiveSeries(*report_->trace, path.toStdString(), residentBytes());
    highlightBlocks_ = StepBlocks::build(highlightSeries_);
    highlight_->setName(path.isEmpty() ? tr("selected module") : path);
    if (path.isEmpty())
        highlight_->removeFromLegend();
    else
        highlight_->addToLegend();
    fitLegend();
    reduceToView();
    replot(rpQueuedReplot);
}

QString TimelinePlot::describeAt(double key, double bytes, QString* modulePath) const
{
    if (!report_ || series_.keys.empty() || key < series_.firstKey() || key > series_.lastKey() || bytes < 0)
        return {};
    auto p = series_.pointAt(key);
    int band = -1;
    for (int b : TimelineSeries::kStackOrder)
        if (band < 0 && series_.present[static_cast<std::size_t>(b)]
            && bytes <= series_.tops[static_cast<std::size_t>(b)][p])
            band = b;
    if (band < 0) { // above the stack: the phase of a training step, whose label may not fit its band
        const Phase* phase = p > 0 ? phaseOfEvent(p - 1) : nullptr;
        if (!phase)
            return {};
        return tr("<b>%1</b><br>%2 to %3 ms, peak %4")
            .arg(QString::fromStdString(phase->name).toHtmlEscaped())
            .arg(static_cast<double>(phase->start_ns) / 1e6, 0, 'f', 3)
            .arg(static_cast<double>(phase->end_ns) / 1e6, 0, 'f', 3)
            .arg(bytesText(static_cast<double>(phase->peak_bytes)));
    }
    if (report_->snapshot)
        return describeSnapshotAt(band, p, bytes);
    double bottom = series_.bottomOf(band, p);
    auto ledger = static_cast<Ledger>(band);
    double constant = ledger == Ledger::Weights ? static_cast<double>(report_->weight_bytes)
        : ledger == Ledger::Inputs              ? static_cast<double>(report_->input_bytes)
        : ledger == Ledger::OptimizerState      ? static_cast<double>(report_->optimizer_state_bytes)
                                                : 0;
    if (bytes <= bottom + constant) {
        if (ledger == Ledger::Weights)
            return tr("<b>%1</b> weights<br>parameters and buffers of %2, resident as %3 for the whole run")
                .arg(bytesText(constant), QString::fromStdString(report_->model.type).toHtmlEscaped(),
                    QString::fromStdString(report_->run.dtype));
        if (ledger == Ledger::OptimizerState)
            return tr("<b>%1</b> optimizer state<br>the state of %2 (momentum, moments), resident for the whole "
                      "step like the weights")
                .arg(bytesText(constant), QString::fromStdString(report_->run.optimizer).toHtmlEscaped());
        return tr("<b>%1</b> inputs<br>the model's input tensors, alive for the whole run").arg(bytesText(constant));
    }
    if (p == 0 || !report_->trace)
        return {};
    // Live allocations of this ledger, stacked oldest first, as the band is drawn.
    const auto& t = *report_->trace;
    auto event = p - 1;
    double level = bottom + constant;
    for (std::size_t a = 0; a <= event; ++a) {
        if (t.action[a] != Action::Alloc || t.ledger[a] != ledger)
            continue;
        auto partner = t.partner[a];
        if (partner != kNoPartner && static_cast<std::size_t>(partner) <= event)
            continue;
        level += static_cast<double>(t.bytes[a]);
        if (bytes > level)
            continue;
        auto where = QString::fromStdString(t.strings.at(t.where[a]));
        if (modulePath)
            *modulePath = where.isEmpty() ? QStringLiteral("") : where; // the root: empty but not null
        auto outer = QString::fromStdString(t.strings.at(t.outer_op[a]));
        auto inner = t.inner_op[a] && t.inner_op[a] != t.outer_op[a]
            ? QString::fromStdString(t.strings.at(t.inner_op[a]))
            : QString();
        // In the backward the outer op is the autograd node ("ConvolutionBackward0"); the module is its forward's.
        const Phase* phase = phaseOfEvent(a);
        QString opLine;
        if (phase && phase->name == "backward" && !outer.isEmpty())
            opLine = tr("autograd node: %1").arg(outer.toHtmlEscaped())
                + (inner.isEmpty() ? QString() : tr("<br>op: %1").arg(inner.toHtmlEscaped()));
        else {
            auto op = inner.isEmpty() ? outer : outer + QStringLiteral(" → ") + inner;
            opLine = tr("op: %1").arg((op.isEmpty() ? tr("(outside any op)") : op).toHtmlEscaped());
        }
        if (phase)
            opLine += tr("<br>phase: %1").arg(QString::fromStdString(phase->name).toHtmlEscaped());
        QString until
            = partner == kNoPartner ? tr("the end of the run") : keyText(*report_, static_cast<std::size_t>(partner));
        return tr("<b>%1</b> %2<br>module: %3<br>%4<br>alive from %5<br>until %6")
            .arg(bytesText(static_cast<double>(t.bytes[a])), QString::fromUtf8(ledgerLabel(ledger)),
                (where.isEmpty() ? tr("(model)") : where).toHtmlEscaped(), opLine, keyText(*report_, a), until);
    }
    return {};
}

QString TimelinePlot::describeSnapshotAt(int band, std::size_t p, double bytes) const
{
    double bottom = series_.bottomOf(band, p);
    double top = series_.tops[static_cast<std::size_t>(band)][p];
    if (band == TimelineSeries::kAliveBefore)
        return tr("<b>%1</b> alive before the trace<br>blocks allocated before the trace's first entry (it is a "
                  "ring buffer); the band shrinks as the trace frees them")
            .arg(bytesText(top - bottom));
    if (p == 0 || !report_->trace)
        return {};
    // Live allocations of this band, stacked oldest first.
    const auto& t = *report_->trace;
    auto event = static_cast<std::int64_t>(p) - 1;
    bool pendingBand = band == TimelineSeries::kPendingFree;
    double level = bottom;
    for (std::int64_t a = 0; a <= event; ++a) {
        auto i = static_cast<std::size_t>(a);
        if (t.action[i] != Action::Alloc || (device_ != TimelineSeries::kAllDevices && t.device[i] != device_))
            continue;
        auto partner = t.partner[i];
        if (partner != kNoPartner && partner <= event)
            continue;
        auto requested = i < series_.free_requested_at.size() ? series_.free_requested_at[i] : -1;
        bool pending = requested >= 0 && requested <= event;
        if (pending != pendingBand)
            continue;
        level += static_cast<double>(t.bytes[i]);
        if (bytes > level)
            continue;
        auto where = QString::fromStdString(t.strings.at(t.where[i]));
        QString until
            = partner == kNoPartner ? tr("the end of the trace") : keyText(*report_, static_cast<std::size_t>(partner));
        hoveredEvent_ = static_cast<std::int64_t>(i);
        auto stack = i < t.stack.size() ? stackTooltipHtml(t, t.stack[i]) : QString();
        if (!stack.isEmpty())
            stack = tr("<br><br>call stack, innermost first:<br>") + stack;
        return tr("<b>%1</b> %2 on cuda:%3<br>where: %4<br>address: 0x%5<br>allocated at %6<br>%7%8")
            .arg(bytesText(static_cast<double>(t.bytes[i])), pendingBand ? tr("pending free") : tr("allocated"),
                QString::number(static_cast<int>(t.device[i])),
                (where.isEmpty() ? tr("(no stack)") : where).toHtmlEscaped(), QString::number(t.address[i], 16),
                keyText(*report_, i),
                pending ? tr("free requested at %1<br>").arg(keyText(*report_, static_cast<std::size_t>(requested)))
                        : QString(),
                tr("freed at %1").arg(until))
            + stack;
    }
    return {};
}

void TimelinePlot::showHover(const QPoint& pos)
{
    double key = xAxis->pixelToCoord(pos.x());
    double bytes = yAxis->pixelToCoord(pos.y());
    bool inside = axisRect()->rect().contains(pos);
    cursorLine_->setVisible(inside);
    if (inside) {
        cursorLine_->point1->setCoords(key, 0);
        cursorLine_->point2->setCoords(key, 1);
    }
    layer(QStringLiteral("cursor"))->replot();
    hoveredEvent_ = -1;
    auto text = inside ? describeAt(key, bytes) : QString();
    if (text.isEmpty())
        QToolTip::hideText();
    else
        QToolTip::showText(mapToGlobal(pos), text, this);
}

void TimelinePlot::mousePressEvent(QMouseEvent* event)
{
    pressPos_ = event->pos();
    if (event->button() == Qt::LeftButton && (rangeMode_ || (event->modifiers() & Qt::ControlModifier))
        && report_ && series_.keys.size() > 1 && axisRect()->rect().contains(event->pos())) {
        rangeDragging_ = true;
        rangeAnchor_ = xAxis->pixelToCoord(event->pos().x());
        return; // no pan while a range is drawn
    }
    setSelectionRectMode(event->modifiers() & Qt::ShiftModifier ? QCP::srmZoom : QCP::srmNone);
    QCustomPlot::mousePressEvent(event);
}

void TimelinePlot::mouseMoveEvent(QMouseEvent* event)
{
    if (rangeDragging_) {
        double key = xAxis->pixelToCoord(event->pos().x());
        rangeRect_->topLeft->setCoords(std::min(key, rangeAnchor_), 0);
        rangeRect_->bottomRight->setCoords(std::max(key, rangeAnchor_), 1);
        rangeRect_->setVisible(true);
        rangeLabel_->setVisible(false);
        replot(rpQueuedReplot);
        return;
    }
    QCustomPlot::mouseMoveEvent(event);
    if (event->buttons() == Qt::NoButton)
        showHover(event->pos());
}

void TimelinePlot::mouseReleaseEvent(QMouseEvent* event)
{
    if (rangeDragging_) {
        rangeDragging_ = false;
        if (event->button() == Qt::LeftButton && (event->pos() - pressPos_).manhattanLength() > 3) {
            double key = xAxis->pixelToCoord(event->pos().x());
            auto [first, end] = eventsBetween(std::min(key, rangeAnchor_), std::max(key, rangeAnchor_));
            setRange(first, end);
        } else
            updateRangeShade(); // a click: the range stays as it was
        return;
    }
    QCustomPlot::mouseReleaseEvent(event);
    if (event->button() != Qt::LeftButton || (event->pos() - pressPos_).manhattanLength() > 3)
        return;
    if (report_ && report_->snapshot && !series_.keys.empty() && axisRect()->rect().contains(event->pos()))
        emit momentClicked(series_.pointAt(xAxis->pixelToCoord(event->pos().x())));
    QString path;
    hoveredEvent_ = -1;
    describeAt(xAxis->pixelToCoord(event->pos().x()), yAxis->pixelToCoord(event->pos().y()), &path);
    if (hoveredEvent_ >= 0)
        emit allocationClicked(hoveredEvent_);
    if (!path.isNull())
        emit moduleClicked(path);
}

void TimelinePlot::mouseDoubleClickEvent(QMouseEvent* event)
{
    QCustomPlot::mouseDoubleClickEvent(event);
    resetZoom();
}

void TimelinePlot::keyPressEvent(QKeyEvent* event)
{
    if (event->key() == Qt::Key_Escape && hasRange()) {
        clearRange();
        event->accept();
        return;
    }
    QCustomPlot::keyPressEvent(event);
}

void TimelinePlot::setRangeMode(bool on)
{
    rangeMode_ = on;
    setCursor(on ? Qt::IBeamCursor : Qt::ArrowCursor);
}

void TimelinePlot::setRange(std::uint32_t first, std::uint32_t end)
{
    const auto events = static_cast<std::uint32_t>(series_.keys.empty() ? 0 : series_.keys.size() - 1);
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
    const auto& k = series_.keys; // k[0]: the start; k[i + 1]: event i
    if (k.size() < 2 || b < a)
        return {0, 0};
    auto first = std::lower_bound(k.begin() + 1, k.end(), a) - (k.begin() + 1);
    auto end = std::upper_bound(k.begin() + 1, k.end(), b) - (k.begin() + 1);
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
    const bool show = hasRange() && series_.keys.size() > rangeEnd_;
    rangeRect_->setVisible(show);
    rangeLabel_->setVisible(show);
    if (show) {
        double a = series_.keys[rangeFirst_ + 1], b = series_.keys[rangeEnd_];
        rangeRect_->topLeft->setCoords(a, 0);
        rangeRect_->bottomRight->setCoords(b, 1);
        rangeLabel_->position->setCoords((a + b) / 2, 1);
        rangeLabel_->setText(tr("range · Esc clears"));
    }
    replot(rpQueuedReplot);
}

void TimelinePlot::leaveEvent(QEvent* event)
{
    QCustomPlot::leaveEvent(event);
    cursorLine_->setVisible(false);
    layer(QStringLiteral("cursor"))->replot();
}

void TimelinePlot::changeEvent(QEvent* event)
{
    QCustomPlot::changeEvent(event);
    if (event->type() == QEvent::PaletteChange)
        applyPalette();
}

void TimelinePlot::resizeEvent(QResizeEvent* event)
{
    QCustomPlot::resizeEvent(event);
    fitLegend();
    reduceToView();
}

double TimelinePlot::residentBytes() const
{
    return report_ ? static_cast<double>(report_->weight_bytes + report_->optimizer_state_bytes + report_->input_bytes)
                   : 0;
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

void TimelinePlot::fitLegend()
{
    // As many columns as the width holds: a training step's eight entries wrap to a second row on a laptop
    // instead of being cut.
    std::vector<int> widths; // the grid's cells include empty ones after a wrap: count the items only
    for (int i = 0; i < legend->itemCount(); ++i)
        if (auto* item = legend->item(i))
            widths.push_back(item->minimumOuterSizeHint().width());
    const int count = static_cast<int>(widths.size());
    if (count == 0)
        return;
    const int available = width() - legend->margins().left() - legend->margins().right() - 8;
    int columns = count;
    for (; columns > 1; --columns) {
        int total = legend->columnSpacing() * (columns - 1);
        for (int c = 0; c < columns; ++c) {
            int widest = 0;
            for (int i = c; i < count; i += columns)
                widest = std::max(widest, widths[static_cast<std::size_t>(i)]);
            total += widest;
        }
        if (total <= available)
            break;
    }
    if (legend->wrap() != columns) {
        legend->setWrap(columns);
        legend->setFillOrder(QCPLegend::foColumnsFirst, true);
    }
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
    if (!report_ || series_.keys.empty())
        return;
    // A training step's phases tile the run; a snapshot's record_function ranges (external_annotations) are bands
    // where the file has them. On the op axis a band spans its events' keys: from its first event to the first
    // event after it.
    const auto events = series_.keys.size() - 1;
    auto eventKey = [&](std::uint32_t e) { return e < events ? series_.keys[e + 1] : series_.lastKey(); };
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
            start = std::min(start, series_.firstKey());
        if (i + 1 == phases.size() && tiled)
            end = std::max(end, series_.lastKey());
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

void TimelinePlot::applyPalette()
{
    auto pal = palette();
    auto text = pal.color(QPalette::WindowText);
    setBackground(pal.color(QPalette::Base));
    for (auto* axis : {xAxis, yAxis}) {
        axis->setBasePen(QPen(text, 1));
        axis->setTickPen(QPen(text, 1));
        axis->setSubTickPen(QPen(text, 1));
        axis->setTickLabelColor(text);
        axis->setLabelColor(text);
        auto grid = text;
        grid.setAlpha(40);
        axis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
    }
    auto legendBack = pal.color(QPalette::Base);
    legendBack.setAlpha(220);
    legend->setBrush(legendBack);
    legend->setTextColor(text);
    legend->setBorderPen(QPen(pal.color(QPalette::Mid)));
    peakTracer_->setPen(QPen(text, 1.5));
    peakTracer_->setBrush(pal.color(QPalette::Base));
    peakLabel_->setColor(text);
    peakLabel_->setBrush(legendBack);
    emptyLabel_->setColor(text);
    cursorLine_->setPen(QPen(pal.color(QPalette::Highlight), 1, Qt::DashLine));
    momentLine_->setPen(QPen(pal.color(QPalette::Highlight), 2));
    auto rangeFill = pal.color(QPalette::Highlight);
    rangeFill.setAlpha(45);
    rangeRect_->setBrush(rangeFill);
    rangeRect_->setPen(QPen(pal.color(QPalette::Highlight), 1));
    rangeLabel_->setColor(pal.color(QPalette::HighlightedText));
    rangeLabel_->setBrush(pal.color(QPalette::Highlight));
    auto shade = pal.color(QPalette::Highlight);
    highlight_->setPen(QPen(shade.darker(140), 1));
    shade.setAlpha(150);
    highlight_->setBrush(QBrush(shade, Qt::Dense4Pattern));
    // Phases: every other band a shade darker and a faint line where each begins; light on any theme.
    auto divider = text;
    divider.setAlpha(70);
    for (auto* line : phaseDividers_)
        line->setPen(QPen(divider, 1, Qt::DashLine));
    for (std::size_t i = 0; i < phaseRects_.size(); ++i) {
        auto band = text;
        band.setAlpha(i % 2 ? 6 : 20);
        phaseRects_[i]->setPen(Qt::NoPen);
        phaseRects_[i]->setBrush(band);
        auto name = text;
        name.setAlpha(170);
        phaseLabels_[i]->setColor(name);
        phaseLabels_[i]->setFont(QFont(font().family(), std::max(7, font().pointSize() - 1)));
    }
    replot(rpQueuedReplot);
}

} // namespace memledger

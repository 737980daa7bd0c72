#include "timeline_plot.h"
#include "timeline_text.h"

#include "byte_axis_ticker.h"
#include "ledger_colors.h"
#include "snapshot/snapshot.h"
#include "stack_pane.h"
#include "step_area_graph.h"
#include "support/format.h"

#include <QToolTip>

#include <algorithm>

namespace memledger {

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
        auto colour = b == TimelineSeries::kPendingFree ? pendingFreeColor() : ledgerColor(static_cast<Ledger>(b));
        g->setName(QString::fromUtf8(TimelineSeries::bandName(b)));
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
    highlightSeries_ = {};
    highlight_->setName(tr("selected module"));
    highlight_->removeFromLegend();
    moment_ = report_ && report_->trace ? report_->trace->size() : 0;
    reserved_ = {};
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

void TimelinePlot::setDevice(int device)
{
    if (device == device_)
        return;
    device_ = device;
    rebuildSeries();
}

void TimelinePlot::setAxis(TimelineAxis axis)
{
    axis_ = axis;
    xAxis->setLabel(axis == TimelineAxis::Milliseconds ? tr("time (ms)") : tr("op sequence"));
    rebuildSeries();
}

void TimelinePlot::rebuildSeries()
{
    series_ = report_ ? TimelineSeries::shared(*report_, axis_, device_) : std::make_shared<const TimelineSeries>();
    hoverIndexes_.clear();
    for (int b = 0; b < TimelineSeries::kBands; ++b) {
        auto* g = bands_[static_cast<std::size_t>(b)];
        g->setVisible(series_->present[static_cast<std::size_t>(b)]);
        g->setName(QString::fromUtf8(TimelineSeries::bandName(b))); // showEndStateOnly() renames one
        if (g->visible())
            g->addToLegend();
        else
            g->removeFromLegend();
    }
    if (!highlighted_.isEmpty() && report_ && report_->trace) {
        highlightSeries_ = StepValues(moduleLiveSeries(*report_->trace, highlighted_.toStdString(), residentBytes()));
    }
    emptyLabel_->setVisible(report_ && (!report_->trace || report_->trace->size() == 0));
    if (report_)
        xAxis->setLabel(QString::fromStdString(timelineAxisLabel(*report_, axis_)));
    showEndStateOnly();
    updateRangeShade();
    const auto& weights = series_->tops[static_cast<std::size_t>(Ledger::Weights)];
    weightsTop_
        = series_->present[static_cast<std::size_t>(Ledger::Weights)] && !weights.empty() ? weights.extremes().low : 0;
    if (reserved_.size() != series_->keys.size()) {
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
    if (!report_->trace)
        return true;
    const auto& a = report_->trace->action;
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
    const auto& total = series_->tops[TimelineSeries::kPendingFree];
    const double bytes = total.empty() ? 0 : total.back();
    std::int64_t blocks = 0;
    for (const auto& seg : report_->snapshot->segments)
        if (device_ == TimelineSeries::kAllDevices || seg.device == device_)
            for (const auto& b : seg.blocks)
                blocks += b.state == BlockState::ActiveAllocated ? 1 : 0;
    endStateRect_->topLeft->setCoords(0, bytes);
    endStateRect_->bottomRight->setCoords(1, 0);
    endStateRect_->setBrush(aliveBeforeColor());
    endStateRect_->setPen(QPen(aliveBeforeColor().darker(130), 1));
    bands_[static_cast<std::size_t>(Ledger::Resident)]->setName(tr("allocated at the end"));
    xAxis->setLabel(tr("the state at the end (the snapshot has no trace)"));
    emptyLabel_->setText(tr("The snapshot has no trace: its segments hold %1 in %2 blocks at the end")
                             .arg(bytesText(bytes))
                             .arg(blocks));
    emptyLabel_->setBrush(palette().color(QPalette::Base));
    emptyLabel_->setPadding(QMargins(6, 3, 6, 3));
    emptyLabel_->setVisible(true);
}

void TimelinePlot::clampKeyRange()
{
    // No panning before the first event or after the last: there is nothing there, not even negative time.
    double lo = series_->firstKey(), hi = series_->lastKey();
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
    double lo = series_->firstKey(), hi = series_->lastKey();
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
    const auto shared = StepColumns::of(series_->keys, range.lower, range.upper, columns); // the bands' columns
    auto plot = [&](QCPGraph* g, const StepColumns& in, const StepValues& values) {
        auto r = reduceSteps(in, values);
        g->setData(
            QVector<double>(r.keys.begin(), r.keys.end()), QVector<double>(r.values.begin(), r.values.end()), true);
        for (double v : r.values)
            top = std::max(top, v);
    };
    for (int b = 0; b < TimelineSeries::kBands; ++b)
        if (series_->present[static_cast<std::size_t>(b)])
            plot(bands_[static_cast<std::size_t>(b)], shared, series_->tops[static_cast<std::size_t>(b)]);
    if (reservedGraph_->visible())
        plot(reservedGraph_, shared, reserved_);
    if (predictedGraph_->visible())
        plot(predictedGraph_, StepColumns::of(predictedSeries_.keys, range.lower, range.upper, columns), predictedTotal_);
    bool highlighting = !highlighted_.isEmpty() && highlightSeries_.size() == series_->keys.size();
    highlight_->setVisible(highlighting);
    if (highlighting) {
        plot(highlight_, shared, highlightSeries_);
        highlight_->setFillBase(residentBytes());
    }
    if (autoValueRange_) {
        double bottom = weightsHidden_ && weightsTop_ < top ? weightsTop_ : 0;
        // Phase names sit at the top of the plot: more headroom keeps the peak label below them. On a short plot
        // the headroom is counted in pixels, so that the label fits above the peak instead of covering the curve.
        double headroom = phaseRects_.empty() ? 1.12 : 1.25;
        const double labelPixels = QFontMetricsF(peakLabel_->font()).height() + 12;
        const double needed = phaseRects_.empty() ? labelPixels : 2 * labelPixels;
        const double height = axisRect()->height();
        if (height > 1.5 * needed)
            headroom = std::max(headroom, height / (height - needed));
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
    highlightSeries_ = {};
    if (!path.isEmpty() && report_ && report_->trace)
        highlightSeries_ = StepValues(moduleLiveSeries(*report_->trace, path.toStdString(), residentBytes()));
    highlight_->setName(path.isEmpty() ? tr("selected module") : path);
    if (path.isEmpty())
        highlight_->removeFromLegend();
    else
        highlight_->addToLegend();
    fitLegend();
    reduceToView();
    replot(rpQueuedReplot);
}

void TimelinePlot::mousePressEvent(QMouseEvent* event)
{
    pressPos_ = event->pos();
    if (event->button() == Qt::LeftButton && (rangeMode_ || (event->modifiers() & Qt::ControlModifier))
        && report_ && series_->keys.size() > 1 && axisRect()->rect().contains(event->pos())) {
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
    if (report_ && report_->snapshot && !series_->keys.empty() && axisRect()->rect().contains(event->pos()))
        emit momentClicked(series_->pointAt(xAxis->pixelToCoord(event->pos().x())));
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

void TimelinePlot::applyPalette()
{
    auto pal = palette();
    auto text = pal.color(QPalette::WindowText);
    applyPlotPalette(this, pal);
    auto legendBack = pal.color(QPalette::Base);
    legendBack.setAlpha(220);
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

TimelineView TimelinePlot::view() const
{
    TimelineView v;
    v.axis = axis_;
    v.weights_hidden = weightsHidden_;
    v.module = highlighted_;
    v.key_lower = xAxis->range().lower;
    v.key_upper = xAxis->range().upper;
    return v;
}

} // namespace memledger

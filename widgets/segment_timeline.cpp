#include "segment_timeline.h"

#include "byte_axis_ticker.h"
#include "ledger_colors.h"
#include "step_area_graph.h"

#include <QLabel>
#include <QVBoxLayout>

#include <qcustomplot.h>

namespace memledger {

SegmentTimeline::SegmentTimeline(QWidget* parent)
    : QWidget(parent)
    , plot_(new QCustomPlot)
    , cause_(new QLabel)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(plot_, 1);
    layout->addWidget(cause_);
    cause_->setWordWrap(true);
    cause_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    cause_->setContentsMargins(6, 2, 6, 4);

    plot_->setMinimumHeight(160);
    plot_->setNoAntialiasingOnDrag(true);
    plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    plot_->axisRect()->setRangeDrag(Qt::Horizontal);
    plot_->axisRect()->setRangeZoom(Qt::Horizontal);
    fragmentation_ = new StepAreaGraph(plot_->xAxis, plot_->yAxis);
    fragmentation_->setName(tr("fragmentation (reserved − allocated)"));
    auto frag = fragmentationColor();
    fragmentation_->setPen(QPen(frag, 1));
    frag.setAlpha(90);
    fragmentation_->setBrush(frag);
    auto line = [this](const QString& name, const QColor& colour, Qt::PenStyle style) {
        auto* g = new QCPGraph(plot_->xAxis, plot_->yAxis);
        g->setName(name);
        g->setLineStyle(QCPGraph::lsStepLeft);
        g->setPen(QPen(colour, 1.5, style));
        g->setAdaptiveSampling(false);
        return g;
    };
    reserved_ = line(tr("reserved"), reservedColor(), Qt::SolidLine);
    active_ = line(tr("active (allocated + pending free)"), pendingFreeColor().darker(130), Qt::DashLine);
    allocated_ = line(tr("allocated"), ledgerColor(Ledger::Activations).darker(120), Qt::SolidLine);
    for (auto* g : {static_cast<QCPGraph*>(fragmentation_), reserved_, active_, allocated_})
        g->setAntialiased(false);

    plot_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new ByteAxisTicker));
    plot_->yAxis->setLabel(tr("bytes"));
    plot_->xAxis->setLabel(tr("time (ms)"));
    plot_->legend->setVisible(true);
    plot_->legend->setWrap(2); // two entries a row, so the plot can be narrow beside the segment map
    plot_->legend->setFillOrder(QCPLegend::foColumnsFirst, true);
    plot_->plotLayout()->insertRow(0);
    plot_->plotLayout()->addElement(0, 0, plot_->legend);
    plot_->plotLayout()->setRowStretchFactor(0, 0.001);
    plot_->legend->setMargins(QMargins(4, 2, 4, 2));
    connect(plot_->xAxis, QOverload<const QCPRange&>::of(&QCPAxis::rangeChanged), this, [this] { reduceToView(); });
    connect(plot_, &QCustomPlot::mouseDoubleClick, this, [this] { resetZoom(); });
    applyPalette();
}

void SegmentTimeline::setReport(std::shared_ptr<const Report> report)
{
    report_ = std::move(report);
    device_ = TimelineSeries::kAllDevices;
    rebuild();
}

void SegmentTimeline::setDevice(int device)
{
    if (device == device_)
        return;
    device_ = device;
    rebuild();
}

QString SegmentTimeline::causeText() const
{
    return cause_->text();
}

void SegmentTimeline::rebuild()
{
    history_ = report_ ? SegmentHistory::build(*report_, TimelineAxis::Milliseconds, device_) : SegmentHistory {};
    bool simulated = history_.simulated;
    if (report_) // a trace without timestamps is laid out in order
        plot_->xAxis->setLabel(QString::fromStdString(timelineAxisLabel(*report_, TimelineAxis::Milliseconds)));
    reserved_->setName(simulated ? tr("reserved (simulated)") : tr("reserved"));
    fragmentation_->setName(
        simulated ? tr("fragmentation (simulated reserved − allocated)") : tr("fragmentation (reserved − allocated)"));
    bool snapshot = report_ && report_->snapshot;
    active_->setVisible(snapshot);
    if (snapshot)
        active_->addToLegend();
    else
        active_->removeFromLegend();
    allocated_->setName(snapshot ? tr("allocated") : tr("live bytes (weights + inputs + run)"));
    cause_->setText(QString::fromStdString(history_.cause));
    cause_->setVisible(!history_.cause.empty());
    resetZoom();
}

void SegmentTimeline::resetZoom()
{
    double lo = history_.keys.empty() ? 0 : history_.keys.front();
    double hi = history_.keys.empty() ? 1 : history_.keys.back();
    if (hi <= lo)
        hi = lo + 1;
    plot_->xAxis->setRange(lo, hi);
    reduceToView();
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

void SegmentTimeline::reduceToView()
{
    if (reducing_)
        return;
    reducing_ = true;
    auto range = plot_->xAxis->range();
    int columns = 2 * std::max(100, plot_->axisRect()->width());
    double top = 0;
    const StepValues* values[] = {&history_.fragmentation, &history_.reserved, &history_.active, &history_.allocated};
    QCPGraph* graphs[] = {fragmentation_, reserved_, active_, allocated_};
    const auto& keys = history_.keys;
    const auto shared = StepColumns::of(keys, range.lower, range.upper, columns); // the four lines'
    for (std::size_t k = 0; k < 4; ++k) {
        if (values[k]->size() != keys.size() || keys.empty()) {
            graphs[k]->data()->clear();
            continue;
        }
        // A snapshot without a trace has one point: draw it as a flat line.
        auto r = keys.size() == 1
            ? reduceSteps(std::vector<double> {keys.front(), keys.front() + 1},
                std::vector<double> {values[k]->front(), values[k]->front()}, range.lower, range.upper, columns)
            : reduceSteps(shared, *values[k]);
        graphs[k]->setData(
            QVector<double>(r.keys.begin(), r.keys.end()), QVector<double>(r.values.begin(), r.values.end()), true);
        for (double v : r.values)
            top = std::max(top, v);
    }
    plot_->yAxis->setRange(0, top > 0 ? top * 1.12 : 1024);
    reducing_ = false;
}

void SegmentTimeline::changeEvent(QEvent* event)
{
    QWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange)
        applyPalette();
}

void SegmentTimeline::applyPalette()
{
    applyPlotPalette(plot_, palette());
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

} // namespace memledger

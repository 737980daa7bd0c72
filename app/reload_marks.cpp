#include "reload_marks.h"

#include "bytes_text.h"
#include "snapshot/snapshot.h"
#include "timeline_plot.h"

namespace memledger {

namespace {

const QColor kMarkColor(90, 90, 90);

QCPItemStraightLine* dashedLine(TimelinePlot* plot)
{
    auto* line = new QCPItemStraightLine(plot);
    line->setPen(QPen(kMarkColor, 1, Qt::DashLine));
    line->setSelectable(false);
    line->setClipToAxisRect(true);
    line->setVisible(false);
    return line;
}

QCPItemText* markLabel(TimelinePlot* plot)
{
    auto* label = new QCPItemText(plot);
    label->setColor(kMarkColor);
    label->setBrush(QBrush(QColor(255, 255, 255, 210)));
    label->setPadding(QMargins(3, 1, 3, 1));
    label->setSelectable(false);
    label->setClipToAxisRect(true);
    label->setVisible(false);
    return label;
}

} // namespace

ReloadMarks::ReloadMarks(TimelinePlot* plot)
    : QObject(plot)
    , plot_(plot)
    , peakLine_(dashedLine(plot))
    , peakLabel_(markLabel(plot))
    , endLine_(dashedLine(plot))
    , endLabel_(markLabel(plot))
{
    connect(plot_, &QCustomPlot::beforeReplot, this, &ReloadMarks::place);
    // After the plot's own afterLayout slot (connected when it was made), which places the current peak's label.
    connect(plot_, &QCustomPlot::afterLayout, this, &ReloadMarks::avoidPeakLabel);
}

void ReloadMarks::show(const LoadFigures& previous)
{
    previous_ = previous;
    place();
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

void ReloadMarks::clear()
{
    previous_.reset();
    place();
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

bool ReloadMarks::peakShown() const
{
    return peakLine_->visible();
}

bool ReloadMarks::endShown() const
{
    return endLine_->visible();
}

double ReloadMarks::endKey() const
{
    return endLine_->point1->key();
}

double ReloadMarks::peakValue() const
{
    return peakLine_->point1->value();
}

QRectF ReloadMarks::peakLabelRect() const
{
    if (!peakLabel_->visible())
        return {};
    return QRectF(peakLabel_->topLeft->pixelPosition(), peakLabel_->bottomRight->pixelPosition()).normalized();
}

void ReloadMarks::avoidPeakLabel()
{
    if (!peakLabel_->visible())
        return;
    // The previous peak's label sits on its dashed line at the left, above it; where that covers the current
    // peak's label (both peaks near the same height, the current one near the left), it moves to the right, then
    // below the line.
    const auto current = plot_->peakLabelRect();
    const double y = peakLine_->point1->value();
    const struct {
        double x;
        Qt::Alignment align;
    } spots[] = {{0.01, Qt::AlignLeft | Qt::AlignBottom}, {0.99, Qt::AlignRight | Qt::AlignBottom},
        {0.01, Qt::AlignLeft | Qt::AlignTop}, {0.99, Qt::AlignRight | Qt::AlignTop}};
    for (const auto& spot : spots) {
        peakLabel_->position->setCoords(spot.x, y);
        peakLabel_->setPositionAlignment(spot.align);
        if (current.isEmpty() || !peakLabelRect().intersects(current))
            return;
    }
}

void ReloadMarks::place()
{
    const auto& report = plot_->report();
    const auto& series = plot_->series();
    const bool any = previous_ && report && !series.keys.empty();
    peakLine_->setVisible(any && previous_->plotted_peak > 0);
    peakLabel_->setVisible(peakLine_->visible());
    if (peakLine_->visible()) {
        const double y = previous_->plotted_peak;
        peakLine_->point1->setCoords(series.firstKey(), y);
        peakLine_->point2->setCoords(series.lastKey(), y);
        peakLabel_->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
        peakLabel_->position->setTypeY(QCPItemPosition::ptPlotCoords);
        peakLabel_->position->setCoords(0.01, y);
        peakLabel_->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
        peakLabel_->setText(tr("previous load's peak %1").arg(bytesText(previous_->peak_bytes)));
    }
    // Where the previous load ended: on the file's clock when both loads have one (a snapshot's ring buffer may
    // have dropped its first events since), else after as many events as it had.
    double key = 0;
    bool end = false;
    if (any && previous_->events > 0) {
        const auto points = series.keys.size();
        if (plot_->axis() == TimelineAxis::Milliseconds && report->snapshot && report->snapshot->trace_has_time
            && previous_->end_us >= 0) {
            const auto ns = (previous_->end_us - report->snapshot->trace_start_us) * 1000;
            key = static_cast<double>(ns) / 1e6;
        } else if (static_cast<std::size_t>(previous_->events) < points) {
            key = series.keys[static_cast<std::size_t>(previous_->events)];
        } else {
            key = series.lastKey();
        }
        end = key > series.firstKey() && key < series.lastKey(); // the file reaches past it
    }
    endLine_->setVisible(end);
    endLabel_->setVisible(end);
    if (end) {
        endLine_->point1->setCoords(key, 0);
        endLine_->point2->setCoords(key, 1);
        endLabel_->position->setTypeX(QCPItemPosition::ptPlotCoords);
        endLabel_->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        endLabel_->position->setCoords(key, 0.02);
        endLabel_->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        endLabel_->setText(
            tr("\u2190 load of %1 \u00b7 new \u2192").arg(previous_->loaded_at.toString(QStringLiteral("HH:mm:ss"))));
    }
}

} // namespace memledger

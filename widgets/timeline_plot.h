#pragma once
#include "timeline_png.h"
#include "analysis/live_index.h"
#include "analysis/timeline_series.h"

#include <qcustomplot.h>

#include <map>
#include <memory>

namespace memledger {

class StepAreaGraph;

// Live bytes over the run, stacked by ledger, with the peak marked; a training step's phases (forward, loss,
// backward, optimizer) as light bands behind the stack, named at the top. Wheel zooms, drag pans, shift+drag
// zooms to a box, double-click resets. Hovering names the allocation under the cursor; a click selects
// its module (moduleClicked) and, on a snapshot, the moment (momentClicked). The step series is built once
// per report and reduced per pixel column whenever the visible range changes.
class TimelinePlot : public QCustomPlot {
    Q_OBJECT
public:
    explicit TimelinePlot(QWidget* parent = nullptr);

    void setReport(std::shared_ptr<const Report> report);
    const std::shared_ptr<const Report>& report() const { return report_; }
    void setAxis(TimelineAxis axis);
    TimelineAxis axis() const { return axis_; }
    // A snapshot's events on one device (TimelineSeries::kAllDevices: all).
    void setDevice(int device);
    int device() const { return device_; }
    // A line of reserved bytes per point of the series (empty: none), e.g. "reserved (simulated GPU)".
    void setReservedLine(StepValues values, const QString& name);
    bool hasReservedLine() const { return !reserved_.empty(); }
    // A predicted step drawn as a line over the recorded one (the checkpointing what-if); nullptr removes it.
    void setPredictedReport(std::shared_ptr<const Report> predicted, const QString& name);
    bool hasPredictedLine() const { return predicted_ != nullptr; }
    double predictedPeak() const { return predictedSeries_.peak_value; }
    // Out-of-memory events of a snapshot, as vertical lines with a label.
    int oomMarkerCount() const { return static_cast<int>(oomLines_.size()); }
    QString oomMarkerText(int i) const;
    const TimelineSeries& series() const { return *series_; }
    bool weightsHidden() const { return weightsHidden_; }
    // What the plot shows now (axis, weights hidden, module, zoom): an exported PNG shows the same.
    TimelineView view() const;
    // Where the peak label is drawn, in widget pixels (empty when there is no peak).
    QRectF peakLabelRect() const;
    bool momentMarkerVisible() const;
    QString highlightedModule() const { return highlighted_; }
    // A snapshot without allocations in its trace: the plot shows its segments' blocks as the state at the end.
    bool showsEndStateOnly() const;
    QString emptyText() const { return emptyLabel_->visible() ? emptyLabel_->text() : QString(); }
    // The phase bands of a training step (none for inference): name and [start, end) on the current axis.
    int phaseBandCount() const { return static_cast<int>(phaseRects_.size()); }
    QString phaseBandName(int i) const;
    QCPRange phaseBandRange(int i) const;
    bool phaseLabelVisible(int i) const; // a label that does not fit its band's width hides

    // A range of the trace's events, chosen on the timeline: ctrl+drag, or a plain drag while the range mode
    // is on, selects it; it is shaded until cleared (clearRange(), Esc). Events [rangeFirst, rangeEnd).
    void setRangeMode(bool on);
    bool rangeMode() const { return rangeMode_; }
    bool hasRange() const { return rangeEnd_ > rangeFirst_; }
    std::uint32_t rangeFirst() const { return rangeFirst_; }
    std::uint32_t rangeEnd() const { return rangeEnd_; }
    void setRange(std::uint32_t first, std::uint32_t end); // emits rangeChanged; first >= end clears
    // The events whose keys lie in [a, b] on the current axis, as [first, end).
    std::pair<std::uint32_t, std::uint32_t> eventsBetween(double a, double b) const;
    // "12.345 – 67.890 ms (events 100 – 1999)", or "events 100 – 1999" without timestamps; "" without a range.
    QString rangeText() const;
    // Where the range's shading is, on the current axis (empty when there is none).
    QCPRange rangeShade() const;

    // What the cursor at (key, bytes) points at, as rich text; empty when nothing is there.
    QString describeAt(double key, double bytes, QString* modulePath = nullptr) const;
    // Points handed to the graphs now, all bands together (after the per-column reduction).
    int plottedPointCount() const;

public slots:
    void highlightModule(const QString& path); // "" clears
    // A snapshot's moment shown elsewhere (the segment map), as a line after that many events; the end hides it.
    void setMomentMarker(std::size_t events);
    void resetZoom();
    // The y axis starts at the top of the weights instead of zero, so that a model whose weights dwarf its
    // activations still shows the run.
    void setWeightsHidden(bool hidden);
    void clearRange();

signals:
    // The range chosen on the timeline changed: events [first, end); first == end == 0 when it was cleared
    // (also when a new report arrives).
    void rangeChanged(std::uint32_t first, std::uint32_t end);
    void moduleClicked(const QString& path);
    // A click on a snapshot's timeline: the moment it points at, as the number of trace events before it.
    void momentClicked(std::size_t events);
    // A click on one of a snapshot's allocations: its alloc event (its stack: widgets/stack_pane.h).
    void allocationClicked(std::int64_t event);

protected:
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;
    void changeEvent(QEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    void rebuildSeries();
    void reduceToView();
    void applyPalette();
    void updatePeakMarker();
    void placePeakLabel();
    void clampKeyRange();
    void showHover(const QPoint& pos);
    void updateOomMarkers();
    QString describeSnapshotAt(int band, std::size_t p, double bytes) const;
    // The hover lookup of a band (core/analysis/live_index.h), made at its first hover for the series shown.
    LiveStackIndex& hoverIndex(int band) const;
    void fitLegend();
    void updatePhaseBands();
    void placePhaseLabels();
    const Phase* phaseOfEvent(std::size_t event) const;
    double residentBytes() const; // weights, optimizer state and inputs: the stack's floor during the run

    std::shared_ptr<const Report> report_;
    TimelineAxis axis_ = TimelineAxis::Milliseconds;
    int device_ = TimelineSeries::kAllDevices;
    StepValues reserved_;
    QCPGraph* reservedGraph_ = nullptr;
    std::vector<QCPItemStraightLine*> oomLines_;
    std::vector<QCPItemText*> oomLabels_;
    std::vector<QCPItemRect*> phaseRects_;
    std::vector<QCPItemText*> phaseLabels_;
    std::vector<QCPItemLine*> phaseDividers_; // where each phase after the first begins
    // Never null; shared with the other views of the report (TimelineSeries::shared).
    std::shared_ptr<const TimelineSeries> series_ = std::make_shared<const TimelineSeries>();
    StepValues highlightSeries_;
    std::shared_ptr<const Report> predicted_;
    TimelineSeries predictedSeries_;
    StepValues predictedTotal_;
    QCPGraph* predictedGraph_ = nullptr;
    void rebuildPredicted();
    QString highlighted_;
    std::array<StepAreaGraph*, TimelineSeries::kBands> bands_ {};
    StepAreaGraph* highlight_ = nullptr;
    QCPItemTracer* peakTracer_ = nullptr;
    QCPItemText* peakLabel_ = nullptr;
    QCPItemStraightLine* cursorLine_ = nullptr;
    QCPItemStraightLine* momentLine_ = nullptr;
    std::size_t moment_ = 0; // events before the moment marker; the marker hides at the end
    void updateMomentMarker();
    QCPItemText* emptyLabel_ = nullptr;
    bool autoValueRange_ = true;
    bool weightsHidden_ = false;
    double weightsTop_ = 0; // the lowest top of the weights band (0 when it has none)
    bool reducing_ = false;
    QPoint pressPos_;
    mutable std::int64_t hoveredEvent_ = -1; // the snapshot allocation describeAt() last named
    mutable std::map<int, std::unique_ptr<LiveStackIndex>> hoverIndexes_; // by band; cleared with the series
    // The range (events) and its shading; a drag that selects one shades from its anchor as it goes.
    void updateRangeShade();
    void showEndStateOnly();
    QCPItemRect* endStateRect_ = nullptr;
    bool rangeMode_ = false;
    bool rangeDragging_ = false;
    double rangeAnchor_ = 0;
    std::uint32_t rangeFirst_ = 0;
    std::uint32_t rangeEnd_ = 0;
    QCPItemRect* rangeRect_ = nullptr;
    QCPItemText* rangeLabel_ = nullptr;
};

} // namespace memledger

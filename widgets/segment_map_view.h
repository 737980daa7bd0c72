#pragma once
#include "report/report.h"
#include "snapshot/snapshot.h"

#include <QAbstractScrollArea>

#include <memory>
#include <vector>

class QCheckBox;
class QLabel;
class QPushButton;

namespace memledger {

// The segments of a CUDA snapshot, one horizontal bar each, with their blocks coloured by state
// (allocated, pending free, inactive). Bars are as wide as log2 of their size by default (linear on request),
// so a 2 MiB segment stays visible beside a 20 GiB one. Painted by hand, only the rows in view: hundreds of
// segments scroll smoothly. The map shows the snapshot at a moment of its trace (segmentsAt), the end by
// default; a model run shows the segments the caching-allocator model leaves at the end of the run.
class SegmentMapView : public QAbstractScrollArea {
    Q_OBJECT
public:
    explicit SegmentMapView(QWidget* parent = nullptr);

    void setReport(std::shared_ptr<const Report> report);
    void setDevice(int device); // TimelineSeries::kAllDevices: all
    void setLogScale(bool log);
    bool logScale() const { return log_; }
    // The state after the first `events` events of the snapshot's trace (clamped to the end); a model run has
    // only its end.
    void setMoment(std::size_t events);
    void showEnd();
    std::size_t moment() const { return moment_; }
    bool atEnd() const;
    QString noteText() const;
    // The segments drawn now, on every device (the map shows those of the chosen device).
    const std::vector<SnapshotSegment>& segments() const { return segments_; }

    int barCount() const { return static_cast<int>(rows_.size()); }
    // Bytes of the blocks drawn in `state`, over all bars; and the bars' total size.
    std::int64_t bytesIn(BlockState state) const;
    std::int64_t barBytes() const;
    // Rectangle of bar `row` in viewport coordinates, and what a tooltip at `pos` (viewport) says.
    QRect barRect(int row) const;
    QString describeAt(const QPoint& pos) const;

    static QColor stateColor(BlockState state);

signals:
    void momentChanged(std::size_t events); // a snapshot's map moved to another moment

protected:
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    bool viewportEvent(QEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void scrollContentsBy(int dx, int dy) override;

private:
    void rebuild();
    std::size_t traceSize() const;
    QString momentText() const;
    void updateScrollBars();
    int barWidth(std::int64_t size) const;

    std::shared_ptr<const Report> report_;
    int device_;
    bool log_ = true;
    std::size_t moment_ = 0;
    bool simulated_ = false; // a model run: segments_ come from the caching-allocator model
    std::vector<SnapshotSegment> segments_;
    std::vector<const SnapshotSegment*> rows_;
    std::int64_t minSize_ = 1, maxSize_ = 1;
    int labelWidth_ = 120;
    int headerHeight_ = 28;
    QString labelOf(const SnapshotSegment& g) const;
    QWidget* header_;
    QLabel* note_;
    QPushButton* endButton_;
    QCheckBox* logBox_;
};

} // namespace memledger

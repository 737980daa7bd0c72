#pragma once
#include "memledger/report.h"
#include "memledger/snapshot.h"

#include <QAbstractScrollArea>

#include <memory>
#include <vector>

class QCheckBox;
class QLabel;

namespace memledger {

// The segments of a CUDA snapshot, one horizontal bar each, with their blocks coloured by state
// (allocated, pending free, inactive). Bars are as wide as log2 of their size by default (linear on request),
// so a 2 MiB segment stays visible beside a 20 GiB one. Painted by hand, only the rows in view: hundreds of
// segments scroll smoothly. The map is the state at the end of the snapshot; earlier moments are not shown.
class SegmentMapView : public QAbstractScrollArea {
    Q_OBJECT
public:
    explicit SegmentMapView(QWidget* parent = nullptr);

    void setReport(std::shared_ptr<const Report> report);
    void setDevice(int device); // TimelineSeries::kAllDevices: all
    void setLogScale(bool log);
    bool logScale() const { return log_; }

    int barCount() const { return static_cast<int>(rows_.size()); }
    // Bytes of the blocks drawn in `state`, over all bars; and the bars' total size.
    std::int64_t bytesIn(BlockState state) const;
    std::int64_t barBytes() const;
    // Rectangle of bar `row` in viewport coordinates, and what a tooltip at `pos` (viewport) says.
    QRect barRect(int row) const;
    QString describeAt(const QPoint& pos) const;

    static QColor stateColor(BlockState state);

protected:
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    bool viewportEvent(QEvent* event) override;
    void scrollContentsBy(int dx, int dy) override;

private:
    void rebuild();
    void updateScrollBars();
    int barWidth(std::int64_t size) const;

    std::shared_ptr<const Report> report_;
    int device_;
    bool log_ = true;
    std::vector<const SnapshotSegment*> rows_;
    std::int64_t minSize_ = 1, maxSize_ = 1;
    int labelWidth_ = 120;
    QString labelOf(const SnapshotSegment& g) const;
    QWidget* header_;
    QLabel* note_;
    QCheckBox* logBox_;
};

} // namespace memledger

#pragma once
#include "analysis/segment_history.h"

#include <QWidget>

#include <memory>

class QCPGraph;
class QCustomPlot;
class QLabel;

namespace memledger {

class StepAreaGraph;

// Reserved, allocated and active bytes over time, with the fragmentation (reserved minus allocated) as its
// own filled series and a sentence naming what holds most of it. Reserved bytes a snapshot did not record
// come from the caching-allocator model, and the legend says "simulated".
class SegmentTimeline : public QWidget {
    Q_OBJECT
public:
    explicit SegmentTimeline(QWidget* parent = nullptr);

    void setReport(std::shared_ptr<const Report> report);
    void setDevice(int device); // TimelineSeries::kAllDevices: all
    const SegmentHistory& history() const { return history_; }
    QString causeText() const;
    QCustomPlot* plot() const { return plot_; }

public slots:
    void resetZoom();

protected:
    void changeEvent(QEvent* event) override;

private:
    void rebuild();
    void reduceToView();
    void applyPalette();

    std::shared_ptr<const Report> report_;
    int device_ = TimelineSeries::kAllDevices;
    SegmentHistory history_;
    QCustomPlot* plot_;
    QLabel* cause_;
    StepAreaGraph* fragmentation_;
    QCPGraph* reserved_;
    QCPGraph* active_;
    QCPGraph* allocated_;
    bool reducing_ = false;
};

} // namespace memledger

#pragma once
// The previous load of a watched file, marked on the timeline: a dashed line at its peak and one where it
// ended, so that what the reload added lies to the right of the one and above or below the other. The marks
// follow the timeline's axis (time or op sequence) and hide where they would not mean anything: the end when
// the file no longer reaches past it (a new job, a shorter trace).
#include "reload_change.h"

#include <QObject>

#include <optional>

class QCPItemStraightLine;
class QCPItemText;

namespace memledger {

class TimelinePlot;

class ReloadMarks : public QObject {
    Q_OBJECT
public:
    explicit ReloadMarks(TimelinePlot* plot);

    void show(const LoadFigures& previous); // over the report the plot shows now
    void clear();
    bool peakShown() const;
    bool endShown() const;
    double endKey() const; // where the previous load's end lies on the current axis (when shown)
    double peakValue() const;
    QRectF peakLabelRect() const; // in pixels, where drawn; empty when hidden

private:
    void place(); // before each replot: the axis or the series may have changed
    void avoidPeakLabel(); // after the layout: off the current peak's label, which is placed then too

    TimelinePlot* plot_;
    std::optional<LoadFigures> previous_;
    QCPItemStraightLine* peakLine_;
    QCPItemText* peakLabel_;
    QCPItemStraightLine* endLine_;
    QCPItemText* endLabel_;
};

} // namespace memledger

#pragma once
#include <qcustomplot.h>

namespace memledger {

// A step graph whose area down to `fillBase` is filled as one rectangle per step. QPainter fills a polygon
// of thousands of vertices very slowly (most of a 16 ms frame for one band); rectangles take a millisecond.
class StepAreaGraph : public QCPGraph {
public:
    StepAreaGraph(QCPAxis* keyAxis, QCPAxis* valueAxis);
    void setFillBase(double value) { fillBase_ = value; }

protected:
    void drawFill(QCPPainter* painter, QVector<QPointF>* lines) const override;

private:
    double fillBase_ = 0;
};

} // namespace memledger

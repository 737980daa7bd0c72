#include "step_area_graph.h"

namespace memledger {

StepAreaGraph::StepAreaGraph(QCPAxis* keyAxis, QCPAxis* valueAxis)
    : QCPGraph(keyAxis, valueAxis)
{
    setLineStyle(lsStepLeft);
}

void StepAreaGraph::drawFill(QCPPainter* painter, QVector<QPointF>* lines) const
{
    if (brush().style() == Qt::NoBrush || brush().color().alpha() == 0 || lines->size() < 2)
        return;
    applyFillAntialiasingHint(painter);
    // Key axis is horizontal here: a step line alternates horizontal and vertical segments, and the area
    // under it is the union of the rectangles below the horizontal ones.
    double base = valueAxis()->coordToPixel(fillBase_);
    const auto& l = *lines;
    for (int i = 0; i + 1 < l.size(); ++i) {
        if (l[i].y() != l[i + 1].y() || l[i].x() == l[i + 1].x())
            continue;
        painter->fillRect(QRectF(QPointF(l[i].x(), l[i].y()), QPointF(l[i + 1].x(), base)).normalized(), brush());
    }
}

} // namespace memledger

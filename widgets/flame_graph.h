#pragma once
// A flame graph of the bytes alive at one moment of a snapshot: the call tree top-down (analysis/call_tree.h),
// each frame a box as wide as the bytes alive under it, the outermost frame at the top and its callees below
// (an icicle). Hover names a box; a click zooms to it, a click on the top row (or double-click) zooms out.
// The moment defaults to the peak; a click on the timeline picks another (setMoment).
#include "analysis/call_tree.h"
#include "report/report.h"

#include <QWidget>

#include <memory>

namespace memledger {

class FlameGraph : public QWidget {
    Q_OBJECT
public:
    explicit FlameGraph(QWidget* parent = nullptr);
    void setReport(std::shared_ptr<const Report> report);
    void setDevice(int device);
    void setFrames(CallTreeFrames frames);
    // The moment after `events` trace events (TimelinePlot::momentClicked); a negative value: the peak.
    void setMoment(std::int64_t events);

    const CallTree* tree() const { return tree_.get(); }
    std::int32_t zoomedNode() const { return zoom_; }
    void zoomTo(std::int32_t node); // 0: the whole tree
    // The node drawn at a point, -1 for none.
    std::int32_t nodeAt(const QPoint& pos) const;
    QRectF nodeRect(std::int32_t node) const; // empty when not drawn
    QString headline() const;
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

signals:
    void nodeClicked(const QString& title, const std::vector<memledger::CallTreeLabel>& frames);

protected:
    void paintEvent(QPaintEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    void rebuild();
    void layoutBoxes();
    std::vector<CallTreeLabel> framesOf(std::int32_t node) const;

    struct Box {
        std::int32_t node;
        QRectF rect;
    };
    std::shared_ptr<const Report> report_;
    CallTreeOptions options_;
    std::unique_ptr<CallTree> tree_;
    std::int32_t zoom_ = 0;
    std::int32_t hover_ = -1;
    std::vector<Box> boxes_;
    int depth_ = 0;
};

} // namespace memledger

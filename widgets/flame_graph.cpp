#include "flame_graph.h"
#include "bytes_text.h"

#include "snapshot/frames.h"
#include "stack_pane.h"
#include "support/format.h"

#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <functional>

namespace memledger {

namespace {

constexpr int kHeadline = 22;
constexpr int kRow = 18;

// A stable colour per frame: user code warm, ATen ops blue, torch's and the interpreter's Python pale yellow,
// C++ grey-brown; the hue varies a little with the text so that neighbours differ.
QColor boxColor(const CallTreeLabel& l, const Trace* t)
{
    auto h = static_cast<int>(qHash(QString::fromStdString(l.text)) % 24);
    if (l.user)
        return QColor::fromHsv(12 + h, 150, 240);
    if (l.frame < 0)
        return l.text.rfind("aten::", 0) == 0 ? QColor::fromHsv(205 + h, 90, 235) : QColor(200, 200, 200);
    FrameKind kind = FrameKind::Cpp;
    if (t) {
        const auto& fr = t->stacks.frame(static_cast<std::uint32_t>(l.frame));
        kind = classifyFrame(t->strings.at(fr.file));
    }
    if (kind == FrameKind::Torch || kind == FrameKind::Library || kind == FrameKind::CPython)
        return QColor::fromHsv(48 + h / 2, 90, 245);
    return QColor::fromHsv(30 + h / 2, 40, 215);
}

} // namespace

FlameGraph::FlameGraph(QWidget* parent)
    : QWidget(parent)
{
    setMouseTracking(true);
    options_.frames = CallTreeFrames::PythonAndOps;
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
}

void FlameGraph::setReport(std::shared_ptr<const Report> report)
{
    report_ = std::move(report);
    options_.device = CallTreeOptions::kAllDevices;
    options_.moment = CallTreeOptions::kRangePeak;
    rebuild();
}

void FlameGraph::setDevice(int device)
{
    options_.device = device;
    rebuild();
}

void FlameGraph::setFrames(CallTreeFrames frames)
{
    options_.frames = frames;
    rebuild();
}

void FlameGraph::setMoment(std::int64_t events)
{
    options_.moment = events < 0 ? CallTreeOptions::kRangePeak : events - 1;
    rebuild();
}

void FlameGraph::rebuild()
{
    zoom_ = 0;
    hover_ = -1;
    tree_.reset();
    if (report_ && report_->trace)
        tree_ = std::make_unique<CallTree>(buildCallTree(*report_->trace, options_));
    layoutBoxes();
    updateGeometry();
    update();
}

void FlameGraph::zoomTo(std::int32_t node)
{
    if (!tree_ || node < 0 || static_cast<std::size_t>(node) >= tree_->nodes.size())
        node = 0;
    zoom_ = node;
    layoutBoxes();
    updateGeometry();
    update();
}

void FlameGraph::layoutBoxes()
{
    boxes_.clear();
    depth_ = 0;
    if (!tree_ || tree_->nodes[0].alive <= 0)
        return;
    const double width = std::max(1, this->width() - 2);
    // The zoomed node's ancestors, full width, then the node and what it calls.
    std::vector<std::int32_t> above;
    for (auto at = tree_->nodes[static_cast<std::size_t>(zoom_)].parent; at >= 0;
         at = tree_->nodes[static_cast<std::size_t>(at)].parent)
        above.push_back(at);
    std::reverse(above.begin(), above.end());
    int row = 0;
    for (auto a : above)
        boxes_.push_back({a, QRectF(1, kHeadline + row++ * kRow, width, kRow - 1)});
    std::function<void(std::int32_t, double, double, int)> place = [&](std::int32_t node, double x, double w, int r) {
        const auto& n = tree_->nodes[static_cast<std::size_t>(node)];
        boxes_.push_back({node, QRectF(x, kHeadline + r * kRow, w, kRow - 1)});
        depth_ = std::max(depth_, r + 1);
        if (n.alive <= 0)
            return;
        std::vector<std::int32_t> kids;
        for (auto c : n.children)
            if (tree_->nodes[static_cast<std::size_t>(c)].alive > 0)
                kids.push_back(c);
        std::stable_sort(kids.begin(), kids.end(), [this](std::int32_t a, std::int32_t b) {
            return tree_->nodes[static_cast<std::size_t>(a)].alive > tree_->nodes[static_cast<std::size_t>(b)].alive;
        });
        double cx = x;
        for (auto c : kids) {
            double cw = w * static_cast<double>(tree_->nodes[static_cast<std::size_t>(c)].alive)
                / static_cast<double>(n.alive);
            if (cw >= 1.0)
                place(c, cx, cw, r + 1);
            cx += cw;
        }
    };
    place(zoom_, 1, width, row);
}

QSize FlameGraph::sizeHint() const
{
    return {600, kHeadline + std::max(depth_, 4) * kRow + 4};
}

QSize FlameGraph::minimumSizeHint() const
{
    return {200, kHeadline + std::max(depth_, 2) * kRow + 4};
}

QString FlameGraph::headline() const
{
    if (!tree_ || !tree_->has_stacks)
        return tr("No call stacks: a model run records module paths (see the Layers tab)");
    const auto& t = *report_->trace;
    QString when = tree_->moment < 0
        ? tr("the start of the trace")
        : tr("%1 ms (after event %2)")
              .arg(static_cast<double>(t.time_ns[static_cast<std::size_t>(tree_->moment)]) / 1e6, 0, 'f', 3)
              .arg(tree_->moment);
    QString which = options_.moment == CallTreeOptions::kRangePeak ? tr("the peak, ") : QString();
    return tr("%1 alive at %2%3 by call stack · click a frame to zoom, the top row to zoom out · click the "
              "timeline to pick a moment")
        .arg(bytesText(tree_->nodes[0].alive), which, when);
}

void FlameGraph::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    p.fillRect(rect(), palette().color(QPalette::Base));
    p.setPen(palette().color(QPalette::Text));
    QRect head(4, 0, width() - 8, kHeadline);
    p.drawText(
        head, Qt::AlignLeft | Qt::AlignVCenter, p.fontMetrics().elidedText(headline(), Qt::ElideRight, head.width()));
    if (!tree_)
        return;
    const Trace* t = report_ ? report_->trace.get() : nullptr;
    for (const auto& b : boxes_) {
        const auto& label = tree_->labels[tree_->nodes[static_cast<std::size_t>(b.node)].label];
        QColor c = boxColor(label, t);
        if (b.node == hover_)
            c = c.darker(115);
        p.fillRect(b.rect, c);
        if (b.rect.width() < 24)
            continue;
        p.setPen(QColor(30, 30, 30));
        auto text = QStringLiteral("%1 (%2)").arg(shortFrameText(QString::fromStdString(label.text)),
            bytesText(tree_->nodes[static_cast<std::size_t>(b.node)].alive));
        QRectF tr = b.rect.adjusted(3, 0, -3, 0);
        p.drawText(tr, Qt::AlignLeft | Qt::AlignVCenter,
            p.fontMetrics().elidedText(text, Qt::ElideMiddle, static_cast<int>(tr.width())));
    }
}

std::int32_t FlameGraph::nodeAt(const QPoint& pos) const
{
    for (const auto& b : boxes_)
        if (b.rect.contains(pos))
            return b.node;
    return -1;
}

QRectF FlameGraph::nodeRect(std::int32_t node) const
{
    for (const auto& b : boxes_)
        if (b.node == node)
            return b.rect;
    return {};
}

std::vector<CallTreeLabel> FlameGraph::framesOf(std::int32_t node) const
{
    std::vector<CallTreeLabel> frames; // innermost first
    for (auto at = node; at > 0; at = tree_->nodes[static_cast<std::size_t>(at)].parent)
        frames.push_back(tree_->labels[tree_->nodes[static_cast<std::size_t>(at)].label]);
    return frames;
}

void FlameGraph::mouseMoveEvent(QMouseEvent* event)
{
    auto node = nodeAt(event->pos());
    if (node != hover_) {
        hover_ = node;
        update();
    }
    if (node < 0 || !tree_) {
        QToolTip::hideText();
        return;
    }
    const auto& n = tree_->nodes[static_cast<std::size_t>(node)];
    double share = tree_->nodes[0].alive > 0
        ? 100.0 * static_cast<double>(n.alive) / static_cast<double>(tree_->nodes[0].alive)
        : 0.0;
    QToolTip::showText(event->globalPosition().toPoint(),
        tr("<b>%1</b><br>%2 alive (%3% of the moment's), %4 allocated in %5 allocations")
            .arg(QString::fromStdString(tree_->text(node)).toHtmlEscaped(), bytesText(n.alive),
                QString::number(share, 'f', 1), bytesText(n.allocated), QString::number(n.count)),
        this);
}

void FlameGraph::mouseReleaseEvent(QMouseEvent* event)
{
    if (event->button() != Qt::LeftButton || !tree_)
        return;
    auto node = nodeAt(event->pos());
    if (node < 0)
        return;
    zoomTo(node == zoom_ ? tree_->nodes[static_cast<std::size_t>(node)].parent : node);
    const auto& n = tree_->nodes[static_cast<std::size_t>(node)];
    emit nodeClicked(tr("%1 alive, %2 allocated in %3 allocations")
                         .arg(bytesText(n.alive), bytesText(n.allocated), QString::number(n.count)),
        framesOf(node));
}

void FlameGraph::mouseDoubleClickEvent(QMouseEvent*)
{
    zoomTo(0);
}

void FlameGraph::leaveEvent(QEvent*)
{
    hover_ = -1;
    update();
}

void FlameGraph::resizeEvent(QResizeEvent*)
{
    layoutBoxes();
}

} // namespace memledger

// TimelinePlot, its hover: what lies under the cursor (an allocation found through core/analysis/live_index.h, a
// ledger held for the whole run, a phase) and the tooltip that names it.
#include "timeline_plot.h"
#include "timeline_text.h"

#include "snapshot/snapshot.h"
#include "stack_pane.h"

#include <QToolTip>

#include <algorithm>

namespace memledger {

QString TimelinePlot::describeAt(double key, double bytes, QString* modulePath) const
{
    if (!report_ || series_->keys.empty() || key < series_->firstKey() || key > series_->lastKey() || bytes < 0)
        return {};
    auto p = series_->pointAt(key);
    int band = -1;
    for (int b : TimelineSeries::kStackOrder)
        if (band < 0 && series_->present[static_cast<std::size_t>(b)]
            && bytes <= series_->tops[static_cast<std::size_t>(b)][p])
            band = b;
    if (band < 0) { // above the stack: the phase of a training step, whose label may not fit its band
        const Phase* phase = p > 0 ? phaseOfEvent(p - 1) : nullptr;
        if (!phase)
            return {};
        return tr("<b>%1</b><br>%2 to %3 ms, peak %4")
            .arg(QString::fromStdString(phase->name).toHtmlEscaped())
            .arg(static_cast<double>(phase->start_ns) / 1e6, 0, 'f', 3)
            .arg(static_cast<double>(phase->end_ns) / 1e6, 0, 'f', 3)
            .arg(bytesText(static_cast<double>(phase->peak_bytes)));
    }
    if (report_->snapshot)
        return describeSnapshotAt(band, p, bytes);
    double bottom = series_->bottomOf(band, p);
    auto ledger = static_cast<Ledger>(band);
    double constant = ledger == Ledger::Weights ? static_cast<double>(report_->weight_bytes)
        : ledger == Ledger::Inputs              ? static_cast<double>(report_->input_bytes)
        : ledger == Ledger::OptimizerState      ? static_cast<double>(report_->optimizer_state_bytes)
                                                : 0;
    if (bytes <= bottom + constant) {
        if (ledger == Ledger::Weights)
            return tr("<b>%1</b> weights<br>parameters and buffers of %2, resident as %3 for the whole run")
                .arg(bytesText(constant), QString::fromStdString(report_->model.type).toHtmlEscaped(),
                    QString::fromStdString(report_->run.dtype));
        if (ledger == Ledger::OptimizerState)
            return tr("<b>%1</b> optimizer state<br>the state of %2 (momentum, moments), resident for the whole "
                      "step like the weights")
                .arg(bytesText(constant), QString::fromStdString(report_->run.optimizer).toHtmlEscaped());
        return tr("<b>%1</b> inputs<br>the model's input tensors, alive for the whole run").arg(bytesText(constant));
    }
    if (p == 0 || !report_->trace)
        return {};
    // Live allocations of this ledger, stacked oldest first, as the band is drawn: the index finds the one.
    const auto& t = *report_->trace;
    auto found = hoverIndex(band).allocationAt(static_cast<std::int64_t>(p - 1), bytes - bottom - constant);
    if (found >= 0) {
        auto a = static_cast<std::size_t>(found);
        auto partner = t.partner[a];
        auto where = QString::fromStdString(t.strings.at(t.where[a]));
        if (modulePath)
            *modulePath = where.isEmpty() ? QStringLiteral("") : where; // the root: empty but not null
        auto outer = QString::fromStdString(t.strings.at(t.outer_op[a]));
        auto inner = t.inner_op[a] && t.inner_op[a] != t.outer_op[a]
            ? QString::fromStdString(t.strings.at(t.inner_op[a]))
            : QString();
        // In the backward the outer op is the autograd node ("ConvolutionBackward0"); the module is its forward's.
        const Phase* phase = phaseOfEvent(a);
        QString opLine;
        if (phase && phase->name == "backward" && !outer.isEmpty())
            opLine = tr("autograd node: %1").arg(outer.toHtmlEscaped())
                + (inner.isEmpty() ? QString() : tr("<br>op: %1").arg(inner.toHtmlEscaped()));
        else {
            auto op = inner.isEmpty() ? outer : outer + QStringLiteral(" → ") + inner;
            opLine = tr("op: %1").arg((op.isEmpty() ? tr("(outside any op)") : op).toHtmlEscaped());
        }
        if (phase)
            opLine += tr("<br>phase: %1").arg(QString::fromStdString(phase->name).toHtmlEscaped());
        QString until
            = partner == kNoPartner ? tr("the end of the run") : keyText(*report_, static_cast<std::size_t>(partner));
        return tr("<b>%1</b> %2<br>module: %3<br>%4<br>alive from %5<br>until %6")
            .arg(bytesText(static_cast<double>(t.bytes[a])), QString::fromUtf8(ledgerLabel(ledger)),
                (where.isEmpty() ? tr("(model)") : where).toHtmlEscaped(), opLine, keyText(*report_, a), until);
    }
    return {};
}

LiveStackIndex& TimelinePlot::hoverIndex(int band) const
{
    auto& index = hoverIndexes_[band];
    if (index)
        return *index;
    // The allocations of the band with the events they live between, as the series stacks them.
    std::vector<LiveStackIndex::Interval> intervals;
    const auto& t = *report_->trace;
    const bool snapshot = report_->snapshot != nullptr;
    for (std::size_t a = 0; a < t.size(); ++a) {
        if (t.action[a] != Action::Alloc)
            continue;
        auto partner = t.partner[a];
        LiveStackIndex::Interval i {static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(a),
            partner == kNoPartner ? LiveStackIndex::kForever : static_cast<std::uint32_t>(partner), t.bytes[a]};
        if (!snapshot) {
            if (static_cast<int>(t.ledger[a]) == band)
                intervals.push_back(i);
            continue;
        }
        if (device_ != TimelineSeries::kAllDevices && t.device[a] != device_)
            continue;
        // A snapshot's block is in its ledger until its free is requested, then pending until the free completes.
        auto requested = series_->freeRequestedAt(a);
        if (band == TimelineSeries::kPendingFree) {
            if (requested < 0)
                continue;
            i.begin = static_cast<std::uint32_t>(requested);
        } else if (static_cast<int>(t.ledger[a]) != band) {
            continue;
        } else if (requested >= 0) {
            i.end = std::min(i.end, static_cast<std::uint32_t>(requested));
        }
        intervals.push_back(i);
    }
    index = std::make_unique<LiveStackIndex>(std::move(intervals));
    return *index;
}

QString TimelinePlot::describeSnapshotAt(int band, std::size_t p, double bytes) const
{
    double bottom = series_->bottomOf(band, p);
    double top = series_->tops[static_cast<std::size_t>(band)][p];
    if (band == static_cast<int>(Ledger::Resident))
        return tr("<b>%1</b> resident (before the trace)<br>blocks allocated before the trace's first entry (it is a "
                  "ring buffer) that nothing in the trace tells more of; the band shrinks as the trace frees them")
            .arg(bytesText(top - bottom));
    if (p == 0 || !report_->trace)
        return {};
    // Live allocations of this band, stacked oldest first: the index finds the one.
    const auto& t = *report_->trace;
    auto event = static_cast<std::int64_t>(p) - 1;
    bool pendingBand = band == TimelineSeries::kPendingFree;
    auto found = hoverIndex(band).allocationAt(event, bytes - bottom);
    if (found >= 0) {
        auto i = static_cast<std::size_t>(found);
        auto partner = t.partner[i];
        auto requested = series_->freeRequestedAt(i);
        bool pending = requested >= 0 && requested <= event;
        auto where = QString::fromStdString(t.strings.at(t.where[i]));
        QString until
            = partner == kNoPartner ? tr("the end of the trace") : keyText(*report_, static_cast<std::size_t>(partner));
        hoveredEvent_ = static_cast<std::int64_t>(i);
        auto stack = i < t.stack.size() ? stackTooltipHtml(t, t.stack[i]) : QString();
        if (!stack.isEmpty())
            stack = tr("<br><br>call stack, innermost first:<br>") + stack;
        if (auto context = contextLinesHtml(*report_, i); !context.isEmpty())
            stack = QStringLiteral("<br>") + context + stack;
        return tr("<b>%1</b> %2 on %3<br>where: %4<br>address: 0x%5<br>allocated at %6<br>%7%8")
            .arg(bytesText(static_cast<double>(t.bytes[i])), pendingBand ? tr("pending free") : QString::fromUtf8(ledgerLabel(t.ledger[i])),
                QString::fromStdString(snapshotDeviceName(t.device[i])),
                (where.isEmpty() ? tr("(no stack)") : where).toHtmlEscaped(), QString::number(t.address[i], 16),
                keyText(*report_, i),
                pending ? tr("free requested at %1<br>").arg(keyText(*report_, static_cast<std::size_t>(requested)))
                        : QString(),
                tr("freed at %1").arg(until))
            + stack;
    }
    return {};
}

void TimelinePlot::showHover(const QPoint& pos)
{
    double key = xAxis->pixelToCoord(pos.x());
    double bytes = yAxis->pixelToCoord(pos.y());
    bool inside = axisRect()->rect().contains(pos);
    cursorLine_->setVisible(inside);
    if (inside) {
        cursorLine_->point1->setCoords(key, 0);
        cursorLine_->point2->setCoords(key, 1);
    }
    layer(QStringLiteral("cursor"))->replot();
    hoveredEvent_ = -1;
    auto text = inside ? describeAt(key, bytes) : QString();
    if (text.isEmpty())
        QToolTip::hideText();
    else
        QToolTip::showText(mapToGlobal(pos), text, this);
}

} // namespace memledger

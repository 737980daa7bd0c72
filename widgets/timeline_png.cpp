#include "timeline_png.h"

#include "analysis/segment_history.h"
#include "report/meta_run.h"
#include "support/format.h"
#include "timeline_plot.h"

#include <QFileInfo>
#include <QSaveFile>
#include <QStringList>

#include <algorithm>

namespace memledger {

QString timelinePngTitle(const Report& report)
{
    auto type = QString::fromStdString(report.model.type);
    auto file = QFileInfo(QString::fromStdString(report.model.path)).fileName();
    QString title = type.isEmpty() ? (file.isEmpty() ? QStringLiteral("memledger") : file)
                                   : (file.isEmpty() ? type : QStringLiteral("%1 (%2)").arg(type, file));
    // A meta run's picture says so where a reader looks first: its figures are not measured.
    if (isMetaRun(report))
        title += QStringLiteral(" \u2014 ") + QString::fromUtf8(kMetaRunBadge);
    return title;
}

QString timelinePngSettings(const Report& report)
{
    const auto& run = report.run;
    QStringList parts;
    if (!run.input_shapes.empty())
        parts << QStringLiteral("inputs %1%2")
                     .arg(QString::fromStdString(inputsToString(run.input_shapes, run.input_types)),
                         run.input_guessed ? QStringLiteral(" (guess)") : QString());
    parts << QStringLiteral("batch %1").arg(run.batch) << QString::fromStdString(run.dtype)
          << QString::fromStdString(run.device);
    if (run.mode == RunMode::Train)
        parts << QStringLiteral("training step (optimizer %1, loss %2)")
                     .arg(QString::fromStdString(run.optimizer.empty() ? "-" : run.optimizer),
                         QString::fromStdString(run.loss.empty() ? "-" : run.loss));
    else
        parts << QString::fromLatin1(nameOf(run.mode));
    return parts.join(QStringLiteral(" · "));
}

QString renderTimelinePng(const Report& report, const QString& path, QSize size, const TimelineView& view)
{
    TimelinePlot plot;
    plot.resize(size);
    // The plot keeps a shared pointer; this one does not own the caller's report.
    plot.setReport(std::shared_ptr<const Report>(&report, [](const Report*) {}));
    plot.setAxis(view.axis);
    plot.setWeightsHidden(view.weights_hidden);
    // The reserve line the window draws: what a GPU's caching allocator would hold (model runs only).
    if (!report.snapshot && report.trace) {
        auto reserved = simulatedReservedBytes(report);
        if (std::any_of(reserved.begin(), reserved.end(), [](double v) { return v > 0; }))
            plot.setReservedLine(StepValues(std::move(reserved)), QStringLiteral("reserved (simulated GPU)"));
    }
    // The window's view: its module and its zoom.
    if (!view.module.isEmpty())
        plot.highlightModule(view.module);
    if (view.key_upper > view.key_lower)
        plot.xAxis->setRange(view.key_lower, view.key_upper);
    auto* layout = plot.plotLayout();
    layout->insertRow(0);
    layout->insertRow(0);
    auto* title = new QCPTextElement(&plot, timelinePngTitle(report), QFont(plot.font().family(), 12, QFont::Bold));
    auto* settings = new QCPTextElement(&plot, timelinePngSettings(report), plot.font());
    for (auto* text : {title, settings})
        text->setTextColor(plot.palette().color(QPalette::WindowText));
    layout->addElement(0, 0, title);
    layout->addElement(1, 0, settings);
    layout->setRowStretchFactor(0, 0.001);
    layout->setRowStretchFactor(1, 0.001);
    plot.replot(QCustomPlot::rpImmediateRefresh);
    QImage image = plot.toPixmap(size.width(), size.height()).toImage();
    plot.setReport(nullptr);
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly))
        return QStringLiteral("%1: %2").arg(path, file.errorString());
    if (!image.save(&file, "PNG") || !file.commit())
        return QStringLiteral("%1: %2").arg(
            path, file.errorString().isEmpty() ? QStringLiteral("could not write the PNG") : file.errorString());
    return {};
}

} // namespace memledger

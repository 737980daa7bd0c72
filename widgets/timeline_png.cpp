#include "timeline_png.h"

#include "timeline_plot.h"

#include <QBuffer>
#include <QSaveFile>

namespace memledger {

QString renderTimelinePng(const Report& report, const QString& path, QSize size)
{
    TimelinePlot plot;
    plot.resize(size);
    // The plot keeps a shared pointer; this one does not own the caller's report.
    plot.setReport(std::shared_ptr<const Report>(&report, [](const Report*) {}));
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

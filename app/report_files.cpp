#include "report_files.h"

#include "exports/report_json.h"
#include "timeline_plot.h"
#include "timeline_png.h"

#if __has_include("exports/report_html.h")
#include "exports/report_html.h"
#define MEMLEDGER_HAS_HTML 1
#endif

#include <nlohmann/json.hpp>

#include <QFileInfo>
#include <QRegularExpression>
#include <QSaveFile>
#include <QWidget>

namespace memledger {

namespace {

QString writeWithQSaveFile(const QString& path, const QByteArray& bytes)
{
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit())
        return QStringLiteral("%1: %2").arg(path, file.errorString());
    return {};
}

} // namespace

QString saveReportJson(const Report& report, const QString& path)
{
    return writeWithQSaveFile(path, QByteArray::fromStdString(reportToJsonText(report)));
}

bool canWriteHtml()
{
#ifdef MEMLEDGER_HAS_HTML
    return true;
#else
    return false;
#endif
}

QString saveReportHtml(const Report& report, const QString& path)
{
#ifdef MEMLEDGER_HAS_HTML
    return writeWithQSaveFile(path, QByteArray::fromStdString(reportToHtml(report)));
#else
    (void)report;
    return QStringLiteral("%1: this build has no HTML report writer").arg(path);
#endif
}

QString saveTimelinePng(const Report& report, const TimelinePlot& plot, const QString& path)
{
    return renderTimelinePng(report, path, plot.size().expandedTo(QSize(800, 300)), plot.view());
}

QString saveWidgetPng(QWidget* widget, const QString& path)
{
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || !widget->grab().save(&file, "PNG") || !file.commit())
        return QStringLiteral("%1: %2").arg(path, file.errorString());
    return {};
}

QString saveBaseName(const QString& file, const QString& displayName)
{
    if (!file.isEmpty())
        return QFileInfo(file).completeBaseName();
    auto name = displayName;
    if (name.startsWith(QStringLiteral("demo:")))
        name = name.mid(5);
    for (const char* suffix : {".pt2", ".pt"})
        if (name.endsWith(QString::fromUtf8(suffix))) {
            name.chop(static_cast<int>(qstrlen(suffix)));
            break;
        }
    name.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9._-]")), QStringLiteral("-"));
    return (name.isEmpty() ? QStringLiteral("memledger") : name) + QStringLiteral("-demo");
}

} // namespace memledger

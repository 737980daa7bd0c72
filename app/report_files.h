#pragma once
// Writing what the window shows to files: the analysis (JSON), the HTML report, PNG images of the timeline and of
// the window, each through QSaveFile, and the name the Save dialogs propose. Each returns "" or why it failed,
// naming the file.
#include "report/report.h"

#include <QString>

class QWidget;

namespace memledger {

class TimelinePlot;

QString saveReportJson(const Report& report, const QString& path);
bool canWriteHtml(); // this build has the HTML report writer
QString saveReportHtml(const Report& report, const QString& path);
// The timeline as the plot shows it (its zoom, its module), at least 800x300.
QString saveTimelinePng(const Report& report, const TimelinePlot& plot, const QString& path);
QString saveWidgetPng(QWidget* widget, const QString& path);

// What the Save dialogs propose for a file ("resnet18") or a built-in demo ("demo:mnist-train.pt" ->
// "mnist-train-demo": no colon, which some file systems refuse).
QString saveBaseName(const QString& file, const QString& displayName);

} // namespace memledger

#pragma once
#include "report/report.h"

#include <QSize>
#include <QString>

namespace memledger {

// Renders the timeline of `report` to a PNG file (written through QSaveFile). Needs a QApplication, which
// may run on the offscreen platform. Returns an empty string, or why it failed, naming the file.
QString renderTimelinePng(const Report& report, const QString& path, QSize size = QSize(1400, 500));

} // namespace memledger

#pragma once
#include "report/report.h"
#include "report/timeline_series.h"

#include <QSize>
#include <QString>

namespace memledger {

// Renders the timeline of `report` to a PNG file (written through QSaveFile), as the window shows it: a title
// (the model), the run's settings, the ledgers, a training step's phases and, for a model run, the reserve a GPU would
// hold (simulated). Needs a QApplication, which may run on the offscreen platform. Returns an empty string, or why it
// failed, naming the file.
QString renderTimelinePng(const Report& report, const QString& path, QSize size = QSize(1400, 500),
    TimelineAxis axis = TimelineAxis::Milliseconds, bool weightsHidden = false);

// The two header lines of the PNG: "RFBNet (model.pt)" and "inputs 1x3x224x224 · batch 1 · float32 · cpu · inference"
// (a training step: "... · cpu · training step (optimizer sgd, loss cross_entropy)").
QString timelinePngTitle(const Report& report);
QString timelinePngSettings(const Report& report);

} // namespace memledger

#pragma once
#include "report/report.h"
#include "analysis/timeline_series.h"

#include <QSize>
#include <QString>

namespace memledger {

// What part of the timeline a PNG shows, as the window's timeline shows it (TimelinePlot::view()).
struct TimelineView {
    TimelineAxis axis = TimelineAxis::Milliseconds;
    bool weights_hidden = false;
    QString module; // the module drawn over the ledgers; "" none
    double key_lower = 0; // the visible range of the x axis (zoomed); key_upper <= key_lower: the whole run
    double key_upper = 0;
};

// Renders the timeline of `report` to a PNG file (written through QSaveFile), as the window shows it: a title
// (the model), the run's settings, the ledgers, a training step's phases and, for a model run, the reserve a GPU would
// hold (simulated). Needs a QApplication, which may run on the offscreen platform. Returns an empty string, or why it
// failed, naming the file.
QString renderTimelinePng(
    const Report& report, const QString& path, QSize size = QSize(1400, 500), const TimelineView& view = {});

// The two header lines of the PNG: "RFBNet (model.pt)" and "inputs 1x3x224x224 · batch 1 · float32 · cpu · inference"
// (a training step: "... · cpu · training step (optimizer sgd, loss cross_entropy)").
QString timelinePngTitle(const Report& report);
QString timelinePngSettings(const Report& report);

} // namespace memledger

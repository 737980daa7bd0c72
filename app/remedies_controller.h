#pragma once
// The window's "What would help" tab: remedies computed off the GUI thread when a report is shown (again with
// the lower-precision and batch remedies once the what-if records are made, and for each new budget typed in
// the What if panel), measured on request.
#include "report/report.h"
#include "session/open_file.h"

#include <QObject>
#include <QString>

#include <cstdint>
#include <memory>
#include <vector>

class QWidget;

namespace memledger {

class RemediesPanel;
class RemediesWorker;
class WhatIfController;

class RemediesController : public QObject {
    Q_OBJECT
public:
    // `dialogs`: the parent of the file dialog that asks for an edited model.
    RemediesController(WhatIfController* whatIf, QWidget* dialogs, QObject* parent = nullptr);

    RemediesPanel* panel() const { return panel_; }
    // A report is shown (nullptr: none); `file` is what it came from. Another report's remedies stay greyed, with
    // a busy mark, until this one's arrive.
    void reportShown(std::shared_ptr<const Report> report, std::shared_ptr<const OpenedFile> file);
    // A new run (or file) is under way: the remedies listed are the old report's from now on (greyed, busy).
    void runStarted();
    // That run failed or was cancelled: the report shown, and its remedies, are still the current ones.
    void runAbandoned();
    // The remedies shown, into the report a save or an export writes.
    void addShownTo(Report& r) const;

signals:
    void ready(bool withWhatIf); // the tab shows its remedies
    void statusMessage(const QString& text, int milliseconds);

private:
    void compute(); // for report_ (with the what-if when recorded)
    bool isModelRun() const; // a model run here, not a saved report or a snapshot

    WhatIfController* whatIf_;
    QWidget* dialogs_;
    RemediesPanel* panel_;
    RemediesWorker* worker_;
    std::shared_ptr<const Report> report_;
    std::shared_ptr<const OpenedFile> file_;
    std::vector<std::int64_t> tile_;
    bool withWhatIf_ = false;
    bool computing_ = false; // a compute() whose remedies have not arrived
};

} // namespace memledger

// The window's "What would help" tab: remedies computed off the GUI thread when a report is shown (again with
// the lower-precision and batch remedies once the what-if records are made), measured on request.
#include "main_window.h"
#include "remedies_panel.h"
#include "remedies_worker.h"
#include "whatif_panel.h"

#include <QFileDialog>
#include <QStatusBar>
#include <QTabWidget>

namespace memledger {

void addShownRemedies(Report& r, const RemediesPanel* panel)
{
    if (panel && !panel->remedies().empty())
        r.remedies = std::make_shared<const std::vector<Remedy>>(panel->remedies());
}

void MainWindow::setUpRemedies()
{
    remediesPanel_ = new RemediesPanel;
    remediesWorker_ = new RemediesWorker(this);
    tabs_->addTab(remediesPanel_, tr("What would help"));
    // MEMLEDGER_SCREENSHOT_REMEDIES=1 shows this tab (main.cpp waits for the remedies with the what-if).
    if (qEnvironmentVariableIsSet("MEMLEDGER_SCREENSHOT_REMEDIES"))
        tabs_->setCurrentWidget(remediesPanel_);

    connect(this, &MainWindow::reportChanged, this, [this](std::shared_ptr<const Report>) {
        remediesTile_.clear();
        remediesWithWhatIf_ = false;
        computeRemedies();
    });
    connect(this, &MainWindow::whatIfReady, this, [this] {
        remediesWithWhatIf_ = true;
        computeRemedies();
    });
    connect(remediesPanel_, &RemediesPanel::tileRequested, this, [this](const std::vector<std::int64_t>& tile) {
        remediesTile_ = tile;
        computeRemedies();
    });
    connect(remediesWorker_, &RemediesWorker::computed, this, [this](quint64, const std::vector<Remedy>& remedies) {
        remediesPanel_->setRemedies(remedies);
        const bool waiting = report_ && report_->source == "model" && !fileIsReport_ && !remediesWithWhatIf_;
        remediesPanel_->setStatus(waiting ? tr("Lower precision and batch sizes follow once the what-if records are made.")
                                          : QString());
        emit remediesReady(remediesWithWhatIf_);
    });
    connect(remediesWorker_, &RemediesWorker::computeFailed, this,
        [this](quint64, const QString& message) { remediesPanel_->setStatus(tr("What would help: %1").arg(message)); });
    connect(remediesPanel_, &RemediesPanel::measureRequested, this, [this](int row, const Remedy& remedy) {
        QString variant;
        if (remedy.measure_how == "variant") {
            variant = QFileDialog::getOpenFileName(this,
                tr("The edited model for \u201c%1\u201d").arg(QString::fromStdString(remedy.title)), QString(),
                tr("TorchScript models (*.pt *.pth);;All files (*)"));
            if (variant.isEmpty()) {
                remediesPanel_->showMeasured(row, remedy); // back to its Measure button
                return;
            }
        }
        statusBar()->showMessage(tr("Measuring \u201c%1\u201d by a real run").arg(QString::fromStdString(remedy.title)));
        remediesWorker_->measure(opened_, report_, row, remedy, variant);
    });
    connect(remediesWorker_, &RemediesWorker::measured, this, [this](quint64, int row, const Remedy& m) {
        remediesPanel_->showMeasured(row, m);
        statusBar()->showMessage(tr("Measured \u201c%1\u201d").arg(QString::fromStdString(m.title)), 4000);
    });
    connect(remediesWorker_, &RemediesWorker::measureFailed, this,
        [this](quint64, int row, const QString& message) { remediesPanel_->showMeasureFailed(row, message); });
}

void MainWindow::computeRemedies()
{
    if (!report_)
        return;
    if (!remediesTile_.empty())
        remediesPanel_->setStatus(tr("Running the model at the tile shape\u2026"));
    remediesWorker_->compute(opened_, report_, remediesWithWhatIf_ ? whatIf_ : nullptr,
        whatIfPanel_ ? whatIfPanel_->budget() : 0, remediesTile_);
}

} // namespace memledger

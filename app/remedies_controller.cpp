#include "remedies_controller.h"

#include "report/meta_run.h"

#include "remedies_panel.h"
#include "remedies_worker.h"
#include "whatif_controller.h"

#include <QFileDialog>

namespace memledger {

RemediesController::RemediesController(WhatIfController* whatIf, QWidget* dialogs, QObject* parent)
    : QObject(parent)
    , whatIf_(whatIf)
    , dialogs_(dialogs)
    , panel_(new RemediesPanel)
    , worker_(new RemediesWorker(this))
{
    connect(whatIf_, &WhatIfController::ready, this, [this] {
        withWhatIf_ = true;
        compute();
    });
    // What would help plans for the budget of the What if panel: a new budget recomputes it.
    connect(whatIf_, &WhatIfController::budgetChanged, this, [this](std::int64_t) {
        if (isModelRun())
            compute();
    });
    connect(panel_, &RemediesPanel::tileRequested, this, [this](const std::vector<std::int64_t>& tile) {
        tile_ = tile;
        compute();
    });
    connect(worker_, &RemediesWorker::computed, this, [this](quint64, const std::vector<Remedy>& remedies) {
        computing_ = false;
        panel_->setMetaRun(report_ && isMetaRun(*report_));
        panel_->setRemedies(remedies);
        panel_->setStale(false);
        panel_->setBusy(QString());
        panel_->setStatus(isModelRun() && !withWhatIf_
                ? tr("Lower precision and batch sizes follow once the what-if records are made.")
                : QString());
        emit ready(withWhatIf_);
    });
    connect(worker_, &RemediesWorker::computeFailed, this,
        [this](quint64, const QString& message) {
            computing_ = false;
            panel_->setBusy(QString());
            panel_->setStatus(tr("What would help: %1").arg(message));
        });
    connect(panel_, &RemediesPanel::measureRequested, this, [this](int row, const Remedy& remedy) {
        QString variant;
        if (remedy.measure_how == MeasureHow::Variant) {
            variant = QFileDialog::getOpenFileName(dialogs_,
                tr("The edited model for \u201c%1\u201d").arg(QString::fromStdString(remedy.title)), QString(),
                tr("TorchScript models (*.pt *.pth);;All files (*)"));
            if (variant.isEmpty()) {
                panel_->showMeasured(row, remedy); // back to its Measure button
                return;
            }
        }
        emit statusMessage(tr("Measuring \u201c%1\u201d by a real run").arg(QString::fromStdString(remedy.title)), 0);
        worker_->measure(file_, report_, row, remedy, variant);
    });
    connect(worker_, &RemediesWorker::measured, this, [this](quint64, int row, const Remedy& m) {
        panel_->showMeasured(row, m);
        emit statusMessage(tr("Measured \u201c%1\u201d").arg(QString::fromStdString(m.title)), 4000);
    });
    connect(worker_, &RemediesWorker::measureFailed, this,
        [this](quint64, int row, const QString& message) { panel_->showMeasureFailed(row, message); });
}

void RemediesController::reportShown(std::shared_ptr<const Report> report, std::shared_ptr<const OpenedFile> file)
{
    if (report != report_ && !panel_->remedies().empty())
        panel_->setStale(true); // until compute() delivers this report's
    report_ = std::move(report);
    file_ = std::move(file);
    panel_->setModelActions(file_ && file_->kind == FileKind::Model);
    tile_.clear();
    withWhatIf_ = false;
    compute();
}

void RemediesController::runStarted()
{
    panel_->setStale(true);
    panel_->setBusy(tr("A new run is under way: its remedies follow when it is done\u2026"));
}

void RemediesController::runAbandoned()
{
    if (computing_)
        return; // the shown report's remedies are on their way: the busy mark stays until they arrive
    panel_->setStale(false);
    panel_->setBusy(QString());
}

bool RemediesController::isModelRun() const
{
    return report_ && report_->source == ReportSource::Model && file_ && file_->kind == FileKind::Model;
}

void RemediesController::compute()
{
    if (!report_)
        return;
    if (report_->run.mode == RunMode::Generate) { // not built yet: say so rather than vary the wrong run
        panel_->setRemedies({});
        panel_->setStale(false);
        panel_->setBusy(QString());
        panel_->setStatus(tr("What would help a generation (a smaller batch or prompt, a lower precision, a "
                             "quantized cache) is not worked out yet: the run's figures are above"));
        return;
    }
    if (!tile_.empty())
        panel_->setStatus(tr("Running the model at the tile shape\u2026"));
    computing_ = true;
    panel_->setBusy(withWhatIf_ ? tr("Working out what would help, with the what-if records\u2026")
                                : tr("Working out what would help\u2026"));
    worker_->compute(file_, report_, withWhatIf_ ? whatIf_->whatIf() : nullptr, whatIf_->budget(), tile_);
}

void RemediesController::addShownTo(Report& r) const
{
    if (!panel_->remedies().empty() && !panel_->isStale()) // with what was measured; never another run's
        r.remedies = std::make_shared<const std::vector<Remedy>>(panel_->remedies());
}

} // namespace memledger

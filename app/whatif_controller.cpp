#include "whatif_controller.h"

#include "whatif_panel.h"
#include "whatif_worker.h"

#include <QStringList>

#include <algorithm>

namespace memledger {

WhatIfController::WhatIfController(QObject* parent)
    : QObject(parent)
    , panel_(new WhatIfPanel)
    , worker_(new WhatIfWorker(this))
{
    // The first two records make the panel usable while the larger ones are made; the status bar says which.
    connect(worker_, &WhatIfWorker::firstRecords, this, [this](quint64, std::shared_ptr<const WhatIf> w) {
        whatIf_ = std::move(w);
        panel_->setBatch(runBatch_);
        panel_->setWhatIf(whatIf_);
        partial_ = true;
    });
    connect(worker_, &WhatIfWorker::recording, this, [this](quint64, qint64 batch, int done) {
        if (done > 2)
            emit statusMessage(
                tr("What-if: recording batch %1 (record %2); figures beyond batch %3 are extrapolated meanwhile")
                    .arg(batch)
                    .arg(done)
                    .arg(whatIf_ ? whatIf_->batch2() : 0),
                15000);
    });
    connect(worker_, &WhatIfWorker::recorded, this, [this](quint64, std::shared_ptr<const WhatIf> w) {
        whatIf_ = std::move(w);
        // Start where the run the window shows is: its batch and, when predictable, its precision (unless the
        // panel was already in use on the first records).
        if (!partial_) {
            panel_->setBatch(runBatch_);
            auto dtypes = whatIf_->dtypes();
            if (std::find(dtypes.begin(), dtypes.end(), runDtype_) != dtypes.end())
                panel_->setDtype(QString::fromStdString(runDtype_));
        }
        partial_ = false;
        panel_->setWhatIf(whatIf_);
        QStringList batches;
        for (auto b : whatIf_->recordedBatches())
            batches << QString::number(b);
        emit statusMessage(tr("What-if ready: recorded at batch %1").arg(batches.join(QStringLiteral(", "))), 4000);
        emit ready();
    });
    connect(worker_, &WhatIfWorker::tableReady, this,
        [this](quint64, std::shared_ptr<const WhatIfTable> table, WhatIfRequest request) {
            table_ = std::move(table);
            tableRequest_ = std::move(request);
            emit tableReady();
        });
    connect(worker_, &WhatIfWorker::seqRecorded, this, [this](quint64, std::shared_ptr<const WhatIf> w) {
        panel_->setSeqWhatIf(std::move(w), runSeq_);
        emit statusMessage(tr("What-if along the sequence ready (batch %1)").arg(runBatch_), 4000);
        emit seqReady();
    });
    connect(worker_, &WhatIfWorker::measured, this, [this](quint64, const Prediction& p) { panel_->showMeasurement(p); });
    connect(worker_, &WhatIfWorker::failed, this, [this](quint64, const QString& message) {
        if (whatIf_)
            panel_->showMeasurementFailed(message);
        else
            emit statusMessage(tr("What-if: %1").arg(message), 8000);
    });
    connect(panel_, &WhatIfPanel::budgetChanged, this, &WhatIfController::budgetChanged);
    connect(panel_, &WhatIfPanel::rankRequested, this, [this](std::int64_t x, const ParallelPlan& plan) {
        auto w = panel_->activeWhatIf();
        if (!w)
            return;
        try {
            auto report = std::make_shared<const Report>(w->predictedRankReport(x, plan));
            emit rankReady(report);
            emit statusMessage(tr("Showing one rank: %1, %2 %3 (predicted; Back to the run in the File menu)")
                                   .arg(QString::fromStdString(plan.text()),
                                       w->axis() == WhatIfAxis::Seq ? tr("sequence") : tr("micro-batch"))
                                   .arg(x),
                8000);
        } catch (const std::exception& e) {
            emit statusMessage(tr("Could not lay out the rank: %1").arg(QString::fromUtf8(e.what())), 8000);
        }
    });
    connect(panel_, &WhatIfPanel::measureRequested, this, [this](std::int64_t batch, const QString& dtype) {
        if (auto w = panel_->activeWhatIf())
            worker_->measure(file_, w, batch, dtype);
    });
}

std::int64_t WhatIfController::budget() const
{
    return panel_->budget();
}

void WhatIfController::clear()
{
    worker_->cancel();
    whatIf_.reset();
    table_.reset();
    partial_ = false;
    panel_->setWhatIf(nullptr);
    panel_->setSeqWhatIf(nullptr, 0);
}

void WhatIfController::record(std::shared_ptr<const OpenedFile> file, const Report& report)
{
    clear();
    file_ = std::move(file);
    runBatch_ = report.run.batch;
    runDtype_ = report.run.dtype;
    runSeq_ = report.run.seq;
    RunOptions base;
    base.inputs = report.run.input_shapes;
    base.input_types = report.run.input_types;
    base.dtype = "float32";
    // A meta run's what-if records on meta as well (shapes only); any other records on the CPU.
    if (report.run.device == "meta")
        base.device = "meta";
    // The what-if records the run the window shows: a training step is predicted as a training step.
    base.mode = report.run.mode;
    if (report.run.mode == RunMode::Train) {
        if (!report.run.optimizer.empty())
            base.optimizer = report.run.optimizer;
        if (!report.run.loss.empty())
            base.loss = report.run.loss;
    }
    base_ = base;
    askedUpTo_ = 0;
    worker_->record(file_, base, exportRequest());
}

void WhatIfController::recordUpTo(std::int64_t x)
{
    if (!file_ || !whatIf_ || x <= 0)
        return;
    askedUpTo_ = std::max(askedUpTo_, x);
    emit statusMessage(tr("What-if: recording up to micro-batch %1 for the GPUs tab").arg(x), 8000);
    worker_->record(file_, base_, withRow(exportRequest(), x));
}

WhatIfRequest WhatIfController::exportRequest() const
{
    WhatIfRequest request;
    request.current_batch = whatIf_ ? panel_->batch() : runBatch_;
    request.budget = panel_->budget();
    return request;
}

std::shared_ptr<const WhatIfTable> WhatIfController::tableForExport() const
{
    if (!whatIf_)
        return nullptr;
    auto request = exportRequest();
    if (table_ && whatIfRows(request) == whatIfRows(tableRequest_) && request.budget == tableRequest_.budget)
        return table_;
    return std::make_shared<const WhatIfTable>(whatIfTableFor(*whatIf_, request));
}

} // namespace memledger

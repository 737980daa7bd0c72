#include "remedies_worker.h"

#include "support/errors.h"
#include "whatif/remedies.h"

#include <optional>
#include <stdexcept>

namespace memledger {

RemediesWorker::RemediesWorker(QObject* parent)
    : QObject(parent)
    , computeJobs_(new JobRunner(this))
    , measureJobs_(new JobRunner(this))
{
    qRegisterMetaType<std::vector<memledger::Remedy>>("std::vector<memledger::Remedy>");
    qRegisterMetaType<memledger::Remedy>("memledger::Remedy");
}

RemediesWorker::~RemediesWorker() = default;

quint64 RemediesWorker::compute(std::shared_ptr<const OpenedFile> file, std::shared_ptr<const Report> report,
    std::shared_ptr<const WhatIf> whatIf, std::int64_t budget, std::vector<std::int64_t> tile)
{
    return computeJobs_->launch(
        [this, file, report, whatIf, budget, tile](quint64 job, const std::atomic<bool>*) {
            try {
                RemedyOptions o;
                o.budget = budget;
                o.whatif = whatIf.get();
                if (file && file->model && !tile.empty()) {
                    o.model = file->model.get();
                    o.tiling.tile = tile;
                }
                auto remedies = computeRemedies(*report, o);
                computeJobs_->deliver(job, [this, job, remedies] { emit computed(job, remedies); });
            } catch (const Cancelled&) {
            } catch (const std::exception& e) {
                auto message = QString::fromStdString(e.what());
                computeJobs_->deliver(job, [this, job, message] { emit computeFailed(job, message); });
            }
        },
        true);
}

quint64 RemediesWorker::measure(std::shared_ptr<const OpenedFile> file, std::shared_ptr<const Report> report,
    int row, Remedy remedy, QString variantPath)
{
    return measureJobs_->launch(
        [this, file, report, row, remedy, variantPath](quint64 job, const std::atomic<bool>*) {
            try {
                if (!file || !file->model)
                    throw std::invalid_argument("measuring needs the model the report was made from: open it");
                std::optional<Model> variant;
                if (!variantPath.isEmpty())
                    variant.emplace(Model::open(variantPath.toStdString()));
                auto m = measureRemedy(remedy, *report, *file->model, variant ? &*variant : nullptr);
                measureJobs_->deliver(job, [this, job, row, m] { emit measured(job, row, m); });
            } catch (const Cancelled&) {
            } catch (const std::exception& e) {
                auto message = QString::fromStdString(e.what());
                measureJobs_->deliver(job, [this, job, row, message] { emit measureFailed(job, row, message); });
            }
        },
        true);
}

} // namespace memledger

#pragma once
#include "job_runner.h"
#include "report/report.h"
#include "session/open_file.h"
#include "whatif/whatif.h"

#include <QObject>
#include <QString>

#include <memory>
#include <vector>

namespace memledger {

// Computes the "What would help" remedies and measures one of them, off the GUI thread. Like WhatIfWorker:
// every job has an id, a new one cancels the old of its kind, and stale results are dropped.
class RemediesWorker : public QObject {
    Q_OBJECT
public:
    explicit RemediesWorker(QObject* parent = nullptr);
    ~RemediesWorker() override;

    // `file` may be null or hold no model (a report or snapshot): the remedies that need no run. `whatIf`
    // (may be null) adds lower precision, the largest batch and micro-batches; `tile` a tiling run.
    quint64 compute(std::shared_ptr<const OpenedFile> file, std::shared_ptr<const Report> report,
        std::shared_ptr<const WhatIf> whatIf, std::int64_t budget, std::vector<std::int64_t> tile);
    // `variantPath`: the edited model for a remedy measured by "variant".
    quint64 measure(std::shared_ptr<const OpenedFile> file, std::shared_ptr<const Report> report, int row,
        Remedy remedy, QString variantPath);

signals:
    void computed(quint64 job, const std::vector<memledger::Remedy>& remedies);
    void measured(quint64 job, int row, const memledger::Remedy& remedy);
    void computeFailed(quint64 job, const QString& message);
    void measureFailed(quint64 job, int row, const QString& message);

private:
    JobRunner* computeJobs_;
    JobRunner* measureJobs_;
};

} // namespace memledger

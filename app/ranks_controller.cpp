#include "ranks_controller.h"

#include "job_runner.h"

#include <exception>
#include <string>
#include <vector>

namespace memledger {

RanksController::RanksController(QObject* parent)
    : QObject(parent)
    , jobs_(new JobRunner(this))
{
    qRegisterMetaType<std::shared_ptr<const memledger::RankTable>>("std::shared_ptr<const memledger::RankTable>");
}

void RanksController::open(const QStringList& paths)
{
    std::vector<std::string> list;
    for (const auto& p : paths)
        list.push_back(p.toStdString());
    reading_ = true;
    emit statusMessage(tr("Reading the ranks: %n file(s) or folder(s)…", nullptr, static_cast<int>(paths.size())), 0);
    jobs_->launch([this, list](quint64 job, const std::atomic<bool>*) {
        try {
            auto table = std::make_shared<const RankTable>(compareRanks(rankFiles(list)));
            jobs_->deliver(job, [this, table] {
                reading_ = false;
                emit statusMessage(tr("%n rank(s) read", nullptr, static_cast<int>(table->ranks.size())), 4000);
                emit ready(table);
            });
        } catch (const std::exception& e) {
            auto message = tr("Open ranks: %1").arg(QString::fromStdString(e.what()));
            jobs_->deliver(job, [this, message] {
                reading_ = false;
                emit statusMessage(QString(), 0);
                emit failed(message);
            });
        }
    });
}

} // namespace memledger

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
                auto text = tr("%n rank(s) read", nullptr, static_cast<int>(table->ranks.size()));
                for (const auto& l : table->left_out)
                    text += tr("; left out: %1").arg(QString::fromStdString(l.reason));
                emit statusMessage(text, table->left_out.empty() ? 4000 : 15000);
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

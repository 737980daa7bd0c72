#pragma once
// File > Open ranks…: the snapshots (or reports) of a multi-GPU job, one per rank, read with compareRanks
// (session/ranks.h) off the GUI thread; the Ranks view shows them. Opening other ranks cancels the reading
// before; a file that cannot be read fails the whole set with its name, and the window keeps what it shows.
#include "session/ranks.h"

#include <QObject>
#include <QStringList>

#include <memory>

namespace memledger {

class JobRunner;

class RanksController : public QObject {
    Q_OBJECT
public:
    explicit RanksController(QObject* parent = nullptr);

    // Files and folders (a folder stands for its .pickle, .pkl and .json files, sorted).
    void open(const QStringList& paths);
    bool isReading() const { return reading_; }

signals:
    void ready(std::shared_ptr<const memledger::RankTable> table);
    void failed(const QString& message); // names the file
    void statusMessage(const QString& text, int milliseconds);

private:
    JobRunner* jobs_;
    bool reading_ = false;
};

} // namespace memledger

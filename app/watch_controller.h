#pragma once
// File > Watch… and `memledger --watch FILE`: the window follows a snapshot or a report that a running job
// rewrites, in place or by an atomic replace (a new file renamed over the old, which a file watcher loses: the
// path is watched again, and so is its folder). Changes are debounced and the file is read off the GUI thread;
// a read that fails (a file caught mid-write) keeps the last good load and is retried at the next change. Each
// load keeps the view (zoom, selected module and range, device, tab), marks the previous load on the timeline
// (reload_marks.h) and says what changed in a notice over it (reload_change.h).
#include "reload_change.h"
#include "session/open_file.h"

#include <QObject>
#include <QString>

#include <memory>
#include <optional>

class QFileSystemWatcher;
class QLabel;
class QTimer;

namespace memledger {

class JobRunner;
class MainWindow;
class ReloadMarks;

class WatchController : public QObject {
    Q_OBJECT
public:
    explicit WatchController(MainWindow* window);

    QLabel* notice() const { return notice_; } // the line over the timeline; hidden while nothing is watched
    void watch(const QString& path); // reads it now, then at each rewrite
    void stop();
    bool isWatching() const { return !path_.isEmpty(); }
    QString path() const { return path_; }
    QString noticeText() const;
    int loads() const { return loads_; } // loads shown since watch()
    bool lastReadFailed() const { return lastReadFailed_; }
    ReloadMarks* marks() const { return marks_; }

signals:
    void fileRead(std::shared_ptr<const memledger::OpenedFile> file); // to FileSession::showRead
    void reloaded(); // a load is shown, the view kept and the notice saying what changed
    void readFailed(const QString& message); // the last good load stays shown
    void statusMessage(const QString& text, int milliseconds);
    void watchingChanged(bool watching);

private:
    // What the user was looking at, put back after a reload.
    struct KeptView {
        bool zoomed = false;
        double lower = 0, upper = 0;
        QString module;
        std::uint32_t rangeFirst = 0, rangeEnd = 0;
        int device = 0;
        int tab = -1;
    };
    struct Signature { // a rewrite changes one of these; another file's change in the folder none
        qint64 inode = -1, size = -1, mtimeNs = -1;
        bool operator==(const Signature& o) const { return inode == o.inode && size == o.size && mtimeNs == o.mtimeNs; }
    };
    Signature signature() const;
    void watchPath(); // (again, after a replace) the file and its folder
    void changed();
    void read();
    void readDone(std::shared_ptr<const OpenedFile> file, Signature read);
    void readFailedWith(const QString& message, Signature read);
    KeptView keepView() const;
    void restoreView(const KeptView& view);
    void shown(); // the load's report is on screen
    void setNotice(const QString& html, bool warning);

    MainWindow* window_;
    QFileSystemWatcher* watcher_;
    QTimer* debounce_;
    QTimer* retry_;
    JobRunner* reader_;
    ReloadMarks* marks_;
    QLabel* notice_;
    QString path_;
    bool reading_ = false;
    bool changedWhileReading_ = false;
    std::optional<Signature> lastRead_; // of the last read, good or not
    bool lastReadFailed_ = false;
    std::optional<LoadFigures> current_; // the load shown
    int loads_ = 0;
    quint64 generation_ = 0; // watch() and stop() make what an older read delivers stale
};

} // namespace memledger

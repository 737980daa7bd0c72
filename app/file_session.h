#pragma once
// The file the window shows and its runs: opening a file (once; its model then serves every run, the what-if and
// the remedies), running it with the Run panel's settings off the GUI thread, and what the Run panel says
// meanwhile. A file that cannot be opened leaves the one before shown, and the panel says so.
#include "report/report.h"
#include "session/open_file.h"

#include <QObject>
#include <QString>

#include <memory>
#include <optional>

namespace memledger {

class RunPanel;
class RunWorker;

class FileSession : public QObject {
    Q_OBJECT
public:
    FileSession(RunPanel* panel, QObject* parent);

    // A model (run at once), a saved report or a snapshot (read); "" is the RFBNet demo, "demo:NAME" a built-in one.
    void open(const QString& path);
    // The command line's --input, --batch, --seq, --mode, --optimizer, --loss and --dtype: the next open() runs
    // with them (the window's first file), then the Run panel's settings again.
    void setCommandLine(const RunOptions& options) { commandLine_ = options; }
    void run(); // the file shown again, at the Run panel's settings
    void cancel();
    bool isRunning() const;
    // A report or snapshot read elsewhere (the watcher's reload, watch_controller.h) becomes the file shown, as if
    // opened here: opened() when it is another file than the one shown, then finished() with its report.
    void showRead(std::shared_ptr<const OpenedFile> file);

    const std::shared_ptr<const OpenedFile>& file() const { return file_; }
    QString path() const { return path_; } // "" for a built-in demo
    bool isModel() const { return file_ && file_->kind == FileKind::Model; }
    QString displayName() const; // the file's name, or the built-in demo's ("demo:mnist-train.pt")

signals:
    void started(); // a file is being opened or run: what is shown is the previous report until finished()
    void stopped(); // that open or run failed or was cancelled: the previous report is still the one shown
    void opened(); // file() is the new file; its report follows
    void finished(std::shared_ptr<const memledger::Report> report);
    void failed(const QString& message); // names the file
    void inputError(const QString& message); // the Run panel's shapes do not parse

private:
    void take(std::shared_ptr<const OpenedFile> file); // the file opened, into the Run panel
    void show(std::shared_ptr<const Report> report); // its report, into the Run panel

    RunPanel* panel_;
    RunWorker* worker_;
    std::shared_ptr<const OpenedFile> file_;
    QString path_;
    QString opening_; // a file being opened: until it opens, the one before is shown
    bool shown_ = false; // a report of file_ has been shown
    std::optional<RunOptions> commandLine_;
};

} // namespace memledger

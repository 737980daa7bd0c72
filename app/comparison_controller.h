#pragma once
// File > Compare with...: B runs (or is read) on a worker of its own, and the comparison view stacks over the
// window's central widget, taking the docks' room, until it is closed or another report is shown.
#include "report/report.h"
#include "run_worker.h"

#include <QList>
#include <QObject>
#include <QString>

#include <memory>

class QDockWidget;
class QMainWindow;
class QStackedWidget;

namespace memledger {

class DiffView;

class ComparisonController : public QObject {
    Q_OBJECT
public:
    explicit ComparisonController(QMainWindow* window);

    DiffView* view() const { return view_; }
    // Compares `a` (shown as `aName`) with what `request` opens and runs.
    void compare(std::shared_ptr<const Report> a, const QString& aName, RunRequest request);
    void close();
    bool isShown() const;

signals:
    void shown();
    void failed(const QString& message); // names the file
    void statusMessage(const QString& text, int milliseconds);

private:
    QMainWindow* window_;
    RunWorker* worker_;
    DiffView* view_;
    QStackedWidget* stack_ = nullptr; // made at the first comparison
    std::shared_ptr<const Report> a_;
    QString aName_;
    QString bFile_;
    QList<QDockWidget*> hiddenDocks_; // the docks the comparison hid, shown again when it closes
};

} // namespace memledger

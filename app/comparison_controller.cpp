#include "comparison_controller.h"

#include "diff_view.h"
#include "analysis/report_diff.h"

#include <QDockWidget>
#include <QFileInfo>
#include <QMainWindow>
#include <QStackedWidget>

namespace memledger {

ComparisonController::ComparisonController(QMainWindow* window)
    : QObject(window)
    , window_(window)
    , worker_(new RunWorker(this))
    , view_(new DiffView)
{
    connect(view_, &DiffView::closeRequested, this, &ComparisonController::close);
    connect(worker_, &RunWorker::finished, this, [this](quint64, std::shared_ptr<const Report> b) {
        if (!a_)
            return;
        auto diff = std::make_shared<const ReportDiff>(
            diffReports(*a_, *b, aName_.toStdString(), QFileInfo(bFile_).fileName().toStdString()));
        view_->setDiff(diff);
        if (!stack_) {
            stack_ = new QStackedWidget;
            stack_->addWidget(window_->takeCentralWidget());
            stack_->addWidget(view_);
            window_->setCentralWidget(stack_);
        }
        stack_->setCurrentWidget(view_);
        // The comparison takes the window's width: the docks describe A alone and come back when it closes.
        for (auto* dock : window_->findChildren<QDockWidget*>())
            if (dock->isVisible() && !hiddenDocks_.contains(dock)) {
                hiddenDocks_ << dock;
                dock->hide();
            }
        emit statusMessage(tr("Comparing %1 (A) with %2 (B)").arg(aName_, QFileInfo(bFile_).fileName()), 6000);
        emit shown();
    });
    connect(worker_, &RunWorker::failed, this,
        [this](quint64, const QString& message) { emit failed(tr("Compare with: %1").arg(message)); });
}

void ComparisonController::compare(std::shared_ptr<const Report> a, const QString& aName, RunRequest request)
{
    a_ = std::move(a);
    aName_ = aName;
    bFile_ = request.path;
    emit statusMessage(tr("Compare with %1: opening and running it as B…").arg(QFileInfo(bFile_).fileName()), 0);
    worker_->start(std::move(request));
}

void ComparisonController::close()
{
    worker_->cancel();
    if (stack_)
        stack_->setCurrentIndex(0);
    for (auto* dock : hiddenDocks_)
        dock->show();
    hiddenDocks_.clear();
}

bool ComparisonController::isShown() const
{
    return stack_ && stack_->currentWidget() == view_;
}

} // namespace memledger

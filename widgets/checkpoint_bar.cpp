#include "checkpoint_bar.h"
#include "bytes_text.h"

#include "layer_tree_model.h"
#include "support/format.h"
#include "whatif/checkpoint.h"

#include <QApplication>
#include <QComboBox>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QLabel>
#include <QPushButton>

#include <stdexcept>

namespace memledger {

namespace {
CheckpointImpl implOf(const QComboBox* box)
{
    return box->currentIndex() == 1 ? CheckpointImpl::NonReentrant : CheckpointImpl::Reentrant;
}
} // namespace

CheckpointBar::CheckpointBar(LayerTreeModel* model, QWidget* parent)
    : QWidget(parent)
    , model_(model)
    , impl_(new QComboBox(this))
    , label_(new QLabel(this))
    , autoPlan_(new QPushButton(tr("Auto plan for budget…"), this))
    , clear_(new QPushButton(tr("Clear"), this))
{
    impl_->addItem(tr("reentrant"));
    impl_->addItem(tr("non-reentrant"));
    impl_->setToolTip(tr("torch.utils.checkpoint's implementation: use_reentrant=True (PyTorch 1.13's default) "
                         "or False"));
    label_->setTextFormat(Qt::RichText);
    label_->setWordWrap(true);
    label_->setText(tr("Checkpoint: tick modules in the tree to predict the step with torch.utils.checkpoint "
                       "around them"));
    autoPlan_->setToolTip(tr("The modules whose checkpointing fits a peak-total budget with the least recompute"));
    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(4, 2, 4, 2);
    layout->addWidget(label_, 1);
    layout->addWidget(impl_);
    layout->addWidget(autoPlan_);
    layout->addWidget(clear_);
    connect(model_, &LayerTreeModel::checkpointsChanged, this, [this] { update(); });
    connect(impl_, QOverload<int>::of(&QComboBox::currentIndexChanged), this, [this] { update(); });
    connect(clear_, &QPushButton::clicked, this, [this] { model_->setCheckpointed({}); });
    connect(autoPlan_, &QPushButton::clicked, this, &CheckpointBar::askBudget);
    setVisible(false);
}

void CheckpointBar::setReport(std::shared_ptr<const Report> report)
{
    report_ = std::move(report);
    active_ = report_ && !checkpointableModules(*report_).empty();
    setVisible(active_);
    update();
}

QString CheckpointBar::predictionText() const { return label_->text(); }

void CheckpointBar::update()
{
    auto paths = model_->checkpointed();
    if (!report_ || !active_ || paths.isEmpty()) {
        label_->setText(tr("Checkpoint: tick modules in the tree to predict the step with torch.utils.checkpoint "
                           "around them"));
        emit predicted(nullptr, {});
        return;
    }
    std::vector<std::string> list;
    for (const auto& p : paths)
        list.push_back(p.toStdString());
    try {
        auto p = predictCheckpoint(*report_, list, implOf(impl_), false);
        QString change = p.saving_bytes >= 0
            ? tr("saves %1").arg(bytesText(p.saving_bytes))
            : tr("<b style='color:#b00020'>WORSE by %1</b>").arg(bytesText(-p.saving_bytes));
        QString text = tr("Checkpointing %1: predicted peak <b>%2</b> (recorded %3), %4, peak total %5, recompute "
                          "%6 ms")
                           .arg(QString::number(p.checkpoint.size()), bytesText(p.predicted_peak_bytes),
                               bytesText(p.recorded_peak_bytes), change, bytesText(p.predicted_peak_total_bytes),
                               QString::number(p.recompute_ms, 'f', 1));
        QStringList notes;
        for (const auto& n : p.notes)
            notes << QString::fromStdString(n).toHtmlEscaped();
        label_->setToolTip(notes.join(QStringLiteral("<br>")));
        if (p.checkpoint.size() < list.size())
            text += tr(" — <b>%1 left out</b> (hover for why)").arg(list.size() - p.checkpoint.size());
        label_->setText(text);
        emit predicted(p.report, tr("predicted with checkpoints (peak total %1)").arg(bytesText(p.predicted_peak_total_bytes)));
    } catch (const std::exception& e) {
        label_->setText(QString::fromStdString(e.what()).toHtmlEscaped());
        emit predicted(nullptr, {});
    }
}

void CheckpointBar::askBudget()
{
    if (!report_)
        return;
    bool ok = false;
    auto text = QInputDialog::getText(this, tr("Auto plan"),
        tr("Peak total to fit (recorded: %1), e.g. 20MiB:").arg(bytesText(report_->peak_total_bytes)), QLineEdit::Normal,
        bytesText(report_->peak_total_bytes * 8 / 10), &ok);
    if (!ok)
        return;
    auto budget = parseBytes(text.toStdString());
    if (!budget || *budget <= 0) {
        label_->setText(tr("'%1' is not a size like 20MiB").arg(text.toHtmlEscaped()));
        return;
    }
    planFor(*budget);
}

void CheckpointBar::planFor(std::int64_t budget)
{
    if (!report_)
        return;
    QApplication::setOverrideCursor(Qt::WaitCursor);
    try {
        auto plan = planCheckpoints(*report_, budget, implOf(impl_));
        QStringList paths;
        for (const auto& p : plan.prediction.checkpoint)
            paths << QString::fromStdString(p);
        model_->setCheckpointed(paths); // predicts again and shows it
        if (!plan.fits)
            label_->setText(label_->text() + tr(" — <b>no plan fits %1</b>; this one has the lowest peak found")
                                                 .arg(bytesText(budget)));
        else
            label_->setText(label_->text() + tr(" — fits %1").arg(bytesText(budget)));
    } catch (const std::exception& e) {
        label_->setText(QString::fromStdString(e.what()).toHtmlEscaped());
    }
    QApplication::restoreOverrideCursor();
}

} // namespace memledger

#include "gpu_fit_view.h"
#include "bytes_text.h"

#include "exports/serve_export.h"
#include "whatif/gpu_fit.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

namespace memledger {

namespace {

QTableWidget* makeTable(QWidget* parent, const QStringList& headers)
{
    auto* t = new QTableWidget(0, static_cast<int>(headers.size()), parent);
    t->setHorizontalHeaderLabels(headers);
    t->verticalHeader()->hide();
    t->setEditTriggers(QAbstractItemView::NoEditTriggers);
    t->setSelectionMode(QAbstractItemView::NoSelection);
    t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    return t;
}

QTableWidgetItem* item(const QString& text, bool right = true)
{
    auto* i = new QTableWidgetItem(text);
    i->setTextAlignment(static_cast<int>((right ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignVCenter));
    return i;
}

} // namespace

GpuFitView::GpuFitView(QWidget* parent)
    : QWidget(parent)
{
    header_ = new QLabel(this);
    header_->setWordWrap(true);
    header_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    answers_ = makeTable(this,
        {tr("Precision"), tr("Strategy"), tr("Checkpointing"), tr("Fewest GPUs"), tr("Micro-batch"), tr("Peak total"),
            tr("Reserved"), tr("Weights"), tr("Gradients"), tr("Optimizer state"), tr("Host / node")});
    byGpus_ = makeTable(this, {tr("Precision"), tr("Strategy"), tr("Checkpointing")});
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(header_);
    layout->addWidget(answers_, 3);
    byGpusLabel_ = new QLabel(tr("Largest micro-batch per rank by GPU count (–: does not fit):"), this);
    layout->addWidget(byGpusLabel_);
    layout->addWidget(byGpus_, 2);
    serving_ = makeTable(this, {tr("Part"), tr("Bytes per GPU"), tr("From")});
    serving_->hide();
    layout->addWidget(serving_, 3);
    servingByGpus_ = makeTable(this, {tr("Tensor-parallel GPUs"), tr("KV heads per GPU"), tr("Weights per GPU"),
                                         tr("KV cache per GPU"), tr("Sequences at the context"), tr("Longest context at the batch")});
    servingByGpus_->hide();
    layout->addWidget(servingByGpus_, 2);
    notes_ = new QLabel(this);
    notes_->setWordWrap(true);
    notes_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(notes_);
    recordFurther_ = new QPushButton(this);
    recordFurther_->setToolTip(tr("An answer lies beyond the last record of its precision (marked *): record the step "
                                  "up to past it, so that it is interpolated between records, not extrapolated"));
    recordFurther_->hide();
    connect(recordFurther_, &QPushButton::clicked, this, [this] {
        if (recordUpTo_ > 0)
            emit recordFurtherRequested(recordUpTo_);
    });
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(recordFurther_);
    buttons->addStretch(1);
    layout->addLayout(buttons);
    clear(tr("The fit table answers for a training step: run the model with Mode \"training step\"."));
}

QString GpuFitView::headerText() const
{
    return header_->text();
}

QString GpuFitView::notesText() const
{
    return notes_->text();
}

void GpuFitView::clear(const QString& why)
{
    header_->setText(why);
    answers_->setRowCount(0);
    byGpus_->setRowCount(0);
    serving_->setRowCount(0);
    servingByGpus_->setRowCount(0);
    notes_->clear();
    recordUpTo_ = 0;
    recordFurther_->hide();
}

void GpuFitView::setServePlan(const std::vector<ServePlan>& byGpus, const QString& model)
{
    if (byGpus.empty()) {
        clear(tr("No serving answer"));
        return;
    }
    const auto& plan = byGpus.front();
    recordUpTo_ = 0;
    recordFurther_->hide();
    for (QWidget* w : std::initializer_list<QWidget*> {answers_, byGpus_, byGpusLabel_})
        w->hide();
    serving_->show();
    servingByGpus_->show();
    servingByGpus_->setRowCount(static_cast<int>(byGpus.size()));
    for (int r = 0; r < static_cast<int>(byGpus.size()); ++r) {
        const auto& p = byGpus[static_cast<std::size_t>(r)];
        servingByGpus_->setItem(r, 0, item(QString::number(p.request.gpus)));
        servingByGpus_->setItem(r, 1, item(QString::number(p.kv_heads_per_gpu)));
        servingByGpus_->setItem(r, 2, item(bytesText(p.weight_bytes)));
        servingByGpus_->setItem(r, 3, item(bytesText(p.kv_cache_bytes)));
        servingByGpus_->setItem(r, 4, item(QString::number(p.sequences)));
        servingByGpus_->setItem(r, 5, item(p.request.batch > 0 ? QString::number(p.longest_context) : QStringLiteral("–")));
    }
    header_->setText(QString::fromStdString(servePlanTitle(plan, model.toStdString())) + QStringLiteral(":\n")
        + QString::fromStdString(servePlanAnswer(plan)));
    const auto lines = servePlanLayout(plan);
    serving_->setRowCount(static_cast<int>(lines.size()));
    int row = 0;
    for (const auto& [what, bytes, why] : lines) {
        serving_->setItem(row, 0, item(QString::fromStdString(what), false));
        serving_->setItem(row, 1, item((bytes < 0 ? QStringLiteral("− ") : QString()) + bytesText(bytes < 0 ? -bytes : bytes)));
        serving_->setItem(row, 2, item(QString::fromStdString(why), false));
        ++row;
    }
    QStringList notes;
    for (const auto& n : plan.notes)
        notes << tr("Note: %1").arg(QString::fromStdString(n));
    notes << QString::fromLatin1(kServeNotModelled);
    notes_->setText(notes.join(QLatin1Char('\n')));
}

void GpuFitView::setTable(const GpuFitTable& t, std::int64_t recordUpTo)
{
    serving_->hide();
    servingByGpus_->hide();
    for (QWidget* w : std::initializer_list<QWidget*> {answers_, byGpus_, byGpusLabel_})
        w->show();
    recordUpTo_ = recordUpTo;
    recordFurther_->setText(tr("Record up to micro-batch %1").arg(recordUpTo));
    recordFurther_->setVisible(recordUpTo > 0);
    header_->setText(tr("Budget per GPU %1; off it, outside PyTorch's allocator: the CUDA context %2 and NCCL's "
                        "buffers %3 (estimates). Rank 0 of each job%4; answered in %5 s.")
                         .arg(QString::fromStdString(t.budget_text.empty() ? bytesText(t.budget_bytes).toStdString()
                                                                           : t.budget_text),
                             bytesText(t.overheads.cuda_context_bytes), bytesText(t.overheads.nccl_bytes),
                             t.device == "meta" ? tr(", computed on the meta device from shapes") : QString())
                         .arg(t.seconds, 0, 'f', 1));
    answers_->setRowCount(static_cast<int>(t.answers.size()));
    for (std::size_t i = 0; i < t.answers.size(); ++i) {
        const auto& a = t.answers[i];
        const int row = static_cast<int>(i);
        auto* precision = item(QString::fromStdString(a.precision), false);
        precision->setToolTip(QString::fromStdString(precisionText(a.precision)));
        answers_->setItem(row, 0, precision);
        answers_->setItem(row, 1, item(QString::fromStdString(a.strategyText()), false));
        auto* checkpoint = item(QString::fromStdString(a.checkpoint), false);
        if (a.checkpoint != "none")
            checkpoint->setToolTip(tr("%1% of the forward's ops run again in the backward").arg(100.0 * a.recompute_share, 0, 'f', 1));
        answers_->setItem(row, 2, checkpoint);
        for (int c = 3; c < answers_->columnCount(); ++c)
            answers_->setItem(row, c, item(QString()));
        if (!a.not_modelled.empty()) {
            answers_->item(row, 3)->setText(tr("not modelled"));
            answers_->item(row, 3)->setToolTip(QString::fromStdString(a.not_modelled));
            continue;
        }
        if (a.fewest_gpus == 0 || !a.at) {
            answers_->item(row, 3)->setText(tr("none up to %1").arg(t.gpu_counts.empty() ? 0 : t.gpu_counts.back()));
            if (a.closest) { // how far the closest rank is from fitting
                const auto& p = *a.closest;
                answers_->item(row, 5)->setText(bytesText(p.predicted_peak_total_bytes));
                answers_->item(row, 5)->setToolTip(tr("At %1 GPUs and micro-batch %2: the closest rank to fitting")
                                                       .arg(t.gpu_counts.empty() ? 0 : t.gpu_counts.back())
                                                       .arg(p.batch));
                answers_->item(row, 6)->setText(p.predicted_reserved_bytes > 0 ? bytesText(p.predicted_reserved_bytes) : tr("—"));
                answers_->item(row, 7)->setText(bytesText(p.weight_bytes));
                answers_->item(row, 8)->setText(bytesText(p.gradient_bytes));
                answers_->item(row, 9)->setText(bytesText(p.optimizer_state_bytes));
            }
            continue;
        }
        const auto& p = *a.at;
        answers_->item(row, 3)->setText(QString::number(a.fewest_gpus));
        answers_->item(row, 4)->setText(QString::fromStdString(a.microBatchText(a.micro_batch))
            + (a.grad_accum > 1 ? QStringLiteral(" × %1").arg(a.grad_accum) : QString()));
        if (a.grad_accum > 1)
            answers_->item(row, 4)->setToolTip(tr("%1 micro-batches accumulated per optimizer step: global batch %2")
                                                   .arg(a.grad_accum)
                                                   .arg(a.globalBatch()));
        answers_->item(row, 5)->setText(bytesText(p.predicted_peak_total_bytes));
        answers_->item(row, 6)->setText(p.predicted_reserved_bytes > 0 ? bytesText(p.predicted_reserved_bytes) : tr("—"));
        answers_->item(row, 7)->setText(bytesText(p.weight_bytes));
        answers_->item(row, 8)->setText(bytesText(p.gradient_bytes));
        answers_->item(row, 9)->setText(bytesText(p.optimizer_state_bytes));
        // Offloaded (the What if panel's CPU offload row): the host's pinned memory for the ranks a node holds.
        answers_->item(row, 10)->setText(a.offload.empty() ? tr("—") : bytesText(p.host_bytes_per_node));
        for (int c : {3, 4}) {
            auto f = answers_->item(row, c)->font();
            f.setBold(true);
            answers_->item(row, c)->setFont(f);
        }
    }
    QStringList headers {tr("Precision"), tr("Strategy"), tr("Checkpointing")};
    for (int n : t.gpu_counts)
        headers << QString::number(n);
    byGpus_->setColumnCount(static_cast<int>(headers.size()));
    byGpus_->setHorizontalHeaderLabels(headers);
    int rows = 0;
    for (const auto& a : t.answers)
        rows += a.not_modelled.empty() ? 1 : 0;
    byGpus_->setRowCount(rows);
    int row = 0;
    for (const auto& a : t.answers) {
        if (!a.not_modelled.empty())
            continue;
        byGpus_->setItem(row, 0, item(QString::fromStdString(a.precision), false));
        byGpus_->setItem(row, 1, item(QString::fromStdString(a.strategyText()), false));
        byGpus_->setItem(row, 2, item(QString::fromStdString(a.checkpoint), false));
        int c = 3;
        for (const auto& [n, b] : a.largest)
            byGpus_->setItem(row, c++, item(b == 0 ? tr("–") : QString::fromStdString(a.microBatchText(b))));
        ++row;
    }
    QStringList notes; // as `memledger fit` and its HTML page say them
    if (const auto legend = t.extrapolatedLegend(); !legend.empty())
        notes << QString::fromStdString(legend);
    for (const auto& n : t.notes)
        notes << tr("Note: %1").arg(QString::fromStdString(n));
    notes_->setText(notes.join(QLatin1Char('\n')));
}

} // namespace memledger

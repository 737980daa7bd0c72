#include "whatif_panel.h"
#include "bytes_text.h"

#include "ledger_colors.h"
#include "support/format.h"
#include "whatif/gpu_fit.h"

#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QEvent>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <cmath>

namespace memledger {

namespace {

constexpr int kMaxPower = 10; // slider: batch 1, 2, 4, ... 1024
constexpr int kMaxBatch = 1000000;
constexpr int kMaxSeqPower = 16; // sequence 1, 2, 4, ... 65536
// Replaying the caching allocator for the fit table costs ~20 replays: only for runs this small.
constexpr std::size_t kReservedSearchEvents = 200000;

} // namespace

WhatIfPanel::WhatIfPanel(QWidget* parent)
    : QWidget(parent)
{
    slider_ = new QSlider(Qt::Horizontal, this);
    slider_->setRange(0, kMaxPower);
    slider_->setPageStep(1);
    slider_->setTickPosition(QSlider::TicksBelow);
    slider_->setToolTip(tr("Batch size, in powers of two"));
    batchBox_ = new QSpinBox(this);
    batchBox_->setRange(1, kMaxBatch);
    dtypeBox_ = new QComboBox(this);
    dtypeBox_->addItems({"float32", "bfloat16", "float16"});
    budgetBox_ = new QComboBox(this);
    budgetBox_->setEditable(true);
    // Two plain sizes, then the GPUs by name with the memory PyTorch reports for them (support/format.h, the same
    // table as --budget): "H100-80GB (79.10 GiB)" means 79.10 GiB, not 80. budget() reads what is before the bracket.
    budgetBox_->addItem(QStringLiteral("8 GiB"));
    budgetBox_->addItem(QStringLiteral("16 GiB"));
    for (const auto& [name, bytes] : gpuPresets())
        budgetBox_->addItem(QStringLiteral("%1 (%2)").arg(QString::fromStdString(name), bytesText(bytes)));
    budgetBox_->setCurrentIndex(1);
    budgetBox_->setToolTip(tr("GPU memory to fit in: a GPU, or a size such as 12 GiB or 512 MiB"));

    peak_ = new QLabel(this);
    total_ = new QLabel(this);
    reserved_ = new QLabel(this);
    fits_ = new QLabel(this);
    fits_->setObjectName(QStringLiteral("fits")); // the answer, found by name (screenshots scroll to it)
    decides_ = new QLabel(this);
    method_ = new QLabel(this);
    notes_ = new QLabel(this);
    // Long sentences wrap: a label that grows wide would widen the whole dock area.
    for (auto* l : {fits_, decides_, method_, notes_})
        l->setWordWrap(true);
    for (auto* l : {peak_, total_, reserved_})
        l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    measure_ = new QPushButton(tr("Measure"), this);
    measure_->setToolTip(tr("Run the model at this batch and precision on the CPU and compare"));

    // One rank of a data-parallel job (a training step): GPUs and strategy, and the fewest GPUs that fit.
    gpusBox_ = new QSpinBox(this);
    gpusBox_->setRange(1, 1024);
    gpusBox_->setToolTip(tr("GPUs the job runs on; the figures are one rank's (rank 0)"));
    shardBox_ = new QComboBox(this);
    shardBox_->addItem(tr("one device"), QString());
    shardBox_->addItem(tr("FSDP (fully_shard)"), QStringLiteral("fsdp"));
    shardBox_->addItem(tr("ZeRO-2 (FSDP, no reshard after forward)"), QStringLiteral("zero2"));
    shardBox_->addItem(tr("ZeRO-1 (optimizer state sharded)"), QStringLiteral("zero1"));
    shardBox_->addItem(tr("DDP (replicated)"), QStringLiteral("ddp"));
    shardBox_->addItem(tr("DeepSpeed ZeRO-1"), QStringLiteral("ds-zero1"));
    shardBox_->addItem(tr("DeepSpeed ZeRO-2"), QStringLiteral("ds-zero2"));
    shardBox_->addItem(tr("DeepSpeed ZeRO-3"), QStringLiteral("ds-zero3"));
    shardBox_->setToolTip(tr("How the job shards the parameters, gradients and optimizer state"));
    checkpointBox_ = new QComboBox(this);
    checkpointBox_->addItem(tr("none"), QStringLiteral("none"));
    checkpointBox_->addItem(tr("selective (matmuls kept)"), QStringLiteral("selective"));
    checkpointBox_->addItem(tr("full (each block)"), QStringLiteral("full"));
    checkpointBox_->setToolTip(tr("Activation checkpointing of each repeated block (torch.utils.checkpoint, "
                                  "non-reentrant): full recomputes the block's forward in its backward, selective "
                                  "keeps the outputs of its matrix products and attention"));
    checkpointLabel_ = new QLabel(tr("Checkpointing"), this);
    gradAccumBox_ = new QSpinBox(this);
    gradAccumBox_->setRange(1, 1024);
    gradAccumBox_->setToolTip(tr("Gradient accumulation: micro-batches per optimizer step. The gradients stay alive from "
                                 "the first micro-batch's backward to the optimizer's step (without synchronization "
                                 "between them: FSDP's set_requires_gradient_sync(False), DDP's no_sync); the global "
                                 "batch is the batch x micro-batches x GPUs"));
    gradAccumLabel_ = new QLabel(tr("Micro-batches"), this);
    offloadBox_ = new QCheckBox(tr("parameters, gradients, optimizer"), this);
    offloadBox_->setToolTip(tr("CPU offload (FSDP2's CPUOffloadPolicy, with FSDP or ZeRO-2): the rank's parameter and "
                               "gradient shards, its optimizer state and step live in the host's pinned memory; each "
                               "unit's shards are copied to the GPU for its forward and backward; with DeepSpeed's "
                               "ZeRO-3 its offload_param and offload_optimizer, with its stages 1 and 2 "
                               "ZeRO-Offload's offload_optimizer alone)"));
    offloadLabel_ = new QLabel(tr("CPU offload"), this);
    // The choices' long names ("ZeRO-2 (FSDP, no reshard after forward)", "bfloat16 mixed (...)") never widen the
    // panel past its dock: the box shows what fits and its list shows them whole. A wider panel was clipped on the
    // right, the Fits answer with it.
    for (auto* box : {dtypeBox_, budgetBox_, shardBox_, checkpointBox_}) {
        box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
        box->setMinimumContentsLength(10);
    }
    gpusLabel_ = new QLabel(tr("GPUs"), this);
    shardLabel_ = new QLabel(tr("Sharding"), this);
    showRank_ = new QPushButton(tr("Show this rank"), this);
    showRank_->setToolTip(tr("Show one rank's step in the timeline, the layer tree and the ledgers"));
    gpuFitTitle_ = new QLabel(this);
    gpuFitTitle_->setWordWrap(true);
    gpuFit_ = new QTableWidget(0, 3, this);
    gpuFit_->setHorizontalHeaderLabels({tr("Strategy"), tr("Fewest GPUs"), tr("Micro-batch")});
    gpuFit_->verticalHeader()->hide();
    gpuFit_->horizontalHeader()->setStretchLastSection(true);
    gpuFit_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    gpuFit_->setSelectionMode(QAbstractItemView::NoSelection);

    fitTable_ = new QTableWidget(0, 2, this);
    fitTable_->setHorizontalHeaderLabels({tr("Precision"), tr("Largest batch")});
    fitTable_->verticalHeader()->hide();
    fitTable_->horizontalHeader()->setStretchLastSection(true);
    fitTable_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    fitTable_->setSelectionMode(QAbstractItemView::NoSelection);

    auto* batchRow = new QHBoxLayout;
    batchRow->addWidget(slider_, 1);
    batchRow->addWidget(batchBox_);
    // The sequence length of token inputs (language models): shown when a sequence what-if is recorded.
    seqSlider_ = new QSlider(Qt::Horizontal, this);
    seqSlider_->setRange(0, kMaxSeqPower);
    seqSlider_->setPageStep(1);
    seqSlider_->setTickPosition(QSlider::TicksBelow);
    seqSlider_->setToolTip(tr("Sequence length of the token inputs, in powers of two"));
    seqBox_ = new QSpinBox(this);
    seqBox_->setRange(1, 1 << kMaxSeqPower);
    seqRow_ = new QWidget(this);
    auto* seqRow = new QHBoxLayout(seqRow_);
    seqRow->setContentsMargins(0, 0, 0, 0);
    seqRow->addWidget(seqSlider_, 1);
    seqRow->addWidget(seqBox_);
    seqLabel_ = new QLabel(tr("Sequence"), this);
    auto* form = new QFormLayout;
    form->addRow(tr("Batch"), batchRow);
    form->addRow(seqLabel_, seqRow_);
    form->addRow(tr("Precision"), dtypeBox_);
    form->addRow(gpusLabel_, gpusBox_);
    form->addRow(shardLabel_, shardBox_);
    form->addRow(checkpointLabel_, checkpointBox_);
    form->addRow(gradAccumLabel_, gradAccumBox_);
    form->addRow(offloadLabel_, offloadBox_);
    form->addRow(tr("Memory budget"), budgetBox_);
    form->addRow(tr("Peak"), peak_);
    form->addRow(tr("Peak total"), total_);
    form->addRow(tr("Reserved"), reserved_);
    form->addRow(tr("Fits"), fits_);
    form->addRow(QString(), decides_);
    form->addRow(QString(), method_);
    form->setRowWrapPolicy(QFormLayout::DontWrapRows);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(measure_);
    buttons->addWidget(showRank_);
    buttons->addStretch(1);
    layout->addLayout(buttons);
    fitTableTitle_ = new QLabel(tr("Largest batch that fits the budget:"), this);
    layout->addWidget(fitTableTitle_);
    layout->addWidget(fitTable_);
    layout->addWidget(gpuFitTitle_);
    layout->addWidget(gpuFit_);
    layout->addWidget(notes_);
    layout->addStretch(1);

    reservedTimer_ = new QTimer(this);
    reservedTimer_->setSingleShot(true);
    reservedTimer_->setInterval(150);
    fitTimer_ = new QTimer(this);
    fitTimer_->setSingleShot(true);
    fitTimer_->setInterval(250);
    connect(reservedTimer_, &QTimer::timeout, this, &WhatIfPanel::updateReserved);
    connect(fitTimer_, &QTimer::timeout, this, &WhatIfPanel::updateFitTable);

    connect(slider_, &QSlider::valueChanged, this, [this](int power) {
        QSignalBlocker block(batchBox_);
        batchBox_->setValue(1 << power);
        repredict();
    });
    connect(batchBox_, qOverload<int>(&QSpinBox::valueChanged), this, [this](int batch) {
        QSignalBlocker block(slider_);
        slider_->setValue(std::min(kMaxPower, static_cast<int>(std::floor(std::log2(batch)))));
        repredict();
    });
    connect(seqSlider_, &QSlider::valueChanged, this, [this](int power) {
        QSignalBlocker block(seqBox_);
        seqBox_->setValue(1 << power);
        repredict();
        fitTimer_->start();
    });
    connect(seqBox_, qOverload<int>(&QSpinBox::valueChanged), this, [this](int seq) {
        QSignalBlocker block(seqSlider_);
        seqSlider_->setValue(std::min(kMaxSeqPower, static_cast<int>(std::floor(std::log2(seq)))));
        repredict();
        fitTimer_->start();
    });
    connect(dtypeBox_, &QComboBox::currentTextChanged, this, [this] {
        repredict();
        fitTimer_->start();
    });
    connect(gpusBox_, qOverload<int>(&QSpinBox::valueChanged), this, [this](int gpus) {
        if (gpus > 1 && shard().isEmpty()) { // more than one GPU: a job, FSDP unless another is chosen
            QSignalBlocker block(shardBox_);
            setShard(QStringLiteral("fsdp"));
        }
        repredict();
    });
    connect(shardBox_, &QComboBox::currentIndexChanged, this, [this] { repredict(); });
    connect(checkpointBox_, &QComboBox::currentIndexChanged, this, [this] {
        repredict();
        updateFitTable();
        updateGpuFit();
        emit checkpointChanged();
    });
    connect(gradAccumBox_, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
        repredict();
        updateFitTable();
        updateGpuFit();
        emit checkpointChanged(); // the staged what-if changed: the GPUs tab answers for it again
    });
    connect(offloadBox_, &QCheckBox::toggled, this, [this] {
        repredict();
        updateGpuFit();
        emit checkpointChanged(); // the GPUs tab answers for the panel's job again
    });
    connect(showRank_, &QPushButton::clicked, this, &WhatIfPanel::requestRank);
    connect(budgetBox_, &QComboBox::currentTextChanged, this, [this] {
        showPrediction(current_, !reservedTimer_->isActive());
        fitTimer_->start();
        budgetTimer_->start();
    });
    budgetTimer_ = new QTimer(this);
    budgetTimer_->setSingleShot(true);
    budgetTimer_->setInterval(400);
    connect(budgetTimer_, &QTimer::timeout, this, [this] {
        if (budget() > 0)
            emit budgetChanged(budget());
    });
    // The wheel scrolls the panel: a control takes it only once clicked or tabbed into.
    for (QWidget* w : std::initializer_list<QWidget*> {slider_, batchBox_, seqSlider_, seqBox_, dtypeBox_, budgetBox_,
             gpusBox_, shardBox_, checkpointBox_, gradAccumBox_, offloadBox_}) {
        w->setFocusPolicy(Qt::StrongFocus);
        w->installEventFilter(this);
    }
    connect(measure_, &QPushButton::clicked, this, [this] {
        measure_->setEnabled(false);
        method_->setText(tr("measuring…"));
        emit measureRequested(seqActive() ? seq() : batch(), precision());
    });
    setWhatIf(nullptr);
    setSeqWhatIf(nullptr, 0);
}

bool WhatIfPanel::eventFilter(QObject* watched, QEvent* event)
{
    // A wheel over a control that has no focus is the panel's (its scroll area's), not the control's.
    if (event->type() == QEvent::Wheel) {
        auto* w = qobject_cast<QWidget*>(watched);
        if (w && !w->hasFocus()) {
            QCoreApplication::sendEvent(this, event);
            return true;
        }
    }
    return QWidget::eventFilter(watched, event);
}

void WhatIfPanel::setSeqWhatIf(std::shared_ptr<const WhatIf> seqWhatIf, std::int64_t baseSeq)
{
    checkpointed_.clear();
    seqWhatIf_ = std::move(seqWhatIf);
    baseSeq_ = baseSeq;
    seqRow_->setVisible(seqWhatIf_ != nullptr);
    seqLabel_->setVisible(seqWhatIf_ != nullptr);
    if (seqWhatIf_) {
        QSignalBlocker block(seqBox_);
        QSignalBlocker blockSlider(seqSlider_);
        seqBox_->setValue(static_cast<int>(std::clamp<std::int64_t>(baseSeq, 1, 1 << kMaxSeqPower)));
        seqSlider_->setValue(std::min(kMaxSeqPower, static_cast<int>(std::floor(std::log2(std::max<std::int64_t>(1, baseSeq))))));
    }
    repredict();
    updateFitTable();
}

std::int64_t WhatIfPanel::seq() const
{
    return seqWhatIf_ ? seqBox_->value() : 0;
}

void WhatIfPanel::setSeq(std::int64_t seq)
{
    seqBox_->setValue(static_cast<int>(std::clamp<std::int64_t>(seq, 1, 1 << kMaxSeqPower)));
}

bool WhatIfPanel::seqActive() const
{
    return seqWhatIf_ && seq() != baseSeq_;
}

std::shared_ptr<const WhatIf> WhatIfPanel::activeWhatIf() const
{
    return staged(seqActive() ? seqWhatIf_ : whatIf_);
}

std::shared_ptr<const WhatIf> WhatIfPanel::staged(const std::shared_ptr<const WhatIf>& w) const
{
    const auto choice = checkpoint().toStdString();
    const int k = gradAccum();
    if (!w || (choice == "none" && k == 1) || w->mode() != RunMode::Train)
        return w;
    const auto key = std::make_tuple(w.get(), choice, k);
    auto it = checkpointed_.find(key);
    if (it == checkpointed_.end()) {
        std::shared_ptr<const WhatIf> made = w;
        if (choice != "none") {
            try {
                made = std::make_shared<const WhatIf>(w->withCheckpoint(parseCheckpointSpec(choice)));
                checkpointBox_->setToolTip(tr("Activation checkpointing of each repeated block (torch.utils.checkpoint, "
                                              "non-reentrant)"));
            } catch (const std::exception& e) {
                checkpointBox_->setToolTip(tr("Not checkpointed: %1").arg(QString::fromUtf8(e.what())));
            }
        }
        if (k > 1) {
            try {
                made = std::make_shared<const WhatIf>(made->withGradAccum(k));
            } catch (const std::exception& e) {
                gradAccumBox_->setToolTip(tr("Not accumulated: %1").arg(QString::fromUtf8(e.what())));
            }
        }
        it = checkpointed_.emplace(key, made).first;
    }
    return it->second;
}

std::string WhatIfPanel::offload() const
{
    const auto s = shard().isEmpty() && gpus() > 1 ? QStringLiteral("fsdp") : shard();
    if (!offloadBox_->isChecked())
        return "";
    // FSDP2's CPUOffloadPolicy moves the parameters with the optimizer (fsdp, zero2); DeepSpeed's ZeRO-3 its
    // offload_param with the optimizer, its stages 1 and 2 the optimizer (ZeRO-Offload); DDP and ZeRO-1 nothing.
    if (s == QLatin1String("fsdp") || s == QLatin1String("zero2") || s == QLatin1String("ds-zero3"))
        return "params";
    return s == QLatin1String("ds-zero1") || s == QLatin1String("ds-zero2") ? "optimizer" : "";
}

bool WhatIfPanel::offloadAsked() const
{
    return offloadBox_->isChecked();
}

void WhatIfPanel::setOffload(bool on)
{
    offloadBox_->setChecked(on);
}

int WhatIfPanel::gradAccum() const
{
    return gradAccumBox_->value();
}

void WhatIfPanel::setGradAccum(int microBatches)
{
    gradAccumBox_->setValue(microBatches);
}

QString WhatIfPanel::checkpoint() const
{
    return checkpointBox_->currentData().toString();
}

void WhatIfPanel::setCheckpoint(const QString& checkpoint)
{
    auto i = checkpointBox_->findData(checkpoint);
    if (i >= 0)
        checkpointBox_->setCurrentIndex(i);
}

std::int64_t WhatIfPanel::batch() const
{
    return batchBox_->value();
}
QString WhatIfPanel::precision() const
{
    const auto data = dtypeBox_->currentData().toString();
    return data.isEmpty() ? dtypeBox_->currentText() : data;
}

QString WhatIfPanel::dtype() const
{
    const auto p = precision();
    return p.endsWith(QLatin1String("-mixed")) ? p.section(QLatin1Char('-'), 0, 0) : p;
}

QString WhatIfPanel::masterDtype() const
{
    return precision().endsWith(QLatin1String("-mixed")) ? QStringLiteral("float32") : dtype();
}

int WhatIfPanel::gpus() const
{
    return gpusBox_->value();
}

QString WhatIfPanel::shard() const
{
    return shardBox_->currentData().toString();
}

void WhatIfPanel::setGpus(int gpus)
{
    gpusBox_->setValue(gpus);
}

void WhatIfPanel::setShard(const QString& shard)
{
    auto i = shardBox_->findData(shard);
    if (i >= 0)
        shardBox_->setCurrentIndex(i);
}

std::optional<ParallelPlan> WhatIfPanel::rankPlan() const
{
    if (!whatIf_ || whatIf_->mode() != RunMode::Train || (shard().isEmpty() && gpus() == 1))
        return std::nullopt;
    GpuFitRequest request;
    request.base.grad_accum = gradAccum();
    request.base.offload = offload();
    return planFor(request, precision().toStdString(), *shardingFromName(shard().isEmpty() ? "fsdp" : shard().toStdString()),
        gpus());
}

void WhatIfPanel::requestRank()
{
    if (auto plan = rankPlan(); plan && showRank_->isEnabled())
        emit rankRequested(seqActive() ? seq() : batch(), *plan);
}

QString WhatIfPanel::gpuFitText() const
{
    QStringList rows;
    for (int r = 0; r < gpuFit_->rowCount(); ++r)
        rows << QStringLiteral("%1: %2 GPUs, micro-batch %3")
                    .arg(gpuFit_->item(r, 0)->text(), gpuFit_->item(r, 1)->text(), gpuFit_->item(r, 2)->text());
    return rows.join(QLatin1Char('\n'));
}

std::int64_t WhatIfPanel::budget() const
{
    // A size, a GPU typed by name ("H100-80GB"), or a listed "H100-80GB (79.10 GiB)": what comes before the bracket.
    return parseBudget(budgetBox_->currentText().section(QLatin1Char('('), 0, 0).trimmed().toStdString()).value_or(0);
}

std::int64_t WhatIfPanel::allocatorBudget() const
{
    const auto plan = rankPlan();
    return DeviceOverheads::estimates().allocatorShare(budget(), plan ? plan->gpus : 1);
}

void WhatIfPanel::setBatch(std::int64_t batch)
{
    batchBox_->setValue(static_cast<int>(std::clamp<std::int64_t>(batch, 1, kMaxBatch)));
}
void WhatIfPanel::setDtype(const QString& dtype)
{
    auto i = dtypeBox_->findData(dtype);
    if (i < 0)
        i = dtypeBox_->findText(dtype);
    if (i >= 0)
        dtypeBox_->setCurrentIndex(i);
}
void WhatIfPanel::setBudget(const QString& text)
{
    budgetBox_->setCurrentText(text);
}

QString WhatIfPanel::peakTotalText() const
{
    return total_->text();
}
QString WhatIfPanel::fitsText() const
{
    return fits_->text();
}
QString WhatIfPanel::decidesText() const
{
    return decides_->text();
}
QString WhatIfPanel::notesText() const
{
    return notes_->text();
}

void WhatIfPanel::setBudgetOnly()
{
    setWhatIf(nullptr);
    setEnabled(true);
    for (auto* w : findChildren<QWidget*>(QString(), Qt::FindDirectChildrenOnly))
        if (w != budgetBox_ && !qobject_cast<QLabel*>(w) && w->isEnabled()) {
            w->setEnabled(false);
            budgetOnlyOff_.push_back(w);
        }
}

void WhatIfPanel::setWhatIf(std::shared_ptr<const WhatIf> whatIf)
{
    for (auto* w : std::exchange(budgetOnlyOff_, {}))
        w->setEnabled(true);
    checkpointed_.clear();
    whatIf_ = std::move(whatIf);
    gpuFitTable_.reset(); // another what-if: the window makes its table anew
    setEnabled(whatIf_ != nullptr);
    updateParallelRows();
    if (!whatIf_) {
        for (auto* l : {peak_, total_, reserved_, fits_, decides_, method_, notes_})
            l->clear();
        fitTable_->setRowCount(0);
        fitsBudget_ = true;
        applyFitsColour();
        return;
    }
    repredict();
    updateFitTable();
}

void WhatIfPanel::updateParallelRows()
{
    // A training step offers the precisions a fine-tune means, mixed first, and the GPUs and Sharding rows.
    const bool train = whatIf_ && whatIf_->mode() == RunMode::Train;
    const int mixed = dtypeBox_->findData(QStringLiteral("bfloat16-mixed"));
    if (train && mixed < 0) {
        QSignalBlocker block(dtypeBox_);
        dtypeBox_->insertItem(0, tr("bfloat16 mixed"), QStringLiteral("bfloat16-mixed"));
        dtypeBox_->setItemData(0, QString::fromStdString(precisionText("bfloat16-mixed")), Qt::ToolTipRole);
        for (const char* d : {"float32", "bfloat16", "float16"}) {
            auto i = dtypeBox_->findText(QString::fromLatin1(d));
            if (i >= 0)
                dtypeBox_->setItemData(i, QString::fromStdString(precisionText(d)), Qt::ToolTipRole);
        }
    } else if (!train && mixed >= 0) {
        QSignalBlocker block(dtypeBox_);
        dtypeBox_->removeItem(mixed);
    }
    for (QWidget* w : std::initializer_list<QWidget*> {gpusLabel_, gpusBox_, shardLabel_, shardBox_, checkpointLabel_,
             checkpointBox_, gradAccumLabel_, gradAccumBox_, offloadLabel_, offloadBox_, showRank_, gpuFitTitle_, gpuFit_})
        w->setVisible(train);
}

void WhatIfPanel::repredict()
{
    if (!whatIf_)
        return;
    if (auto plan = rankPlan()) { // one rank of a data-parallel job
        const auto& w = *activeWhatIf();
        const auto why = notRecorded(w, *plan);
        const std::int64_t x = seqActive() ? seq() : batch();
        if (why.empty()) {
            current_ = w.predictRank(x, *plan, false);
        } else {
            current_ = w.predict(x, dtype().toStdString(), false);
            current_.runnable = false;
            current_.not_runnable = why;
        }
        showPrediction(current_, false);
        if (why.empty())
            reservedTimer_->start();
        measure_->setEnabled(false);
        measure_->setToolTip(tr("A rank of a job is laid over the recorded step: there is nothing to run here"));
        showRank_->setEnabled(why.empty());
        emit predictionChanged(current_);
        return;
    }
    showRank_->setEnabled(false);
    // Mixed precision on one device is autocast over float32 weights: the what-if's record of it (a training step's
    // what-if makes one, as `whatif --dtype bfloat16-mixed` does), where it could be made.
    const auto key = precision().toStdString();
    if (!activeWhatIf()->hasPrecision(key)) {
        current_ = staged(whatIf_)->predict(batch(), dtype().toStdString(), false);
        current_.runnable = false;
        current_.not_runnable = tr("%1 on one device is torch.autocast over float32 weights, which this what-if did not "
                                   "record (its notes say why): choose FSDP or ZeRO-2 (float32 master weights, %2 "
                                   "parameters), or run with --autocast %2")
                                    .arg(precision(), dtype())
                                    .toStdString();
        showPrediction(current_, false);
        measure_->setEnabled(false);
        return;
    }
    // Away from the run's sequence, the figures are the sequence what-if's, at the batch it recorded.
    const bool seqMode = seqActive();
    // Only what cannot move is greyed out: a batch the program fixed, and the batch while a sequence is chosen.
    const auto& batches = whatIf_->runnableRange();
    const bool fixedBatch = batches.min == batches.max;
    slider_->setEnabled(!seqMode && !fixedBatch);
    batchBox_->setEnabled(!seqMode && !fixedBatch);
    const QString why = fixedBatch ? tr("The batch cannot move: %1").arg(QString::fromStdString(batches.why)) : QString();
    slider_->setToolTip(fixedBatch ? why : tr("Batch size, in powers of two"));
    batchBox_->setToolTip(why);
    if (seqMode) {
        current_ = staged(seqWhatIf_)->predict(seq(), key, false);
        QSignalBlocker block(batchBox_);
        QSignalBlocker blockSlider(slider_);
        batchBox_->setValue(static_cast<int>(current_.batch));
    } else {
        current_ = staged(whatIf_)->predict(batch(), key, false);
    }
    showPrediction(current_, false);
    reservedTimer_->start();
    const bool recorded = activeWhatIf()->isRecorded(key);
    const bool checkpointed = !activeWhatIf()->checkpoint().none() || activeWhatIf()->gradAccum() > 1;
    measure_->setEnabled(recorded && current_.runnable && !checkpointed);
    measure_->setToolTip(!current_.runnable ? QString::fromStdString(current_.not_runnable)
            : checkpointed ? tr("The checkpointed step is the recorded one rewritten: there is nothing to run here")
            : recorded     ? tr("Run the model at this batch and precision on the CPU and compare")
                           : tr("The CPU build of libtorch cannot run %1").arg(dtype()));
    emit predictionChanged(current_);
}

void WhatIfPanel::updateReserved()
{
    if (!whatIf_)
        return;
    // On a device of the budget's size: its allocator releases cached blocks before it runs out of memory.
    if (auto plan = rankPlan()) {
        if (!current_.runnable)
            return;
        current_ = activeWhatIf()->predictRank(seqActive() ? seq() : batch(), *plan, true, allocatorBudget());
        showPrediction(current_, true);
        return;
    }
    const auto key = precision().toStdString();
    if (!activeWhatIf()->hasPrecision(key))
        return; // not recorded: said by repredict
    current_ = activeWhatIf()->predict(seqActive() ? seq() : batch(), key, true, allocatorBudget());
    showPrediction(current_, true);
}

void WhatIfPanel::showPrediction(const Prediction& p, bool reservedKnown)
{
    if (!whatIf_)
        return;
    // Beyond the largest record a figure is the last fit carried on: another style, and it says so.
    // A meta what-if ran on shapes: its "measured" figures are computed, and never say measured.
    const bool meta = whatIf_->device() == "meta";
    const QString tag = p.method == FigureMethod::Measured ? tr(figureMethodText(p.method, meta))
        : p.extrapolated                       ? tr("extrapolated")
                                               : tr("interpolated");
    auto mark = [&](std::int64_t v) { return QString("%1  (%2)").arg(bytesText(v), tag); };
    peak_->setText(mark(p.predicted_peak_bytes));
    total_->setText(mark(p.predicted_peak_total_bytes));
    // The reserve is always the caching-allocator model's, at a recorded batch too.
    reserved_->setText(reservedKnown ? QString("%1  (%2)").arg(bytesText(p.predicted_reserved_bytes),
                                           p.extrapolated ? tr("extrapolated") : tr("simulated"))
                                     : tr("…"));
    for (auto* l : {peak_, total_, reserved_}) {
        auto f = l->font();
        f.setItalic(p.extrapolated && p.method != FigureMethod::Measured);
        l->setFont(f);
    }
    // The larger of the two figures decides: a GPU needs the peak total, and its caching allocator holds more.
    const bool reserveBinds = reservedKnown && p.predicted_reserved_bytes > p.predicted_peak_total_bytes;
    auto b = budget();
    if (b <= 0) {
        fitsBudget_ = true;
        fits_->setText(tr("type a size such as 16 GiB"));
        decides_->clear();
    } else {
        // The table's rule (fitsWithin on the allocator's share), and never above the largest size the fit table found.
        const auto share = allocatorBudget();
        const std::int64_t x = p.seq > 0 ? p.seq : p.batch;
        std::optional<std::int64_t> largest;
        for (const auto& l : largest_)
            if (l.dtype == p.dtype && l.budget == b && l.seq == (p.seq > 0))
                largest = l.n;
        const bool aboveLargest = largest && x > *largest;
        fitsBudget_ = fitsWithin(p, share) && !aboveLargest;
        const auto overheads = DeviceOverheads::estimates();
        const auto plan = rankPlan();
        const bool nccl = plan && plan->gpus > 1; // as allocatorShare takes NCCL's buffers off
        const QString within = tr("%1 (%2 to the allocator: the CUDA context%4, %3, off, an estimate)")
                                   .arg(bytesText(b), bytesText(share),
                                       bytesText(overheads.cuda_context_bytes + (nccl ? overheads.nccl_bytes : 0)),
                                       nccl ? tr(" and NCCL's buffers") : QString());
        fits_->setText(!p.runnable   ? QString::fromStdString(p.not_runnable)
                : fitsBudget_       ? tr("fits in %1").arg(within)
                : p.out_of_memory   ? tr("does not fit in %1: out of memory on a device of that size").arg(within)
                : aboveLargest && fitsWithin(p, share)
                ? tr("not called fits: %1 %2, smaller, does not fit").arg(p.seq > 0 ? tr("sequence") : tr("batch")).arg(*largest + 1)
                                    : tr("does not fit in %1").arg(within));
        if (!p.runnable)
            decides_->clear();
        else if (reservedKnown && p.out_of_memory)
            decides_->setText(tr("Decided by the simulated GPU: its caching allocator ran out of memory with "
                                 "%1 to it, after releasing its cached blocks (peak total %2).")
                                  .arg(bytesText(share), bytesText(p.predicted_peak_total_bytes)));
        else if (reserveBinds)
            decides_->setText(tr("Decided by the simulated GPU reserve, %1: a caching allocator holds more than the "
                                 "peak total of %2.")
                                  .arg(bytesText(p.predicted_reserved_bytes), bytesText(p.predicted_peak_total_bytes)));
        else if (reservedKnown)
            decides_->setText(tr("Decided by the peak total, %1 (weights + inputs + run peak); the simulated GPU "
                                 "reserve, %2, is not larger.")
                                  .arg(bytesText(p.predicted_peak_total_bytes), bytesText(p.predicted_reserved_bytes)));
        else
            decides_->setText(tr("Decided by the peak total, %1 (weights + inputs + run peak), until the simulated "
                                 "GPU reserve is known.")
                                  .arg(bytesText(p.predicted_peak_total_bytes)));
    }
    applyFitsColour();
    // Notes of this precision only: a rescaled float16 says so when float16 is chosen, not otherwise.
    QStringList notes;
    const auto prefix = QString::fromStdString(p.dtype) + QLatin1Char(':');
    for (const auto& n : whatIf_->notes()) {
        auto note = QString::fromStdString(n);
        if (note.startsWith(prefix))
            notes << note;
    }
    notes_->setText(notes.join(QLatin1Char('\n')));
    // The records of the what-if this figure came from (along the sequence: the sequence what-if's), in its precision.
    const auto& source = p.seq > 0 && seqWhatIf_ ? *seqWhatIf_ : *whatIf_;
    const QString word = p.seq > 0 ? tr("sequence") : tr("batch");
    QStringList records;
    const auto recorded = source.recordedBatches(p.dtype);
    for (auto r : recorded)
        records << QString::number(r);
    const QString from = source.isRecorded(p.dtype) ? QString::fromStdString(p.dtype)
                                                     : tr("%1 (rescaled)").arg(QString::fromStdString(p.dtype));
    QString method = p.method == FigureMethod::Measured
        ? (meta ? tr("Computed on meta: the model ran at this %1 and precision on the meta device, from shapes "
                     "(not measured; kernel temporaries absent)").arg(word)
                : tr("Measured: the model ran at this %1 and precision").arg(word))
        : p.extrapolated ? tr("Extrapolated beyond the records (%1 %2) from the %3 runs at %1 %4: use Measure to check")
                               .arg(word)
                               .arg(recorded.empty() ? 0 : recorded.back())
                               .arg(from)
                               .arg(records.join(QStringLiteral(", ")))
                         : tr("Predicted from the %1 runs at %2 %3").arg(from, word, records.join(QStringLiteral(", ")));
    if (!p.reliable)
        method += tr(" — rough: the two runs did not line up; use Measure");
    method_->setText(method);
}

void WhatIfPanel::applyFitsColour()
{
    // Red-ish that reads on the current background: darker on a light palette, lighter on a dark one. Only
    // WindowText is set, so the label follows every other change of the panel's palette.
    QPalette pal;
    if (!fitsBudget_) {
        auto red = fragmentationColor();
        bool dark = palette().color(QPalette::Window).lightness() < 128;
        pal.setColor(QPalette::WindowText, dark ? red.lighter(140) : red.darker(130));
    }
    fits_->setPalette(pal);
    QFont font;
    font.setBold(!fitsBudget_);
    fits_->setFont(fitsBudget_ ? QFont() : font);
}

void WhatIfPanel::changeEvent(QEvent* event)
{
    QWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange)
        applyFitsColour();
}

void WhatIfPanel::showMeasurement(const Prediction& m)
{
    measure_->setEnabled(true);
    if (m.batch != batch() || QString::fromStdString(m.dtype) != precision())
        return; // the user moved on while it ran
    if (m.measured_peak_bytes && m.error_percent)
        method_->setText((whatIf_ && whatIf_->device() == "meta"
                                 ? tr("Peak computed on meta %1, peak total %2: the prediction is off by %3%")
                                 : tr("Measured peak %1, peak total %2: the prediction is off by %3%"))
                             .arg(bytesText(*m.measured_peak_bytes))
                             .arg(bytesText(m.measured_peak_total_bytes.value_or(0)))
                             .arg(*m.error_percent, 0, 'f', 2));
}

void WhatIfPanel::showMeasurementFailed(const QString& reason)
{
    measure_->setEnabled(true);
    method_->setText(tr("Could not measure: %1").arg(reason));
}

void WhatIfPanel::updateFitTable()
{
    if (!whatIf_)
        return;
    auto b = budget();
    // Along the sequence: the longest sequence at the sequence what-if's batch.
    const auto& w = *activeWhatIf();
    fitTableTitle_->setText(seqActive() ? tr("Longest sequence that fits the budget (batch %1):").arg(current_.batch)
                                        : tr("Largest batch that fits the budget:"));
    fitTable_->setHorizontalHeaderLabels({tr("Precision"), seqActive() ? tr("Longest sequence") : tr("Largest batch")});
    const auto dtypes = w.dtypes();
    fitTable_->setRowCount(static_cast<int>(dtypes.size()));
    for (std::size_t i = 0; i < dtypes.size(); ++i) {
        const auto& d = dtypes[i];
        bool withReserved = w.eventCount(d) <= kReservedSearchEvents;
        QString text = tr("—");
        if (b > 0) {
            auto n = w.maxBatch(d, allocatorBudget(), withReserved);
            // How it is known, as the what-if table's text says it: beyond the last record, extrapolated.
            text = QString::fromStdString(WhatIfTable::largestText(n))
                + (n > 0 ? (n > w.lastRecord(d) ? tr(" (extrapolated)") : tr(" (interpolated)")) : QString());
            const bool seq = w.axis() == WhatIfAxis::Seq;
            largest_.erase(std::remove_if(largest_.begin(), largest_.end(),
                               [&](const Largest& l) { return l.dtype == d && l.seq == seq; }),
                largest_.end());
            largest_.push_back({d, b, seq, n});
        }
        auto* name
            = new QTableWidgetItem(QString::fromStdString(d) + (w.isRecorded(d) ? "" : tr(" (rescaled)")));
        auto* value = new QTableWidgetItem(text);
        value->setToolTip(withReserved ? tr("peak total and reserved memory both fit") : tr("peak total fits"));
        fitTable_->setItem(static_cast<int>(i), 0, name);
        fitTable_->setItem(static_cast<int>(i), 1, value);
    }
    updateGpuFit();
    if (b > 0) // the verdict above the table follows the largest sizes it found
        showPrediction(current_, !reservedTimer_->isActive());
}

void WhatIfPanel::setGpuFitTable(std::shared_ptr<const GpuFitTable> table)
{
    gpuFitTable_ = std::move(table);
    updateGpuFit();
}

void WhatIfPanel::updateGpuFit()
{
    gpuFit_->setRowCount(0);
    if (!whatIf_ || whatIf_->mode() != RunMode::Train)
        return;
    const auto spec = activeWhatIf()->checkpoint();
    gpuFitTitle_->setText(tr("Fewest GPUs that fit the budget, %1%2, per rank (CUDA context and NCCL buffers "
                             "estimated off it):")
                              .arg(precision(), spec.none() ? QString() : tr(", %1 checkpointing").arg(QString::fromStdString(spec.text()))));
    if (!gpuFitTable_ || gpuFitTable_->budget_bytes != budget())
        return; // the window's table for this budget is on its way
    GpuFitTable table = *gpuFitTable_;
    const auto chosen = precision().toStdString();
    const auto chosenCheckpoint = activeWhatIf()->checkpoint().text();
    table.answers.erase(std::remove_if(table.answers.begin(), table.answers.end(),
                            [&](const GpuFitAnswer& a) { return a.precision != chosen || a.checkpoint != chosenCheckpoint; }),
        table.answers.end());
    gpuFit_->setRowCount(static_cast<int>(table.answers.size()));
    for (std::size_t i = 0; i < table.answers.size(); ++i) {
        const auto& a = table.answers[i];
        const int row = static_cast<int>(i);
        gpuFit_->setItem(row, 0, new QTableWidgetItem(QString::fromStdString(a.strategyText())));
        QString fewest = !a.not_modelled.empty() ? tr("not modelled")
            : a.fewest_gpus > 0                  ? QString::number(a.fewest_gpus)
                                                 : tr("none up to %1").arg(table.gpu_counts.empty() ? 0 : table.gpu_counts.back());
        auto* item = new QTableWidgetItem(fewest);
        if (!a.not_modelled.empty())
            item->setToolTip(QString::fromStdString(a.not_modelled));
        gpuFit_->setItem(row, 1, item);
        gpuFit_->setItem(row, 2,
            new QTableWidgetItem(a.fewest_gpus > 0 ? QString::fromStdString(WhatIfTable::largestText(a.micro_batch)) : tr("—")));
    }
}

} // namespace memledger

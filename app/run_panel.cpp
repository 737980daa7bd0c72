#include "run_panel.h"

#include "support/format.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QVBoxLayout>

#include <stdexcept>

namespace memledger {

RunPanel::RunPanel(QWidget* parent)
    : QWidget(parent)
    , inputs_(new QLineEdit(this))
    , inputsNote_(new QLabel(this))
    , batch_(new QSpinBox(this))
    , dtype_(new QComboBox(this))
    , device_(new QComboBox(this))
    , mode_(new QComboBox(this))
    , optimizer_(new QComboBox(this))
    , loss_(new QComboBox(this))
    , holdOutput_(new QComboBox(this))
    , lifetimes_(new QComboBox(this))
    , training_(new QWidget(this))
    , newTokens_(new QSpinBox(this))
    , cache_(new QComboBox(this))
    , run_(new QPushButton(tr("Run"), this))
    , cancel_(new QPushButton(tr("Cancel"), this))
    , progress_(new QProgressBar(this))
    , status_(new QLabel(this))
{
    inputs_->setPlaceholderText(tr("guess from the model"));
    inputs_->setToolTip(tr("Inputs, comma-separated, each a shape with an optional type: 1x3x224x224, or token ids and "
                           "a mask as 2x512:int64,2x512:bool (int64 filled with 0, bool with false; =V fills V)"));
    connect(inputs_, &QLineEdit::textEdited, this, [this] { // typed by hand: no longer a guess
        inputsNote_->clear();
        inputsNote_->hide();
    });
    batch_->setRange(0, 1 << 20);
    batch_->setSpecialValueText(tr("as in the input"));
    batch_->setToolTip(tr("Replaces dimension 0 of every input"));
    dtype_->addItems({QStringLiteral("float32"), QStringLiteral("bfloat16"), QStringLiteral("float16")});
    // The CPU; the GPUs once a model is opened (looking for them loads libtorch, which a snapshot never needs).
    refreshDevices(false);
    // Meta: shapes only, no memory (docs/meta.md). The libtorch 1.13 build lists it disabled, with the reason.
    device_->addItem(tr("meta (shapes only)"), QStringLiteral("meta"));
    const int metaRow = device_->count() - 1;
    if (metaRunsSupported()) {
        device_->setItemData(metaRow,
            tr("Shapes only: every tensor's size and lifetime, no memory and no values; the figures are computed, "
               "not measured, and kernel-internal temporaries do not exist"),
            Qt::ToolTipRole);
    } else {
        if (auto* items = qobject_cast<QStandardItemModel*>(device_->model()))
            items->item(metaRow)->setEnabled(false);
        device_->setItemData(metaRow,
            tr("Meta runs need memledger's PyTorch 2 build; this one has %1")
                .arg(QString::fromStdString(torchBuildInfo())),
            Qt::ToolTipRole);
    }
    device_->setToolTip((builtWithCuda() ? tr("Where the model runs: the CPU or a CUDA GPU")
                                         : tr("This memledger was built without CUDA (%1): it runs on the CPU")
                                               .arg(QString::fromStdString(torchBuildInfo())))
        + tr("; meta: shapes only, nothing measured"));
    mode_->addItem(tr("inference"), QString::fromLatin1(nameOf(RunMode::Inference)));
    mode_->addItem(tr("training step"), QString::fromLatin1(nameOf(RunMode::Train)));
    mode_->setToolTip(tr("Inference: eval mode, no grad. Training step: forward, loss, backward and the "
                         "optimizer's step, with gradients and optimizer state. Generate (a program saved with "
                         "memledger.export(..., generate=True)): the prompt's prefill, then a decode step per new "
                         "token against the KV cache, as transformers' greedy generate runs them"));
    newTokens_->setRange(1, 1 << 20);
    newTokens_->setValue(64);
    newTokens_->setToolTip(tr("The tokens generated per row after the prompt (the Inputs: batch x prompt token ids): "
                              "the prefill, then one decode step per further token"));
    cache_->addItem(tr("dynamic"), QString::fromLatin1(nameOf(GenerationCache::Dynamic)));
    cache_->addItem(tr("static"), QString::fromLatin1(nameOf(GenerationCache::Static)));
    cache_->setToolTip(tr("The KV cache generate keeps. Dynamic (transformers' default): each layer's keys and values "
                          "grow by a torch.cat per token. Static (cache_implementation=\"static\"): prompt + new "
                          "tokens - 1 slots per layer, allocated in the prefill and written in place"));
    optimizer_->addItem(QStringLiteral("SGD"), QStringLiteral("sgd"));
    optimizer_->addItem(QStringLiteral("Adam"), QStringLiteral("adam"));
    optimizer_->addItem(QStringLiteral("AdamW"), QStringLiteral("adamw"));
    optimizer_->addItem(tr("none"), QStringLiteral("none"));
    optimizer_->setToolTip(tr("The optimizer whose step is recorded (SGD with momentum 0.9); its state is a "
                              "ledger of its own"));
    loss_->addItem(tr("auto"), QStringLiteral("auto"));
    loss_->addItem(tr("sum"), QStringLiteral("sum"));
    loss_->addItem(tr("cross-entropy"), QStringLiteral("cross_entropy"));
    loss_->addItem(tr("next token (language model)"), QStringLiteral("next_token"));
    loss_->setToolTip(tr("The loss the backward starts from; auto: cross-entropy for a 2-D output, else the sum"));
    holdOutput_->addItem(tr("until the step returns"), QStringLiteral("step"));
    holdOutput_->addItem(tr("until after backward"), QStringLiteral("backward"));
    holdOutput_->addItem(tr("not held"), QStringLiteral("none"));
    holdOutput_->setToolTip(tr("How long the training loop holds the model's output and the loss. Until the step "
                               "returns: `logits, loss = model(x, y)` as nanoGPT's and Hugging Face's loops, the "
                               "previous step's alive until this forward returns. Until after backward: `del out, "
                               "loss` before the optimizer step. Not held: `loss_fn(model(x), y).backward()`"));
    lifetimes_->addItem(tr("as the eager code holds them"), QStringLiteral("eager"));
    lifetimes_->addItem(tr("as the graph frees them"), QStringLiteral("graph"));
    lifetimes_->setToolTip(tr("How long each value of the program lives. As the eager code holds them: the Python the "
                              "program was exported from, a local until it is reassigned or its function returns "
                              "(running the model eagerly, training or serving it). As the graph frees them: each "
                              "value after its last reader, as torch.export.load(FILE).module() and torch.compile"));
    for (auto* box : {optimizer_, loss_, holdOutput_, lifetimes_})
        box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    cancel_->setEnabled(false);
    progress_->setTextVisible(true);
    progress_->setRange(0, 1);
    progress_->setValue(0);
    status_->setWordWrap(true);
    inputsNote_->setWordWrap(true);
    inputsNote_->hide(); // "(CUDA memory snapshot)" wraps under the field instead of widening the dock

    auto* shapes = new QVBoxLayout;
    shapes->setSpacing(2);
    shapes->addWidget(inputs_);
    shapes->addWidget(inputsNote_);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(run_);
    buttons->addWidget(cancel_);
    // Optimizer and loss share a row: the dock keeps its width and a training step costs one line of height.
    auto* training = new QHBoxLayout(training_);
    training->setContentsMargins(0, 0, 0, 0);
    training->addWidget(optimizer_, 1);
    training->addWidget(new QLabel(tr("loss"), training_));
    training->addWidget(loss_, 1);
    form_ = new QFormLayout(this);
    form_->addRow(tr("Inputs"), shapes);
    inputsRow_ = shapes;
    form_->addRow(tr("Batch"), batch_);
    form_->addRow(tr("Dtype"), dtype_);
    form_->addRow(tr("Device"), device_);
    form_->addRow(tr("Mode"), mode_);
    form_->addRow(tr("Optimizer"), training_);
    form_->addRow(tr("New tokens"), newTokens_);
    form_->addRow(tr("KV cache"), cache_);
    form_->addRow(tr("Output held"), holdOutput_);
    form_->addRow(tr("Lifetimes"), lifetimes_);
    form_->addRow(buttons);
    form_->addRow(progress_);
    form_->addRow(status_);
    form_->setRowVisible(training_, false);
    form_->setRowVisible(holdOutput_, false);
    form_->setRowVisible(lifetimes_, false);
    form_->setRowVisible(newTokens_, false);
    form_->setRowVisible(cache_, false);
    connect(mode_, QOverload<int>::of(&QComboBox::currentIndexChanged), this, [this] { showModeRows(); });

    connect(run_, &QPushButton::clicked, this, &RunPanel::runRequested);
    connect(inputs_, &QLineEdit::returnPressed, this, &RunPanel::runRequested);
    connect(cancel_, &QPushButton::clicked, this, &RunPanel::cancelRequested);
}

void RunPanel::setInputs(const QString& shapes, const QString& note, const QString& tooltip)
{
    inputs_->setText(shapes);
    inputsNote_->setText(note);
    inputsNote_->setToolTip(tooltip);
    inputsNote_->setVisible(runnable_ && !note.isEmpty());
}

QString RunPanel::inputsText() const
{
    return inputs_->text();
}

RunOptions RunPanel::options() const
{
    RunOptions o;
    auto text = inputs_->text().trimmed();
    if (!text.isEmpty()) {
        auto parsed = parseInputs(text.toStdString());
        o.inputs = std::move(parsed.shapes);
        o.input_types = std::move(parsed.types);
    }
    if (batch_->value() > 0)
        o.batch = batch_->value();
    o.dtype = dtype();
    o.device = device_->currentData().toString().toStdString();
    o.mode = mode();
    o.optimizer = optimizer();
    o.loss = loss();
    o.hold_output = holdOutput();
    o.lifetimes = lifetimes();
    if (o.mode == RunMode::Generate) {
        o.new_tokens = newTokens_->value();
        o.cache = cache();
    }
    return o;
}

void RunPanel::showModeRows()
{
    form_->setRowVisible(training_, runnable_ && mode() == RunMode::Train);
    form_->setRowVisible(holdOutput_, runnable_ && mode() == RunMode::Train);
    form_->setRowVisible(newTokens_, runnable_ && mode() == RunMode::Generate);
    form_->setRowVisible(cache_, runnable_ && mode() == RunMode::Generate);
}

void RunPanel::setGenerates(bool generates, bool staticCache)
{
    // the static cache where the file holds its programs; else only the dynamic one
    if (auto* items = qobject_cast<QStandardItemModel*>(cache_->model()))
        items->item(1)->setEnabled(staticCache);
    cache_->setItemData(1, staticCache ? QVariant() : QVariant(tr("This file holds no static-cache programs: export it "
                                                                  "again with memledger.export(..., generate=True)")),
        Qt::ToolTipRole);
    if (!staticCache)
        cache_->setCurrentIndex(0);
    const int row = mode_->findData(QString::fromLatin1(nameOf(RunMode::Generate)));
    if (generates && row < 0)
        mode_->addItem(tr("generate (greedy)"), QString::fromLatin1(nameOf(RunMode::Generate)));
    else if (!generates && row >= 0)
        mode_->removeItem(row); // the box falls back to another mode, whose rows show
    showModeRows();
}

int RunPanel::newTokens() const
{
    return newTokens_->value();
}

void RunPanel::setNewTokens(int tokens)
{
    newTokens_->setValue(tokens);
}

bool RunPanel::newTokensRowVisible() const
{
    return form_->isRowVisible(newTokens_);
}

GenerationCache RunPanel::cache() const
{
    return fromName(cache_->currentData().toString().toStdString(), GenerationCache::Dynamic);
}

void RunPanel::setCache(GenerationCache cache)
{
    const int row = cache_->findData(QString::fromLatin1(nameOf(cache)));
    if (row >= 0)
        cache_->setCurrentIndex(row);
}

std::string RunPanel::dtype() const
{
    return dtype_->currentText().toStdString();
}

std::string RunPanel::device() const
{
    return device_->currentData().toString().toStdString();
}

void RunPanel::refreshDevices(bool loadTorch)
{
    // The CPU, then every CUDA GPU this libtorch sees, with its name and memory, before meta.
    const int metaRow = device_->findData(QStringLiteral("meta"));
    int at = metaRow < 0 ? device_->count() : metaRow;
    for (const auto& d : availableDevices(loadTorch)) {
        const auto id = QString::fromStdString(d.id);
        if (device_->findData(id) >= 0)
            continue;
        auto label = d.id == "cpu" ? tr("CPU")
                                   : QStringLiteral("%1: %2, %3")
                                         .arg(id, QString::fromStdString(d.name),
                                             QString::fromStdString(formatBytes(d.total_memory_bytes)));
        device_->insertItem(at++, label, id);
    }
}

bool RunPanel::setDevice(const std::string& device)
{
    int row = device_->findData(QString::fromStdString(device == "cuda" ? "cuda:0" : device));
    auto* items = qobject_cast<QStandardItemModel*>(device_->model());
    if (row < 0 || (items && !items->item(row)->isEnabled()))
        return false;
    device_->setCurrentIndex(row);
    return true;
}

namespace {

void selectData(QComboBox* box, const std::string& value)
{
    auto i = box->findData(QString::fromStdString(value));
    if (i >= 0)
        box->setCurrentIndex(i);
}

} // namespace

void RunPanel::setMode(RunMode mode)
{
    selectData(mode_, nameOf(mode));
}

RunMode RunPanel::mode() const
{
    return fromName<RunMode>(mode_->currentData().toString().toStdString()).value_or(RunMode::Inference);
}

void RunPanel::setOptimizer(const std::string& optimizer)
{
    selectData(optimizer_, optimizer);
}

std::string RunPanel::optimizer() const
{
    return optimizer_->currentData().toString().toStdString();
}

std::string RunPanel::loss() const
{
    return loss_->currentData().toString().toStdString();
}

void RunPanel::setHoldOutput(const std::string& hold)
{
    selectData(holdOutput_, hold);
}

std::string RunPanel::holdOutput() const
{
    return holdOutput_->currentData().toString().toStdString();
}

void RunPanel::setLifetimes(const std::string& lifetimes)
{
    selectData(lifetimes_, lifetimes);
}

std::string RunPanel::lifetimes() const
{
    return lifetimes_->currentData().toString().toStdString();
}

void RunPanel::setLifetimesApply(bool applies)
{
    lifetimesApply_ = applies;
    form_->setRowVisible(lifetimes_, runnable_ && applies);
}

bool RunPanel::lifetimesRowVisible() const
{
    return form_->isRowVisible(lifetimes_);
}

bool RunPanel::trainingRowVisible() const
{
    return form_->isRowVisible(training_);
}

void RunPanel::setRunnable(bool runnable)
{
    runnable_ = runnable;
    for (QWidget* w : std::initializer_list<QWidget*> {inputs_, batch_, dtype_, device_, mode_, optimizer_, loss_, holdOutput_, lifetimes_, newTokens_, cache_, run_})
        w->setEnabled(runnable);
    // A snapshot or a saved report has nothing to run: its rows go rather than stand greyed out.
    for (QWidget* w : std::initializer_list<QWidget*> {batch_, dtype_, device_, mode_})
        form_->setRowVisible(w, runnable);
    form_->setRowVisible(inputsRow_, runnable);
    inputs_->setVisible(runnable); // a nested layout's widgets are not hidden with its row
    inputsNote_->setVisible(runnable && !inputsNote_->text().isEmpty());
    showModeRows();
    form_->setRowVisible(lifetimes_, runnable && lifetimesApply_);
}

void RunPanel::setRunning(bool running)
{
    run_->setEnabled(runnable_ && !running);
    cancel_->setEnabled(running);
    if (running) {
        // A new run forgets how the last one ended: no "failed" or "done" over a bar that is moving again.
        progress_->setRange(0, 0);
        progress_->setFormat(QString());
    }
}

void RunPanel::setFinished(Outcome outcome)
{
    setRunning(false);
    progress_->setRange(0, 1);
    switch (outcome) {
    case Outcome::Done:
        progress_->setValue(1);
        progress_->setFormat(tr("done"));
        break;
    case Outcome::Failed:
        progress_->setValue(0);
        progress_->setFormat(tr("failed"));
        break;
    case Outcome::Cancelled:
        progress_->setValue(0);
        progress_->setFormat(tr("cancelled"));
        break;
    }
}

void RunPanel::setProgress(int done, int total)
{
    if (total <= 0) {
        progress_->setRange(0, 0);
        return;
    }
    progress_->setRange(0, total);
    progress_->setValue(std::min(done, total));
    progress_->setFormat(tr("%1 of %2 modules").arg(done).arg(total));
}

void RunPanel::setReadProgress(qint64 done, qint64 total)
{
    if (total <= 0)
        return;
    progress_->setRange(0, 1000);
    progress_->setValue(static_cast<int>(std::min<qint64>(done, total) * 1000 / total));
    progress_->setFormat(tr("Reading %1 of %2 MB").arg(done / 1000000).arg((total + 999999) / 1000000));
}

void RunPanel::setStatus(const QString& text)
{
    status_->setText(text);
}

QString RunPanel::status() const
{
    return status_->text();
}

} // namespace memledger

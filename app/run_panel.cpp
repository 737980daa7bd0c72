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
#include <QVBoxLayout>

#include <stdexcept>

namespace memledger {

RunPanel::RunPanel(QWidget* parent)
    : QWidget(parent)
    , inputs_(new QLineEdit(this))
    , inputsNote_(new QLabel(this))
    , batch_(new QSpinBox(this))
    , dtype_(new QComboBox(this))
    , run_(new QPushButton(tr("Run"), this))
    , cancel_(new QPushButton(tr("Cancel"), this))
    , progress_(new QProgressBar(this))
    , status_(new QLabel(this))
{
    inputs_->setPlaceholderText(tr("guess from the model"));
    inputs_->setToolTip(tr("Input shapes, comma-separated: 1x3x224x224 or 1x128x512,1x128"));
    connect(inputs_, &QLineEdit::textEdited, this, [this] { // typed by hand: no longer a guess
        inputsNote_->clear();
        inputsNote_->hide();
    });
    batch_->setRange(0, 1 << 20);
    batch_->setSpecialValueText(tr("as in the input"));
    batch_->setToolTip(tr("Replaces dimension 0 of every input"));
    dtype_->addItems({QStringLiteral("float32"), QStringLiteral("bfloat16"), QStringLiteral("float16")});
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
    auto* form = new QFormLayout(this);
    form->addRow(tr("Inputs"), shapes);
    form->addRow(tr("Batch"), batch_);
    form->addRow(tr("Dtype"), dtype_);
    form->addRow(buttons);
    form->addRow(progress_);
    form->addRow(status_);

    connect(run_, &QPushButton::clicked, this, &RunPanel::runRequested);
    connect(inputs_, &QLineEdit::returnPressed, this, &RunPanel::runRequested);
    connect(cancel_, &QPushButton::clicked, this, &RunPanel::cancelRequested);
}

void RunPanel::setInputs(const QString& shapes, const QString& note, const QString& tooltip)
{
    inputs_->setText(shapes);
    inputsNote_->setText(note);
    inputsNote_->setToolTip(tooltip);
    inputsNote_->setVisible(!note.isEmpty());
}

QString RunPanel::inputsText() const
{
    return inputs_->text();
}

RunOptions RunPanel::options() const
{
    RunOptions o;
    auto text = inputs_->text().trimmed();
    if (!text.isEmpty())
        o.inputs = parseShapes(text.toStdString());
    if (batch_->value() > 0)
        o.batch = batch_->value();
    o.dtype = dtype();
    return o;
}

std::string RunPanel::dtype() const
{
    return dtype_->currentText().toStdString();
}

void RunPanel::setRunnable(bool runnable)
{
    runnable_ = runnable;
    for (QWidget* w : std::initializer_list<QWidget*> {inputs_, batch_, dtype_, run_})
        w->setEnabled(runnable);
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

void RunPanel::setStatus(const QString& text)
{
    status_->setText(text);
}

} // namespace memledger

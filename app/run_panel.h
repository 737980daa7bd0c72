#pragma once
#include "recording/model.h"

#include <QWidget>

class QComboBox;
class QFormLayout;
class QLayout;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace memledger {

// Input shapes, batch, dtype and mode (inference or one training step, with its optimizer and loss) of the
// next run, the Run and Cancel buttons and the run's progress.
class RunPanel : public QWidget {
    Q_OBJECT
public:
    explicit RunPanel(QWidget* parent = nullptr);

    // `note` shows beside the shapes: "(guess)" for a guess from the model's first layer.
    void setInputs(const QString& shapes, const QString& note, const QString& tooltip = {});
    QString inputsText() const;
    // The options the fields describe; throws std::invalid_argument with a message for the user.
    RunOptions options() const;
    void setRunnable(bool runnable); // false for a report read from JSON: there is no model to run
    void setRunning(bool running);
    enum class Outcome { Done, Failed, Cancelled };
    // Ends a run: the bar is full only when it is done; a failure or a cancel empties it and says so.
    void setFinished(Outcome outcome);
    std::string dtype() const; // the chosen precision
    std::string device() const; // cpu | meta | cuda:N
    // Adds the GPUs libtorch sees (once a model is opened; `loadTorch` false looks only if libtorch is loaded).
    void refreshDevices(bool loadTorch = true);
    // Chooses a device the box lists and allows ("cuda" is cuda:0); false, and nothing changes, otherwise.
    bool setDevice(const std::string& device);
    // The optimizer and loss rows show only for a training step.
    void setMode(RunMode mode);
    RunMode mode() const;
    void setOptimizer(const std::string& optimizer); // sgd | adam | adamw | none
    std::string optimizer() const;
    std::string loss() const; // auto | sum | cross_entropy
    void setHoldOutput(const std::string& hold); // step | backward | none (RunOptions::hold_output)
    std::string holdOutput() const;
    // How long a torch.export program's values live (RunOptions::lifetimes): eager | graph. The row shows for a
    // program only (`applies`): a TorchScript model has TorchScript's own.
    void setLifetimes(const std::string& lifetimes);
    std::string lifetimes() const;
    void setLifetimesApply(bool applies);
    bool lifetimesRowVisible() const;
    // Whether the model holds the programs generation runs (memledger.export's generate=True): the mode box then
    // offers "generate", with its New tokens and KV cache rows (static where the file holds its programs too).
    void setGenerates(bool generates, bool staticCache = false);
    GenerationCache cache() const;
    void setCache(GenerationCache cache);
    int newTokens() const;
    void setNewTokens(int tokens);
    bool newTokensRowVisible() const;
    void setProgress(int done, int total); // total 0: not known yet, the bar runs indeterminate
    void setStatus(const QString& text);
    QString status() const; // what the panel says under its button

    QPushButton* runButton() const { return run_; }
    QPushButton* cancelButton() const { return cancel_; }
    // A file's reading: "Reading 40 of 111 MB".
    void setReadProgress(qint64 done, qint64 total);
    QProgressBar* progressBar() const { return progress_; }
    QComboBox* modeBox() const { return mode_; }
    QComboBox* optimizerBox() const { return optimizer_; }
    QComboBox* lossBox() const { return loss_; }
    QComboBox* deviceBox() const { return device_; }
    bool trainingRowVisible() const; // the optimizer and loss

signals:
    void runRequested();
    void cancelRequested();

private:
    QLineEdit* inputs_;
    QLabel* inputsNote_;
    QSpinBox* batch_;
    QComboBox* dtype_;
    QComboBox* device_; // availableDevices()
    QComboBox* mode_;
    QComboBox* optimizer_;
    QComboBox* loss_;
    QComboBox* holdOutput_; // how long the loop holds the output and the loss (a training step)
    QComboBox* lifetimes_; // eager | graph (a torch.export program)
    QWidget* training_; // optimizer and loss, in one row
    QSpinBox* newTokens_; // generate: the tokens generated per row
    QComboBox* cache_; // generate: the KV cache (dynamic | static)
    QFormLayout* form_ = nullptr;
    QLayout* inputsRow_ = nullptr; // the inputs and their note
    QPushButton* run_;
    QPushButton* cancel_;
    QProgressBar* progress_;
    QLabel* status_;
    bool runnable_ = true;
    bool lifetimesApply_ = false;
    void showModeRows();
};

} // namespace memledger

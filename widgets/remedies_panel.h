#pragma once
// "What would help": the remedies of the shown run, ranked, with their predicted savings on the peak total and
// the reserve, a Measure button where a real run can check a prediction (the window runs it off the GUI
// thread and calls showMeasured), and the concrete change of the selected remedy. A tile shape asks the
// window for a tiling run. The panel runs nothing itself.
#include "report/remedy.h"

#include <QWidget>

#include <vector>

class QLabel;
class QCheckBox;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QTableWidget;
class QTextBrowser;

namespace memledger {

class RemediesPanel : public QWidget {
    Q_OBJECT
public:
    explicit RemediesPanel(QWidget* parent = nullptr);

    // The report is a meta-device run: what a run makes reads "computed on meta", never "measured".
    void setMetaRun(bool meta);
    void setRemedies(const std::vector<Remedy>& remedies); // ranked, best first
    void setStatus(const QString& text); // "Recording what-if runs ..."; "" hides it
    // Remedies are being worked out off the GUI thread: a busy bar with `text`; "" hides it.
    void setBusy(const QString& text);
    bool isBusy() const;
    QString busyText() const;
    // The remedies listed belong to another run than the one shown (a new run is under way, or its remedies are
    // still being worked out): greyed, and left out of what the window saves, until the new ones replace them.
    void setStale(bool stale);
    bool isStale() const { return stale_; }
    // false for a snapshot or a saved report: no model to run, so no tile to measure.
    void setModelActions(bool model);
    void showMeasured(int row, const Remedy& measured);
    void showMeasureFailed(int row, const QString& reason);

    const std::vector<Remedy>& remedies() const { return remedies_; }
    QTableWidget* table() const { return table_; }
    QPushButton* measureButton(int row) const; // nullptr where the row cannot be measured here
    QString detailsText() const; // the selected remedy's change and details
    QString statusText() const;
    void selectRow(int row);
    void setTile(const QString& text); // "512x512", as typed

    static constexpr int kMeasuredColumn = 5;

signals:
    void measureRequested(int row, const memledger::Remedy& remedy);
    void tileRequested(const std::vector<std::int64_t>& tile);

private:
    void fillRow(int row);
    void showDetails();

    std::vector<Remedy> remedies_;
    QLabel* status_ = nullptr;
    QTableWidget* table_ = nullptr;
    QTextBrowser* details_ = nullptr;
    QLineEdit* tile_ = nullptr;
    QWidget* tileRow_ = nullptr;
    QCheckBox* showAll_ = nullptr; // rows that save under 1% of the peak total are hidden until ticked
    void hideMinorRows();
    QPushButton* tileButton_ = nullptr;
    QLabel* tileError_ = nullptr;
    bool meta_ = false;
    QWidget* busyRow_ = nullptr;
    QLabel* busyText_ = nullptr;
    QProgressBar* busyBar_ = nullptr;
    QLabel* staleNote_ = nullptr;
    bool stale_ = false;
};

} // namespace memledger

#pragma once
#include "report/report.h"
#include "report/timeline_series.h"
#include "session/open_file.h"

#include <QElapsedTimer>
#include <QMainWindow>

#include <memory>

class QDockWidget;
class QLabel;
class QComboBox;
class QMenu;
class QTabWidget;
class QToolBar;
class QStackedWidget;

namespace memledger {

class CallTreeView;
class DiffView;
class FlameGraph;
class LayerTreePanel;
class StackPane;
class LedgerSummary;
class RemediesPanel;
class RemediesWorker;
class RunPanel;
class RunWorker;
class SegmentMapView;
class SegmentTimeline;
class TimelinePlot;
class WhatIf;
class WhatIfPanel;
class WhatIfWorker;

// The desktop app: opens a model (and runs it off the GUI thread) or a saved report, and shows it.
class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    // A .pt model (run at once), a .json report (shown as is); "" is the RFBNet demo, "demo:NAME" a built-in one
    // (demoModels()), run in the mode it is made for.
    void openFile(const QString& path);
    void openDemo() { openFile(QString()); } // the RFBNet demo; File > Open demo lists every built-in one
    void startRun();
    void cancelRun();

    bool isRunning() const;
    const std::shared_ptr<const Report>& report() const { return report_; }
    QString currentFile() const { return file_; } // "" for the demo
    QString errorText() const;

    TimelinePlot* timeline() const { return timeline_; }
    LayerTreePanel* layerTree() const { return tree_; }
    LedgerSummary* ledgerSummary() const { return summary_; }
    RunPanel* runPanel() const { return runPanel_; }
    // The Segments tab (segments over time, the segment map of a snapshot) and the snapshot's device selector.
    SegmentTimeline* segmentTimeline() const { return segmentTimeline_; }
    SegmentMapView* segmentMap() const { return segmentMap_; }
    QTabWidget* tabs() const { return tabs_; }
    // A snapshot's call stacks: the call tree and flame graph tabs, the stack dock (hidden without stacks).
    CallTreeView* callTree() const { return callTree_; }
    FlameGraph* flameGraph() const { return flame_; }
    StackPane* stackPane() const { return stackPane_; }
    QDockWidget* stackDock() const { return stackDock_; }
    QComboBox* deviceSelector() const { return deviceBox_; }
    bool fileIsSnapshot() const { return fileIsSnapshot_; }
    void setDevice(int device); // TimelineSeries::kAllDevices: all
    // The report of the range chosen on the timeline (tree and peak panel show it); nullptr without a range.
    const std::shared_ptr<const Report>& rangeReport() const { return rangeReport_; }
    QString rangeStatusText() const;
    // Where the what-if panel goes; the window shows it beside the run panel.
    void setWhatIfPanel(QWidget* panel);
    QDockWidget* whatIfDock() const { return whatIfDock_; }
    WhatIfPanel* whatIfPanel() const { return whatIfPanel_; }
    RemediesPanel* remediesPanel() const { return remediesPanel_; } // the "What would help" tab
    // The report as saved and exported: with the what-if table when the model has been recorded for it.
    Report reportForExport() const;

    // Return "" or why it failed, naming the file.
    QString saveAnalysis(const QString& path) const;
    QString exportTimelinePng(const QString& path) const;
    QString exportWindowPng(const QString& path);
    QString exportHtml(const QString& path) const;

    // File > Compare with...: the report shown is A; `path` (a model, run with the run panel's settings, a
    // report or a snapshot) is B. The comparison view replaces the timeline and tables until it is closed.
    void compareWith(const QString& path);
    void closeComparison();
    bool isComparing() const;
    DiffView* diffView() const { return diffView_; }

signals:
    void reportChanged(std::shared_ptr<const memledger::Report> report); // a report is shown; never nullptr
    void runFailed(const QString& message);
    void whatIfReady(); // the what-if panel has its records
    void seqWhatIfReady(); // and, for token inputs, its records along the sequence
    void comparisonShown(); // compareWith() has its B and shows the comparison
    void comparisonFailed(const QString& message);
    void remediesReady(bool withWhatIf); // the "What would help" tab shows its remedies

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;
    void closeEvent(QCloseEvent* event) override;

private:
    void buildMenus();
    void setUpRange(QToolBar* bar);
    void showRange(std::uint32_t first, std::uint32_t end);
    void showReport(std::shared_ptr<const Report> report);
    void fileOpened(std::shared_ptr<const OpenedFile> file, const QString& path);
    void showSegments();
    void showCallStacks();
    void setUpWhatIf();
    void setUpComparison();
    void recordWhatIf(const Report& report);
    void setUpRemedies(); // main_window_remedies.cpp
    void computeRemedies(); // for report_ (with whatIf_ when recorded)
    void showError(const QString& message);
    void clearError();
    void addRecentFile(const QString& path);
    void rebuildRecentMenu();
    void updateActions();
    QString displayName() const; // the file's name, or the built-in demo's ("demo:mnist-train.pt")
    QString saveBaseName() const; // what the Save dialogs propose: "resnet18", "mnist-train-demo"

    RunWorker* worker_;
    TimelinePlot* timeline_;
    LayerTreePanel* tree_;
    LedgerSummary* summary_;
    RunPanel* runPanel_;
    QDockWidget* whatIfDock_;
    WhatIfPanel* whatIfPanel_ = nullptr;
    WhatIfWorker* whatIfWorker_ = nullptr;
    std::shared_ptr<const WhatIf> whatIf_;
    QLabel* error_;
    QLabel* peakLabel_;
    QMenu* recentMenu_ = nullptr;
    QList<QAction*> needReport_;
    std::shared_ptr<const Report> report_;
    QElapsedTimer openClock_; // since a file was chosen (MEMLEDGER_TIMING=1 prints when its timeline is drawn)
    std::shared_ptr<const OpenedFile> opened_;
    bool whatIfPartial_ = false; // the panel shows the first records while larger ones are made // the file shown, opened once; its model serves runs and what-if
    QString file_;
    bool fileIsReport_ = false;
    bool fileIsSnapshot_ = false;
    SegmentTimeline* segmentTimeline_ = nullptr;
    SegmentMapView* segmentMap_ = nullptr;
    QTabWidget* tabs_ = nullptr;
    QComboBox* deviceBox_ = nullptr;
    QAction* deviceAction_ = nullptr;
    QAction* hideWeightsAction_ = nullptr; // a snapshot has no weights of its own
    CallTreeView* callTree_ = nullptr;
    FlameGraph* flame_ = nullptr;
    StackPane* stackPane_ = nullptr;
    QDockWidget* stackDock_ = nullptr;
    std::shared_ptr<const Report> rangeReport_;
    QAction* clearRangeAction_ = nullptr;
    QLabel* rangeLabel_ = nullptr;
    // File > Compare with...: B runs on its own worker; the view stacks over the central widget.
    RunWorker* compareWorker_ = nullptr;
    DiffView* diffView_ = nullptr;
    QStackedWidget* centralStack_ = nullptr;
    QString compareFile_;
    QList<QDockWidget*> dockedForComparison_; // the docks the comparison hid, shown again when it closes
    RemediesPanel* remediesPanel_ = nullptr;
    RemediesWorker* remediesWorker_ = nullptr;
    std::vector<std::int64_t> remediesTile_;
    bool remediesWithWhatIf_ = false;
};

} // namespace memledger

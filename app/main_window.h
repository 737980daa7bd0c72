#pragma once
#include "report/report.h"
#include "analysis/timeline_series.h"
#include "session/open_file.h"
#include "session/ranks.h"

#include <QElapsedTimer>
#include <QMainWindow>
#include <QStringList>

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
class ComparisonController;
class FileSession;
class DiffView;
class FlameGraph;
class LayerTreePanel;
class StackPane;
class ContextTable;
class LedgerSummary;
class RecentFiles;
class RemediesController;
class RemediesPanel;
class RanksController;
class RanksView;
class RunPanel;
class GpuFitView;
class RunWorker;
class SegmentMapView;
class SegmentTimeline;
class TimelinePlot;
class TimelineToolbar;
class WatchController;
class WhatIfController;
class WhatIfPanel;

// The desktop app's window: it lays out the views and the parts that each own one job, and connects them. It
// opens a file (a model is run at once off the GUI thread; a saved report or a snapshot is read) and hands each
// report to the views. The parts: the timeline toolbar (timeline_toolbar.h), the what-if (whatif_controller.h),
// What would help (remedies_controller.h), the comparison (comparison_controller.h), recent files
// (recent_files.h), the file shown and its runs (file_session.h) and the files it writes (report_files.h).
class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    // A .pt model (run at once), a .json report (shown as is); "" is the RFBNet demo, "demo:NAME" a built-in one
    // (demoModels()), run in the mode it is made for.
    void openFile(const QString& path);
    // The command line's run options (--input, --mode, --optimizer, ...): the first file opened runs with them.
    void setCommandLineRun(const RunOptions& options);
    void openDemo() { openFile(QString()); } // the RFBNet demo; File > Open demo lists every built-in one
    // File > Watch… and --watch: a snapshot or report shown again at each rewrite (watch_controller.h); opening
    // another file stops it.
    void watchFile(const QString& path);
    WatchController* watcher() const { return watch_; }
    void startRun();
    void cancelRun();

    bool isRunning() const;
    const std::shared_ptr<const Report>& report() const { return report_; }
    QString currentFile() const; // "" for the demo
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
    QComboBox* deviceSelector() const;
    bool fileIsSnapshot() const;
    void setDevice(int device); // TimelineSeries::kAllDevices: all
    // The report of the range chosen on the timeline (tree and peak panel show it); nullptr without a range.
    const std::shared_ptr<const Report>& rangeReport() const { return rangeReport_; }
    QString rangeStatusText() const;
    QDockWidget* whatIfDock() const { return whatIfDock_; }
    WhatIfPanel* whatIfPanel() const;
    RemediesPanel* remediesPanel() const; // the "What would help" tab
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
    DiffView* diffView() const;

    // File > Open ranks…: one snapshot (or report) per rank of a job, files or folders, read off the GUI thread
    // into the Ranks tab; a click there opens a rank's file here as File > Open does.
    void openRanks(const QStringList& paths);
    RanksView* ranksView() const { return ranksView_; }
    GpuFitView* gpuFitView() const { return gpuFit_; }
    WhatIfController* whatIfController() const { return whatIf_; }

signals:
    void reportChanged(std::shared_ptr<const memledger::Report> report); // a report is shown; never nullptr
    void runFailed(const QString& message);
    void whatIfReady(); // the what-if panel has its records
    void whatIfTableReady(); // and reportForExport() the table the recording made (as `whatif --json` makes it)
    void seqWhatIfReady(); // and, for token inputs, its records along the sequence
    void comparisonShown(); // compareWith() has its B and shows the comparison
    void comparisonFailed(const QString& message);
    void remediesReady(bool withWhatIf); // the "What would help" tab shows its remedies
    void ranksShown(); // openRanks() has its table in the Ranks tab
    void ranksFailed(const QString& message); // names the file
    void gpuFitReady(); // the GPUs tab has its table

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;
    void closeEvent(QCloseEvent* event) override;

private:
    QWidget* buildCentralWidget(); // the timeline over the tabs
    void buildDocks();
    void buildMenus();
    void connectViews();
    void connectRuns();
    void fileOpened();
    void showRange(std::uint32_t first, std::uint32_t end);
    void showReport(std::shared_ptr<const Report> report);
    void showRank(std::shared_ptr<const Report> rank); // the What if panel's "Show this rank"
    void backToRun();
    void updateGpuFit(); // the GPUs tab, for the what-if and the What if panel's budget
    void updateServing(); // the GPUs tab for a generation: fit --serve's answer at the run's context and batch
    void showSegments();
    void showCallStacks();
    void showError(const QString& message);
    void clearError();
    void showStatus(const QString& text, int milliseconds);
    void updateActions();

    TimelinePlot* timeline_;
    TimelineToolbar* timelineBar_;
    LayerTreePanel* tree_;
    LedgerSummary* summary_;
    RunPanel* runPanel_;
    QDockWidget* whatIfDock_;
    QLabel* error_;
    QLabel* peakLabel_;
    QLabel* rangeLabel_;
    SegmentTimeline* segmentTimeline_ = nullptr;
    SegmentMapView* segmentMap_ = nullptr;
    QTabWidget* tabs_ = nullptr;
    CallTreeView* callTree_ = nullptr;
    FlameGraph* flame_ = nullptr;
    StackPane* stackPane_ = nullptr;
    ContextTable* contextTable_ = nullptr;
    RanksView* ranksView_ = nullptr;
    GpuFitView* gpuFit_ = nullptr; // the GPUs tab: the fit table of a training step
    std::uint64_t gpuFitGeneration_ = 0;
    QDockWidget* stackDock_ = nullptr;
    FileSession* session_;
    WhatIfController* whatIf_;
    RemediesController* remedies_;
    ComparisonController* comparison_;
    RanksController* ranks_;
    WatchController* watch_;
    RecentFiles* recent_ = nullptr;
    QList<QAction*> needReport_;
    QAction* backToRun_ = nullptr; // File > Back to the run: shown while one rank of a job is
    std::shared_ptr<const Report> runReport_; // the run, while a rank's predicted step is shown in its place

    std::shared_ptr<const Report> report_;
    std::shared_ptr<const Report> rangeReport_;
    // A snapshot with pinned host memory: the file's report (its GPUs) and, once picked, its host's, shown in
    // report_ while the device picker says "host (pinned)".
    std::shared_ptr<const Report> fileReport_;
    std::shared_ptr<const Report> hostReport_;
    QElapsedTimer openClock_; // since a file was chosen (MEMLEDGER_TIMING=1 prints when its timeline is drawn)
};

} // namespace memledger

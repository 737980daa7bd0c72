#include "cli.h"

#include <exception>
#include <iostream>

#ifdef MEMLEDGER_HAS_GUI
#include "layer_tree_panel.h"
#include "main_window.h"
#include "ranks_view.h"
#include "run_panel.h"
#include "watch_controller.h"
#include "stack_pane.h"
#include "timeline_plot.h"
#include "layer_tree_model.h"
#include "timeline_png.h"
#include "whatif_panel.h"

#include <QApplication>
#include <QTabWidget>
#include <QScrollArea>
#include <QScrollBar>
#include <QTableWidget>
#include <QTimer>

#include <unistd.h>

#include <filesystem>

#include <memory>
#endif

#ifndef MEMLEDGER_VERSION
#define MEMLEDGER_VERSION "0"
#endif

namespace {

#ifdef MEMLEDGER_HAS_GUI
void nameApplication()
{
    QCoreApplication::setOrganizationName(QStringLiteral("memledger"));
    QCoreApplication::setApplicationName(QStringLiteral("memledger"));
    QCoreApplication::setApplicationVersion(QStringLiteral(MEMLEDGER_VERSION));
}

int runWindow(int argc, char** argv, const memledger::CliOptions& options)
{
    QApplication app(argc, argv);
    nameApplication();
    memledger::MainWindow window;
    window.show();
    // --device: the first run, and every run after, on that device (the Run panel's choice).
    if (!options.run.device.empty() && options.run.device != "cpu" && !window.runPanel()->setDevice(options.run.device))
        std::cerr << "memledger: --device " << options.run.device << " is not available here; running on the cpu\n";
    window.setCommandLineRun(options.run); // --input, --mode, ... for the first file
    if (qEnvironmentVariableIsSet("MEMLEDGER_BUDGET")) // the What if panel's budget from the start (screenshots)
        window.whatIfPanel()->setBudget(qEnvironmentVariable("MEMLEDGER_BUDGET"));
    if (options.watch) {
        window.watchFile(QString::fromStdString(options.model));
    } else if (options.rank_files.empty()) {
        window.openFile(QString::fromStdString(options.model));
    } else { // several files: the Ranks tab, and the rank with the highest peak in the main views
        QStringList paths;
        for (const auto& f : options.rank_files)
            paths << QString::fromStdString(f);
        QObject::connect(
            &window, &memledger::MainWindow::ranksShown, &window,
            [&window] {
                const auto& t = *window.ranksView()->table();
                window.openFile(QString::fromStdString(t.ranks[static_cast<std::size_t>(t.highest_peak_rank)].file));
            },
            Qt::SingleShotConnection);
        window.openRanks(paths);
    }
    // MEMLEDGER_SCREENSHOT=FILE.png: save the window once the first report is shown, then quit.
    auto shot = qEnvironmentVariable("MEMLEDGER_SCREENSHOT");
    if (!shot.isEmpty()) {
        auto save = [&window, shot] {
            // MEMLEDGER_SELECT=PATH selects a module first, to show its allocations shaded.
            if (qEnvironmentVariableIsSet("MEMLEDGER_SELECT"))
                window.layerTree()->selectModule(qEnvironmentVariable("MEMLEDGER_SELECT"));
            // MEMLEDGER_STACK_EVENT=N shows the call stack of trace event N in the Call stack dock.
            if (qEnvironmentVariableIsSet("MEMLEDGER_STACK_EVENT"))
                window.stackPane()->showAllocation(qEnvironmentVariable("MEMLEDGER_STACK_EVENT").toLongLong());
            // MEMLEDGER_TAB=NAME shows that tab ("Call tree", "Flame graph", ...).
            if (qEnvironmentVariableIsSet("MEMLEDGER_TAB"))
                for (int i = 0; i < window.tabs()->count(); ++i)
                    if (window.tabs()->tabText(i) == qEnvironmentVariable("MEMLEDGER_TAB"))
                        window.tabs()->setCurrentIndex(i);
            // MEMLEDGER_DEVICE=N picks a snapshot's device in the timeline's toolbar (-3: host (pinned)).
            if (qEnvironmentVariableIsSet("MEMLEDGER_DEVICE"))
                window.setDevice(qEnvironmentVariable("MEMLEDGER_DEVICE").toInt());
            // MEMLEDGER_RANGE=FIRST:END selects the events [FIRST, END) on the timeline first.
            if (auto range = qEnvironmentVariable("MEMLEDGER_RANGE").split(QLatin1Char(':')); range.size() == 2)
                window.timeline()->setRange(range[0].toUInt(), range[1].toUInt());
            // MEMLEDGER_CHECKPOINT=PATH,PATH ticks those modules' checkpoint boxes (a training step).
            if (qEnvironmentVariableIsSet("MEMLEDGER_CHECKPOINT"))
                window.layerTree()->model()->setCheckpointed(
                    qEnvironmentVariable("MEMLEDGER_CHECKPOINT").split(QLatin1Char(','), Qt::SkipEmptyParts));
            // MEMLEDGER_GPUS=N, MEMLEDGER_SHARD=S and MEMLEDGER_PRECISION=P set the What if panel's GPUs, Sharding
            // and Precision rows (a training step); MEMLEDGER_SHOW_RANK=1 then shows that rank in the window.
            auto* panel = window.whatIfPanel();
            if (qEnvironmentVariableIsSet("MEMLEDGER_PRECISION"))
                panel->setDtype(qEnvironmentVariable("MEMLEDGER_PRECISION"));
            if (qEnvironmentVariableIsSet("MEMLEDGER_GPUS"))
                panel->setGpus(qEnvironmentVariable("MEMLEDGER_GPUS").toInt());
            if (qEnvironmentVariableIsSet("MEMLEDGER_SHARD"))
                panel->setShard(qEnvironmentVariable("MEMLEDGER_SHARD"));
            // MEMLEDGER_ACTIVATION_CHECKPOINT=none|selective|full sets its Checkpointing row.
            if (qEnvironmentVariableIsSet("MEMLEDGER_ACTIVATION_CHECKPOINT"))
                panel->setCheckpoint(qEnvironmentVariable("MEMLEDGER_ACTIVATION_CHECKPOINT"));
            // MEMLEDGER_GRAD_ACCUM=K sets its Micro-batches row (gradient accumulation).
            if (qEnvironmentVariableIsSet("MEMLEDGER_GRAD_ACCUM"))
                panel->setGradAccum(qEnvironmentVariableIntValue("MEMLEDGER_GRAD_ACCUM"));
            // MEMLEDGER_OFFLOAD=params (or optimizer) ticks its CPU offload row: the Sharding row's offload.
            if (!qEnvironmentVariable("MEMLEDGER_OFFLOAD").isEmpty())
                panel->setOffload(true);
            if (qEnvironmentVariableIsSet("MEMLEDGER_BUDGET"))
                panel->setBudget(qEnvironmentVariable("MEMLEDGER_BUDGET"));
            // MEMLEDGER_SCROLL_WHATIF=1 scrolls the What if dock to its last table (the fewest GPUs).
            if (qEnvironmentVariableIsSet("MEMLEDGER_SCROLL_WHATIF"))
                QTimer::singleShot(1200, &window, [panel] {
                    for (QWidget* p = panel->parentWidget(); p; p = p->parentWidget())
                        if (auto* area = qobject_cast<QScrollArea*>(p)) {
                            auto tables = panel->findChildren<QTableWidget*>();
                            if (!tables.isEmpty())
                                area->ensureWidgetVisible(tables.last(), 0, 0);
                            break;
                        }
                });
            if (qEnvironmentVariableIsSet("MEMLEDGER_SHOW_RANK"))
                QTimer::singleShot(300, &window, [&window] { window.whatIfPanel()->requestRank(); });
            QTimer::singleShot(1500, &window, [&window, shot] {
                auto error = window.exportWindowPng(shot);
                if (!error.isEmpty())
                    std::cerr << "memledger: " << error.toStdString() << "\n";
                QCoreApplication::exit(error.isEmpty() ? 0 : 1);
            });
        };
        // MEMLEDGER_COMPARE=FILE compares the first report with FILE (File > Compare with...) and waits for it.
        if (qEnvironmentVariableIsSet("MEMLEDGER_COMPARE")) {
            auto other = qEnvironmentVariable("MEMLEDGER_COMPARE");
            QObject::connect(
                &window, &memledger::MainWindow::reportChanged, &window, [&window, other] { window.compareWith(other); },
                Qt::SingleShotConnection);
            QObject::connect(&window, &memledger::MainWindow::comparisonShown, &window, save);
            QObject::connect(&window, &memledger::MainWindow::comparisonFailed, &window, save);
        }
        // MEMLEDGER_SCREENSHOT_REMEDIES=1 waits for the complete "What would help" tab instead,
        // MEMLEDGER_SCREENSHOT_WHATIF=1 for the what-if panel's records.
        else if (qEnvironmentVariableIsSet("MEMLEDGER_SCREENSHOT_REMEDIES"))
            QObject::connect(&window, &memledger::MainWindow::remediesReady, &window, [save](bool withWhatIf) {
                if (withWhatIf)
                    save();
            });
        // MEMLEDGER_SCREENSHOT_SEQ=N: once the sequence what-if is recorded, the panel's sequence set to N.
        else if (qEnvironmentVariableIsSet("MEMLEDGER_SCREENSHOT_SEQ"))
            QObject::connect(&window, &memledger::MainWindow::seqWhatIfReady, &window, [&window, save] {
                auto* panel = window.whatIfPanel();
                panel->setSeq(qEnvironmentVariable("MEMLEDGER_SCREENSHOT_SEQ").toLongLong());
                // The What if dock scrolled to its answer (the Fits row), whatever the dock's height.
                for (QWidget* p = panel->parentWidget(); p; p = p->parentWidget())
                    if (auto* area = qobject_cast<QScrollArea*>(p)) {
                        if (auto* fits = panel->findChild<QWidget*>(QStringLiteral("fits"))) {
                            area->ensureWidgetVisible(fits, 0, 40);
                            area->horizontalScrollBar()->setValue(0); // the row's label stays in view
                        }
                        break;
                    }
                save();
            });
        // MEMLEDGER_SCREENSHOT_GPUS=1 waits for the GPUs tab's fit table (and shows that tab): the last one asked for,
        // a second after it is ready with none asked for since (the panel's rows, set one by one, each ask again).
        else if (qEnvironmentVariableIsSet("MEMLEDGER_SCREENSHOT_GPUS")) {
            auto* settle = new QTimer(&window);
            settle->setSingleShot(true);
            settle->setInterval(qEnvironmentVariableIntValue("MEMLEDGER_SCREENSHOT_SETTLE_MS") > 0 ? qEnvironmentVariableIntValue("MEMLEDGER_SCREENSHOT_SETTLE_MS") : 1000);
            QObject::connect(settle, &QTimer::timeout, &window, save);
            QObject::connect(&window, &memledger::MainWindow::gpuFitReady, settle, qOverload<>(&QTimer::start));
        }
        // MEMLEDGER_SCREENSHOT_LOADS=N (with --watch): once the watched file has been shown N times.
        else if (qEnvironmentVariableIsSet("MEMLEDGER_SCREENSHOT_LOADS"))
            QObject::connect(window.watcher(), &memledger::WatchController::reloaded, &window, [&window, save] {
                if (window.watcher()->loads() == qEnvironmentVariable("MEMLEDGER_SCREENSHOT_LOADS").toInt())
                    save();
            });
        else if (qEnvironmentVariableIsSet("MEMLEDGER_SCREENSHOT_WHATIF"))
            QObject::connect(&window, &memledger::MainWindow::whatIfReady, &window, save);
        else
            QObject::connect(&window, &memledger::MainWindow::reportChanged, &window, save);
        QObject::connect(&window, &memledger::MainWindow::runFailed, &window, save);
        QObject::connect(&window, &memledger::MainWindow::ranksFailed, &window, save);
    }
    return app.exec();
}

// `analyze --png` renders offscreen: it needs no display.
std::unique_ptr<QApplication> offscreenApp;
std::string renderPng(const memledger::Report& report, const std::string& path)
{
    if (!QCoreApplication::instance()) {
        if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
            qputenv("QT_QPA_PLATFORM", "offscreen");
        // Qt warns on stderr when XDG_RUNTIME_DIR is unset (a shell over ssh, a CI job): give it a private one.
        if (qEnvironmentVariableIsEmpty("XDG_RUNTIME_DIR")) {
            auto dir = std::filesystem::temp_directory_path() / ("memledger-runtime-" + std::to_string(::getuid()));
            std::error_code ec;
            std::filesystem::create_directories(dir, ec);
            std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
            if (!ec)
                qputenv("XDG_RUNTIME_DIR", QByteArray::fromStdString(dir.string()));
        }
        static int argc = 1;
        static char name[] = "memledger";
        static char* argv[] = {name, nullptr};
        offscreenApp = std::make_unique<QApplication>(argc, argv);
        nameApplication();
    }
    return memledger::renderTimelinePng(report, QString::fromStdString(path)).toStdString();
}
#endif

} // namespace

int main(int argc, char** argv)
{
    using namespace memledger;
    CliOptions options;
    try {
        options = parseCli(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const std::exception& e) {
        std::cerr << "memledger: " << e.what() << "\n\n" << usageText();
        return kExitUsage;
    }
    if (options.help) {
        std::cout << usageText();
        return kExitOk;
    }
    if (options.version) {
        std::cout << "memledger " MEMLEDGER_VERSION " (" << torchBuildInfo() << ")\n";
        return kExitOk;
    }
    try {
#ifdef MEMLEDGER_HAS_GUI
        if (options.command == "gui")
            return runWindow(argc, argv, options);
        setPngRenderer(renderPng);
#endif
        int code = runCli(options);
#ifdef MEMLEDGER_HAS_GUI
        offscreenApp.reset();
#endif
        return code;
    } catch (const std::exception& e) {
        std::cerr << "memledger: unexpected error: " << e.what() << "\n";
        return kExitRunFailed;
    }
}

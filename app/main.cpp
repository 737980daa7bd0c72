#include "cli.h"

#include <exception>
#include <iostream>

#ifdef MEMLEDGER_HAS_GUI
#include "layer_tree_panel.h"
#include "main_window.h"
#include "timeline_png.h"

#include <QApplication>
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
    window.openFile(QString::fromStdString(options.model));
    // MEMLEDGER_SCREENSHOT=FILE.png: save the window once the first report is shown, then quit.
    auto shot = qEnvironmentVariable("MEMLEDGER_SCREENSHOT");
    if (!shot.isEmpty()) {
        auto save = [&window, shot] {
            // MEMLEDGER_SELECT=PATH selects a module first, to show its allocations shaded.
            if (qEnvironmentVariableIsSet("MEMLEDGER_SELECT"))
                window.layerTree()->selectModule(qEnvironmentVariable("MEMLEDGER_SELECT"));
            QTimer::singleShot(500, &window, [&window, shot] {
                auto error = window.exportWindowPng(shot);
                if (!error.isEmpty())
                    std::cerr << "memledger: " << error.toStdString() << "\n";
                QCoreApplication::exit(error.isEmpty() ? 0 : 1);
            });
        };
        // MEMLEDGER_SCREENSHOT_WHATIF=1 waits for the what-if panel's records instead.
        if (qEnvironmentVariableIsSet("MEMLEDGER_SCREENSHOT_REMEDIES")) // the "What would help" tab, complete
            QObject::connect(&window, &memledger::MainWindow::remediesReady, &window, [save](bool withWhatIf) {
                if (withWhatIf)
                    save();
            });
        else if (qEnvironmentVariableIsSet("MEMLEDGER_SCREENSHOT_WHATIF"))
            QObject::connect(&window, &memledger::MainWindow::whatIfReady, &window, save);
        else
            QObject::connect(&window, &memledger::MainWindow::reportChanged, &window, save);
        QObject::connect(&window, &memledger::MainWindow::runFailed, &window, save);
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

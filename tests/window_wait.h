#pragma once
// Waiting in GUI tests for what the window does off its thread.
#include "main_window.h"

#include <QElapsedTimer>
#include <QSignalSpy>

// Waits until the window shows a report (true) or says its run or read failed (false), at most timeoutMs.
// The report comes from a worker thread and a queued signal: call it after asking for the file or run.
inline bool waitForReport(memledger::MainWindow& w, int timeoutMs = 120000)
{
    QSignalSpy shown(&w, &memledger::MainWindow::reportChanged);
    QSignalSpy failed(&w, &memledger::MainWindow::runFailed);
    QElapsedTimer clock;
    clock.start();
    while (shown.isEmpty() && failed.isEmpty() && clock.elapsed() < timeoutMs)
        shown.wait(50);
    return !shown.isEmpty();
}

// Shows the window at 1400x900, opens `path` (a file, or "demo:NAME") and waits for its report (true).
inline bool openAndWait(memledger::MainWindow& w, const QString& path)
{
    w.resize(1400, 900);
    w.show();
    w.openFile(path);
    return waitForReport(w);
}

// Waits until `spy` has caught `count` signals (true), at most timeoutMs, serving the window's events meanwhile.
inline bool waitForSignals(QSignalSpy& spy, int timeoutMs, int count = 1)
{
    QElapsedTimer clock;
    clock.start();
    while (spy.count() < count && clock.elapsed() < timeoutMs)
        spy.wait(100);
    return spy.count() >= count;
}

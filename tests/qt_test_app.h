#pragma once
#include <QApplication>
#include <QStandardPaths>

// One QApplication for a GoogleTest executable (ctest sets QT_QPA_PLATFORM=offscreen).
inline QApplication& qtTestApp()
{
    static int argc = 1;
    static char name[] = "memledger-test";
    static char* argv[] = {name, nullptr};
    static QApplication* app = [] {
        QStandardPaths::setTestModeEnabled(true); // recent files go to a test settings file
        auto* a = new QApplication(argc, argv);
        QCoreApplication::setOrganizationName(QStringLiteral("memledger-test"));
        QCoreApplication::setApplicationName(QStringLiteral("memledger-test"));
        return a;
    }();
    return *app;
}

// Counts the pixels of `image` that differ from its top-left pixel.
inline int pixelsUnlike(const QImage& image, QRgb background)
{
    int n = 0;
    for (int y = 0; y < image.height(); ++y)
        for (int x = 0; x < image.width(); ++x)
            n += image.pixel(x, y) != background;
    return n;
}

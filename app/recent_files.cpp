#include "recent_files.h"

#include <QFileInfo>
#include <QMenu>
#include <QSettings>

namespace memledger {

namespace {
constexpr int kMaxRecentFiles = 8;
}

RecentFiles::RecentFiles(QMenu* menu, QObject* parent)
    : QObject(parent)
    , menu_(menu)
{
    rebuild();
}

void RecentFiles::add(const QString& path)
{
    QSettings settings;
    auto files = settings.value(QStringLiteral("recentFiles")).toStringList();
    auto absolute = QFileInfo(path).absoluteFilePath();
    files.removeAll(absolute);
    files.prepend(absolute);
    while (files.size() > kMaxRecentFiles)
        files.removeLast();
    settings.setValue(QStringLiteral("recentFiles"), files);
    rebuild();
}

void RecentFiles::rebuild()
{
    menu_->clear();
    const auto files = QSettings().value(QStringLiteral("recentFiles")).toStringList();
    for (const auto& f : files)
        menu_->addAction(f, this, [this, f] { emit openRequested(f); });
    menu_->setEnabled(!files.isEmpty());
}

} // namespace memledger

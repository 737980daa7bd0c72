#pragma once
// File > Open recent: the last files opened, kept in QSettings, newest first.
#include <QObject>
#include <QString>

class QMenu;

namespace memledger {

class RecentFiles : public QObject {
    Q_OBJECT
public:
    RecentFiles(QMenu* menu, QObject* parent);
    void add(const QString& path);

signals:
    void openRequested(const QString& path);

private:
    void rebuild();
    QMenu* menu_;
};

} // namespace memledger

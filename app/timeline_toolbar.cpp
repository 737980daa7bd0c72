#include "timeline_toolbar.h"

#include "timeline_plot.h"

#include "snapshot/snapshot.h"

#include <QActionGroup>
#include <QComboBox>
#include <QLabel>

namespace memledger {

TimelineToolbar::TimelineToolbar(TimelinePlot* plot, QWidget* parent)
    : QToolBar(tr("Timeline"), parent)
    , plot_(plot)
    , deviceBox_(new QComboBox)
{
    setIconSize(QSize(16, 16));
    auto* axisGroup = new QActionGroup(this);
    auto* byTime = addAction(tr("Time (ms)"));
    auto* byOp = addAction(tr("Op sequence"));
    for (auto* a : {byTime, byOp}) {
        a->setCheckable(true);
        axisGroup->addAction(a);
    }
    byTime->setChecked(true);
    connect(byTime, &QAction::triggered, plot_, [this] { plot_->setAxis(TimelineAxis::Milliseconds); });
    connect(byOp, &QAction::triggered, plot_, [this] { plot_->setAxis(TimelineAxis::OpSequence); });
    addSeparator();
    addAction(tr("Reset zoom"), plot_, &TimelinePlot::resetZoom);
    deviceBox_->setToolTip(tr("The snapshot's device to show"));
    deviceAction_ = addWidget(deviceBox_);
    deviceAction_->setVisible(false);
    connect(deviceBox_, QOverload<int>::of(&QComboBox::activated), this,
        [this](int i) { emit deviceChosen(deviceBox_->itemData(i).toInt()); });
    addSeparator();
    hideWeights_ = addAction(tr("Hide weights"));
    hideWeights_->setCheckable(true);
    hideWeights_->setToolTip(tr("Start the y axis at the top of the weights, so that activations and temporaries "
                                "get the plot's height"));
    connect(hideWeights_, &QAction::toggled, plot_, &TimelinePlot::setWeightsHidden);

    addSeparator();
    auto* select = addAction(tr("Select range"));
    select->setCheckable(true);
    select->setToolTip(tr("Drag on the timeline to choose a range (or ctrl+drag at any time): the tree and the "
                          "peak panel then count what was allocated in it and its own peak"));
    connect(select, &QAction::toggled, plot_, &TimelinePlot::setRangeMode);
    clearRange_ = addAction(tr("Clear range"));
    clearRange_->setShortcut(QKeySequence(Qt::Key_Escape));
    clearRange_->setToolTip(tr("Back to the whole run (Esc)"));
    clearRange_->setEnabled(false);
    connect(clearRange_, &QAction::triggered, plot_, &TimelinePlot::clearRange);

    addSeparator();
    // On a narrow window the toolbar moves the hint into its extension menu; the tooltip says it in full.
    auto* hint = new QLabel(tr("wheel: zoom · drag: pan · shift+drag: zoom to box · ctrl+drag: select range · "
                               "double-click: reset · click: select module and moment"));
    hint->setEnabled(false);
    hint->setToolTip(hint->text());
    addWidget(hint);
}

void TimelineToolbar::setDevices(const std::vector<int>& devices, int allDevices)
{
    deviceBox_->clear();
    if (!devices.empty()) {
        deviceBox_->addItem(tr("all devices"), allDevices);
        for (int d : devices)
            deviceBox_->addItem(QString::fromStdString(snapshotDeviceName(d)), d);
    }
    deviceAction_->setVisible(devices.size() > 1);
}

void TimelineToolbar::selectDevice(int device)
{
    auto i = deviceBox_->findData(device);
    if (i >= 0)
        deviceBox_->setCurrentIndex(i);
}

void TimelineToolbar::setWeightsOffered(bool offered)
{
    hideWeights_->setVisible(offered);
    if (!offered)
        hideWeights_->setChecked(false);
}

void TimelineToolbar::setRangeSelected(bool selected)
{
    clearRange_->setEnabled(selected);
}

} // namespace memledger

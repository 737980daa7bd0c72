#pragma once
// The timeline's toolbar: the x axis (time or op sequence), reset zoom, a snapshot's device, hide weights, range
// selection, and the mouse hint. It drives its TimelinePlot directly; the window hears of the device chosen.
#include <QToolBar>

#include <vector>

class QComboBox;
class QLabel;

namespace memledger {

class TimelinePlot;

class TimelineToolbar : public QToolBar {
    Q_OBJECT
public:
    explicit TimelineToolbar(TimelinePlot* plot, QWidget* parent = nullptr);

    QComboBox* deviceSelector() const { return deviceBox_; }
    // A snapshot's devices ("all devices" first; the selector shows with more than one); empty: a model run.
    void setDevices(const std::vector<int>& devices, int allDevices);
    void selectDevice(int device);
    // A snapshot has no weights of its own: "Hide weights" is not offered.
    void setWeightsOffered(bool offered);
    void setRangeSelected(bool selected); // "Clear range" is enabled

signals:
    void deviceChosen(int device);

private:
    TimelinePlot* plot_;
    QComboBox* deviceBox_;
    QAction* deviceAction_;
    QAction* hideWeights_;
    QAction* clearRange_;
};

} // namespace memledger

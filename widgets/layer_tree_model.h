#pragma once
#include "report/report.h"

#include <QAbstractItemModel>
#include <QColor>
#include <QStringList>

#include <array>
#include <memory>

namespace memledger {

// The module tree of a report (Report::layers, parents first) with a column per ledger. The backward's
// columns (Gradients to BackwardPeakDelta) hold figures in a training step only; the view hides them otherwise.
class LayerTreeModel : public QAbstractItemModel {
    Q_OBJECT
public:
    enum Column {
        Name,
        Type,
        OutputShape,
        Weights,
        Activations,
        Temporaries,
        PeakDelta,
        Gradients,
        SavedForBackward,
        BackwardTemporaries,
        BackwardPeakDelta,
        ColumnCount
    };
    // A snapshot's tree of stack frames has figures of its own, in the byte columns' places: the bytes alive at
    // the peak, allocated in total, the number of blocks and the largest block (no output shape, weights or
    // temporaries there).
    static constexpr int AtPeak = Weights;
    static constexpr int AllocatedTotal = Activations;
    static constexpr int BlockCount = Temporaries;
    static constexpr int LargestBlock = PeakDelta;
    static constexpr int kFirstTrainingColumn = Gradients;
    static bool isTrainingColumn(int column) { return column >= kFirstTrainingColumn && column < ColumnCount; }
    bool isTrainStep() const; // the report is a training step: the training columns apply
    bool isSnapshot() const; // the report is a CUDA snapshot's: the snapshot's columns apply
    bool columnApplies(int column) const; // the view hides the others
    enum Role {
        SortRole = Qt::UserRole + 1, // raw bytes for the byte columns, text otherwise
        BarFractionRole, // value / the largest value of the column, for the inline bars
        BarColorRole,
        PathRole, // "layer1.0.conv1"
        FilterRole, // path and type, what the filter box matches
        LayerRole, // index into Report::layers
    };

    explicit LayerTreeModel(QObject* parent = nullptr);
    void setReport(std::shared_ptr<const Report> report);
    const std::shared_ptr<const Report>& report() const { return report_; }

    QModelIndex indexForLayer(int layer, int column = 0) const;
    // The layer of `path`, or of its longest prefix that is a layer; invalid if none.
    QModelIndex indexForPath(const QString& path) const;
    int layerOf(const QModelIndex& index) const; // -1 if invalid

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

    // A training step: a checkpoint check box per module (Name column) that a checkpoint can go around.
    QStringList checkpointed() const; // module paths ticked, in layer order
    void setCheckpointed(const QStringList& paths);
    bool isCheckpointable(int layer) const;

signals:
    void checkpointsChanged(const QStringList& paths);

private:
    std::int64_t bytes(int layer, int column) const;

    std::shared_ptr<const Report> report_;
    std::vector<int> roots_;
    std::vector<std::vector<int>> children_;
    std::vector<int> row_; // row of each layer under its parent
    std::array<std::int64_t, ColumnCount> largest_ {};
    std::vector<char> checkpointable_; // per layer
    std::vector<char> checked_; // per layer
};

} // namespace memledger

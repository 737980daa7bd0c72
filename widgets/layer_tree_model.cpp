#include "layer_tree_model.h"

#include "whatif/checkpoint.h"

#include "ledger_colors.h"
#include "support/format.h"

#include <QStringList>

namespace memledger {

LayerTreeModel::LayerTreeModel(QObject* parent)
    : QAbstractItemModel(parent)
{
}

void LayerTreeModel::setReport(std::shared_ptr<const Report> report)
{
    beginResetModel();
    report_ = std::move(report);
    roots_.clear();
    children_.clear();
    row_.clear();
    largest_.fill(0);
    if (report_) {
        // Rebuilt from `parent` rather than trusting `children`, so a report read from JSON works too.
        const auto& layers = report_->layers;
        children_.resize(layers.size());
        row_.resize(layers.size(), 0);
        for (std::size_t i = 0; i < layers.size(); ++i) {
            int p = layers[i].parent;
            auto& siblings = p >= 0 && static_cast<std::size_t>(p) < layers.size()
                ? children_[static_cast<std::size_t>(p)]
                : roots_;
            row_[i] = static_cast<int>(siblings.size());
            siblings.push_back(static_cast<int>(i));
            for (int c = Weights; c < ColumnCount; ++c)
                largest_[static_cast<std::size_t>(c)]
                    = std::max(largest_[static_cast<std::size_t>(c)], bytes(static_cast<int>(i), c));
        }
    }
    checked_.assign(report_ ? report_->layers.size() : 0, 0);
    checkpointable_.assign(checked_.size(), 0);
    if (report_)
        for (const auto& path : checkpointableModules(*report_)) {
            int layer = report_->findLayer(path);
            if (layer >= 0)
                checkpointable_[static_cast<std::size_t>(layer)] = 1;
        }
    endResetModel();
}

bool LayerTreeModel::isCheckpointable(int layer) const
{
    return layer >= 0 && static_cast<std::size_t>(layer) < checkpointable_.size()
        && checkpointable_[static_cast<std::size_t>(layer)];
}

Qt::ItemFlags LayerTreeModel::flags(const QModelIndex& index) const
{
    auto f = QAbstractItemModel::flags(index);
    if (index.column() == Name && isCheckpointable(layerOf(index)))
        f |= Qt::ItemIsUserCheckable;
    return f;
}

bool LayerTreeModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    int layer = layerOf(index);
    if (role != Qt::CheckStateRole || index.column() != Name || !isCheckpointable(layer))
        return false;
    checked_[static_cast<std::size_t>(layer)] = value.toInt() == Qt::Checked ? 1 : 0;
    emit dataChanged(index, index, {Qt::CheckStateRole});
    emit checkpointsChanged(checkpointed());
    return true;
}

QStringList LayerTreeModel::checkpointed() const
{
    QStringList out;
    for (std::size_t i = 0; i < checked_.size(); ++i)
        if (checked_[i])
            out << QString::fromStdString(report_->layers[i].path);
    return out;
}

void LayerTreeModel::setCheckpointed(const QStringList& paths)
{
    if (!report_)
        return;
    std::fill(checked_.begin(), checked_.end(), 0);
    for (const auto& p : paths) {
        int layer = report_->findLayer(p.toStdString());
        if (isCheckpointable(layer))
            checked_[static_cast<std::size_t>(layer)] = 1;
    }
    if (!checked_.empty())
        emit dataChanged(index(0, Name), index(rowCount() - 1, Name), {Qt::CheckStateRole});
    // dataChanged above covers the top rows; a reset of the check state reaches every row through the view.
    for (std::size_t i = 0; i < checked_.size(); ++i) {
        auto idx = indexForLayer(static_cast<int>(i));
        emit dataChanged(idx, idx, {Qt::CheckStateRole});
    }
    emit checkpointsChanged(checkpointed());
}

std::int64_t LayerTreeModel::bytes(int layer, int column) const
{
    const auto& l = report_->layers[static_cast<std::size_t>(layer)];
    if (isSnapshot())
        switch (column) {
        case AtPeak:
            return l.peak_bytes;
        case AllocatedTotal:
            return l.activation_bytes;
        case BlockCount:
            return l.calls;
        case LargestBlock:
            return l.largest_block_bytes;
        case Gradients:
            return l.gradient_bytes;
        case SavedForBackward:
            return l.saved_activation_bytes;
        default:
            return 0;
        }
    switch (column) {
    case Weights:
        return l.weight_bytes;
    case Activations:
        return l.activation_bytes;
    case Temporaries:
        return l.temporary_peak_bytes;
    case PeakDelta:
        return l.peak_bytes;
    case Gradients:
        return l.gradient_bytes;
    case SavedForBackward:
        return l.saved_activation_bytes;
    case BackwardTemporaries:
        return l.backward_temporary_peak_bytes;
    case BackwardPeakDelta:
        return l.backward_peak_bytes;
    default:
        return 0;
    }
}

bool LayerTreeModel::isTrainStep() const
{
    return report_ && report_->run.mode == RunMode::Train;
}

bool LayerTreeModel::isSnapshot() const
{
    return report_ && report_->source == ReportSource::Snapshot;
}

bool LayerTreeModel::columnApplies(int column) const
{
    if (isSnapshot())
        return column == Name || column == Type || (column >= Weights && column < kFirstTrainingColumn)
            || column == SavedForBackward || column == Gradients;
    return column < ColumnCount && (!isTrainingColumn(column) || isTrainStep());
}

QModelIndex LayerTreeModel::indexForLayer(int layer, int column) const
{
    if (!report_ || layer < 0 || static_cast<std::size_t>(layer) >= row_.size())
        return {};
    return createIndex(row_[static_cast<std::size_t>(layer)], column, static_cast<quintptr>(layer));
}

QModelIndex LayerTreeModel::indexForPath(const QString& path) const
{
    if (!report_)
        return {};
    auto p = path.toStdString();
    while (true) {
        int layer = report_->findLayer(p);
        if (layer >= 0)
            return indexForLayer(layer);
        auto dot = p.rfind('.');
        if (p.empty())
            return {};
        p = dot == std::string::npos ? std::string() : p.substr(0, dot);
    }
}

int LayerTreeModel::layerOf(const QModelIndex& index) const
{
    return index.isValid() && index.model() == this ? static_cast<int>(index.internalId()) : -1;
}

QModelIndex LayerTreeModel::index(int row, int column, const QModelIndex& parent) const
{
    if (!report_ || row < 0 || column < 0 || column >= ColumnCount)
        return {};
    const auto& siblings = parent.isValid() ? children_[static_cast<std::size_t>(layerOf(parent))] : roots_;
    if (static_cast<std::size_t>(row) >= siblings.size())
        return {};
    return createIndex(row, column, static_cast<quintptr>(siblings[static_cast<std::size_t>(row)]));
}

QModelIndex LayerTreeModel::parent(const QModelIndex& child) const
{
    int layer = layerOf(child);
    if (layer < 0)
        return {};
    int p = report_->layers[static_cast<std::size_t>(layer)].parent;
    return p >= 0 ? indexForLayer(p) : QModelIndex();
}

int LayerTreeModel::rowCount(const QModelIndex& parent) const
{
    if (!report_)
        return 0;
    if (!parent.isValid())
        return static_cast<int>(roots_.size());
    if (parent.column() != 0)
        return 0;
    return static_cast<int>(children_[static_cast<std::size_t>(layerOf(parent))].size());
}

int LayerTreeModel::columnCount(const QModelIndex&) const
{
    return ColumnCount;
}

QVariant LayerTreeModel::data(const QModelIndex& index, int role) const
{
    int layer = layerOf(index);
    if (layer < 0)
        return {};
    const auto& l = report_->layers[static_cast<std::size_t>(layer)];
    int column = index.column();
    bool isBytes = column >= Weights;
    if (role == Qt::CheckStateRole) {
        if (column != Name || !isCheckpointable(layer))
            return {};
        return checked_[static_cast<std::size_t>(layer)] ? Qt::Checked : Qt::Unchecked;
    }
    switch (role) {
    case Qt::DisplayRole:
        switch (column) {
        case Name:
            return QString::fromStdString(l.name);
        case Type:
            return QString::fromStdString(l.type);
        case OutputShape: {
            QStringList shapes;
            for (const auto& s : l.output_shapes)
                shapes << QString::fromStdString(s);
            return shapes.join(QStringLiteral(", "));
        }
        default:
            if (column == BlockCount && isSnapshot())
                return QString::number(bytes(layer, column));
            return QString::fromStdString(formatBytes(bytes(layer, column)));
        }
    case Qt::ToolTipRole:
        return QString::fromStdString(l.path.empty() ? l.type : l.path);
    case Qt::TextAlignmentRole:
        return isBytes ? QVariant(Qt::AlignRight | Qt::AlignVCenter) : QVariant();
    case SortRole:
        if (isBytes)
            return QVariant::fromValue<qlonglong>(bytes(layer, column));
        return data(index, Qt::DisplayRole);
    case BarFractionRole: {
        if (!isBytes || largest_[static_cast<std::size_t>(column)] <= 0)
            return {};
        return static_cast<double>(bytes(layer, column))
            / static_cast<double>(largest_[static_cast<std::size_t>(column)]);
    }
    case BarColorRole:
        if (isSnapshot())
            return column == AllocatedTotal ? ledgerColor(Ledger::Unattributed).lighter(130)
                : column == BlockCount      ? QColor(Qt::gray)
                : column == Gradients       ? ledgerColor(Ledger::Gradients)
                : column == SavedForBackward ? ledgerColor(Ledger::SavedActivations)
                                            : ledgerColor(Ledger::Unattributed);
        switch (column) {
        case Weights:
            return ledgerColor(Ledger::Weights);
        case Activations:
            return ledgerColor(Ledger::Activations);
        case Temporaries:
            return ledgerColor(Ledger::Temporaries);
        case PeakDelta:
        case BackwardPeakDelta:
            return ledgerColor(Ledger::Unattributed);
        case Gradients:
            return ledgerColor(Ledger::Gradients);
        case SavedForBackward:
            return ledgerColor(Ledger::SavedActivations);
        case BackwardTemporaries:
            return ledgerColor(Ledger::Temporaries);
        default:
            return {};
        }
    case PathRole:
        return QString::fromStdString(l.path);
    case FilterRole:
        return QString::fromStdString(l.path + " " + l.name + " " + l.type);
    case LayerRole:
        return layer;
    default:
        return {};
    }
}

QVariant LayerTreeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation == Qt::Horizontal && role == Qt::ToolTipRole && isSnapshot()) {
        switch (section) {
        case AtPeak:
            return tr("Bytes its blocks hold at the peak (the highest point of the timeline, or of the range)");
        case AllocatedTotal:
            return tr("Bytes it allocated in the trace (or the range); without a trace, the blocks at the end");
        case BlockCount:
            return tr("How many blocks it allocated");
        case LargestBlock:
            return tr("Its largest block");
        case SavedForBackward:
            return tr("Bytes it allocated in the forward that the backward freed: saved for backward");
        case Gradients:
            return tr("Gradients it allocated (alive after the backward)");
        default:
            return {};
        }
    }
    if (orientation == Qt::Horizontal && role == Qt::DisplayRole && isSnapshot()) {
        switch (section) {
        case Name:
            return tr("Module (forward frames)");
        case Type:
            return tr("Type");
        case AtPeak:
            return tr("At the peak");
        case AllocatedTotal:
            return tr("Allocated in total");
        case BlockCount:
            return tr("Count");
        case LargestBlock:
            return tr("Largest block");
        case Gradients:
            return tr("Gradients");
        case SavedForBackward:
            return tr("Saved for backward");
        default:
            return {};
        }
    }
    if (orientation == Qt::Horizontal && role == Qt::ToolTipRole) {
        switch (section) {
        case Gradients:
            return tr("The .grad of the module's parameters after the step");
        case SavedForBackward:
            return tr("Activations of its forward still alive when the backward starts: what autograd saved");
        case BackwardTemporaries:
            return tr("The most temporary bytes alive at once in its backward nodes");
        case BackwardPeakDelta:
            return tr("The most live bytes during its backward nodes, minus the live bytes when the first began");
        default:
            return {};
        }
    }
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return QAbstractItemModel::headerData(section, orientation, role);
    switch (section) {
    case Name:
        return tr("Module");
    case Type:
        return tr("Type");
    case OutputShape:
        return tr("Output shape");
    case Weights:
        return tr("Weights");
    case Activations:
        return tr("Activations");
    // A training step has eight byte columns: their names take two lines so that the columns stay narrow.
    case Temporaries:
        return isTrainStep() ? tr("Temporaries\n(peak)") : tr("Temporaries (peak)");
    case PeakDelta:
        return tr("Peak delta");
    case Gradients:
        return tr("Gradients");
    case SavedForBackward:
        return tr("Saved for\nbackward");
    case BackwardTemporaries:
        return tr("Backward\ntemporaries (peak)");
    case BackwardPeakDelta:
        return tr("Backward\npeak delta");
    default:
        return {};
    }
}

} // namespace memledger

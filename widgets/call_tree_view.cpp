#include "call_tree_view.h"
#include "bytes_text.h"
#include "tree_sorting.h"

#include "bar_delegate.h"
#include "ledger_colors.h"
#include "stack_pane.h"
#include "snapshot/snapshot.h"
#include "support/format.h"

#include <QComboBox>
#include <QFont>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QSortFilterProxyModel>
#include <QStackedWidget>
#include <QTreeView>
#include <QVBoxLayout>

#include <algorithm>

namespace memledger {

namespace {

const CallTreeNode& nodeOf(const CallTree& t, const QModelIndex& index)
{
    return t.nodes[static_cast<std::size_t>(index.internalId())];
}

} // namespace

void CallTreeModel::setTree(std::shared_ptr<const CallTree> tree)
{
    beginResetModel();
    tree_ = std::move(tree);
    row_.assign(tree_ ? tree_->nodes.size() : 0, 0);
    if (tree_)
        for (const auto& n : tree_->nodes)
            for (std::size_t r = 0; r < n.children.size(); ++r)
                row_[static_cast<std::size_t>(n.children[r])] = static_cast<int>(r);
    endResetModel();
}

QModelIndex CallTreeModel::index(int row, int column, const QModelIndex& parent) const
{
    if (!tree_ || row < 0 || column < 0 || column >= ColumnCount)
        return {};
    if (!parent.isValid()) // one top row: every allocation of the range
        return row == 0 ? createIndex(0, column, quintptr {0}) : QModelIndex();
    const auto& p = nodeOf(*tree_, parent);
    if (row >= static_cast<int>(p.children.size()))
        return {};
    return createIndex(row, column, static_cast<quintptr>(p.children[static_cast<std::size_t>(row)]));
}

QModelIndex CallTreeModel::parent(const QModelIndex& child) const
{
    if (!tree_ || !child.isValid() || child.internalId() == 0)
        return {};
    auto parent = nodeOf(*tree_, child).parent;
    return createIndex(row_[static_cast<std::size_t>(parent)], 0, static_cast<quintptr>(parent));
}

int CallTreeModel::rowCount(const QModelIndex& parent) const
{
    if (!tree_)
        return 0;
    if (!parent.isValid())
        return 1;
    if (parent.column() != 0)
        return 0;
    return static_cast<int>(nodeOf(*tree_, parent).children.size());
}

int CallTreeModel::columnCount(const QModelIndex&) const
{
    return ColumnCount;
}

QVariant CallTreeModel::data(const QModelIndex& index, int role) const
{
    if (!tree_ || !index.isValid())
        return {};
    const auto& n = nodeOf(*tree_, index);
    const auto& root = tree_->nodes[0];
    const auto& label = tree_->labels[n.label];
    auto value = [&](int column) -> std::int64_t {
        switch (column) {
        case Allocated:
            return n.allocated;
        case AtPeak:
            return n.alive;
        case Count:
            return n.count;
        case Largest:
            return n.largest;
        default:
            return 0;
        }
    };
    const int c = index.column();
    switch (role) {
    case Qt::DisplayRole:
        if (c == Frame)
            return shortFrameText(QString::fromStdString(label.text));
        if (c == Count)
            return QString::number(n.count);
        return bytesText(value(c));
    case SortRole:
        if (c == Frame)
            return QString::fromStdString(label.text);
        return static_cast<qlonglong>(value(c));
    case BarFractionRole: {
        if (c == Frame || c == Count)
            return {};
        std::int64_t top = c == Largest ? root.largest : c == AtPeak ? root.alive : root.allocated;
        return top > 0 ? static_cast<double>(value(c)) / static_cast<double>(top) : 0.0;
    }
    case BarColorRole:
        return c == AtPeak ? ledgerColor(Ledger::Unattributed) : reservedColor();
    case Qt::FontRole:
        if (c == Frame && (label.user || label.group)) {
            QFont f;
            f.setBold(label.user);
            f.setItalic(label.group); // a user_metadata or compile_context value, not a frame
            return f;
        }
        return {};
    case Qt::ToolTipRole:
        if (c == Frame)
            return tr("%1<br>%2 allocated in %3 allocations (largest %4); %5 alive at the peak")
                .arg(QString::fromStdString(label.text).toHtmlEscaped(), bytesText(n.allocated),
                    QString::number(n.count), bytesText(n.largest), bytesText(n.alive));
        return {};
    case Qt::TextAlignmentRole:
        return c == Frame ? QVariant() : QVariant(Qt::AlignRight | Qt::AlignVCenter);
    case NodeRole:
        return static_cast<qlonglong>(index.internalId());
    default:
        return {};
    }
}

QVariant CallTreeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal)
        return {};
    if (role == Qt::DisplayRole) {
        switch (section) {
        case Frame: {
            auto frames = tree_ && tree_->bottom_up ? tr("Allocating frame, then its callers") : tr("Frame (outermost first)");
            if (tree_ && tree_->group)
                return tr("%1, then: %2").arg(QString::fromUtf8(contextKindName(*tree_->group)), frames);
            return frames;
        }
        case Allocated:
            return tr("Allocated");
        case AtPeak:
            return tr("At peak");
        case Count:
            return tr("Count");
        case Largest:
            return tr("Largest");
        default:
            return {};
        }
    }
    if (role == Qt::ToolTipRole) {
        switch (section) {
        case Allocated:
            return tr("Bytes allocated under this frame (its callees included)");
        case AtPeak:
            return tr("Bytes of these allocations alive at the peak of live bytes");
        case Count:
            return tr("Number of allocations");
        case Largest:
            return tr("The largest single allocation");
        default:
            return {};
        }
    }
    return {};
}

CallTreeView::CallTreeView(QWidget* parent)
    : QWidget(parent)
    , model_(new CallTreeModel(this))
    , proxy_(new QSortFilterProxyModel(this))
    , view_(new QTreeView)
    , filter_(new QLineEdit)
    , direction_(new QComboBox)
    , frames_(new QComboBox)
    , group_(new QComboBox)
    , summary_(new QLabel)
    , empty_(new QLabel)
    , stack_(new QStackedWidget)
{
    proxy_->setSourceModel(model_);
    proxy_->setSortRole(CallTreeModel::SortRole);
    proxy_->setFilterKeyColumn(CallTreeModel::Frame);
    proxy_->setFilterRole(CallTreeModel::SortRole); // the full "file:line name"
    proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);
    proxy_->setRecursiveFilteringEnabled(true);
    proxy_->setAutoAcceptChildRows(true);

    direction_->addItem(tr("Top-down"), false);
    direction_->addItem(tr("Bottom-up"), true);
    direction_->setToolTip(tr("Top-down: the outermost frame first, down to the allocating frame. Bottom-up: the "
                              "allocating frame first, then who called it"));
    frames_->addItem(tr("Python and ATen ops"), static_cast<int>(CallTreeFrames::PythonAndOps));
    frames_->addItem(tr("All frames"), static_cast<int>(CallTreeFrames::All));
    frames_->setToolTip(tr("Which frames make the tree: Python frames and the ATen operators the stacks pass "
                           "through, or every frame (the allocator's and the unwinder's own are always left out)"));
    options_.frames = CallTreeFrames::PythonAndOps;
    group_->addItem(tr("No grouping"), -1);
    group_->addItem(tr("By user_metadata"), static_cast<int>(ContextKind::UserMetadata));
    group_->addItem(tr("By compile_context"), static_cast<int>(ContextKind::CompileContext));
    group_->setToolTip(tr("A top level per value of the allocations' user_metadata "
                          "(torch.cuda.memory._set_memory_metadata) or compile_context (torch.compile's frame), "
                          "the frames beneath; for snapshots that record them"));
    connect(group_, QOverload<int>::of(&QComboBox::activated), this, [this](int i) {
        auto v = group_->itemData(i).toInt();
        setGroup(v < 0 ? std::nullopt : std::optional<ContextKind>(static_cast<ContextKind>(v)));
    });
    filter_->setPlaceholderText(tr("Filter frames"));
    filter_->setClearButtonEnabled(true);
    connect(filter_, &QLineEdit::textChanged, this, [this](const QString& text) {
        proxy_->setFilterFixedString(text);
        if (!text.isEmpty())
            view_->expandAll();
    });
    connect(direction_, QOverload<int>::of(&QComboBox::activated), this,
        [this](int i) { setBottomUp(direction_->itemData(i).toBool()); });
    connect(frames_, QOverload<int>::of(&QComboBox::activated), this,
        [this](int i) { setFrames(static_cast<CallTreeFrames>(frames_->itemData(i).toInt())); });

    view_->setModel(proxy_);
    view_->setSortingEnabled(true);
    view_->sortByColumn(CallTreeModel::Allocated, Qt::DescendingOrder);
    sortLargestFirstOnFirstClick(view_, [](int column) { return column != CallTreeModel::Frame; });
    view_->setUniformRowHeights(true);
    view_->setAlternatingRowColors(true);
    view_->setSelectionMode(QAbstractItemView::SingleSelection);
    view_->setSelectionBehavior(QAbstractItemView::SelectRows);
    auto* bars = new BarDelegate(view_);
    for (int c = CallTreeModel::Allocated; c < CallTreeModel::ColumnCount; ++c)
        if (c != CallTreeModel::Count)
            view_->setItemDelegateForColumn(c, bars);
    view_->header()->setStretchLastSection(false);
    view_->header()->setSectionResizeMode(QHeaderView::Interactive);
    view_->header()->setSectionResizeMode(CallTreeModel::Frame, QHeaderView::Stretch);
    for (int c = CallTreeModel::Allocated; c < CallTreeModel::ColumnCount; ++c)
        view_->setColumnWidth(c, c == CallTreeModel::Count ? 64 : 96);

    connect(view_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
        const auto& tree = model_->tree();
        if (!tree || !current.isValid())
            return;
        auto node = static_cast<std::int32_t>(current.data(CallTreeModel::NodeRole).toLongLong());
        std::vector<CallTreeLabel> frames;
        for (auto at = node; at > 0; at = tree->nodes[static_cast<std::size_t>(at)].parent)
            if (const auto& l = tree->labels[tree->nodes[static_cast<std::size_t>(at)].label]; !l.group)
                frames.push_back(l); // a group's value is no frame of the stack
        if (tree->bottom_up)
            std::reverse(frames.begin(), frames.end());
        const auto& n = tree->nodes[static_cast<std::size_t>(node)];
        emit nodeSelected(tr("%1 allocated in %2 allocations, %3 alive at the peak")
                              .arg(bytesText(n.allocated), QString::number(n.count), bytesText(n.alive)),
            frames);
    });

    auto* bar = new QHBoxLayout;
    bar->setContentsMargins(0, 0, 0, 0);
    bar->addWidget(direction_);
    bar->addWidget(frames_);
    bar->addWidget(group_);
    bar->addWidget(filter_, 1);
    summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* page = new QWidget;
    auto* pageLayout = new QVBoxLayout(page);
    pageLayout->setContentsMargins(0, 0, 0, 0);
    pageLayout->addLayout(bar);
    pageLayout->addWidget(view_, 1);
    pageLayout->addWidget(summary_);
    empty_->setText(tr("No call stacks: a model run records module paths (see the Layers tab); a CUDA snapshot "
                       "has them when it was recorded with stacks (torch.cuda.memory._record_memory_history())."));
    empty_->setWordWrap(true);
    empty_->setAlignment(Qt::AlignCenter);
    empty_->setEnabled(false);
    stack_->addWidget(page);
    stack_->addWidget(empty_);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(stack_);
}

void CallTreeView::setReport(std::shared_ptr<const Report> report)
{
    report_ = std::move(report);
    options_.first = 0;
    options_.last = CallTreeOptions::kEnd;
    options_.device = CallTreeOptions::kAllDevices;
    rebuild();
}

void CallTreeView::setDevice(int device)
{
    options_.device = device;
    rebuild();
}

void CallTreeView::setRange(std::size_t first, std::size_t last)
{
    options_.first = first;
    options_.last = last;
    rebuild();
}

void CallTreeView::setBottomUp(bool bottomUp)
{
    options_.bottom_up = bottomUp;
    direction_->setCurrentIndex(bottomUp ? 1 : 0);
    rebuild();
}

void CallTreeView::setFrames(CallTreeFrames frames)
{
    options_.frames = frames;
    frames_->setCurrentIndex(frames_->findData(static_cast<int>(frames)));
    rebuild();
    emit framesChanged(frames);
}

void CallTreeView::setGroup(std::optional<ContextKind> group)
{
    options_.group = group;
    group_->setCurrentIndex(group_->findData(group ? static_cast<int>(*group) : -1));
    rebuild();
}

bool CallTreeView::hasStacks() const
{
    return model_->tree() && model_->tree()->has_stacks;
}

void CallTreeView::rebuild()
{
    if (!report_ || !report_->trace) {
        model_->setTree(nullptr);
        stack_->setCurrentWidget(empty_);
        return;
    }
    const TraceContextColumn* contexts = report_->snapshot ? &report_->snapshot->trace_context : nullptr;
    // Grouping needs values: a file without any keeps its frames at the top (the choice is greyed out).
    const bool values = contexts && !contexts->empty();
    group_->setEnabled(values);
    auto options = options_;
    if (!values)
        options.group.reset();
    auto tree = std::make_shared<CallTree>(buildCallTree(*report_->trace, options, contexts));
    const auto& root = tree->nodes[0];
    summary_->setText(tr("%1 allocated in %2 allocations; %3 of them alive at the peak (after event %4)")
                          .arg(bytesText(root.allocated), QString::number(root.count), bytesText(root.alive),
                              QString::number(tree->moment)));
    model_->setTree(tree);
    stack_->setCurrentWidget(model_->tree()->has_stacks ? static_cast<QWidget*>(view_->parentWidget()) : empty_);
    // Open the path that holds the most: the top row and, below it, the largest child a few levels down.
    auto at = proxy_->index(0, 0);
    view_->expand(at);
    for (int depth = 0; depth < 6 && at.isValid(); ++depth) {
        at = proxy_->index(0, 0, at);
        if (at.isValid() && proxy_->rowCount(at) <= 3)
            view_->expand(at);
        else
            break;
    }
}

} // namespace memledger

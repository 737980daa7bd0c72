#include "stack_pane.h"
#include "bytes_text.h"

#include "snapshot/frames.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_contexts.h"
#include "support/format.h"

#include <QFont>
#include <QCheckBox>
#include <QLabel>
#include <QListWidget>
#include <QPalette>
#include <QVBoxLayout>

namespace memledger {

namespace {

constexpr int kUserRole = Qt::UserRole + 1;

QString msText(const Trace& t, std::size_t event)
{
    return QStringLiteral("%1 ms").arg(static_cast<double>(t.time_ns[event]) / 1e6, 0, 'f', 3);
}

} // namespace

QString shortFrameText(const QString& text)
{
    auto space = text.indexOf(QLatin1Char(' '));
    auto head = space < 0 ? text : text.left(space);
    auto colon = head.lastIndexOf(QLatin1Char(':'));
    auto path = colon < 0 ? head : head.left(colon);
    if (!path.contains(QLatin1Char('/')) && !path.contains(QLatin1Char('\\')))
        return text;
    QString normal = path;
    normal.replace(QLatin1Char('\\'), QLatin1Char('/'));
    QString shortPath;
    for (auto marker : {QStringLiteral("site-packages/"), QStringLiteral("dist-packages/")}) {
        auto at = normal.lastIndexOf(marker);
        if (at >= 0) {
            shortPath = path.mid(at + marker.size());
            break;
        }
    }
    if (shortPath.isEmpty()) {
        auto last = normal.lastIndexOf(QLatin1Char('/'));
        auto before = last > 0 ? normal.lastIndexOf(QLatin1Char('/'), last - 1) : -1;
        shortPath = path.mid(before + 1);
    }
    return shortPath + text.mid(path.size());
}

QString contextLinesHtml(const Report& r, std::size_t event)
{
    if (!r.snapshot || r.snapshot->trace != r.trace)
        return {};
    QString out;
    auto line = [&](const QString& label, const std::string& value) {
        auto text = QString::fromStdString(value);
        if (text.size() > 110)
            text = text.left(109) + QChar(0x2026);
        out += (out.isEmpty() ? QString() : QStringLiteral("<br>")) + label + QStringLiteral(": ") + text.toHtmlEscaped();
    };
    if (hasContexts(*r.snapshot))
        for (auto kind : {ContextKind::UserMetadata, ContextKind::CompileContext})
            if (const auto& value = contextOfEvent(*r.snapshot, event, kind); !value.empty())
                line(QString::fromLatin1(contextKindName(kind)), value);
    for (const auto* a : annotationsOfEvent(*r.snapshot, event))
        line(a->time_ns == INT64_MAX ? QObject::tr("annotated")
                                     : QObject::tr("annotated at %1 ms").arg(static_cast<double>(a->time_ns) / 1e6, 0, 'f', 3),
            a->text);
    return out;
}

QString stackTooltipHtml(const Trace& t, std::uint32_t stack, int maxFrames)
{
    if (stack == 0 || stack >= t.stacks.stackCount())
        return {};
    std::vector<FrameView> frames;
    frames.reserve(t.stacks.depth(stack));
    for (auto f = t.stacks.begin(stack); f != t.stacks.end(stack); ++f) {
        const auto& fr = t.stacks.frame(*f);
        frames.push_back({t.strings.at(fr.file), fr.line, t.strings.at(fr.name)});
    }
    return stackTooltipHtml(frames, maxFrames);
}

QString stackTooltipHtml(const std::vector<FrameView>& frames, int maxFrames)
{
    // Python frames first (pythonFirstOrder), the allocator's and unwinder's own left out.
    std::vector<std::size_t> order;
    for (auto i : pythonFirstOrder(frames, false))
        if (!isAllocatorFrame(frames[i].name))
            order.push_back(i);
    QString out;
    int shown = 0;
    for (auto i : order) {
        if (shown == maxFrames)
            break;
        const auto& f = frames[i];
        auto text = shortFrameText(QString::fromStdString(frameText(f)));
        if (text.size() > 110)
            text = text.left(109) + QChar(0x2026);
        text = text.toHtmlEscaped();
        out += (classifyFrame(f.filename) == FrameKind::User ? QStringLiteral("<b>%1</b>") : QStringLiteral("%1"))
                   .arg(text)
            + QStringLiteral("<br>");
        ++shown;
    }
    auto rest = static_cast<int>(order.size()) - shown;
    if (rest > 0)
        out += (rest == 1 ? QObject::tr("… 1 more frame") : QObject::tr("… %1 more frames").arg(rest))
            + QStringLiteral("<br>");
    if (out.endsWith(QStringLiteral("<br>")))
        out.chop(4);
    return out;
}

StackPane::StackPane(QWidget* parent)
    : QWidget(parent)
    , title_(new QLabel)
    , pythonOnly_(new QCheckBox(tr("Python frames only")))
    , list_(new QListWidget)
{
    pythonOnly_->setToolTip(tr("Python frames are listed first, innermost first; this hides the C++ and the "
                               "interpreter's frames after them"));
    connect(pythonOnly_, &QCheckBox::toggled, this, [this] {
        if (shown_ >= 0)
            showAllocation(shown_);
    });
    title_->setWordWrap(true);
    title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    list_->setSelectionMode(QAbstractItemView::ExtendedSelection); // frames can be copied
    list_->setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
    list_->setTextElideMode(Qt::ElideMiddle);
    list_->setUniformItemSizes(true);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(title_);
    layout->addWidget(pythonOnly_);
    layout->addWidget(list_, 1);
    showAllocation(-1);
}

void StackPane::setReport(std::shared_ptr<const Report> report)
{
    report_ = std::move(report);
    showAllocation(-1);
}

void StackPane::showAllocation(std::int64_t event)
{
    list_->clear();
    shown_ = event;
    const Trace* t = report_ ? report_->trace.get() : nullptr;
    if (!t || event < 0 || static_cast<std::size_t>(event) >= t->size()) {
        title_->setText(tr("Click an allocation on the timeline, or a frame in the call tree, to see its call stack"));
        return;
    }
    auto i = static_cast<std::size_t>(event);
    if (t->action[i] != Action::Alloc && t->partner[i] != kNoPartner)
        i = static_cast<std::size_t>(t->partner[i]); // a free: show its allocation
    auto partner = t->partner[i];
    QString when = t->action[i] == Action::Alloc
        ? tr("allocated at %1, %2")
              .arg(msText(*t, i),
                  partner == kNoPartner ? tr("alive at the end")
                                        : tr("freed at %1").arg(msText(*t, static_cast<std::size_t>(partner))))
        : tr("%1 at %2").arg(QString::fromLatin1(actionName(t->action[i])), msText(*t, i));
    auto context = contextLinesHtml(*report_, i);
    title_->setText(tr("<b>%1</b> on %2, %3").arg(bytesText(t->bytes[i]), QString::fromStdString(snapshotDeviceName(t->device[i])), when)
        + (context.isEmpty() ? QString() : QStringLiteral("<br>") + context));
    std::uint32_t stack = i < t->stack.size() ? t->stack[i] : 0;
    if (stack == 0 || stack >= t->stacks.stackCount()) {
        list_->addItem(tr("(no stack recorded)"));
        return;
    }
    const QColor dim = palette().color(QPalette::Disabled, QPalette::Text);
    std::vector<FrameView> frames;
    for (auto f = t->stacks.begin(stack); f != t->stacks.end(stack); ++f) {
        const auto& fr = t->stacks.frame(*f);
        frames.push_back({t->strings.at(fr.file), fr.line, t->strings.at(fr.name)});
    }
    for (auto k : pythonFirstOrder(frames, pythonOnly_->isChecked())) {
        const FrameView& v = frames[k];
        auto full = QString::fromStdString(memledger::frameText(v));
        auto* item = new QListWidgetItem(shortFrameText(full));
        item->setToolTip(full);
        const bool user = classifyFrame(v.filename) == FrameKind::User;
        item->setData(kUserRole, user);
        if (user) {
            QFont bold = item->font();
            bold.setBold(true);
            item->setFont(bold);
        } else if (auto kind = classifyFrame(v.filename);
                   isAllocatorFrame(v.name) || kind == FrameKind::CPython || kind == FrameKind::Torch
                   || kind == FrameKind::Library) {
            item->setForeground(dim); // the allocator's, the interpreter's, torch's own Python
        }
        list_->addItem(item);
    }
}

void StackPane::showFrames(const QString& title, const std::vector<CallTreeLabel>& frames)
{
    list_->clear();
    shown_ = -1;
    title_->setText(title);
    for (const auto& f : frames) {
        auto full = QString::fromStdString(f.text);
        auto* item = new QListWidgetItem(shortFrameText(full));
        item->setToolTip(full);
        item->setData(kUserRole, f.user);
        if (f.user) {
            QFont bold = item->font();
            bold.setBold(true);
            item->setFont(bold);
        }
        list_->addItem(item);
    }
}

QString StackPane::title() const
{
    return title_->text();
}

int StackPane::frameCount() const
{
    return list_->count();
}

QString StackPane::frameText(int row) const
{
    auto* item = list_->item(row);
    return item ? item->text() : QString();
}

bool StackPane::frameIsUser(int row) const
{
    auto* item = list_->item(row);
    return item && item->data(kUserRole).toBool();
}

} // namespace memledger

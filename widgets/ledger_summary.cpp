#include "ledger_summary.h"
#include "bytes_text.h"

#include "ledger_colors.h"
#include "report/meta_run.h"
#include "analysis/timeline_series.h"
#include "snapshot/snapshot.h"
#include "support/format.h"

#include <QFontMetrics>
#include <QLabel>
#include <QMessageBox>
#include <QPainter>
#include <QVBoxLayout>

#include <algorithm>
#include <vector>

namespace memledger {

namespace {

constexpr int kBarTop = 26;
constexpr int kBarHeight = 22;
constexpr int kRowHeight = 18;

} // namespace

QString loadTaxLine(const Report& r)
{
    const auto& t = r.load_tax;
    if (t.file_tensor_bytes <= 0 && t.resident_bytes <= 0)
        return {};
    return QObject::tr("file %1 %2, resident %3 as %4")
        .arg(bytesText(t.file_tensor_bytes), QString::fromStdString(t.file_dtype.empty() ? "-" : t.file_dtype),
            bytesText(t.resident_bytes), QString::fromStdString(t.resident_dtype));
}

struct LedgerSummary::Row {
    QString name;
    std::int64_t bytes;
    QColor colour;
};

// A titled bar with its rows; `caption` (may be empty) is a line of small print under the rows.
struct LedgerSummary::Section {
    QString title;
    std::vector<Row> rows;
    QString caption;
};

namespace {

using SummaryRow = LedgerSummary::Row;
using SummarySection = LedgerSummary::Section;

// A ledger of a run has a row when it holds bytes at the peak or over the run; the four of an inference run
// always do, as they always have.
bool holdsBytes(const Report& r, Ledger l)
{
    const auto& f = r.ledgers[static_cast<std::size_t>(l)];
    bool classic = l == Ledger::Weights || l == Ledger::Inputs || l == Ledger::Activations || l == Ledger::Temporaries;
    return classic || f.at_peak > 0 || f.total > 0;
}

QString keyText(const Report& r, std::size_t event)
{
    if (!r.trace || event >= r.trace->size())
        return {};
    if (!timelineHasTime(r))
        return QObject::tr("event %1").arg(event);
    return QObject::tr("%1 ms (event %2)")
        .arg(static_cast<double>(r.trace->time_ns[event]) / 1e6, 0, 'f', 3)
        .arg(event);
}

// A snapshot, on `device`: the peak moment as the timeline draws it (the highest point of its stack inside the
// report's range) and, apart, the state at the end as the segments hold it.
std::vector<SummarySection> snapshotSections(const Report& r, int device)
{
    const auto& snap = *r.snapshot;
    std::vector<SummarySection> out;
    auto onDevice = [&](int d) { return device == TimelineSeries::kAllDevices || d == device; };
    const QString where = device == TimelineSeries::kAllDevices || snap.devices.size() < 2
        ? QString()
        : QStringLiteral(" (%1)").arg(QString::fromStdString(snapshotDeviceName(device)));
    const bool traced = r.trace && std::any_of(r.trace->action.begin(), r.trace->action.end(),
        [](Action a) { return a == Action::Alloc || a == Action::Free; });
    if (traced) {
        const auto shared = TimelineSeries::shared(r, TimelineAxis::Milliseconds, device); // the timeline's
        const auto& series = *shared;
        const auto& total = series.tops[static_cast<std::size_t>(TimelineSeries::kPendingFree)];
        std::size_t from = 0, to = total.size(); // points of the range: its start and after each of its events
        if (r.range_end > 0) {
            from = r.range_first;
            to = std::min<std::size_t>(total.size(), std::size_t {r.range_end} + 1);
        }
        const std::size_t p = from < to ? total.extremes(from, to).high_at : from; // its first highest point
        // The ledgers at that moment, in the timeline's stacking order (its bands, read off the same series).
        auto height = [&](int band) {
            return static_cast<std::int64_t>(
                series.tops[static_cast<std::size_t>(band)][p] - series.bottomOf(band, p));
        };
        SummarySection peak;
        peak.title = QObject::tr("At the peak%1: %2").arg(where, bytesText(total[p]));
        for (int band : TimelineSeries::kStackOrder) {
            const auto bytes = height(band);
            if (bytes <= 0)
                continue;
            if (band == TimelineSeries::kPendingFree)
                peak.rows.push_back({QObject::tr("pending free"), bytes, pendingFreeColor()});
            else
                peak.rows.push_back({QString::fromUtf8(ledgerLabel(static_cast<Ledger>(band))), bytes,
                    ledgerColor(static_cast<Ledger>(band))});
        }
        peak.caption = p == 0 ? QObject::tr("when the trace begins") : QObject::tr("at %1").arg(keyText(r, p - 1));
        out.push_back(std::move(peak));
    }
    std::int64_t reserved = 0, allocated = 0, requested = 0;
    for (const auto& seg : snap.segments)
        if (onDevice(seg.device)) {
            reserved += seg.total_size;
            for (const auto& b : seg.blocks)
                if (b.state == BlockState::ActiveAllocated) {
                    allocated += b.size;
                    requested += requestedOrSize(snap, b);
                }
        }
    SummarySection end;
    end.title = QObject::tr("At the end%1: %2 reserved").arg(where, bytesText(reserved));
    if (requested != allocated) { // the timeline counts the bytes requested, the blocks hold them rounded up
        end.rows.push_back({QObject::tr("allocated, as requested"), requested, ledgerColor(Ledger::Unattributed)});
        end.rows.push_back({QObject::tr("rounded up into blocks"), allocated - requested,
            ledgerColor(Ledger::Unattributed).lighter(135)});
    } else {
        end.rows.push_back({QObject::tr("allocated"), allocated, ledgerColor(Ledger::Unattributed)});
    }
    // Cached but free: the allocator's reserve for later requests, fragmentation only where it cannot serve them.
    end.rows.push_back(
        {QObject::tr("cached, not allocated (the allocator's reserve)"), reserved - allocated, fragmentationColor()});
    if (!traced)
        end.caption = QObject::tr("the snapshot has no trace: this is all it shows");
    out.push_back(std::move(end));
    return out;
}

// A model run: its ledgers at the peak, in the timeline's stacking order. A snapshot: the peak and the end.
std::vector<SummarySection> summarySections(const Report& r, int device)
{
    if (r.snapshot)
        return snapshotSections(r, device);
    SummarySection s;
    // A meta run's figures come from shapes: the title never reads as a measurement.
    s.title = (isMetaRun(r) ? QObject::tr("At the peak (computed on meta): %1") : QObject::tr("At the peak: %1"))
                  .arg(bytesText(r.peak_total_bytes));
    for (int band : TimelineSeries::kStackOrder) {
        if (band >= kLedgerCount)
            continue;
        auto l = static_cast<Ledger>(band);
        if (holdsBytes(r, l))
            s.rows.push_back(
                {QString::fromUtf8(ledgerLabel(l)), r.ledgers[static_cast<std::size_t>(band)].at_peak, ledgerColor(l)});
    }
    if (r.range_end > 0 && r.peak_event >= 0)
        s.caption = QObject::tr("peak of the range, at %1").arg(keyText(r, static_cast<std::size_t>(r.peak_event)));
    return {std::move(s)};
}

constexpr int kCaptionHeight = 16;
constexpr int kSectionGap = 10;

int sectionHeight(const SummarySection& s, bool first)
{
    return (first ? kBarTop : kBarTop - 4 + kSectionGap) + kBarHeight + 8 + kRowHeight * static_cast<int>(s.rows.size())
        + (s.caption.isEmpty() ? 0 : kCaptionHeight);
}

} // namespace

LedgerSummary::~LedgerSummary() = default;

LedgerSummary::LedgerSummary(QWidget* parent)
    : QWidget(parent)
    , meta_(new QLabel(QString::fromUtf8(kMetaRunBadge), this))
    , training_(new QLabel(this))
    , loadTax_(new QLabel(this))
    , notes_(new QLabel(this))
{
    meta_->setObjectName(QStringLiteral("metaBadge"));
    meta_->setToolTip(tr("A run on the meta device: tensors had shapes and no memory, so every figure is computed "
                         "from shapes; the scratch kernels allocate inside themselves (oneDNN, im2col, cuBLAS and "
                         "cuDNN workspaces) does not exist there, so temporaries and the peak can be lower"));
    auto badgeFont = meta_->font();
    badgeFont.setBold(true);
    meta_->setFont(badgeFont);
    meta_->hide();
    for (auto* label : {meta_, training_, loadTax_}) {
        label->setWordWrap(true);
        label->setTextInteractionFlags(Qt::TextSelectableByMouse);
    }
    training_->hide();
    notes_->setObjectName(QStringLiteral("runNotes"));
    notes_->setTextFormat(Qt::RichText);
    notes_->setTextInteractionFlags(Qt::LinksAccessibleByMouse | Qt::LinksAccessibleByKeyboard);
    notes_->hide();
    connect(notes_, &QLabel::linkActivated, this, [this] {
        QMessageBox box(QMessageBox::Information, tr("Notes about this run"), notesLinkText(), QMessageBox::Ok, this);
        box.setInformativeText(notes().join(QStringLiteral("\n\n"))); // a blank line apart
        box.setTextInteractionFlags(Qt::TextSelectableByMouse);
        box.exec();
    });
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, rowsHeight(), 6, 6);
    layout->addWidget(meta_);
    layout->addWidget(training_);
    layout->addWidget(loadTax_);
    layout->addWidget(notes_);
    layout->addStretch(1);
    setMinimumWidth(220);
}

int LedgerSummary::rowsHeight() const
{
    // Four rows before a report arrives: an inference run's, so the dock does not jump when one does.
    if (!report_)
        return kBarTop + kBarHeight + 8 + kRowHeight * 4 + 6;
    int height = 6;
    bool first = true;
    for (const auto& s : sections_) {
        height += sectionHeight(s, first);
        first = false;
    }
    return height;
}

void LedgerSummary::setReport(std::shared_ptr<const Report> report)
{
    // A range of the same snapshot keeps the device; another file starts on all devices, as the timeline does.
    if (!report || !report_ || report->snapshot != report_->snapshot)
        device_ = TimelineSeries::kAllDevices;
    report_ = std::move(report);
    sections_ = report_ ? summarySections(*report_, device_) : std::vector<Section> {};
    layout()->setContentsMargins(6, rowsHeight(), 6, 6);
    meta_->setVisible(report_ && isMetaRun(*report_));
    training_->setText(trainingText());
    training_->setVisible(!training_->text().isEmpty());
    loadTax_->setText(report_ ? tr("Load tax: %1").arg(loadTaxLine(*report_)) : QString());
    loadTax_->setVisible(report_ && !loadTaxLine(*report_).isEmpty());
    const auto link = notesLinkText();
    notes_->setText(link.isEmpty() ? QString() : QStringLiteral("<a href=\"#notes\">%1</a>").arg(link.toHtmlEscaped()));
    QStringList escaped;
    for (const auto& n : notes())
        escaped << n.toHtmlEscaped();
    notes_->setToolTip(escaped.join(QStringLiteral("<br><br>")));
    notes_->setVisible(!link.isEmpty());
    keepLoadTaxVisible();
    updateGeometry();
    update();
}

QString LedgerSummary::trainingText() const
{
    if (!report_ || report_->snapshot || report_->run.mode != RunMode::Train)
        return {};
    auto optimizer = QString::fromStdString(report_->run.optimizer);
    return tr("Training step: gradients %1 (every parameter's .grad after the step), optimizer state %2%3")
        .arg(bytesText(report_->gradient_bytes), bytesText(report_->optimizer_state_bytes),
            optimizer.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(optimizer));
}

QStringList LedgerSummary::notes() const
{
    QStringList out;
    if (report_)
        for (const auto& n : report_->notes)
            out << QString::fromStdString(n);
    return out;
}

QString LedgerSummary::notesText() const
{
    return notes().join(QLatin1Char('\n'));
}

QString LedgerSummary::notesLinkText() const
{
    const auto n = static_cast<int>(notes().size());
    return n == 0 ? QString() : n == 1 ? tr("1 note about this run") : tr("%1 notes about this run").arg(n);
}

QStringList LedgerSummary::rowNames() const
{
    QStringList names;
    if (report_)
        for (const auto& s : sections_)
            for (const auto& row : s.rows)
                names << row.name;
    return names;
}

void LedgerSummary::resizeEvent(QResizeEvent* event)
{
    QWidget::resizeEvent(event);
    keepLoadTaxVisible();
}

void LedgerSummary::keepLoadTaxVisible()
{
    // A dock does not ask for height-for-width: without this, a short screen cuts the wrapped load-tax line.
    if (layout()->hasHeightForWidth())
        setMinimumHeight(layout()->heightForWidth(width()));
}

QString LedgerSummary::metaBadgeText() const
{
    return meta_->isVisibleTo(this) ? meta_->text() : QString();
}

QString LedgerSummary::loadTaxText() const
{
    return report_ ? loadTaxLine(*report_) : QString();
}

QSize LedgerSummary::sizeHint() const
{
    return {280, rowsHeight() + 34};
}

void LedgerSummary::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    auto text = palette().color(QPalette::WindowText);
    p.setPen(text);
    if (!report_) {
        p.drawText(rect().adjusted(6, 6, -6, -6), Qt::AlignLeft | Qt::AlignTop, tr("No report yet"));
        return;
    }
    int top = 0;
    bool first = true;
    for (const auto& section : sections_) {
        if (!first)
            top += kSectionGap - 4;
        first = false;
        std::int64_t total = 0;
        for (const auto& row : section.rows)
            total += std::max<std::int64_t>(0, row.bytes);
        auto titleFont = font();
        titleFont.setBold(true);
        p.setFont(titleFont);
        p.setPen(text);
        p.drawText(QRect(6, top + 4, width() - 12, kBarTop - 6), Qt::AlignLeft | Qt::AlignVCenter, section.title);
        p.setFont(font());

        QRect bar(6, top + kBarTop, width() - 12, kBarHeight);
        double x = bar.left();
        for (const auto& row : section.rows) {
            double w = total > 0 ? bar.width() * static_cast<double>(std::max<std::int64_t>(0, row.bytes))
                    / static_cast<double>(total)
                                 : 0;
            p.fillRect(QRectF(x, bar.top(), w, bar.height()), row.colour);
            x += w;
        }
        p.setPen(palette().color(QPalette::Mid));
        p.drawRect(bar.adjusted(0, 0, -1, -1));

        int y = bar.bottom() + 8;
        for (const auto& row : section.rows) {
            p.fillRect(QRect(6, y + 4, 10, 10), row.colour);
            p.setPen(text);
            QString figure = bytesText(row.bytes);
            if (total > 0)
                figure += QStringLiteral("  %1%").arg(
                    100.0 * static_cast<double>(row.bytes) / static_cast<double>(total), 0, 'f', 0);
            // In a narrow panel a long name is cut short with an ellipsis, never drawn under its figure.
            const QFontMetrics fm(p.font());
            const int nameWidth
                = std::max(0, width() - 28 - fm.horizontalAdvance(figure) - fm.horizontalAdvance(QStringLiteral("  ")));
            p.drawText(QRect(22, y, nameWidth, kRowHeight), Qt::AlignLeft | Qt::AlignVCenter,
                fm.elidedText(row.name, Qt::ElideRight, nameWidth));
            p.drawText(QRect(22, y, width() - 28, kRowHeight), Qt::AlignRight | Qt::AlignVCenter, figure);
            y += kRowHeight;
        }
        if (!section.caption.isEmpty()) {
            auto small = font();
            small.setPointSizeF(std::max(7.0, font().pointSizeF() - 1));
            p.setFont(small);
            p.setPen(palette().color(QPalette::PlaceholderText));
            p.drawText(QRect(22, y, width() - 28, kCaptionHeight), Qt::AlignLeft | Qt::AlignVCenter, section.caption);
            p.setFont(font());
            y += kCaptionHeight;
        }
        top = y - 4;
    }
}

QString LedgerSummary::summaryText() const
{
    QStringList lines;
    if (report_ && isMetaRun(*report_))
        lines << QString::fromUtf8(kMetaRunBadge);
    if (report_)
        for (const auto& s : sections_) {
            lines << s.title;
            for (const auto& row : s.rows)
                lines << QStringLiteral("  %1: %2").arg(row.name, bytesText(row.bytes));
            if (!s.caption.isEmpty())
                lines << QStringLiteral("  ") + s.caption;
        }
    return lines.join(QLatin1Char('\n'));
}

void LedgerSummary::setDevice(int device)
{
    if (device == device_)
        return;
    device_ = device;
    sections_ = report_ ? summarySections(*report_, device_) : std::vector<Section> {};
    layout()->setContentsMargins(6, rowsHeight(), 6, 6);
    updateGeometry();
    update();
}

} // namespace memledger

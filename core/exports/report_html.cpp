#include "exports/report_html.h"
#include "exports/html_style.h"

#include "analysis/segment_history.h"
#include "exports/ledger_palette.h"
#include "report/meta_run.h"
#include "report/parallel_words.h"
#include "recording/build_report.h"
#include "analysis/timeline_series.h"
#include "snapshot/snapshot.h"
#include "report/report_summary.h"
#include "support/format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace memledger {

namespace {

constexpr std::size_t kChartPoints = 1000; // columns of the chart: about one per pixel
constexpr std::size_t kHoverAllocations = 3000; // largest allocations kept for hover details

const char* bandColour(int band)
{
    if (band == TimelineSeries::kPendingFree)
        return kPendingFreeColourHex;
    return ledgerColourHex(static_cast<Ledger>(band));
}

// The window's live-bytes series (TimelineSeries), reduced to at most kChartPoints columns: each column keeps
// the point where the total is highest, so the peak survives. Weights and inputs go in `base` (constant
// during a model run); the other bands in `series`. Axis ticks come from the same 1-2-5 rule as the window's.
nlohmann::json chartSeries(const Report& r)
{
    using nlohmann::json;
    json out = json::object();
    const auto shared = TimelineSeries::shared(r, TimelineAxis::Milliseconds);
    const auto& s = *shared;
    const std::size_t points = s.keys.size();
    const auto& total = s.tops[static_cast<std::size_t>(TimelineSeries::kStackOrder.back())];
    const double lo = s.firstKey(), hi = s.lastKey();
    const double span = std::max(1e-9, hi - lo);
    std::vector<std::size_t> chosen;
    std::int64_t column = -1;
    double best = 0; // the total at chosen.back()
    total.forEach(0, points, [&](std::size_t p, double v) {
        auto c = static_cast<std::int64_t>((s.keys[p] - lo) / span * (kChartPoints - 1));
        if (c != column) {
            chosen.push_back(p);
            column = c;
            best = v;
        } else if (v > best) {
            chosen.back() = p;
            best = v;
        }
    });
    std::vector<double> x;
    for (auto p : chosen)
        x.push_back(s.keys[p]);
    out["x_ms"] = x;
    out["end_ms"] = hi;
    json series = json::array();
    json base = json::array();
    double top = 0;
    for (auto p : chosen)
        top = std::max(top, total[p]);
    for (int band : TimelineSeries::kStackOrder) {
        if (!s.present[static_cast<std::size_t>(band)])
            continue;
        std::vector<double> y;
        for (auto p : chosen)
            y.push_back(s.tops[static_cast<std::size_t>(band)][p] - s.bottomOf(band, p));
        // Resident during a model run: weights, optimizer state and inputs.
        const bool constantBase = !r.snapshot
            && (band == static_cast<int>(Ledger::Weights) || band == static_cast<int>(Ledger::OptimizerState)
                || band == static_cast<int>(Ledger::Inputs));
        const char* name = TimelineSeries::bandName(band);
        if (constantBase)
            base.push_back({{"name", name}, {"colour", bandColour(band)}, {"bytes", y.empty() ? 0.0 : y.front()}});
        else
            series.push_back({{"name", name}, {"colour", bandColour(band)}, {"y", y}});
    }
    // A training step's phases, drawn as the window draws them: light bands behind the stack, named at the top.
    json phases = json::array();
    if (!r.snapshot)
        for (const auto& p : r.phases)
            phases.push_back({{"name", p.name}, {"start_ms", static_cast<double>(p.start_ns) / 1e6},
                {"end_ms", static_cast<double>(p.end_ns) / 1e6}});
    out["phases"] = phases;
    out["series"] = series;
    out["base"] = base;
    // The reserve line the window draws: recorded segments of a snapshot, or the simulated GPU of a model run.
    auto history = SegmentHistory::build(r, TimelineAxis::Milliseconds);
    if (history.reserved.size() == points && points > 0) {
        std::vector<double> reserved;
        for (auto p : chosen) {
            reserved.push_back(history.reserved[p]);
            top = std::max(top, history.reserved[p]);
        }
        out["reserved"] = {{"name", history.simulated ? "reserved (simulated GPU)" : "reserved"},
            {"colour", kReservedColourHex}, {"y", reserved}};
    }
    top = std::max(top * (phases.empty() ? 1.05 : 1.15), 1.0); // room for the phase names above the stack
    auto ticks = byteTicks(0, top, 5);
    out["y_max"] = std::max(top, ticks.values.empty() ? top : ticks.values.back());
    out["y_ticks"] = json::array();
    for (std::size_t i = 0; i < ticks.values.size(); ++i)
        out["y_ticks"].push_back({{"v", ticks.values[i]}, {"label", ticks.labels[i]}});
    out["x_ticks"] = niceTicks(0, hi, 6);
    out["x_unit"] = timelineHasTime(r) ? " ms" : ""; // no timestamps: the keys are the events' order
    out["x_label"] = timelineAxisLabel(r, TimelineAxis::Milliseconds);
    return out;
}

nlohmann::json hoverAllocations(const Report& r)
{
    using nlohmann::json;
    const auto& t = *r.trace;
    std::vector<std::size_t> allocs;
    for (std::size_t i = 0; i < t.size(); ++i)
        if (t.action[i] == Action::Alloc)
            allocs.push_back(i);
    auto keep = std::min(allocs.size(), kHoverAllocations);
    std::partial_sort(allocs.begin(), allocs.begin() + static_cast<std::ptrdiff_t>(keep), allocs.end(),
        [&](std::size_t a, std::size_t b) { return t.bytes[a] > t.bytes[b]; });
    allocs.resize(keep);
    // Without timestamps (a snapshot) the chart's keys are the events' order: time_ns is 1000 per event.
    const double msToKey = timelineHasTime(r) ? 1.0 : 1000.0;
    double endMs = t.size() ? static_cast<double>(t.time_ns.back()) / 1e6 * msToKey : 0.0;
    const Phase* backward = nullptr;
    for (const auto& phase : r.phases)
        if (phase.name == "backward")
            backward = &phase;
    json out = json::array();
    for (auto i : allocs) {
        auto p = t.partner[i];
        double to = p == kNoPartner ? endMs : static_cast<double>(t.time_ns[static_cast<std::size_t>(p)]) / 1e6 * msToKey;
        // In the backward the outer op is the autograd node ("ConvolutionBackward0"): it comes first.
        std::string op = t.strings.at(t.inner_op[i] ? t.inner_op[i] : t.outer_op[i]);
        if (backward && i >= backward->first_event && i < backward->end_event && t.outer_op[i]) {
            op = t.strings.at(t.outer_op[i]);
            if (t.inner_op[i] && t.inner_op[i] != t.outer_op[i])
                op += " > " + t.strings.at(t.inner_op[i]);
        }
        out.push_back({static_cast<double>(t.time_ns[i]) / 1e6 * msToKey, to, t.bytes[i], ledgerLabel(t.ledger[i]),
            t.strings.at(t.where[i]), op});
    }
    return out;
}

std::string scriptSafe(std::string json)
{
    std::string out;
    out.reserve(json.size());
    for (std::size_t i = 0; i < json.size(); ++i) {
        if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/')
            out += "<\\";
        else
            out += json[i];
    }
    return out;
}

// After kHtmlBaseStyle (exports/html_style.h).
const char* kStyle = R"(
.meta-run{border:2px solid #b8860b;background:#fff8e1;color:#5d4200;padding:8px 12px;max-width:900px}
.bar{display:flex;height:28px;width:100%;max-width:900px;border:1px solid #ccc}
.bar div{height:100%} .legend span{display:inline-block;margin-right:16px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
#chart{border:1px solid #ddd;max-width:100%} #tip{position:absolute;background:#fffbe6;border:1px solid #cca;
padding:4px 8px;font-size:12px;pointer-events:none;display:none;white-space:pre}
.inbar{display:inline-block;height:8px;background:#dd8452;vertical-align:middle}
.wide{overflow-x:auto;max-width:100%} #layers td:first-child{white-space:normal;overflow-wrap:anywhere;min-width:200px;max-width:420px}
#allrem:not(:checked)~#remedies tr.minor{display:none}
)";

const char* kScript = R"(
(function(){
const c=document.getElementById('chart'),ctx=c.getContext('2d'),tip=document.getElementById('tip');
const W=c.width,H=c.height,L=70,R=10,T=10,B=30;
const xs=DATA.chart.x_ms,end=Math.max(DATA.chart.end_ms,1e-9),base=DATA.chart.base;
let baseSum=0;base.forEach(b=>baseSum+=b.bytes);
const n=xs.length;const top=DATA.chart.y_max||1;
function fmt(b){const u=['B','KiB','MiB','GiB','TiB'];let i=0,s=b<0?'-':'';b=Math.abs(b);while(b>=1024&&i<4){b/=1024;i++;}
 return s+(i?b.toFixed(b>=100?1:2):Math.round(b))+' '+u[i];}
const X=t=>L+(W-L-R)*t/end,Y=v=>H-B-(H-T-B)*v/top;
ctx.fillStyle='#fff';ctx.fillRect(0,0,W,H);ctx.font='11px sans-serif';ctx.fillStyle='#444';ctx.strokeStyle='#eee';
DATA.chart.y_ticks.forEach(k=>{const y=Y(k.v);ctx.beginPath();ctx.moveTo(L,y);ctx.lineTo(W-R,y);ctx.stroke();ctx.fillText(k.label,4,y+4);});
DATA.chart.x_ticks.forEach(t=>{if(t>end)return;const l=(+t.toPrecision(6))+(DATA.chart.x_unit??' ms'),w=ctx.measureText(l).width;
 ctx.fillText(l,Math.max(L-w/2,Math.min(X(t)-w/2,W-R-w)),H-10);});
const ph=DATA.chart.phases||[];
ph.forEach((p,i)=>{const a=X(Math.max(0,p.start_ms)),b=X(Math.min(end,p.end_ms));ctx.fillStyle=i%2?'rgba(0,0,0,0.025)':'rgba(0,0,0,0.08)';
 ctx.fillRect(a,T,Math.max(0,b-a),H-T-B);if(i){ctx.strokeStyle='rgba(0,0,0,0.3)';ctx.setLineDash([4,3]);ctx.beginPath();
 ctx.moveTo(a,T);ctx.lineTo(a,H-B);ctx.stroke();ctx.setLineDash([]);}});
ctx.fillStyle='#444';
let lower=new Array(n).fill(0);
function band(vals,colour){ctx.fillStyle=colour;ctx.beginPath();ctx.moveTo(X(0),Y(lower[0]));
 for(let i=0;i<n;i++){ctx.lineTo(X(xs[i]),Y(i?lower[i-1]+vals[i-1]:lower[0]));ctx.lineTo(X(xs[i]),Y(lower[i]+vals[i]));}
 ctx.lineTo(X(end),Y(lower[n-1]+vals[n-1]));ctx.lineTo(X(end),Y(lower[n-1]));
 for(let i=n-1;i>=0;i--){ctx.lineTo(X(xs[i]),Y(lower[i]));ctx.lineTo(X(xs[i]),Y(i?lower[i-1]:lower[0]));}
 ctx.closePath();ctx.fill();for(let i=0;i<n;i++)lower[i]+=vals[i];}
if(n){base.forEach(b=>band(new Array(n).fill(b.bytes),b.colour));
DATA.chart.series.forEach(se=>band(se.y,se.colour));}
const rs=DATA.chart.reserved;const ry=rs&&n?Math.max(T+24,Y(rs.y[n-1])-4):-99;if(rs&&n){ctx.strokeStyle=rs.colour;ctx.lineWidth=1.5;ctx.setLineDash([6,4]);ctx.beginPath();
 ctx.moveTo(X(xs[0]),Y(rs.y[0]));for(let i=1;i<n;i++){ctx.lineTo(X(xs[i]),Y(rs.y[i-1]));ctx.lineTo(X(xs[i]),Y(rs.y[i]));}
 ctx.lineTo(X(end),Y(rs.y[n-1]));ctx.stroke();ctx.setLineDash([]);ctx.lineWidth=1;ctx.fillStyle=rs.colour;
 ctx.fillText(rs.name,W-R-ctx.measureText(rs.name).width-4,ry);}
ctx.fillStyle='#555';ph.forEach(p=>{const a=X(Math.max(0,p.start_ms)),b=X(Math.min(end,p.end_ms)),w=ctx.measureText(p.name).width;
 if(b-a>=w+8)ctx.fillText(p.name,(a+b-w)/2,T+12);});
if(DATA.chart.x_unit==='')ctx.fillText(DATA.chart.x_label,W-R-ctx.measureText(DATA.chart.x_label).width,H-B-6);
const pk=DATA.peak;ctx.strokeStyle='#000';ctx.setLineDash([4,3]);ctx.beginPath();ctx.moveTo(X(pk.ms),T);ctx.lineTo(X(pk.ms),H-B);ctx.stroke();
ctx.setLineDash([]);ctx.fillStyle='#000';let py=T+(ph.length?28:12);if(ph.length&&Math.abs(py-ry)<14)py=ry+14;
ctx.fillText('peak '+fmt(pk.bytes),Math.min(X(pk.ms)+4,W-120),py);
c.addEventListener('mousemove',e=>{const r=c.getBoundingClientRect(),sx=(e.clientX-r.left)*W/r.width;
 if(sx<L||sx>W-R){tip.style.display='none';return;}const t=(sx-L)/(W-L-R)*end;
 const alive=DATA.allocs.filter(a=>a[0]<=t&&t<a[1]).sort((a,b)=>b[2]-a[2]).slice(0,4);
 const u=DATA.chart.x_unit??' ms',d=u?3:0;let s=(u?'':'event ')+t.toFixed(d)+u;alive.forEach(a=>{s+='\n'+fmt(a[2])+'  '+a[3]+'  '+(a[4]||'(root)')+'  '+a[5]+'  alive '+(u?'':'events ')+a[0].toFixed(u?2:0)+'-'+a[1].toFixed(u?2:0)+u;});
 tip.textContent=s;tip.style.display='block';tip.style.left=(e.pageX+12)+'px';tip.style.top=(e.pageY+12)+'px';});
c.addEventListener('mouseleave',()=>tip.style.display='none');
document.body.setAttribute('data-rendered','yes');
})();
)";

void layerRows(std::ostringstream& out, const Report& r, int i, std::int64_t largest)
{
    const auto& l = r.layers[static_cast<std::size_t>(i)];
    std::string shapes;
    for (const auto& s : l.output_shapes)
        shapes += (shapes.empty() ? "" : ", ") + s;
    auto width
        = largest > 0 ? static_cast<int>(100.0 * static_cast<double>(l.peak_bytes) / static_cast<double>(largest)) : 0;
    out << "<tr><td style=\"padding-left:" << 8 + 14 * l.depth << "px\">" << htmlEscape(l.parent < 0 ? l.type : l.name)
        << "</td><td class=l>" << htmlEscape(l.parent < 0 ? "" : l.type) << "</td><td class=l>" << htmlEscape(shapes)
        << "</td><td>" << formatBytes(l.weight_bytes) << "</td><td>" << formatBytes(l.activation_bytes) << "</td><td>"
        << formatBytes(l.temporary_peak_bytes) << "</td><td>" << formatBytes(l.peak_bytes)
        << " <span class=inbar style=\"width:" << width << "px\"></span></td>";
    if (r.run.mode == RunMode::Train || r.snapshot)
        out << "<td>" << formatBytes(l.gradient_bytes) << "</td><td>" << formatBytes(l.saved_activation_bytes)
            << "</td><td>" << formatBytes(l.backward_temporary_peak_bytes) << "</td><td>"
            << formatBytes(l.backward_peak_bytes) << "</td>";
    out << "<td>" << l.calls << "</td></tr>\n";
    for (int c : l.children)
        layerRows(out, r, c, largest);
}

// The what-if table, as the text report prints it.
void whatIfSection(std::ostringstream& out, const WhatIfTable& w)
{
    const bool seq = w.axis == WhatIfAxis::Seq;
    auto records = w.recorded_batches.empty() ? std::vector<std::int64_t> {w.recorded_batch1, w.recorded_batch2}
                                              : w.recorded_batches;
    std::string list;
    for (std::size_t i = 0; i < records.size(); ++i)
        list += (i == 0 ? "" : i + 1 == records.size() ? " and " : ", ") + std::to_string(records[i]);
    out << "<h2>What if: other batch sizes and precisions</h2>\n<p>Predicted from runs at "
        << (w.axis == WhatIfAxis::Seq ? "sequence " : "batch ") << list
        << (w.device == "meta" ? " on the meta device (computed from shapes, not measured)" : "")
        << ".</p>\n<table id=whatif><tr><th>batch</th>" << (seq ? "<th>seq</th>" : "") << "<th class=l>dtype</th>"
           "<th class=l>method</th><th>peak</th><th>peak total</th><th>reserved (simulated GPU)</th>";
    if (w.budget_bytes > 0)
        out << "<th class=l>fits " << htmlEscape(w.budgetText()) << "</th>";
    out << "</tr>\n";
    for (const auto& p : w.predictions) {
        auto peak = p.measured_peak_bytes.value_or(p.predicted_peak_bytes);
        auto total = p.peakTotal();
        out << "<tr><td>" << p.batch << "</td>";
        if (seq)
            out << "<td>" << p.seq << "</td>";
        out << "<td class=l>" << htmlEscape(p.dtype) << "</td><td class=l>"
            << w.methodText(p) << "</td><td>" << (p.runnable ? formatBytes(peak) : "&ndash;") << "</td><td>"
            << (p.runnable ? formatBytes(total) : "&ndash;") << "</td><td>"
            << (p.runnable ? formatBytes(p.predicted_reserved_bytes) : "&ndash;") << "</td>";
        if (w.budget_bytes > 0) {
            const auto verdict = htmlEscape(w.fitsText(p));
            out << "<td class=l" << (p.runnable ? "" : " title=\"" + htmlEscape(p.not_runnable) + "\"") << ">"
                << (w.fits(p) ? verdict : "<b class=no>" + verdict + "</b>") << "</td>";
        }
        out << "</tr>\n";
    }
    out << "</table>\n";
    if (w.budget_bytes > 0 && !w.max_batch.empty()) {
        out << "<p>" << (seq ? "Longest sequence" : "Largest batch") << " within " << htmlEscape(w.budgetText()) << ", "
            << htmlEscape(w.allocatorText());
        if (w.runnable.bounded())
            out << " (within " << w.runnable.text() << ", the sizes the model accepts)";
        out << ":";
        for (std::size_t i = 0; i < w.max_batch.size(); ++i) {
            const auto& [dtype, n] = w.max_batch[i];
            out << " " << htmlEscape(dtype) << " <b>" << WhatIfTable::largestText(n) << "</b>";
            if (seq && i < w.max_seq_batch.size())
                out << " at batch " << w.max_seq_batch[i];
            out << htmlEscape(w.largestMethodText(i)) << (i + 1 < w.max_batch.size() ? ";" : "");
        }
        out << "</p>\n";
    }
    std::vector<std::string> refused;
    for (const auto& p : w.predictions)
        if (!p.runnable && std::find(refused.begin(), refused.end(), p.not_runnable) == refused.end())
            refused.push_back(p.not_runnable);
    for (const auto& why : refused)
        out << "<p class=note>" << htmlEscape(why) << "</p>\n";
}

// "What would help": the remedies, ranked, with their predicted (and measured) savings.
void remediesSection(std::ostringstream& out, const std::vector<Remedy>& remedies, bool meta)
{
    auto change = [](std::int64_t before, std::int64_t after) { return formatByteChange(before, after, "&minus;"); };
    out << "<h2>What would help</h2>\n";
    if (remedies.empty()) {
        out << "<p>Nothing found that would help without changing the result.</p>\n";
        return;
    }
    // Rows that save under 1% of the peak total wait behind "show all" (a checkbox; no script needed).
    std::size_t minor = std::count_if(remedies.begin(), remedies.end(), [](const Remedy& m) { return m.minor(); });
    if (minor > 0)
        out << "<input type=checkbox id=allrem><label for=allrem> show all (" << minor
            << (minor == 1 ? " remedy saves" : " remedies save") << " under 1% of the peak total)</label>\n";
    out << "<table id=remedies><tr><th>#</th><th class=l>remedy</th><th>peak total</th><th>change</th>"
           "<th>reserve</th><th>change</th><th class=l>figure</th><th class=l>what to change</th></tr>\n";
    int n = 0;
    for (const auto& m : remedies) {
        out << (m.minor() ? "<tr class=minor><td>" : "<tr><td>") << ++n << "</td><td class=l><b>" << htmlEscape(m.title) << "</b></td><td>"
            << formatBytes(m.peak_total_after) << "</td><td>" << change(m.peak_total_before, m.peak_total_after)
            << "</td><td>" << (m.reserve_after > 0 ? formatBytes(m.reserve_after) : "-") << "</td><td>"
            << (m.reserve_after > 0 ? change(m.reserve_before, m.reserve_after) : "-") << "</td><td class=l>"
            << figureMethodText(m.method, meta);
        if (m.measured_peak_total && m.kind != RemedyKind::Tiling)
            out << ": " << formatBytes(*m.measured_peak_total) << " " << figureMethodText(FigureMethod::Measured, meta);
        out << "</td><td class=l style=\"white-space:normal;overflow-wrap:anywhere;min-width:320px;max-width:560px\">" << htmlEscape(m.change);
        if (!m.details.empty()) {
            out << "<ul>";
            for (std::size_t i = 0; i < m.details.size() && i < 20; ++i)
                out << "<li>" << htmlEscape(m.details[i]) << "</li>";
            if (m.details.size() > 20)
                out << "<li>... and " << m.details.size() - 20 << " more</li>";
            out << "</ul>";
        }
        out << "</td></tr>\n";
    }
    out << "</table>\n<p class=muted>Ranked by the saving on the peak total, then on the reserve (the caching-allocator "
           "model's replay of the run or the snapshot). Predicted figures come from the recorded run; "
        << (meta ? "those computed on meta from a meta-device run at the changed setting (shapes only: no memory measured)"
                 : "measured ones from a real run at the changed setting")
        << ".</p>\n";
}

} // namespace

std::string htmlEscape(const std::string& s)
{
    std::string out;
    for (char ch : s) {
        switch (ch) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&quot;";
            break;
        default:
            out += ch;
        }
    }
    return out;
}

namespace {

// The note a meta run's report carries (recording/meta_device.cpp), the one that starts "a meta-device run".
std::string metaNote(const Report& r)
{
    for (const auto& note : r.notes)
        if (note.rfind("a meta-device run", 0) == 0)
            return note;
    return {};
}

} // namespace

std::string reportToHtml(const Report& r, const std::string& extraSectionsHtml)
{
    std::ostringstream out;
    out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>memledger: "
        << htmlEscape(r.model.path) << "</title><style>" << kHtmlBaseStyle << kStyle << "</style></head><body>\n";
    out << "<h1>memledger: " << htmlEscape(r.model.path) << "</h1>\n<p class=muted>";
    if (r.source == ReportSource::Snapshot) {
        out << htmlEscape(r.model.type);
    } else {
        out << "input ";
        for (std::size_t i = 0; i < r.run.input_shapes.size(); ++i)
            out << (i ? ", " : "") << htmlEscape(inputToString(r.run.input_shapes[i], inputTypeAt(r.run.input_types, i)));
        out << (r.run.input_guessed ? " (guessed)" : "") << " &middot; batch " << r.run.batch << " &middot; "
            << htmlEscape(r.run.dtype) << " &middot; " << nameOf(r.run.mode) << " on " << htmlEscape(r.run.device);
        if (!r.run.lifetimes.empty())
            out << " &middot; " << htmlEscape(r.run.lifetimes) << " lifetimes";
        if (r.run.mode == RunMode::Train)
            out << " &middot; optimizer " << htmlEscape(r.run.optimizer.empty() ? "-" : r.run.optimizer)
                << " &middot; loss " << htmlEscape(r.run.loss.empty() ? "-" : r.run.loss)
                << (r.run.hold_output.empty() ? "" : " &middot; output held to " + htmlEscape(r.run.hold_output))
                << (r.run.grad_accum > 1 ? " &middot; " + std::to_string(r.run.grad_accum) + " micro-batches accumulated (global batch "
                        + std::to_string(globalBatch(r.run)) + ")"
                                         : std::string())
                << " &middot; "
                << r.run.threads << (r.run.threads == 1 ? " thread" : " threads");
        out << " &middot; file " << formatBytes(r.model.file_bytes);
    }
    out << " &middot; " << (r.trace ? r.trace->size() : 0) << " events</p>\n";
    if (r.run.mode == RunMode::Generate) {
        const auto& g = r.model.generation;
        out << "<p class=generation id=generation><strong>Generation</strong>: prompt " << r.run.seq << ", "
            << r.run.new_tokens << " new tokens per row (greedy: the prefill, then "
            << std::max<std::int64_t>(0, r.run.new_tokens - 1) << " decode steps) &middot; " << nameOf(r.run.cache)
            << " KV cache of " << g.layers << " layers x " << g.kv_heads << " KV heads x " << g.head_dim
            << " &middot; <strong>KV cache at the end " << formatBytes(r.kv_cache_bytes) << "</strong> ("
            << r.run.seq + r.run.new_tokens - 1 << " tokens per row)</p>\n";
    }
    if (const auto& par = r.run.parallel) { // one rank of a data-parallel job, laid over the recorded step
        auto layout = shardingLayoutWords(*par);
        out << "<p class=parallel><strong>Rank " << par->rank << " of " << par->gpus << " GPUs, "
            << htmlEscape(par->shard) << "</strong> (predicted: the step recorded on one device, the job's schedule laid "
            << "over it) &middot; "
            << htmlEscape((layout.empty() ? "" : layout + "; ") + shardingStateWords(*par))
            << " &middot; per rank: weights " << formatBytes(r.weight_bytes) << " of "
            << formatBytes(par->full_parameter_bytes) << " parameters, gradients " << formatBytes(r.gradient_bytes)
            << ", optimizer state " << formatBytes(r.optimizer_state_bytes)
            << (par->offload.empty() ? std::string()
                                     : " &middot; offloaded (--offload " + htmlEscape(par->offload) + "): "
                                         + formatBytes(par->host_bytes) + " of the host's pinned memory per rank, "
                                         + formatBytes(par->host_bytes * par->gpus_per_node) + " per node of "
                                         + std::to_string(par->gpus_per_node) + " GPUs")
            << "</p>\n";
    }
    // A meta run's figures come from shapes: it says so before any figure, where it cannot be missed.
    if (isMetaRun(r))
        out << "<p class=meta-run><strong>" << htmlEscape(kMetaRunBadge) << "</strong><br>" << htmlEscape(metaNote(r))
            << "</p>\n";

    // One stacked bar with its legend: the ledgers at the peak, or what a snapshot's segments hold at the end.
    struct Part {
        std::string name;
        std::int64_t bytes;
        std::string colour;
        std::string detail;
    };
    std::vector<Part> parts;
    std::string heading;
    if (r.snapshot) {
        auto reserved = r.snapshot->reservedBytes(), allocated = r.snapshot->allocatedBytes();
        heading = "Live at the peak: " + formatBytes(r.peak_bytes)
            + " &middot; reserved at the end: " + formatBytes(reserved);
        parts.push_back({"allocated", allocated, ledgerColourHex(Ledger::Unattributed), ""});
        parts.push_back({"reserved, not allocated", reserved - allocated, "#c44e52", ""});
    } else {
        heading = "Ledgers at the peak: " + formatBytes(r.peak_total_bytes);
        // The timeline's stacking order; the four ledgers of an inference run always, the others when they hold
        // bytes.
        for (int band : TimelineSeries::kStackOrder) {
            if (band >= kLedgerCount)
                continue;
            auto l = static_cast<Ledger>(band);
            const auto& f = r.ledgers[static_cast<std::size_t>(band)];
            bool classic
                = l == Ledger::Weights || l == Ledger::Inputs || l == Ledger::Activations || l == Ledger::Temporaries;
            if (classic || f.at_peak > 0 || f.total > 0)
                parts.push_back(
                    {ledgerLabel(l), f.at_peak, ledgerColourHex(l), formatBytes(f.total) + " allocated in all"});
        }
    }
    out << "<h2>" << heading << "</h2>\n<div class=bar>";
    std::int64_t sum = 0;
    for (const auto& part : parts)
        sum += part.bytes;
    for (const auto& part : parts) {
        double pct = sum > 0 ? 100.0 * static_cast<double>(part.bytes) / static_cast<double>(sum) : 0;
        out << "<div title=\"" << part.name << " " << formatBytes(part.bytes) << "\" style=\"width:" << pct
            << "%;background:" << part.colour << "\"></div>";
    }
    out << "</div>\n<p class=legend>";
    for (const auto& part : parts)
        out << "<span><i class=sw style=\"background:" << part.colour << "\"></i>" << part.name << " "
            << formatBytes(part.bytes)
            << (part.detail.empty() ? std::string() : " <span class=muted>(" + part.detail + ")</span>") << "</span>";
    out << "</p>\n";
    if (r.load_tax.file_tensor_bytes > 0)
        out << "<p>Load tax: file " << formatBytes(r.load_tax.file_tensor_bytes) << " "
            << htmlEscape(r.load_tax.file_dtype) << ", resident " << formatBytes(r.load_tax.resident_bytes) << " as "
            << htmlEscape(r.load_tax.resident_dtype) << "</p>\n";
    if (r.run.mode == RunMode::Train && r.source == ReportSource::Model)
        out << "<p>Training step: gradients " << formatBytes(r.gradient_bytes)
            << " <span class=muted>(every parameter's .grad after the step)</span> &middot; optimizer state "
            << formatBytes(r.optimizer_state_bytes) << "</p>\n";
    if (r.simulated_reserved_peak_bytes > 0 && r.source == ReportSource::Model)
        out << "<p>On a GPU, PyTorch's caching allocator would reserve about "
            << formatBytes(r.simulated_reserved_peak_bytes) << " <span class=muted>(simulated)</span></p>\n";
    for (const auto& note : r.notes)
        if (!isMetaRun(r) || note != metaNote(r)) // shown at the top
            out << "<p class=muted>Note: " << htmlEscape(note) << "</p>\n";

    out << "<h2>Timeline: live bytes" << (r.snapshot ? "" : " by ledger")
        << "</h2>\n<canvas id=chart width=1100 height=360></canvas><div id=tip></div>\n";
    if (!r.snapshot && !r.phases.empty()) {
        out << "<h2>Phases</h2>\n<table id=phases><tr><th>phase</th><th>duration (ms)</th><th>peak</th></tr>\n";
        for (const auto& p : r.phases) {
            char ms[32];
            std::snprintf(ms, sizeof ms, "%.2f", static_cast<double>(p.end_ns - p.start_ns) / 1e6);
            out << "<tr><td>" << htmlEscape(p.name) << "</td><td>" << ms << "</td><td>" << formatBytes(p.peak_bytes)
                << "</td></tr>\n";
        }
        out << "</table>\n";
    }
    if (r.whatif)
        whatIfSection(out, *r.whatif);
    if (r.remedies)
        remediesSection(out, *r.remedies, r.run.device == "meta");
    out << extraSectionsHtml;
    if (!r.alive_at_peak.empty()) {
        out << "<h2>Alive at the peak</h2>\n<table><tr><th>bytes</th><th>ledger</th><th>module</th><th>op</th></tr>\n";
        for (std::size_t i = 0; i < std::min<std::size_t>(r.alive_at_peak.size(), 15); ++i) {
            const auto& a = r.alive_at_peak[i];
            out << "<tr><td>" << formatBytes(a.bytes) << "</td><td class=l>" << ledgerLabel(a.ledger)
                << "</td><td class=l>" << htmlEscape(a.where.empty() ? "(root)" : a.where) << "</td><td class=l>"
                << htmlEscape(a.op) << "</td></tr>\n";
        }
        out << "</table>\n";
    }
    if (!r.layers.empty()) {
        std::int64_t largest = 0;
        for (const auto& l : r.layers)
            if (l.parent >= 0)
                largest = std::max(largest, l.peak_bytes);
        // A snapshot's frame paths are long and a training run has twelve columns: the module column wraps and
        // the table scrolls inside its box, never the page.
        out << "<h2>Layers</h2>\n<div class=wide><table id=layers><tr><th>module</th><th class=l>type</th><th class=l>output</th>"
               "<th>weights</th><th>activations</th><th>temporaries (peak)</th><th>peak delta</th>";
        if (r.run.mode == RunMode::Train || r.snapshot)
            out << "<th>gradients</th><th>saved for backward</th><th>backward temporaries (peak)</th>"
                   "<th>backward peak delta</th>";
        out << "<th>calls</th></tr>\n";
        layerRows(out, r, 0, std::max<std::int64_t>(largest, 1));
        out << "</table></div>\n";
    }

    nlohmann::json data;
    if (r.trace) {
        data["chart"] = chartSeries(r);
        data["allocs"] = hoverAllocations(r);
    } else {
        data["chart"] = {{"x_ms", nlohmann::json::array()}, {"end_ms", 0}, {"series", nlohmann::json::array()},
            {"base", nlohmann::json::array()}, {"phases", nlohmann::json::array()}};
        data["allocs"] = nlohmann::json::array();
    }
    data["peak"] = {{"ms", static_cast<double>(r.peak_time_ns) / 1e6 * (timelineHasTime(r) ? 1.0 : 1000.0)}, {"bytes", r.peak_total_bytes}};
    out << "<script>const DATA=" << scriptSafe(data.dump()) << ";\n" << kScript << "</script>\n</body></html>\n";
    return out.str();
}

} // namespace memledger

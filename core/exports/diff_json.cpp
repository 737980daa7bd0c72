#include "exports/diff_json.h"

#include <algorithm>

namespace memledger {

namespace {

using nlohmann::json;

json figure(const DiffFigure& f)
{
    return {{"a", f.a}, {"b", f.b}, {"delta", f.delta()}};
}

json side(const DiffSide& s)
{
    json shapes = json::array();
    for (const auto& shape : s.input_shapes)
        shapes.push_back(shape);
    return {{"name", s.name}, {"source", nameOf(s.source)}, {"type", s.type}, {"dtype", s.dtype}, {"batch", s.batch},
        {"mode", nameOf(s.mode)}, {"device", s.device}, {"input_shapes", shapes}, {"reserved_kind", nameOf(s.reserved_kind)},
        {"description", s.describe()}};
}

json series(const DiffSeries& s, double lo, double hi, int columns)
{
    auto reduced = reduceSteps(s.keys, s.values, lo, hi, columns);
    return {{"x", reduced.keys}, {"y", reduced.values}, {"peak_x", s.peak_key}, {"peak_y", s.peak_value}};
}

} // namespace

json diffToJson(const ReportDiff& d, int chartColumns)
{
    json j;
    j["format"] = "memledger-diff";
    j["version"] = 1;
    j["a"] = side(d.a);
    j["b"] = side(d.b);
    json totals = json::object();
    for (const auto& t : d.totals)
        totals[t.name] = figure(t.figure);
    j["totals"] = totals;
    json ledgers = json::object();
    for (const auto& l : d.ledgers)
        ledgers[ledgerName(l.ledger)] = {{"at_peak", figure(l.at_peak)}, {"total", figure(l.total)}};
    j["ledgers"] = ledgers;
    if (!d.ledgers_sum.empty())
        j["ledgers_sum"] = d.ledgers_sum;

    json columns = json::array();
    for (const auto& c : d.columns)
        columns.push_back({{"name", c.name}, {"label", c.label}, {"unit", c.bytes ? "bytes" : "count"}});
    json rows = json::array();
    for (const auto& e : d.entries) {
        json a = json::array(), b = json::array(), delta = json::array();
        for (const auto& f : e.figures) {
            a.push_back(f.a);
            b.push_back(f.b);
            delta.push_back(f.delta());
        }
        rows.push_back({{"key", e.key}, {"type", e.type}, {"depth", e.depth}, {"status", e.status()},
            {"change", e.change}, {"a", a}, {"b", b}, {"delta", delta}});
    }
    j["entries"] = {{"kind", nameOf(d.entry_kind)}, {"columns", columns}, {"rows", rows}};

    const auto& sa = d.series_a;
    const auto& sb = d.series_b;
    double lo = 0, hi = 0;
    bool any = false;
    for (const auto* s : {&sa, &sb})
        if (!s->keys.empty()) {
            lo = any ? std::min(lo, s->keys.front()) : s->keys.front();
            hi = any ? std::max(hi, s->keys.back()) : s->keys.back();
            any = true;
        }
    if (hi <= lo)
        hi = lo + 1;
    j["timeline"] = {{"axis", axisName(d.axis)}, {"axis_reason", d.axis_reason}, {"a", series(sa, lo, hi, chartColumns)},
        {"b", series(sb, lo, hi, chartColumns)}};
    j["notes"] = d.notes;
    return j;
}

} // namespace memledger

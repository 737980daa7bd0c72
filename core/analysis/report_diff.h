#pragma once
// Two recordings side by side: two runs of a model (float32 against bfloat16, before and after a fix), two
// saved reports or two CUDA memory snapshots. What `memledger diff`, its JSON and HTML, and the window's
// File > Compare with... show: the peaks, each ledger, per-module (model runs) or per-allocation-site
// (snapshots) deltas largest first, and both live-bytes timelines on one axis. Deltas are always B - A.
#include "report/report.h"
#include "analysis/timeline_series.h"

#include <cstdint>
#include <string>
#include <vector>

namespace memledger {

struct DiffFigure {
    std::int64_t a = 0;
    std::int64_t b = 0;
    std::int64_t delta() const { return b - a; }
};

// What one side of the comparison is, for headings.
struct DiffSide {
    std::string name; // the file as the user named it
    ReportSource source = ReportSource::Model;
    std::string type; // the root module's type, or "CUDA memory snapshot"
    std::string dtype, device;
    RunMode mode = RunMode::Inference;
    std::int64_t batch = 1;
    std::vector<Shape> input_shapes;
    std::vector<InputType> input_types;
    ReserveKind reserved_kind = ReserveKind::None; // what reserved_bytes is for this side
    std::string describe() const; // "model, float32, batch 1, inference" / "CUDA memory snapshot, cuda:0"
};

// A headline figure: peak_bytes, peak_total_bytes, reserved_bytes, weight_bytes, ...
struct DiffTotal {
    std::string name; // as the JSON spells it
    std::string label; // for people
    DiffFigure figure;
};

struct DiffLedger {
    Ledger ledger = Ledger::Weights;
    DiffFigure at_peak; // alive at the run's peak
    DiffFigure total; // allocated over the run
    std::string label; // for people: "saved for backward", "resident (before the trace)"
};

// A column of the entry table: bytes (sorted on) or a count.
struct DiffColumn {
    std::string name; // "weight_bytes", "allocated_bytes", "calls"
    std::string label; // "weights", "allocated"
    bool bytes = true;
};

// One module (matched by its path) or allocation site (matched by its text) found in A, B or both.
struct DiffEntry {
    std::string key; // module path ("" the root) or allocation site ("(no stack)" when none)
    std::string label; // what to print: the path, or "(root) TYPE"
    std::string type; // "Conv2d", "site"
    int depth = 0;
    bool in_a = false;
    bool in_b = false;
    std::vector<DiffFigure> figures; // one per ReportDiff::columns
    // The byte column's delta with the largest magnitude (signed): what the entries are sorted by.
    std::int64_t change = 0;
    int change_column = -1; // the column of `change` (-1: nothing changed)
    const char* status() const { return in_a && in_b ? "both" : in_b ? "added" : "removed"; }
    bool changed() const; // any figure's delta is not zero
};

// Total live bytes (every ledger stacked) per point, on the diff's axis.
struct DiffSeries {
    std::vector<double> keys; // milliseconds since the run began, or op sequence
    std::vector<double> values;
    double peak_key = 0;
    double peak_value = 0;
};

struct ReportDiff {
    DiffSide a, b;
    std::vector<DiffTotal> totals; // peak_bytes, peak_total_bytes, reserved_bytes, weight_bytes, input_bytes, ...
    std::vector<DiffLedger> ledgers; // the ledgers either side has bytes in
    // Which ledger rows sum to which total, for people ("" when not told): a snapshot's rows, resident included,
    // sum at the peak to its peak; allocated, all but resident sum to what its trace allocated.
    std::string ledgers_sum;
    DiffEntryKind entry_kind = DiffEntryKind::Module; // modules: both model runs; sites: snapshots, or a model against one
    std::vector<DiffColumn> columns;
    std::vector<DiffEntry> entries; // |change| largest first, then by key
    TimelineAxis axis = TimelineAxis::Milliseconds;
    // Why this axis: "both are runs of the same graph: ..." (op), or how they differ (milliseconds since each
    // run began): "a snapshot has no op sequence", "op 3 is aten::relu in A and aten::add in B".
    std::string axis_reason;
    DiffSeries series_a, series_b;
    std::vector<std::string> notes;

    const DiffTotal* total(const std::string& name) const;
    const DiffLedger* ledger(Ledger l) const;
    const DiffEntry* entry(const std::string& key) const;
    std::size_t changedEntries() const; // entries with a non-zero delta in some column
};

// Compares B against A. `aName` and `bName` name the files in headings (the reports' own paths otherwise).
ReportDiff diffReports(const Report& a, const Report& b, const std::string& aName = {}, const std::string& bName = {});

// Whether two model runs executed the same graph: the same number of outermost ops with the same names at
// every op both runs allocated in. `why` says how they differ (or how many ops they share).
bool sameGraph(const Report& a, const Report& b, std::string* why = nullptr);

const char* axisName(TimelineAxis axis); // "ms" | "op"

} // namespace memledger

#pragma once
// The what-if policy, in one place: which records a what-if makes, in which precisions, within which budget of
// time and memory, and which rows a saved table holds. The command line (`whatif`, `analyze --whatif-batch`),
// the window's What if panel and What would help all call it, so the same model and settings give the same
// table and the same JSON whichever of them made it.
//
// Extrapolation is the last resort: every row asked for is recorded where this machine can run it (its
// predicted peak within a quarter of this machine's memory, a warm-up and a recorded run within about a minute,
// and all the larger records of all precisions within a minute), at the row itself or, where the row
// is beyond that, at the largest batch (or sequence) that is not.
#include "whatif/whatif.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace memledger {

struct WhatIfRequest {
    WhatIfAxis axis = WhatIfAxis::Batch;
    // The rows asked for: batches, or with axis Seq sequence lengths. Empty: the default rows.
    std::vector<std::int64_t> rows;
    // The batch of the run shown (a row of its own), or, with axis Seq, the batch every row is at.
    std::int64_t current_batch = 0;
    std::int64_t current_seq = 0; // axis Seq: the run's sequence length (a row of its own); 0: none
    std::vector<std::string> dtypes; // empty: the default precisions
    std::int64_t budget = 0; // bytes the user has (the largest batch within it per precision); 0: none
};

// float32, bfloat16 and float16: the precisions a what-if records (or rescales) unless others are asked for.
std::vector<std::string> whatIfDtypes(const std::vector<std::string>& asked);
// The window's what-if: those three, and for a training step "bfloat16-mixed" too (autocast over float32 weights),
// the precision a fine-tune means, which its What if panel offers first, and "bfloat16-fsdp", what FSDP and ZeRO-2
// ranks in it are laid over (the units' inputs cast: RunOptions::cast_module_inputs).
std::vector<std::string> windowWhatIfDtypes(RunMode mode);
// `request` with `x` as a row of its own besides its rows (whatIfRows): records made for it reach x.
WhatIfRequest withRow(WhatIfRequest request, std::int64_t x);
// The rows of a table: those asked for (or 1, 8, 32, 64 and 128 along the batch; 512, 1024, 2048, 4096 and
// 8192 along the sequence), with the run's own, increasing, each once.
std::vector<std::int64_t> whatIfRows(const WhatIfRequest& request);
// MEMLEDGER_RECORD_BUDGET=N: a what-if's records are counted, not timed: at most N beyond the first two of each
// precision, all precisions together (WhatIf::Plan::record_count_budget), each within a predicted peak total of
// 1 GiB (instead of a quarter of this machine's memory), and at most N runs that check a table's figures, so that an
// answer does not depend on this machine's speed, memory or load (the tests set it). -1 when unset:
// about a minute of this machine's time, as above. A value that is not a count is refused (std::invalid_argument
// naming the variable).
int countedRecordBudget();
// How the records are planned for these rows: up to the largest row, each row on the way recorded, within
// this machine's memory and time as above. `progress` is told each record as it starts.
WhatIf::Plan whatIfPlan(const WhatIfRequest& request,
    std::function<void(const std::string& dtype, std::int64_t x, int done)> progress = {});

// Records the what-if of `base` (its inputs, mode, optimizer and loss; its batch and dtype are set here) for the
// request. Along the sequence, base.batch is request.current_batch. `first` (may be empty) is told the first
// records, so that a view is usable while the larger ones are made.
WhatIf recordWhatIf(Model& model, RunOptions base, const WhatIfRequest& request,
    std::function<void(const std::string& dtype, std::int64_t x, int done)> progress = {},
    std::function<void(const WhatIf& first)> first = {});
// The same for a command that answers "the largest batch within the budget" (`memledger whatif --budget`,
// `analyze --whatif --budget`): along the batch with a budget, where that batch, or the one above it that does not
// fit, lies beyond the last record of its precision, the records are made again up to past it
// (recordWhatIfReaching, budgetRecordsWanted), so that it is interpolated, not extrapolated, where this machine can
// record it. The window records with recordWhatIf in the background and marks such an answer extrapolated instead
// (its Measure runs it; the GPUs tab offers the records).
WhatIf recordWhatIfForBudget(Model& model, RunOptions base, const WhatIfRequest& request,
    std::function<void(const std::string& dtype, std::int64_t x, int done)> progress = {});

// The size records must reach so that an answer (`answer`, the largest size that fits) and the size just above it
// lie inside them, with an eighth to spare (new records may move the answer a little), within `range`; 0 when the
// last record (`lastRecord`) already reaches past the answer, or there is no answer.
std::int64_t recordsToReach(std::int64_t answer, std::int64_t lastRecord, const SizeRange& range);
// Of `dtypes`, the furthest size the records must reach so that the largest batch within `budget` (a GPU, its
// allocator's share judged: DeviceOverheads) of each is
// inside its records (recordsToReach); 0 when every one is.
std::int64_t budgetRecordsWanted(const WhatIf& w, const std::vector<std::string>& dtypes, std::int64_t budget);
// While one is alive on a thread, the what-if records made on that thread are kept, by precision and size, and a record
// asked for again is taken from them instead of run again: recordWhatIfReaching's further rounds ask for the sizes of
// the first again beside the rows past the answer. For the records of one model and one base run only (the scope of
// one recordWhatIfReaching).
class ReusedRecords {
public:
    ReusedRecords();
    ~ReusedRecords();
    ReusedRecords(const ReusedRecords&) = delete;
    ReusedRecords& operator=(const ReusedRecords&) = delete;
    struct Store;

private:
    std::unique_ptr<Store> store_;
    Store* previous_ = nullptr;
};

// The records of `request` (as recordWhatIf makes them without a budget), then, while `wanted` names a size beyond
// them, again with that size as a row (log-spaced records, each within this machine's memory and time for one):
// at most two more rounds, none after a round that could not reach its size (this machine's memory or time ended
// it: another would stop at the same place), and none once two minutes are spent.
WhatIf recordWhatIfReaching(Model& model, RunOptions base, WhatIfRequest request,
    const std::function<std::int64_t(const WhatIf&)>& wanted,
    std::function<void(const std::string& dtype, std::int64_t x, int done)> progress = {},
    std::function<void(const WhatIf& first)> first = {});

// The table a report or `whatif --json` saves: every row x precision of the request, with the largest batch (or
// sequence) within the budget. With `model`, a row the records do not back is run instead (measured).
WhatIfTable whatIfTableFor(const WhatIf& w, const WhatIfRequest& request, Model* model = nullptr);

// Notes about a precision nobody asked for ("float16: recorded at ...") are left out.
void keepNotesOf(const std::vector<std::string>& dtypes, std::vector<std::string>& notes);

} // namespace memledger

#pragma once
// A remedy of "What would help" as plain values: what the report carries, the exports write and a reopened
// report reads. Computed by core/whatif/remedies.h.
#include "report/kinds.h"
#include "report/trace.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memledger {

struct Remedy {
    RemedyKind kind = RemedyKind::LowerPrecision;
    std::string title; // "Run in bfloat16"
    std::string change; // what to change, concretely
    std::vector<std::string> details; // one line per place: "features.1 (aten::relu): ReLU(inplace=True)"
    // The figures now and after the change. Reserve: a GPU's caching allocator (simulated for CPU runs);
    // 0 when not known.
    std::int64_t peak_total_before = 0;
    std::int64_t peak_total_after = 0;
    std::int64_t reserve_before = 0;
    std::int64_t reserve_after = 0;
    FigureMethod method = FigureMethod::Predicted; // Measured: the "after" figures come from a real run
    // How a real run can check it: not here, memledger runs the model at another setting, a run of the edited
    // model (which the user gives), a run on the GPU.
    MeasureHow measure_how = MeasureHow::None;
    // What the measuring run changes.
    std::int64_t batch = 0; // largest_batch, micro_batching: the batch of the run
    std::string dtype; // lower_precision
    std::vector<std::int64_t> tile; // tiling: the input's last dimensions
    std::string setting; // allocator_settings: "expandable_segments:True"
    // micro_batching: the outputs of the other micro-batches, kept alive; tiling: what stitching keeps beside a
    // tile's run (the full input and output, the previous tile's output).
    std::int64_t extra_bytes = 0;
    // Set: this remedy asked for could not be worked out (its run failed), and why, with what would make it work;
    // its figures are the run's own (no saving), and it is listed, never hidden, so that its failure hides nothing.
    std::string not_worked_out;
    // Filled by a measuring run.
    std::optional<std::int64_t> measured_peak_total;
    std::optional<std::int64_t> measured_reserve;
    std::string measure_note;

    std::int64_t peakSaving() const { return peak_total_before - peak_total_after; }
    std::int64_t reserveSaving() const { return reserve_before - reserve_after; }
    // Saves under 1% of the peak total on both figures (416 bytes of unread buffers, an in-place op worth 0 B):
    // listed behind "show all", not among the remedies that pay.
    bool minor() const
    {
        if (!not_worked_out.empty())
            return false;
        const double threshold = 0.01 * static_cast<double>(peak_total_before);
        return static_cast<double>(peakSaving()) < threshold
            && (reserve_after <= 0 || static_cast<double>(reserveSaving()) < threshold);
    }
};

} // namespace memledger

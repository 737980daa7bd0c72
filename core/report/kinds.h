#pragma once
// The values that code branches on, as types: a typo does not compile. Their text ("train", "snapshot",
// "lower_precision") appears only where a report meets the JSON, the HTML, the CLI or the window, through
// nameOf() and fromName<E>(), and each enum's table below is the one place that text is spelled.
#include <optional>
#include <string_view>

namespace memledger {

// What a run did: eval mode without grad, or one training step (forward, loss, backward, optimizer).
enum class RunMode { Inference, Train, Generate };
// Where a report's trace comes from: memledger's own run of a model, or a CUDA snapshot PyTorch wrote.
enum class ReportSource { Model, Snapshot };
// How a figure is known: a fit through the records, a real run at exactly that setting, a fit carried on
// beyond the largest record, or an estimate by a stated rule from what a snapshot holds (nothing ran).
enum class FigureMethod { Predicted, Measured, Extrapolated, Estimate };
// What a what-if varies: the batch (dimension 0 of every input; each allocation a line in it) or the sequence
// length (dimension 1 of every token input; each allocation a parabola, as attention scores grow with its square).
enum class WhatIfAxis { Batch, Seq };
// The remedies of "What would help".
enum class RemedyKind {
    LowerPrecision,
    LargestBatch,
    MicroBatching,
    Checkpoint,
    InPlace,
    FoldBatchNorm,
    UnreadBuffers,
    Tiling,
    CudnnBenchmark,
    AllocatorSettings,
    SnapshotPeak, // a snapshot's peak: what holds it and what would shrink its dominant ledger (an estimate)
};
// How a real run can check a remedy: not here, memledger runs the model at another setting, a run of the
// edited model the user gives, or a run on a GPU.
enum class MeasureHow { None, Run, Variant, Gpu };
// What the rows of a comparison are: modules (two model runs) or sites, the frame that names an allocation.
enum class DiffEntryKind { Module, Site };
// What a comparison side's reserved bytes are: none known, the caching-allocator model over a CPU run, a GPU
// run's allocator, or the segments at a snapshot's end.
enum class ReserveKind { None, Simulated, Gpu, SnapshotEnd };
// generate: the KV cache transformers' generate keeps. Dynamic: DynamicCache, each layer's keys and values grown by a
// torch.cat per token; Static: StaticCache (cache_implementation="static"), prompt + new tokens - 1 slots per layer
// allocated at the prefill and written in place.
enum class GenerationCache { Dynamic, Static };

template <typename E>
struct EnumText {
    E value;
    const char* text;
};

inline constexpr EnumText<RunMode> kRunModeText[] = {{RunMode::Inference, "inference"}, {RunMode::Train, "train"},
    {RunMode::Generate, "generate"}};
inline constexpr EnumText<ReportSource> kReportSourceText[] = {
    {ReportSource::Model, "model"}, {ReportSource::Snapshot, "snapshot"}};
inline constexpr EnumText<FigureMethod> kFigureMethodText[] = {{FigureMethod::Predicted, "predicted"},
    {FigureMethod::Measured, "measured"}, {FigureMethod::Extrapolated, "extrapolated"}, {FigureMethod::Estimate, "estimate"}};
inline constexpr EnumText<WhatIfAxis> kWhatIfAxisText[] = {{WhatIfAxis::Batch, "batch"}, {WhatIfAxis::Seq, "seq"}};
inline constexpr EnumText<RemedyKind> kRemedyKindText[] = {
    {RemedyKind::LowerPrecision, "lower_precision"},
    {RemedyKind::LargestBatch, "largest_batch"},
    {RemedyKind::MicroBatching, "micro_batching"},
    {RemedyKind::Checkpoint, "checkpoint"},
    {RemedyKind::InPlace, "inplace"},
    {RemedyKind::FoldBatchNorm, "fold_batchnorm"},
    {RemedyKind::UnreadBuffers, "unread_buffers"},
    {RemedyKind::Tiling, "tiling"},
    {RemedyKind::CudnnBenchmark, "cudnn_benchmark"},
    {RemedyKind::AllocatorSettings, "allocator_settings"},
    {RemedyKind::SnapshotPeak, "snapshot_peak"},
};
inline constexpr EnumText<MeasureHow> kMeasureHowText[] = {
    {MeasureHow::None, ""}, {MeasureHow::Run, "run"}, {MeasureHow::Variant, "variant"}, {MeasureHow::Gpu, "gpu"}};
inline constexpr EnumText<DiffEntryKind> kDiffEntryKindText[] = {
    {DiffEntryKind::Module, "module"}, {DiffEntryKind::Site, "site"}};
inline constexpr EnumText<ReserveKind> kReserveKindText[] = {{ReserveKind::None, ""},
    {ReserveKind::Simulated, "simulated"}, {ReserveKind::Gpu, "gpu"}, {ReserveKind::SnapshotEnd, "snapshot end"}};

inline constexpr EnumText<GenerationCache> kGenerationCacheText[] = {
    {GenerationCache::Dynamic, "dynamic"}, {GenerationCache::Static, "static"}};

constexpr const auto& textTable(RunMode) { return kRunModeText; }
constexpr const auto& textTable(GenerationCache) { return kGenerationCacheText; }
constexpr const auto& textTable(ReportSource) { return kReportSourceText; }
constexpr const auto& textTable(FigureMethod) { return kFigureMethodText; }
constexpr const auto& textTable(WhatIfAxis) { return kWhatIfAxisText; }
constexpr const auto& textTable(RemedyKind) { return kRemedyKindText; }
constexpr const auto& textTable(MeasureHow) { return kMeasureHowText; }
constexpr const auto& textTable(DiffEntryKind) { return kDiffEntryKindText; }
constexpr const auto& textTable(ReserveKind) { return kReserveKindText; }

// The text of a value: what the JSON and the CLI write.
template <typename E>
constexpr const char* nameOf(E value)
{
    for (const auto& t : textTable(value))
        if (t.value == value)
            return t.text;
    return "";
}

// How a figure is known, for people: nameOf(m), but "computed on meta" for a figure a run on the meta device made
// (a meta run has no memory to measure: it computes from shapes).
inline const char* figureMethodText(FigureMethod m, bool meta)
{
    return meta && m == FigureMethod::Measured ? "computed on meta" : nameOf(m);
}

// The value a text names, or nothing: for the JSON a report is read from, the CLI's flags, a combo box's data.
template <typename E>
constexpr std::optional<E> fromName(std::string_view text)
{
    for (const auto& t : textTable(E {}))
        if (text == t.text)
            return t.value;
    return std::nullopt;
}

// The value a text names, or `fallback` where it names none (a report written before the value existed).
template <typename E>
constexpr E fromName(std::string_view text, E fallback)
{
    return fromName<E>(text).value_or(fallback);
}

} // namespace memledger

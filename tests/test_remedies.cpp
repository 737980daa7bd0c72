// "What would help": each remedy's prediction against a real run of the changed model, and against PyTorch's
// own numbers for it (tests/fixtures/remedies_models.py: the variants are made with PyTorch itself, e.g. the
// folded model by torch.nn.utils.fusion.fuse_conv_bn_eval, and give the same output as the original).
#include "allocator/caching_allocator.h"
#include "exports/report_html.h"
#include "exports/report_json.h"
#include "fixture_paths.h"
#include "recording/build_report.h"
#include "snapshot/snapshot.h"
#include "support/errors.h"
#include "whatif/remedies.h"
#include "whatif/whatif.h"
#include "run_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

using namespace memledger;

namespace {

std::string remediesFixture(const std::string& name)
{
    return test::fixture("remedies/" + name);
}

const nlohmann::json& truth()
{
    static const nlohmann::json t = [] {
        std::ifstream in(remediesFixture("truth.json"));
        return nlohmann::json::parse(in);
    }();
    return t;
}

// PyTorch's peak total of a model at an input: parameters + buffers + input + the profiler's peak.
std::int64_t truthPeakTotal(const std::string& model, const std::string& shape)
{
    const auto& t = truth().at(model);
    return t.at("parameter_bytes").get<std::int64_t>() + t.at("buffer_bytes").get<std::int64_t>()
        + t.at("input_bytes_" + shape).get<std::int64_t>() + t.at("peak_" + shape).get<std::int64_t>();
}

const Shape kFull {1, 3, 96, 96};

Report analyze(Model& m, const Shape& input = kFull, const std::string& dtype = "float32")
{
    RunOptions o;
    o.inputs = {input};
    o.dtype = dtype;
    return analyzeModel(m, o);
}

const Remedy* find(const std::vector<Remedy>& rs, RemedyKind kind)
{
    for (const auto& r : rs)
        if (r.kind == kind)
            return &r;
    return nullptr;
}

double errorPercent(std::int64_t predicted, std::int64_t truth)
{
    return 100.0 * std::abs(static_cast<double>(predicted - truth)) / static_cast<double>(truth);
}

// A remedy whose change PyTorch made on the model (the variant file): its peak totals before and after are
// PyTorch's profiler's for the model and the variant, and memledger's own run of the variant measures the
// predicted peak total. Returns that measurement, for the reserve.
Remedy expectPredictsTheVariant(
    const Remedy& r, const Report& report, Model& model, const std::string& base, const std::string& variant)
{
    EXPECT_EQ(r.peak_total_before, truthPeakTotal(base, "full"));
    EXPECT_EQ(r.peak_total_after, truthPeakTotal(variant, "full"));
    auto changed = Model::open(remediesFixture(variant + ".pt"));
    auto measured = measureRemedy(r, report, model, &changed);
    EXPECT_EQ(measured.method, FigureMethod::Measured);
    EXPECT_TRUE(measured.measured_peak_total && measured.measured_reserve);
    EXPECT_EQ(measured.measured_peak_total.value_or(-1), r.peak_total_after);
    return measured;
}

} // namespace

TEST(Remedies, InplaceActivationsPredictTheInplaceModel)
{
    auto model = Model::open(remediesFixture("relu.pt"));
    auto report = analyze(model);
    auto cands = inplaceCandidates(report);
    std::set<std::string> modules;
    for (const auto& c : cands)
        modules.insert(c.module);
    EXPECT_EQ(modules, (std::set<std::string> {"relu1", "relu2"}));
    auto remedies = computeRemedies(report);
    const auto* r = find(remedies, RemedyKind::InPlace);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->measure_how, MeasureHow::Variant);
    // The saving is PyTorch's (libtorch 1.13 saves a block here; 2.x's CPU kernels may already reuse it).
    EXPECT_EQ(r->peakSaving(), truthPeakTotal("relu", "full") - truthPeakTotal("inplace", "full"));
    // PyTorch's profiler on the model scripted with ReLU(inplace=True), and memledger's own real run of that
    // model: peak total and the reserve simulated from its trace.
    auto measured = expectPredictsTheVariant(*r, report, model, "relu", "inplace");
    EXPECT_LE(errorPercent(r->reserve_after, measured.measured_reserve.value_or(0)), 2.0);
}

TEST(Remedies, InplaceIsNeverSuggestedWhereTheInputIsReadAgain)
{
    auto model = Model::open(remediesFixture("relu_reused.pt"));
    auto report = analyze(model, {1, 3, 32, 32});
    for (const auto& c : inplaceCandidates(report))
        EXPECT_NE(c.op_name, "aten::relu") << "relu(y) + y: y is read after the ReLU";
    // The output, read by the caller, never goes in place either; and a training step gets no such rule.
    RunOptions train;
    train.inputs = {{2, 3, 32, 32}};
    train.mode = RunMode::Train;
    train.loss = "sum";
    auto trained = analyzeModel(model, train);
    EXPECT_TRUE(inplaceCandidates(trained).empty());
    EXPECT_TRUE(batchNormFolds(trained).empty());
}

// BatchNorm folded into Conv2d, Conv1d and Conv3d, against PyTorch's folded models (fuse_conv_bn_eval, then
// the BatchNorm replaced by Identity), profiled by PyTorch.
class BatchNormFolding : public ::testing::TestWithParam<const char*> {};

TEST_P(BatchNormFolding, PredictsTheFoldedModel)
{
    const std::string base = std::string("base") + GetParam(), folded = std::string("folded") + GetParam();
    Shape shape;
    for (const auto& d : truth().at(base).at("shape_full"))
        shape.push_back(d.get<std::int64_t>());
    auto model = Model::open(remediesFixture(base + ".pt"));
    auto report = analyze(model, shape);
    auto folds = batchNormFolds(report);
    ASSERT_EQ(folds.size(), 2u);
    EXPECT_EQ(folds[0].conv, "conv1");
    EXPECT_EQ(folds[0].batchnorm, "bn1");
    EXPECT_EQ(folds[1].conv, "conv2");
    EXPECT_EQ(folds[1].batchnorm, "bn2");
    auto remedies = computeRemedies(report);
    const auto* r = find(remedies, RemedyKind::FoldBatchNorm);
    ASSERT_NE(r, nullptr);
    EXPECT_GT(r->peakSaving(), 0);
    auto measured = expectPredictsTheVariant(*r, report, model, base, folded);
    EXPECT_LE(errorPercent(r->reserve_after, measured.measured_reserve.value_or(0)), 2.0);
}

INSTANTIATE_TEST_SUITE_P(Remedies, BatchNormFolding, ::testing::Values("", "1d", "3d"));

TEST(Remedies, InplaceAddAndMulPredictTheInplaceModel)
{
    // s = a + b; m = s * b, where nothing reads a or s afterwards: a += b; a *= b (PyTorch's own model).
    auto model = Model::open(remediesFixture("addmul.pt"));
    auto report = analyze(model);
    std::set<std::string> ops;
    for (const auto& c : inplaceCandidates(report))
        ops.insert(c.op_name);
    EXPECT_EQ(ops, (std::set<std::string> {"aten::add", "aten::mul"}));
    auto remedies = computeRemedies(report);
    const auto* r = find(remedies, RemedyKind::InPlace);
    ASSERT_NE(r, nullptr);
    expectPredictsTheVariant(*r, report, model, "addmul", "addmul_inplace");
}

TEST(Remedies, UnreadBuffersAreTheOnesTheRunNeverTook)
{
    auto model = Model::open(remediesFixture("base.pt"));
    auto report = analyze(model);
    ASSERT_TRUE(report.buffer_reads_recorded);
    std::set<std::string> unread(report.unread_buffers.begin(), report.unread_buffers.end());
    // BatchNorm's running statistics are read in eval mode: never suggested.
    EXPECT_EQ(unread, (std::set<std::string> {"lookup", "bn1.num_batches_tracked", "bn2.num_batches_tracked"}));
    auto remedies = computeRemedies(report);
    const auto* r = find(remedies, RemedyKind::UnreadBuffers);
    ASSERT_NE(r, nullptr);
    // PyTorch: the model with those buffers set to None (same output), profiled.
    EXPECT_EQ(r->peak_total_after, truthPeakTotal("unread", "full"));
    auto variant = Model::open(remediesFixture("unread.pt"));
    auto measured = measureRemedy(*r, report, model, &variant);
    EXPECT_EQ(*measured.measured_peak_total, r->peak_total_after);
    EXPECT_LE(errorPercent(r->reserve_after, *measured.measured_reserve), 2.0);
}

class RemediesWithWhatIf : public ::testing::Test {
protected:
    static void SetUpTestSuite()
    {
        model_ = new Model(Model::open(remediesFixture("base.pt")));
        RunOptions base;
        base.inputs = {kFull};
        whatif_ = new WhatIf(WhatIf::record(*model_, base, std::vector<std::int64_t> {1, 2, 8, 32},
            std::vector<std::string> {"float32", "bfloat16"}));
    }
    static void TearDownTestSuite()
    {
        delete whatif_;
        delete model_;
    }
    static Model* model_;
    static WhatIf* whatif_;
};
Model* RemediesWithWhatIf::model_ = nullptr;
WhatIf* RemediesWithWhatIf::whatif_ = nullptr;

TEST_F(RemediesWithWhatIf, LowerPrecisionPredictsARealBfloat16Run)
{
    auto report = analyze(*model_);
    RemedyOptions o;
    o.whatif = whatif_;
    auto remedies = computeRemedies(report, o);
    const auto* r = find(remedies, RemedyKind::LowerPrecision);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->dtype, "bfloat16");
    // Whether bfloat16 saves (libtorch 1.13) or costs (2.x's CPU path keeps bfloat16 reorders) is PyTorch's.
    EXPECT_EQ(r->peakSaving() > 0, truthPeakTotal("base", "full") > truthPeakTotal("base_bfloat16", "full"));
    // PyTorch's profiler on the model converted to bfloat16 by PyTorch.
    EXPECT_LE(errorPercent(r->peak_total_after, truthPeakTotal("base_bfloat16", "full")), 1.0);
    auto measured = measureRemedy(*r, report, *model_);
    EXPECT_LE(errorPercent(r->peak_total_after, *measured.measured_peak_total), 1.0);
    EXPECT_LE(errorPercent(r->reserve_after, *measured.measured_reserve), 2.0);
}

// The budget is a GPU's: the batch fits the allocator's share of it, the CUDA context (an estimate) off.
TEST_F(RemediesWithWhatIf, LargestBatchFitsAndTheNextDoesNot)
{
    auto report = analyze(*model_);
    RemedyOptions o;
    o.whatif = whatif_;
    const auto overheads = DeviceOverheads::estimates();
    o.budget = (std::int64_t {48} << 20) + overheads.cuda_context_bytes;
    const auto share = overheads.allocatorShare(o.budget);
    ASSERT_EQ(share, std::int64_t {48} << 20);
    auto remedies = computeRemedies(report, o);
    const auto* r = find(remedies, RemedyKind::LargestBatch);
    ASSERT_NE(r, nullptr);
    ASSERT_GT(r->batch, 1);
    auto measured = measureRemedy(*r, report, *model_);
    EXPECT_LE(errorPercent(r->peak_total_after, *measured.measured_peak_total), 1.0);
    EXPECT_LE(*measured.measured_peak_total, share);
    EXPECT_LE(*measured.measured_reserve, share);
    // A real run one batch larger goes over the allocator's share.
    auto next = analyze(*model_, {r->batch + 1, 3, 96, 96});
    EXPECT_TRUE(next.peak_total_bytes > share || next.simulated_reserved_peak_bytes > share);
    // The what-if table's answer for the same budget, the one rule.
    auto table = makeWhatIfTable(*whatif_, {1, 8, 32, 64, 128, report.run.batch}, {"float32"}, o.budget);
    ASSERT_EQ(table.max_batch.size(), 1u);
    EXPECT_EQ(table.max_batch[0].second, r->batch);
}

TEST_F(RemediesWithWhatIf, MicroBatchesPredictARealRunAtTheMicroBatch)
{
    auto report = analyze(*model_, {4, 3, 96, 96});
    EXPECT_EQ(report.peak_total_bytes, truthPeakTotal("base", "batch4"));
    RemedyOptions o;
    o.whatif = whatif_;
    auto remedies = computeRemedies(report, o);
    const auto* r = find(remedies, RemedyKind::MicroBatching);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->batch, 1);
    // The outputs of the three other micro-batches (1x10 float32 each) stay until they are concatenated.
    EXPECT_EQ(r->extra_bytes, 3 * 10 * 4);
    EXPECT_LE(errorPercent(r->peak_total_after, truthPeakTotal("base", "full") + r->extra_bytes), 1.0);
    auto measured = measureRemedy(*r, report, *model_);
    EXPECT_LE(errorPercent(r->peak_total_after, *measured.measured_peak_total), 1.0);
}

// Tiling as users tile (remedies_models.py's Tiled: 3x3 tiles of 32x32 with 8 of overlap, each tile's input copied
// out, its output cropped into the full output made first): one interior tile's run, exact against PyTorch's, and
// what stitching keeps beside it, within 1% of the profiler's peak of the eager tiling loop.
TEST(Remedies, TilingCountsWhatStitchingKeeps)
{
    auto model = Model::open(remediesFixture("seg.pt"));
    auto report = analyze(model);
    EXPECT_EQ(report.peak_total_bytes, truthPeakTotal("seg", "full"));
    const auto& seg = truth().at("seg");
    RemedyOptions o;
    o.model = &model;
    o.tiling.tile = {seg.at("tile").get<std::int64_t>(), seg.at("tile").get<std::int64_t>()};
    o.tiling.overlap = seg.at("overlap").get<std::int64_t>();
    auto remedies = computeRemedies(report, o);
    const auto* r = find(remedies, RemedyKind::Tiling);
    ASSERT_NE(r, nullptr);
    EXPECT_TRUE(r->not_worked_out.empty()) << r->not_worked_out;
    EXPECT_EQ(r->tile, (std::vector<std::int64_t> {48, 48})); // the interior tile's input
    EXPECT_EQ(r->peak_total_after - r->extra_bytes, truthPeakTotal("seg", "tile"));
    const auto stitched = seg.at("parameter_bytes").get<std::int64_t>() + seg.at("input_bytes_full").get<std::int64_t>()
        + seg.at("peak_stitched").get<std::int64_t>();
    std::printf("[ tiling   ] stitched: predicted %lld, PyTorch's tiling loop %lld (%+.2f%%)\n",
        static_cast<long long>(r->peak_total_after), static_cast<long long>(stitched),
        100.0 * static_cast<double>(r->peak_total_after - stitched) / static_cast<double>(stitched));
    EXPECT_LE(errorPercent(r->peak_total_after, stitched), 1.0);
    // Measure runs the tile again and adds the same stitching.
    auto measured = measureRemedy(*r, report, model);
    EXPECT_EQ(*measured.measured_peak_total, r->peak_total_after);
    // A tile with more dimensions than the input has is refused with a reason.
    o.tiling.tile = {1, 2, 3, 4};
    EXPECT_THROW(computeRemedies(report, o), std::invalid_argument);
}

// A program exported with its height and width fixed cannot run a tile: the tiling remedy says so and how (export
// one at the tile's input and give it with --tile-program), and every other remedy is still there; given that
// program, the figures are the TorchScript model's.
TEST(Remedies, AFixedSizeProgramTilesThroughATileProgram)
{
    const auto full = remediesFixture("seg_static.pt2"), tile = remediesFixture("seg_tile.pt2");
    if (!std::filesystem::exists(full))
        GTEST_SKIP() << "no seg_static.pt2: this PyTorch has no torch.export";
    const auto command = test::memledgerBinary() + " analyze " + full + " --remedies --tile 32x32 --tile-overlap 8";
    auto without = test::runCommand(command);
    if (without.output.find("PyTorch 2") != std::string::npos && without.exit_code != 0)
        GTEST_SKIP() << "this build reads no torch.export programs: " << without.output;
    ASSERT_EQ(without.exit_code, 0) << without.output;
    EXPECT_NE(without.output.find("[not worked out]"), std::string::npos) << without.output;
    EXPECT_NE(without.output.find("--tile-program"), std::string::npos) << without.output;
    EXPECT_NE(without.output.find("  2. "), std::string::npos) << without.output; // the others are there
    auto with = test::runCommand(command + " --tile-program " + tile);
    ASSERT_EQ(with.exit_code, 0) << with.output;
    EXPECT_EQ(with.output.find("[not worked out]"), std::string::npos) << with.output;
    EXPECT_NE(with.output.find("Tiles of 32x32, 8 of overlap"), std::string::npos) << with.output;
    auto lonely = test::runCommand(test::memledgerBinary() + " analyze " + full + " --remedies --tile-overlap 8");
    EXPECT_EQ(lonely.exit_code, 2) << lonely.output;
    EXPECT_NE(lonely.output.find("--tile-overlap"), std::string::npos) << lonely.output;
}

TEST(Remedies, RemediesAreRankedAndKeptInTheJsonReport)
{
    auto model = Model::open(remediesFixture("base.pt"));
    auto report = analyze(model);
    auto remedies = computeRemedies(report);
    ASSERT_GE(remedies.size(), 2u);
    for (std::size_t i = 1; i < remedies.size(); ++i)
        EXPECT_GE(remedies[i - 1].peakSaving(), remedies[i].peakSaving());
    report.remedies = std::make_shared<const std::vector<Remedy>>(remedies);
    auto back = reportFromJson(reportToJson(report), "report.json");
    ASSERT_TRUE(back.remedies);
    ASSERT_EQ(back.remedies->size(), remedies.size());
    for (std::size_t i = 0; i < remedies.size(); ++i) {
        EXPECT_EQ((*back.remedies)[i].kind, remedies[i].kind);
        EXPECT_EQ((*back.remedies)[i].peak_total_after, remedies[i].peak_total_after);
        EXPECT_EQ((*back.remedies)[i].details, remedies[i].details);
    }
    // The HTML report has the section, each remedy's title and its concrete change.
    auto html = reportToHtml(report);
    EXPECT_NE(html.find("<h2>What would help</h2>"), std::string::npos);
    EXPECT_NE(html.find("bn1 into conv1"), std::string::npos);
    // A reopened report keeps what the rules need: the same remedies come from it.
    auto again = computeRemedies(back);
    ASSERT_EQ(again.size(), remedies.size());
    for (std::size_t i = 0; i < again.size(); ++i)
        EXPECT_EQ(again[i].peak_total_after, remedies[i].peak_total_after) << nameOf(again[i].kind);
}

TEST(Remedies, CliWritesRemediesToTextAndJson)
{
    auto json = std::filesystem::temp_directory_path() / "memledger_remedies.json";
    auto r = test::runCommand(test::memledgerBinary() + " analyze " + remediesFixture("base.pt")
        + " --input 1x3x96x96 --remedies --budget 560MiB --tile 48x48 --json " + json.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("What would help"), std::string::npos);
    EXPECT_NE(r.output.find("Fold BatchNorm"), std::string::npos);
    std::ifstream in(json);
    auto j = nlohmann::json::parse(in);
    std::set<std::string> kinds;
    for (const auto& e : j.at("remedies"))
        kinds.insert(e.at("kind").get<std::string>());
    for (const char* k : {"fold_batchnorm", "unread_buffers", "lower_precision", "largest_batch", "tiling"})
        EXPECT_TRUE(kinds.count(k)) << k;
    auto bad = test::runCommand(test::memledgerBinary() + " analyze " + remediesFixture("base.pt") + " --remedies --tile 48x");
    EXPECT_EQ(bad.exit_code, 2) << bad.output;
    std::filesystem::remove(json);
}

namespace {

std::string snapshotPath(const std::string& name)
{
    return std::string(MEMLEDGER_SNAPSHOTS) + "/" + name;
}

} // namespace

// No GPU here: the allocator settings are checked against the caching-allocator model's own replay of real
// snapshots, whose recorded segment sizes it reproduces (the snapshot tests check that), not on a GPU.
TEST(RemediesAllocator, SuggestedSettingIsTheReplaysBest)
{
    for (const char* name : {"torch-2.1-era-format.pickle", "many-segments.pickle"}) {
        SCOPED_TRACE(name);
        if (!std::filesystem::exists(snapshotPath(name)))
            GTEST_SKIP() << "the shared snapshots are not here: " << snapshotPath(name);
        auto report = readSnapshotReport(snapshotPath(name));
        ASSERT_TRUE(report.snapshot);
        const auto& s = *report.snapshot;
        ASSERT_TRUE(s.allocator_check.matched) << "the model does not reproduce this snapshot's segments";
        auto suggestions = allocatorSuggestions(report);
        ASSERT_FALSE(suggestions.empty());
        auto recorded = replaySnapshot(s, s.settings.toModel());
        for (const auto& g : suggestions) {
            EXPECT_EQ(g.reserve_before, recorded.peak_reserved);
            EXPECT_EQ(g.reserve_after, replaySnapshot(s, g.settings).peak_reserved) << g.setting;
            // Never less than what is allocated at once.
            EXPECT_GE(g.reserve_after, replaySnapshot(s, g.settings).peak_allocated) << g.setting;
        }
        for (std::size_t i = 1; i < suggestions.size(); ++i)
            EXPECT_LE(suggestions[i - 1].reserve_after, suggestions[i].reserve_after);
        auto remedies = computeRemedies(report);
        const auto* r = find(remedies, RemedyKind::AllocatorSettings);
        const auto saving = suggestions.front().reserve_before - suggestions.front().reserve_after;
        if (saving > (std::int64_t {1} << 20) && saving > suggestions.front().reserve_before / 200) {
            ASSERT_NE(r, nullptr);
            EXPECT_EQ(r->setting, suggestions.front().setting);
            EXPECT_EQ(r->reserveSaving(), saving);
            EXPECT_EQ(r->measure_how, MeasureHow::None);
        } else {
            EXPECT_EQ(r, nullptr) << "suggested a setting that saves nothing";
        }
    }
}

// memledger's figures against what PyTorch itself reports (tests/fixtures/make_fixtures.py).
#include "support/format.h"
#include "cli_options.h"
#include "fixture_paths.h"
#include "recording/build_report.h"
#include "support/errors.h"
#include "exports/report_json.h"
#include "doc_table.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

using namespace memledger;
using memledger::test::fixture;

namespace {

struct Case {
    std::string name;
};

class ModelTruth : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override
    {
        auto all = memledger::test::truth();
        ASSERT_TRUE(all.contains(GetParam())) << "truth.json has no entry for " << GetParam();
        t = all[GetParam()];
        model = std::make_unique<Model>(Model::open(fixture(t["file"].get<std::string>())));
        RunOptions o;
        o.inputs = parseShapes(t["input"].get<std::string>());
        report = analyzeModel(*model, o);
    }
    nlohmann::json t;
    std::unique_ptr<Model> model;
    Report report;
};

} // namespace

TEST_P(ModelTruth, ParameterAndBufferBytesAreExact)
{
    EXPECT_EQ(report.model.parameter_bytes, t["parameter_bytes"].get<std::int64_t>());
    EXPECT_EQ(report.model.buffer_bytes, t["buffer_bytes"].get<std::int64_t>());
    EXPECT_EQ(report.weight_bytes, t["parameter_bytes"].get<std::int64_t>() + t["buffer_bytes"].get<std::int64_t>());
}

TEST_P(ModelTruth, LeafActivationsEqualForwardHookOutputs)
{
    int checked = 0;
    for (const auto& [path, bytes] : t["leaf_output_bytes"].items()) {
        int i = report.findLayer(path);
        ASSERT_GE(i, 0) << "no layer " << path;
        const auto& layer = report.layers[static_cast<std::size_t>(i)];
        EXPECT_EQ(layer.activation_bytes, bytes.get<std::int64_t>()) << path << " (" << layer.type << ")";
        ++checked;
    }
    EXPECT_GT(checked, 0);
}

TEST_P(ModelTruth, PeakWithinOnePercentOfTheProfiler)
{
    auto expected = static_cast<double>(t["peak_bytes"].get<std::int64_t>());
    auto got = static_cast<double>(report.peak_bytes);
    EXPECT_LE(std::abs(got - expected), 0.01 * expected) << "memledger " << got << " profiler " << expected;
    EXPECT_EQ(report.peak_total_bytes, report.weight_bytes + report.input_bytes + report.peak_bytes);
}

TEST_P(ModelTruth, EveryAllocationHasOneLedgerAndTheReportRoundTrips)
{
    const auto& tr = *report.trace;
    for (std::size_t i = 0; i < tr.size(); ++i)
        ASSERT_TRUE(tr.ledger[i] == Ledger::Activations || tr.ledger[i] == Ledger::Temporaries) << "event " << i;
    // A GPU would hold at least everything alive at once, in whole 2 MiB or 20 MiB segments.
    EXPECT_GE(report.simulated_reserved_peak_bytes, report.peak_total_bytes);
    auto back = reportFromJson(reportToJson(report), "roundtrip");
    EXPECT_EQ(back.simulated_reserved_peak_bytes, report.simulated_reserved_peak_bytes);
    EXPECT_EQ(back.peak_bytes, report.peak_bytes);
    EXPECT_EQ(back.layers.size(), report.layers.size());
    EXPECT_EQ(back.trace->size(), tr.size());
}

INSTANTIATE_TEST_SUITE_P(Models, ModelTruth,
    ::testing::Values(
        "resnet18_scripted", "resnet18_traced", "mobilenet_v2", "small_inplace", "transformer_layer", "demo",
        "nested_attribute"));

TEST(LoadTax, Float16FileDoublesAsFloat32)
{
    auto t = memledger::test::truth()["small_float16"];
    auto model = Model::open(fixture("small_float16.pt"));
    EXPECT_EQ(model.info().parameter_bytes, t["file_parameter_bytes"].get<std::int64_t>());
    RunOptions o;
    o.inputs = parseShapes("1x3x32x32");
    auto r = analyzeModel(model, o);
    EXPECT_EQ(r.model.parameter_bytes, t["parameter_bytes"].get<std::int64_t>());
    EXPECT_EQ(r.load_tax.file_dtype, "float16");
    EXPECT_EQ(r.load_tax.resident_dtype, "float32");
    EXPECT_EQ(
        r.load_tax.resident_bytes, t["parameter_bytes"].get<std::int64_t>() + t["buffer_bytes"].get<std::int64_t>());
    EXPECT_LT(r.load_tax.file_tensor_bytes, r.load_tax.resident_bytes * 6 / 10);
}

TEST(Inspect, ModuleTreeNamesAndTypesAsPyTorchPrintsThem)
{
    auto model = Model::open(fixture("resnet18_traced.pt"));
    bool found = false;
    for (const auto& m : model.modules())
        if (m.path == "layer1.0.conv1") {
            EXPECT_EQ(m.type, "Conv2d");
            found = true;
        }
    EXPECT_TRUE(found);
    EXPECT_EQ(model.info().type, "ResNet");
    std::string how;
    auto guess = model.guessInputs(&how);
    ASSERT_EQ(guess.size(), 1u);
    EXPECT_EQ(guess[0], (Shape {1, 3, 224, 224}));
    EXPECT_NE(how.find("conv1"), std::string::npos);
}

TEST(Run, ModelRejectsAShapeWithItsOwnMessage)
{
    auto model = Model::open(fixture("small_inplace.pt"));
    RunOptions o;
    o.inputs = parseShapes("1x3x40x40");
    try {
        analyzeModel(model, o);
        FAIL() << "expected a RunError";
    } catch (const RunError& e) {
        EXPECT_NE(std::string(e.what()).find("mat1 and mat2"), std::string::npos) << e.what();
    }
}

TEST(Run, BatchReplacesDimZeroAndActivationsScale)
{
    auto model = Model::open(fixture("small_inplace.pt"));
    RunOptions o;
    o.inputs = parseShapes("1x3x32x32");
    auto one = analyzeModel(model, o);
    o.batch = 4;
    auto four = analyzeModel(model, o);
    EXPECT_EQ(four.run.batch, 4);
    EXPECT_EQ(four.run.input_shapes[0][0], 4);
    auto conv = four.findLayer("conv1");
    EXPECT_EQ(four.layers[conv].activation_bytes, 4 * one.layers[conv].activation_bytes);
}

TEST(Run, CancelStopsTheRun)
{
    auto model = Model::open(fixture("small_inplace.pt"));
    std::atomic<bool> cancel {true};
    RunOptions o;
    o.inputs = parseShapes("1x3x32x32");
    o.cancel = &cancel;
    EXPECT_THROW(analyzeModel(model, o), Cancelled);
    cancel = false;
    EXPECT_GT(analyzeModel(model, o).peak_bytes, 0); // still usable afterwards
}

// A scripted torchvision detector (tests/fixtures/vision_truths.py): it calls torchvision's operators (nms,
// roi_align), which memledger loads from the torchvision beside its libtorch, and takes List[Tensor] images.
TEST(Vision, ScriptedDetectorTakesItsListOfImagesAndMeetsTheProfiler)
{
    const auto truth = memledger::test::readTruth("vision/vision_truth.json", "make_vision_fixtures");
    if (truth.contains("skipped"))
        GTEST_SKIP() << truth["skipped"].get<std::string>();
    int checked = 0;
    for (const auto& [name, c] : truth["cases"].items()) {
        if (c.contains("skipped")) {
            ADD_FAILURE() << name << " was not made: " << c["skipped"].get<std::string>();
            continue;
        }
        auto model = Model::open(fixture(c["file"].get<std::string>()));
        RunOptions o;
        auto parsed = parseInputs(c["input"].get<std::string>());
        o.inputs = parsed.shapes;
        o.input_types = parsed.types;
        o.threads = 1;
        auto r = analyzeModel(model, o);
        EXPECT_EQ(r.run.batch, c["images"].get<std::int64_t>()) << name;
        EXPECT_EQ(inputsToString(r.run.input_shapes, r.run.input_types), c["input"].get<std::string>()) << name;
        EXPECT_EQ(r.model.parameter_bytes, c["parameter_bytes"].get<std::int64_t>()) << name;
        EXPECT_EQ(r.model.buffer_bytes, c["buffer_bytes"].get<std::int64_t>()) << name;
        const auto theirs = c["peak_bytes"].get<std::int64_t>();
        const double diff = 100.0 * static_cast<double>(r.peak_bytes - theirs) / static_cast<double>(theirs);
        char pct[32];
        std::snprintf(pct, sizeof pct, "%+.2f%%", diff);
        // The doc's row is the default build's (PyTorch 2); another torch's is printed beside it.
        const bool defaultTorch = truth["torch"].get<std::string>().rfind("2.", 0) == 0;
        memledger::test::docTableRow("vision.md", "vision-detectors",
            {name, "`" + c["input"].get<std::string>() + "`", memledger::test::groupedBytes(r.weight_bytes),
                memledger::test::groupedBytes(theirs), memledger::test::groupedBytes(r.peak_bytes), pct},
            {{"vision_truth " + name + " peak_bytes", r.peak_bytes, theirs, 0.01}}, defaultTorch);
        // --batch 3: three images, the given shapes taken in turn.
        o.batch = 3;
        auto three = analyzeModel(model, o);
        EXPECT_EQ(three.run.batch, 3) << name;
        EXPECT_EQ(three.run.input_shapes.size(), 3u) << name;
        EXPECT_EQ(three.run.input_shapes[2], parsed.shapes[0]) << name;
        ++checked;
    }
    EXPECT_GT(checked, 0);
}

TEST(Vision, ListInputsParseAndPrintWithTheirBrackets)
{
    auto p = parseInputs("[3x480x640, 3x512x512],2x4:int64");
    ASSERT_EQ(p.shapes.size(), 3u);
    EXPECT_EQ(p.types[0].list, 0);
    EXPECT_EQ(p.types[1].list, 0);
    EXPECT_EQ(p.types[2].list, -1);
    EXPECT_EQ(inputsToString(p.shapes, p.types), "[3x480x640,3x512x512],2x4:int64");
    EXPECT_EQ(argumentCount(p.types, p.shapes.size()), 2u);
    EXPECT_EQ(batchOfInputs(p.shapes, p.types), 2);
    auto shapes = p.shapes;
    auto types = p.types;
    setInputBatch(shapes, types, 3);
    EXPECT_EQ(inputsToString(shapes, types), "[3x480x640,3x512x512,3x480x640],3x4:int64");
    for (const char* bad : {"[3x4,[3x4]]", "3x4]", "[3x4", "[]", "[3x4,]x2"})
        EXPECT_THROW(parseInputs(bad), std::invalid_argument) << bad;
}

// A program whose modules' class defines __getattr__ (diffusers' ModelMixin), exported strictly: its graph names
// modules by their TorchDynamo source ("__dict__['_modules']['down_blocks'].1..."). Every module of the model's own
// named_modules() appears in the tree with its calls, and the root holds no activation of theirs.
TEST(Vision, ModulesNamedByTheirSourceMakeTheModelsTree)
{
    const auto truth = memledger::test::readTruth("vision/vision_truth.json", "make_vision_fixtures");
    if (truth.contains("skipped"))
        GTEST_SKIP() << truth["skipped"].get<std::string>();
    const auto& c = truth["getattr_tree"];
    if (c.contains("skipped"))
        GTEST_SKIP() << c["skipped"].get<std::string>();
    EXPECT_FALSE(c["graph_sources"].empty()) << "the graph names no module by its source: nothing is checked";
    auto model = Model::open(fixture(c["file"].get<std::string>()));
    RunOptions o;
    o.inputs = parseShapes(c["input"].get<std::string>());
    auto r = analyzeModel(model, o);
    for (const auto& [path, type] : c["modules"].items()) {
        const int i = r.findLayer(path);
        ASSERT_GE(i, 0) << "no layer " << path;
        const auto& layer = r.layers[static_cast<std::size_t>(i)];
        EXPECT_EQ(layer.type, type.get<std::string>()) << path;
        EXPECT_GT(layer.calls, 0) << path;
    }
    const int root = r.findLayer("");
    ASSERT_GE(root, 0);
    const int proj = r.findLayer("up_blocks.1.proj");
    ASSERT_GE(proj, 0);
    EXPECT_GT(r.layers[static_cast<std::size_t>(proj)].activation_bytes, 0);
}

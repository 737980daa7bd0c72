#include "cli_options.h"
#include "analysis/live_index.h"
#include "snapshot/frames.h"
#include "support/format.h"
#include "recording/module_path.h"
#include "session/open_file.h"
#include "support/atomic_file.h"
#include "support/errors.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

using namespace memledger;

TEST(Format, BytesAre1024Based)
{
    EXPECT_EQ(formatBytes(512), "512 B");
    EXPECT_EQ(formatBytes(3 * 1024), "3.00 KiB");
    EXPECT_EQ(formatBytes(5LL * 1024 * 1024 * 1024), "5.00 GiB");
    EXPECT_EQ(formatBytes(std::int64_t {141} << 30), "141.0 GiB"); // no int overflow above 4 GiB
}

TEST(Format, ParseBytes)
{
    EXPECT_EQ(parseBytes("16GiB").value(), std::int64_t {16} << 30);
    EXPECT_EQ(parseBytes("16 GB").value(), std::int64_t {16000000000}); // a disk's GB: 10^9
    EXPECT_EQ(parseBytes("80GB").value(), std::int64_t {80000000000});
    EXPECT_EQ(parseBytes("16G").value(), std::int64_t {16} << 30);
    EXPECT_EQ(parseBytes("2 kB").value(), 2000);
    EXPECT_EQ(parseBytes("512MiB").value(), std::int64_t {512} << 20);
    EXPECT_EQ(parseBytes("1024").value(), 1024);
    EXPECT_FALSE(parseBytes("lots").has_value());
    EXPECT_FALSE(parseBytes("12 parsecs").has_value());
    EXPECT_FALSE(parseBytes(".").has_value());
}

TEST(Format, InputsTakeATypeAndAFillAndPrintAsTheyAreWritten)
{
    auto p = parseInputs("2x512:int64, 2x512:bool=true,1x3x8x8,4x16:int64=7,1x4:bfloat16=0.5");
    ASSERT_EQ(p.shapes.size(), 5u);
    EXPECT_EQ(p.shapes[0], (Shape {2, 512}));
    EXPECT_EQ(p.types[0].dtype, "int64");
    EXPECT_FALSE(p.types[0].fill);
    EXPECT_EQ(p.types[1].dtype, "bool");
    EXPECT_EQ(p.types[1].fill, 1.0);
    EXPECT_EQ(p.types[2], InputType {});
    EXPECT_EQ(p.types[3].fill, 7.0);
    EXPECT_EQ(inputsToString(p.shapes, p.types), "2x512:int64,2x512:bool=true,1x3x8x8,4x16:int64=7,1x4:bfloat16=0.5");
    // Token ids stay integers under --dtype; floating-point inputs take it.
    EXPECT_EQ(p.types[0].runDtype("bfloat16"), "int64");
    EXPECT_EQ(p.types[2].runDtype("bfloat16"), "bfloat16");
    EXPECT_TRUE(p.types[0].isToken());
    EXPECT_TRUE(p.types[1].isToken());
    EXPECT_FALSE(p.types[4].isToken());
    EXPECT_EQ(inputBytes(p.shapes, p.types, "float32"), 2 * 512 * 8 + 2 * 512 + 3 * 64 * 4 + 4 * 16 * 8 + 4 * 2);
    for (const char* bad : {"2x512:int8", "2x512:", "2x512:int64=1.5", "2x512:bool=maybe", "2x:int64"})
        EXPECT_THROW(parseInputs(bad), std::invalid_argument) << bad;
    try {
        parseInputs("2x512:long64");
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("int64"), std::string::npos) << e.what(); // names the types there are
    }
}

TEST(Format, ParseShapesRefusesEmptyDimensions)
{
    EXPECT_EQ(parseShapes("1x3x224x224, 1x10"), (std::vector<Shape> {{1, 3, 224, 224}, {1, 10}}));
    for (const char* bad : {"3x224x224x", "x3x4", "3xx4", "1x-3", "1x3.5", "", ",", "1x 3"})
        EXPECT_THROW(parseShapes(bad), std::invalid_argument) << bad;
    try {
        parseShapes("3x224x224x");
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("3x224x224x"), std::string::npos) << e.what();
    }
}

TEST(ModulePath, FoldsTopSelfAndFunctionFrames)
{
    EXPECT_EQ(
        modulePathFromHierarchy({"TOP(ResNet)::forward", "SELF(ResNet)::_forward_impl", "layer1(Sequential)::forward",
            "0(BasicBlock)::forward", "relu(ReLU)::forward", "CALL_FUNCTION::relu()::relu"}),
        "layer1.0.relu");
}

TEST(ModulePath, ResolvesUnrolledModuleListsInCallOrder)
{
    ModulePathResolver r({{"", "Net"}, {"base", "ModuleList"}, {"base.0", "Conv2d"}, {"base.1", "ReLU"},
        {"loc", "ModuleList"}, {"loc.0", "Conv2d"}, {"conf", "ModuleList"}, {"conf.0", "Conv2d"}});
    EXPECT_EQ(r.resolve({"TOP(Net)::forward", "1(ReLU)::forward"}, 0), "base.1");
    EXPECT_EQ(r.resolve({"TOP(Net)::forward", "0(Conv2d)::forward"}, 1), "base.0");
    EXPECT_EQ(r.resolve({"TOP(Net)::forward", "0(Conv2d)::forward"}, 2), "base.0"); // same call goes on
    EXPECT_EQ(r.resolve({"TOP(Net)::forward", "0(Conv2d)::forward"}, 5, "conf.0"), "conf.0"); // weight decides
    EXPECT_EQ(r.resolve({"TOP(Net)::forward", "0(Conv2d)::forward"}, 9, "loc.0"), "loc.0");
}

TEST(ModulePath, FindsAModuleCalledThroughANestedAttribute)
{
    // Net.forward calls self.body.inner(x): TorchScript's frame names only "inner".
    ModulePathResolver r({{"", "Net"}, {"body", "Body"}, {"body.inner", "Inner"}, {"body.inner.conv", "Conv2d"},
        {"body.proj", "Conv2d"}, {"head", "Conv2d"}, {"head2", "Head"}, {"head2.proj", "Conv2d"}});
    EXPECT_EQ(r.resolve({"TOP(Net)::forward", "inner(Inner)::forward", "conv(Conv2d)::forward"}, 0),
        "body.inner.conv");
    // Two modules of that name and type: the op's weight decides.
    EXPECT_EQ(r.resolve({"TOP(Net)::forward", "proj(Conv2d)::forward"}, 1, "head2.proj"), "head2.proj");
    EXPECT_EQ(r.resolve({"TOP(Net)::forward", "proj(Conv2d)::forward"}, 3, "body.proj"), "body.proj");
    // `self.body.proj(y)` beside a top-level `self.proj`: the frame says "proj", the op's weight says which.
    ModulePathResolver both({{"", "Net"}, {"body", "Body"}, {"body.proj", "Conv2d"}, {"proj", "Conv2d"}});
    EXPECT_EQ(both.resolve({"TOP(Net)::forward", "proj(Conv2d)::forward"}, 0, "body.proj"), "body.proj");
    EXPECT_EQ(both.resolve({"TOP(Net)::forward", "proj(Conv2d)::forward"}, 2, "proj"), "proj");
    EXPECT_EQ(both.resolve({"TOP(Net)::forward", "proj(Conv2d)::forward"}, 4), "proj");
    // Called the ordinary way, the frames name every level.
    EXPECT_EQ(r.resolve({"TOP(Net)::forward", "body(Body)::forward", "proj(Conv2d)::forward"}, 5), "body.proj");
}

TEST(Cli, ParsesShapesAndRejectsNonsense)
{
    auto o = parseCli({"analyze", "m.pt", "--input", "1x3x224x224,1x10", "--batch", "8", "--dtype", "bfloat16"});
    ASSERT_EQ(o.run.inputs.size(), 2u);
    EXPECT_EQ(o.run.inputs[0], (Shape {1, 3, 224, 224}));
    EXPECT_EQ(*o.run.batch, 8);
    EXPECT_EQ(o.run.dtype, "bfloat16");
    EXPECT_THROW(parseCli({"analyze", "--input", "1xfoo"}), std::invalid_argument);
    EXPECT_THROW(parseCli({"analyze", "--dtype", "float8"}), std::invalid_argument);
    EXPECT_THROW(parseCli({"analyze", "--batch", "0"}), std::invalid_argument);
    EXPECT_THROW(parseCli({"analyze", "--frobnicate"}), std::invalid_argument);
    auto w = parseCli({"whatif", "m.pt", "--batch", "1,8,32", "--dtype", "float32,bfloat16", "--budget", "16GiB"});
    EXPECT_EQ(w.batches.size(), 3u);
    EXPECT_EQ(w.dtypes.size(), 2u);
    EXPECT_EQ(*w.budget, std::int64_t {16} << 30);
}

// The command line refuses `args` with a message that holds `says` (the flag it names).
static void refused(const std::vector<std::string>& args, const std::string& says)
{
    try {
        parseCli(args);
        ADD_FAILURE() << "accepted: " << args.back();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
}

// --checkpoint is typed where the text enters: one spec, or an axis of modes for fit and whatif --gpus; what cannot be
// answered is refused with a message that names the flag.
TEST(Cli, CheckpointIsTypedOnceAndRefusedWhereItCannotBeAnswered)
{
    auto fit = parseCli({"fit", "m.pt2", "--budget", "H100-80GB", "--checkpoint", "none,selective,full", "--checkpoint-every", "2"});
    ASSERT_EQ(fit.checkpoints.size(), 3u);
    EXPECT_TRUE(fit.checkpoints[0].none());
    EXPECT_EQ(fit.checkpoints[1].text(), "selective (every 2nd block)");
    EXPECT_EQ(fit.checkpoints[2].implementation(), CheckpointImpl::NonReentrant);
    auto paths = parseCli({"analyze", "m.pt2", "--mode", "train", "--checkpoint", "layers.*.feed_forward,layers.0"});
    ASSERT_EQ(paths.checkpoints.size(), 1u);
    EXPECT_EQ(paths.checkpoints[0].mode, CheckpointMode::Modules);
    EXPECT_EQ(paths.checkpoints[0].implementation(), CheckpointImpl::Reentrant); // named modules: as before
    auto rank = parseCli({"whatif", "m.pt2", "--gpus", "8,64", "--shard", "fsdp", "--checkpoint", "full,none"});
    EXPECT_EQ(rank.checkpoints.size(), 2u);
    refused({"analyze", "m.pt2", "--checkpoint", "none,full"}, "--checkpoint");
    refused({"fit", "m.pt2", "--budget", "80GB", "--checkpoint", "auto"}, "--checkpoint auto");
    refused({"analyze", "m.pt2", "--gpus", "8", "--checkpoint", "auto"}, "--checkpoint auto");
    refused({"analyze", "m.pt2", "--mode", "inference", "--checkpoint", "full"}, "--checkpoint");
    refused({"analyze", "m.pt2", "--mode", "train", "--checkpoint", "layers.0", "--checkpoint-every", "2"}, "--checkpoint-every");
    refused({"analyze", "m.pt2", "--mode", "train", "--checkpoint", "selective", "--checkpoint-impl", "reentrant"},
        "--checkpoint selective");
    refused({"analyze", "m.pt2", "--checkpoint-every", "2"}, "--checkpoint-every");
    refused({"ranks", "a.pickle", "--checkpoint", "full"}, "--checkpoint");
}

// --grad-accum K is the job's, on analyze and whatif (one device or --gpus) and fit; refused, naming the flag,
// where it cannot be answered.
TEST(Cli, GradAccumIsAnsweredWhereATrainingStepIsAndRefusedElsewhere)
{
    EXPECT_EQ(parseCli({"analyze", "m.pt2", "--mode", "train", "--grad-accum", "4"}).grad_accum, 4);
    EXPECT_EQ(parseCli({"analyze", "m.pt2", "--gpus", "8", "--grad-accum", "4"}).grad_accum, 4); // a rank trains
    EXPECT_EQ(parseCli({"whatif", "m.pt2", "--gpus", "8,64", "--grad-accum", "8"}).grad_accum, 8);
    EXPECT_EQ(parseCli({"fit", "m.pt2", "--budget", "H100-80GB", "--grad-accum", "2"}).grad_accum, 2);
    EXPECT_EQ(parseCli({"analyze", "m.pt2"}).grad_accum, 1);
    EXPECT_EQ(parseCli({"analyze", "m.pt2", "--grad-accum", "4"}).grad_accum, 4); // a training step, as --checkpoint
    refused({"analyze", "m.pt2", "--mode", "inference", "--grad-accum", "4"}, "--grad-accum");
    refused({"analyze", "m.pt2", "--mode", "train", "--grad-accum", "0"}, "--grad-accum");
    refused({"analyze", "m.pt2", "--mode", "train", "--grad-accum", "x"}, "--grad-accum");
    EXPECT_EQ(parseCli({"whatif", "m.pt2", "--mode", "train", "--grad-accum", "4"}).grad_accum, 4); // one device
    refused({"whatif", "m.pt2", "--mode", "inference", "--grad-accum", "4"}, "--grad-accum");
    refused({"ranks", "a.pickle", "--grad-accum", "4"}, "--grad-accum");
    EXPECT_EQ(parseCli({"fit", "m.pt2", "--budget", "H100-80GB", "--global-batch", "512"}).global_batch, 512);
    refused({"fit", "m.pt2", "--budget", "H100-80GB", "--global-batch", "512", "--grad-accum", "4"}, "--global-batch");
    refused({"analyze", "m.pt2", "--global-batch", "512"}, "--global-batch");
    refused({"analyze", "m.pt2", "--mode", "train", "--grad-accum", "4", "--remedies"}, "--remedies with --grad-accum");
    auto offload = parseCli({"fit", "m.pt2", "--budget", "H100-80GB", "--offload", "params", "--gpus-per-node", "4",
        "--host-budget", "512GiB"});
    EXPECT_EQ(offload.offload, "params");
    EXPECT_EQ(offload.gpus_per_node, 4);
    EXPECT_EQ(offload.host_budget, std::int64_t {512} << 30);
    EXPECT_TRUE(parseCli({"analyze", "m.pt2", "--gpus", "8", "--offload", "none"}).offload.empty());
    refused({"analyze", "m.pt2", "--mode", "train", "--offload", "params"}, "--offload");
    refused({"analyze", "m.pt2", "--gpus", "8", "--offload", "disk"}, "--offload 'disk'");
    refused({"fit", "m.pt2", "--budget", "80GB", "--host-budget", "1TB"}, "--host-budget");
}

TEST(OpenFile, DetectsTheKindByContentNotByName)
{
    auto dir = std::filesystem::temp_directory_path() / ("memledger-kind-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto write = [&](const std::string& name, const std::string& bytes) {
        std::ofstream(dir / name, std::ios::binary) << bytes;
        return (dir / name).string();
    };
    EXPECT_EQ(detectFileKind(write("model.json", std::string("PK\x03\x04", 4) + "rest")), FileKind::Model);
    EXPECT_EQ(detectFileKind(write("report.pt", "\n  {\"format\": \"memledger-report\"}")), FileKind::Report);
    EXPECT_EQ(detectFileKind(write("snap.pt", std::string("\x80\x04\x95", 3))), FileKind::Snapshot);
    EXPECT_EQ(detectFileKind(write("notes.pt", "hello")), FileKind::Model); // the model loader explains
    for (const auto& [path, reason] : std::vector<std::pair<std::string, std::string>> {
             {write("empty.pt", ""), "empty"}, {dir.string(), "directory"}, {(dir / "none.pt").string(), "no such file"}}) {
        try {
            detectFileKind(path);
            ADD_FAILURE() << path;
        } catch (const FileError& e) {
            EXPECT_EQ(e.path(), path);
            EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
        }
    }
    std::filesystem::remove_all(dir);
}

// A file written over an existing one is replaced whole (the two exchanged, then the old one removed); nothing is
// left under a temporary name; a folder in the way is an error naming the path, and leaves the folder as it was.
TEST(AtomicFile, ReplacesAFileWholeAndLeavesNothingBehind)
{
    namespace fs = std::filesystem;
    auto dir = fs::temp_directory_path() / ("memledger-atomic-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto read = [](const fs::path& p) {
        std::ifstream in(p, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const auto file = (dir / "report.json").string();
    writeFileAtomically(file, "first, and longer than the second");
    EXPECT_EQ(read(file), "first, and longer than the second");
    {
        AtomicFileWriter w(file);
        w.write("sec", 3);
        w.write("ond", 3);
        EXPECT_EQ(read(file), "first, and longer than the second"); // not until commit()
        w.commit();
    }
    EXPECT_EQ(read(file), "second");
    { AtomicFileWriter abandoned(file); abandoned.write("third", 5); } // no commit: the file stays
    EXPECT_EQ(read(file), "second");
    fs::create_directories(dir / "folder");
    try {
        writeFileAtomically((dir / "folder").string(), "text");
        ADD_FAILURE() << "a folder was replaced";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find((dir / "folder").string()), std::string::npos) << e.what();
    }
    EXPECT_TRUE(fs::is_directory(dir / "folder"));
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string> {"folder", "report.json"}));
    fs::remove_all(dir);
}

TEST(Format, ByteTicksAreRound)
{
    auto t = byteTicks(0, 35.8 * 1024 * 1024, 5);
    EXPECT_EQ(t.unit, 1024.0 * 1024);
    EXPECT_EQ(t.step, 5.0 * 1024 * 1024);
    ASSERT_EQ(t.labels.size(), 8u); // 0, 5, ..., 35 MiB
    EXPECT_EQ(t.labels[0], "0");
    EXPECT_EQ(t.labels[1], "5 MiB");
    auto small = byteTicks(0, 3 * 1024, 6);
    EXPECT_EQ(small.labels[1], "0.5 KiB");
    EXPECT_EQ(niceTicks(0, 13.7, 6), (std::vector<double> {0, 2, 4, 6, 8, 10, 12}));
}

TEST(Frames, InstalledPackagesAreLibraryCodeAndTheUsersFrameNamesTheAllocation)
{
    EXPECT_EQ(classifyFrame("/usr/lib/python3/dist-packages/einops/_backends.py"), FrameKind::Library);
    EXPECT_EQ(classifyFrame("/home/u/.venv/lib/python3.11/site-packages/transformers/modeling_llama.py"),
        FrameKind::Library);
    EXPECT_EQ(classifyFrame("/home/u/.venv/lib/python3.11/site-packages/torch/nn/modules/linear.py"), FrameKind::Torch);
    EXPECT_EQ(classifyFrame("/usr/lib/python3.11/threading.py"), FrameKind::CPython);
    EXPECT_EQ(classifyFrame("/home/u/project/model.py"), FrameKind::User);
    // einops is called by the user's forward: the forward names the allocation, not einops.
    std::vector<FrameView> stack {{"??", 0, "at::_ops::einsum::call(...)"},
        {"/home/u/.venv/lib/python3.11/site-packages/einops/_backends.py", 291, "einsum"},
        {"/home/u/project/model.py", 382, "forward"},
        {"/home/u/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", 1747, "_call_impl"}};
    EXPECT_EQ(allocationSite(stack), "/home/u/project/model.py:382 forward");
}

// The timeline's hover index against the scan it replaces: the live allocations of a band at an event, stacked
// oldest first, the first whose running sum reaches the height. Moving back and forth along the trace.
TEST(LiveStackIndex, AgreesWithAScanOfTheTrace)
{
    std::mt19937 rng(7);
    std::vector<LiveStackIndex::Interval> intervals;
    const std::int64_t events = 4000;
    for (std::uint32_t a = 0; a < events; a += 1 + rng() % 3) {
        LiveStackIndex::Interval i;
        i.order = a;
        i.begin = a;
        i.end = rng() % 7 == 0 ? LiveStackIndex::kForever : a + 1 + static_cast<std::uint32_t>(rng() % 600);
        i.bytes = 1 + static_cast<std::int64_t>(rng() % 5000);
        intervals.push_back(i);
    }
    auto scan = [&](std::int64_t event, double height) -> std::int64_t {
        double level = 0;
        for (const auto& i : intervals) {
            if (i.begin > event || i.end <= event)
                continue;
            level += static_cast<double>(i.bytes);
            if (height <= level)
                return i.order;
        }
        return -1;
    };
    auto live = [&](std::int64_t event) {
        std::int64_t s = 0;
        for (const auto& i : intervals)
            if (i.begin <= event && event < i.end)
                s += i.bytes;
        return s;
    };
    LiveStackIndex index(intervals);
    int checked = 0;
    for (int q = 0; q < 3000; ++q) {
        auto event = static_cast<std::int64_t>(rng() % events);
        auto top = live(event);
        ASSERT_EQ(index.liveBytes(event), top) << event;
        double height = top == 0 ? 10.0 : static_cast<double>(rng() % static_cast<std::uint64_t>(top + top / 10 + 2));
        if (q % 50 == 0)
            height = 0; // the band's bottom: its oldest live allocation
        ASSERT_EQ(index.allocationAt(event, height), scan(event, height)) << "event " << event << " height " << height;
        ++checked;
    }
    EXPECT_EQ(checked, 3000);
    EXPECT_EQ(LiveStackIndex({}).allocationAt(5, 1.0), -1);
}

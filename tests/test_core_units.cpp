#include "cli_options.h"
#include "support/format.h"
#include "recording/module_path.h"

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
    EXPECT_EQ(parseBytes("16 GB").value(), std::int64_t {16} << 30);
    EXPECT_EQ(parseBytes("512MiB").value(), std::int64_t {512} << 20);
    EXPECT_EQ(parseBytes("1024").value(), 1024);
    EXPECT_FALSE(parseBytes("lots").has_value());
    EXPECT_FALSE(parseBytes("12 parsecs").has_value());
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

// The HTML export opened the way a person would: in Debian's headless Chromium.
#include "fixture_paths.h"
#include "run_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace memledger::test;

namespace {

std::string chromium(const std::string& args)
{
    return "timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
           "--disable-background-networking --disable-component-update --disable-sync --enable-logging=stderr "
           "--v=0 --user-data-dir="
        + fixture("chromium-profile") + " " + args;
}

std::string readAll(const std::string& path)
{
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

} // namespace

TEST(HtmlExport, SelfContainedPageRendersInChromiumWithoutErrors)
{
    if (runCommand("command -v chromium").exit_code != 0)
        GTEST_SKIP() << "chromium is not installed (packaging/install-deps.sh installs it)";
    auto html = fixture("demo-report.html");
    auto r = runCommand(memledgerBinary() + " analyze --html '" + html + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto page = readAll(html);
    EXPECT_EQ(page.find("http://"), std::string::npos) << "the page must not fetch anything";
    EXPECT_EQ(page.find("https://"), std::string::npos) << "the page must not fetch anything";
    EXPECT_EQ(page.find("<script src"), std::string::npos);
    EXPECT_NE(page.find("Ledgers at the peak"), std::string::npos);
    EXPECT_NE(page.find("id=layers"), std::string::npos);

    auto dom = runCommand(chromium("--dump-dom file://" + html));
    EXPECT_NE(dom.output.find("data-rendered=\"yes\""), std::string::npos) << "the chart script did not finish";
    EXPECT_EQ(dom.output.find("Uncaught"), std::string::npos) << dom.output;
    EXPECT_EQ(dom.output.find(":CONSOLE"), std::string::npos) << "console output: " << dom.output;

    auto png = fixture("demo-report-html.png");
    std::filesystem::remove(png);
    auto shot = runCommand(chromium("--window-size=1200,900 --screenshot=" + png + " file://" + html));
    ASSERT_TRUE(std::filesystem::exists(png)) << shot.output;
    // Non-blank: the chart's colours cover a good share of the pixels.
    auto pixels = runCommand("/usr/bin/python3 -c \"from PIL import Image; im=Image.open('" + png
        + "').convert('RGB'); px=list(im.getdata()); print(sum(1 for p in px if p!=(255,255,255)) * 1000 // "
          "len(px))\"");
    ASSERT_EQ(pixels.exit_code, 0) << pixels.output;
    EXPECT_GT(std::stoi(pixels.output), 100) << "per mille of non-white pixels";
}

// A training step: the built-in MNIST demo records one by default; its page names the phases, shades them on
// the chart and lists gradients, and renders without a console error.
TEST(HtmlExport, TrainingStepPageHasPhasesAndGradients)
{
    auto html = fixture("mnist-train-report.html");
    auto r = runCommand(memledgerBinary() + " analyze demo:mnist-train.pt --html '" + html + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto page = readAll(html);
    for (const char* part : {"\"phases\":", "<table id=phases>", "forward", "loss", "backward", "optimizer",
             "gradients", "optimizer state", "saved for backward", "train on cpu"})
        EXPECT_NE(page.find(part), std::string::npos) << part;
    if (runCommand("command -v chromium").exit_code != 0)
        GTEST_SKIP() << "chromium is not installed (packaging/install-deps.sh installs it)";
    auto dom = runCommand(chromium("--dump-dom file://" + html));
    EXPECT_NE(dom.output.find("data-rendered=\"yes\""), std::string::npos) << "the chart script did not finish";
    EXPECT_EQ(dom.output.find("Uncaught"), std::string::npos) << dom.output;
    EXPECT_EQ(dom.output.find(":CONSOLE"), std::string::npos) << "console output: " << dom.output;
}

// The chart's axis: round 1-2-5 ticks in one unit, labelled as the window labels them; ledger colours as the
// window's.
TEST(HtmlExport, ChartHasRoundTicksAndTheWindowsColours)
{
    auto html = fixture("demo-ticks.html");
    auto r = runCommand(memledgerBinary() + " analyze --html '" + html + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto page = readAll(html);
    auto at = page.find("\"y_ticks\":");
    ASSERT_NE(at, std::string::npos);
    auto open = page.find('[', at);
    int depth = 0;
    std::size_t end = open;
    for (; end < page.size(); ++end) {
        depth += page[end] == '[' ? 1 : page[end] == ']' ? -1 : 0;
        if (depth == 0)
            break;
    }
    auto ticks = nlohmann::json::parse(page.substr(open, end - open + 1));
    ASSERT_GE(ticks.size(), 3u);
    const double step = ticks[1]["v"].get<double>() - ticks[0]["v"].get<double>();
    EXPECT_EQ(ticks[0]["v"].get<double>(), 0.0);
    EXPECT_EQ(ticks[0]["label"], "0");
    // The step is 1, 2 or 5 times a power of ten of a binary unit.
    double unit = 1;
    while (step >= unit * 1024)
        unit *= 1024;
    double mantissa = step / unit / std::pow(10.0, std::floor(std::log10(step / unit)));
    EXPECT_TRUE(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 || std::abs(mantissa - 5) < 1e-9)
        << step;
    for (std::size_t i = 1; i < ticks.size(); ++i) {
        EXPECT_NEAR(ticks[i]["v"].get<double>() - ticks[i - 1]["v"].get<double>(), step, 1e-6);
        auto label = ticks[i]["label"].get<std::string>();
        EXPECT_TRUE(label.find("iB") != std::string::npos || label.find(" B") != std::string::npos) << label;
    }
    // The window's ledger colours (core/exports/ledger_palette.h), not a palette of the page's own.
    for (const char* colour : {"#4c72b0", "#8172b3", "#55a868", "#dd8452"})
        EXPECT_NE(page.find(colour), std::string::npos) << colour;
    for (const char* old : {"#f28e2b", "#59a14f"})
        EXPECT_EQ(page.find(old), std::string::npos) << old;
    // The reserve line the window draws for a model run: the simulated GPU.
    EXPECT_NE(page.find("reserved (simulated GPU)"), std::string::npos);
}

// `--png` draws offscreen: no display and no XDG_RUNTIME_DIR needed, and nothing from Qt on the terminal.
TEST(PngExport, NeedsNoDisplayAndPrintsNoQtWarnings)
{
    auto png = fixture("demo-cli.png");
    std::filesystem::remove(png);
    auto r = runCommand(
        "env -u XDG_RUNTIME_DIR -u DISPLAY -u QT_QPA_PLATFORM " + memledgerBinary() + " analyze --png '" + png + "'");
    if (r.output.find("no GUI") != std::string::npos)
        GTEST_SKIP() << "this build has no GUI: " << r.output;
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(std::filesystem::exists(png));
    EXPECT_EQ(r.output.find("XDG_RUNTIME_DIR"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("QStandardPaths"), std::string::npos) << r.output;
}

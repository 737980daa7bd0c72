// The HTML export opened the way a person would: in Debian's headless Chromium.
#include "fixture_paths.h"
#include "run_command.h"

#include <gtest/gtest.h>

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

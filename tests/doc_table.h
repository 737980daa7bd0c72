#pragma once
// Tables in docs/ that tests write: a table sits between two markers,
//   <!-- table NAME: written by TEST (MEMLEDGER_WRITE_DOCS=1 rewrites it) -->
//   | ... | header | and | rule |
//   | KEY | figures ... |
//   <!-- end of table NAME -->
// and each test that measures a row checks that the row in the doc is, to the character, the row it made
// (its first cell is its key). With MEMLEDGER_WRITE_DOCS=1 in the environment the test writes the row into the
// doc instead (replacing the row of its key, or adding it last), so that no figure in such a
// table is typed by hand. Every row made is also written to build/doc_tables/NAME/KEY.md.
// A row is checked against PyTorch too: each call gives at least one of PyTorch's own figures for what the row
// shows (PyTorchFigure: a truth a fixture script wrote, tests/fixtures/*.py) with ours beside it, so that a row can
// neither pass by matching our own output alone nor be written (MEMLEDGER_WRITE_DOCS=1) while it disagrees.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace memledger::test {

// 1234567 -> "1,234,567"; negative with a minus sign (U+2212) when `sign`, and "+" before a positive one.
inline std::string groupedBytes(std::int64_t v, bool sign = false)
{
    std::string digits = std::to_string(v < 0 ? -v : v);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0)
            out += ',';
        out += digits[i];
    }
    if (v < 0)
        return (sign ? "\u2212" : "-") + out;
    return (sign && v > 0 ? "+" : "") + out;
}

// One of PyTorch's figures for a doc row and ours for the same thing: equal to the byte (`tolerance` 0) or within
// `tolerance` of PyTorch's (relative).
struct PyTorchFigure {
    std::string what; // what PyTorch's figure is and where it comes from: "lm_truth gpt_sdpa.pt2 inference peak"
    std::int64_t ours = 0;
    std::int64_t pytorch = 0;
    double tolerance = 0;
};

// Checks each figure (a failure names it); false when one is off.
inline bool checkPyTorchFigures(const std::vector<PyTorchFigure>& figures, const std::string& row)
{
    EXPECT_FALSE(figures.empty()) << "no PyTorch figure for the doc row " << row;
    bool ok = !figures.empty();
    for (const auto& f : figures) {
        const double diff = static_cast<double>(f.ours) - static_cast<double>(f.pytorch);
        const double bound = f.tolerance * std::abs(static_cast<double>(f.pytorch));
        const bool within = std::abs(diff) <= bound;
        std::printf("[ pytorch  ] %s: ours %lld PyTorch %lld (%+.3f%%)\n", f.what.c_str(), static_cast<long long>(f.ours),
            static_cast<long long>(f.pytorch), f.pytorch ? 100.0 * diff / static_cast<double>(f.pytorch) : 0.0);
        EXPECT_TRUE(within) << f.what << ": ours " << f.ours << ", PyTorch's " << f.pytorch
                            << (f.tolerance > 0 ? ", more than the tolerance apart" : ", not equal") << " (doc row "
                            << row << ")";
        ok = ok && within;
    }
    return ok;
}

inline std::string markdownRow(const std::vector<std::string>& cells)
{
    std::string row = "|";
    for (const auto& c : cells)
        row += " " + c + " |";
    return row;
}

// Checks (or with MEMLEDGER_WRITE_DOCS=1 writes) the row whose first cell is cells[0] in table `name` of
// docs/`doc` (relative to the source tree).
// `exact` false: a row whose figures come from a truth made on this machine by another process (a torchrun job,
// a PyTorch that pip may have moved) is checked for its key only; figures that differ here are printed, not
// failed (the test's own bound checks them).
inline void docTableRow(const std::string& doc, const std::string& name, const std::vector<std::string>& cells,
    const std::vector<PyTorchFigure>& pytorch, bool exact = true)
{
    const std::string row = markdownRow(cells);
    const bool agrees = checkPyTorchFigures(pytorch, row);
    const std::string key = "| " + cells.front() + " |";
    {
        std::string file = cells.front();
        for (auto& ch : file)
            if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-')
                ch = '_';
        auto dir = std::filesystem::path(MEMLEDGER_FIXTURES).parent_path() / "doc_tables" / name;
        std::filesystem::create_directories(dir);
        std::ofstream(dir / (file + ".md")) << row << "\n";
    }
    const auto path = std::string(MEMLEDGER_SOURCE_DIR) + "/docs/" + doc;
    std::vector<std::string> lines;
    {
        std::ifstream in(path);
        ASSERT_TRUE(in) << path;
        for (std::string line; std::getline(in, line);)
            lines.push_back(line);
    }
    const std::string begin = "<!-- table " + name + ":";
    const std::string end = "<!-- end of table " + name + " -->";
    std::size_t b = lines.size(), e = lines.size();
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (lines[i].rfind(begin, 0) == 0)
            b = i;
        else if (lines[i] == end && b < lines.size())
            e = i;
    }
    ASSERT_LT(b, lines.size()) << path << " has no table " << name;
    ASSERT_LT(e, lines.size()) << path << ": table " << name << " has no end marker";
    // Rows start after the header and its rule.
    const std::size_t first = b + 3;
    std::size_t at = e;
    for (std::size_t i = first; i < e; ++i)
        if (lines[i].rfind(key, 0) == 0)
            at = i;
    const char* write = std::getenv("MEMLEDGER_WRITE_DOCS");
    if (write && std::string(write) == "1") {
        if (!agrees) {
            std::printf("[ doc      ] not written into docs/%s, table %s (PyTorch disagrees): %s\n", doc.c_str(),
                name.c_str(), row.c_str());
            return;
        }
        if (at < e) {
            lines[at] = row;
        } else {
            lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(e), row); // last, in the order the tests run
        }
        std::ostringstream out;
        for (const auto& l : lines)
            out << l << "\n";
        std::ofstream(path) << out.str();
        std::printf("[ doc      ] wrote into docs/%s, table %s: %s\n", doc.c_str(), name.c_str(), row.c_str());
        return;
    }
    ASSERT_LT(at, e) << "docs/" << doc << ", table " << name << ", has no row " << key
                     << " (MEMLEDGER_WRITE_DOCS=1 writes it): " << row;
    if (!exact) {
        if (lines[at] != row)
            std::printf("[ doc      ] docs/%s, table %s, says %s; this machine measured %s\n", doc.c_str(),
                name.c_str(), lines[at].c_str(), row.c_str());
        return;
    }
    EXPECT_EQ(lines[at], row) << "docs/" << doc << ", table " << name
                              << ", is not what the test measured (MEMLEDGER_WRITE_DOCS=1 rewrites it)";
}

} // namespace memledger::test

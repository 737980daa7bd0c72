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
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
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
    bool exact = true)
{
    const std::string row = markdownRow(cells);
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

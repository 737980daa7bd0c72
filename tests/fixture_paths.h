#pragma once
// Where the generated fixtures live (tests/fixtures/make_fixtures.py writes them before the tests run).
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace memledger::test {

inline std::string fixture(const std::string& name)
{
    return std::string(MEMLEDGER_FIXTURES) + "/" + name;
}

// A truth file that a fixture maker (a ctest entry) writes, or {"skipped": why} when `maker` did not write it.
inline nlohmann::json readTruth(const std::string& name, const std::string& maker)
{
    std::ifstream in(fixture(name));
    if (!in)
        return nlohmann::json {{"skipped", name + " was not written (" + maker + " did not run)"}};
    return nlohmann::json::parse(in);
}

inline nlohmann::json truth()
{
    std::ifstream in(fixture("truth.json"));
    return nlohmann::json::parse(in);
}

} // namespace memledger::test

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

inline nlohmann::json truth()
{
    std::ifstream in(fixture("truth.json"));
    return nlohmann::json::parse(in);
}

} // namespace memledger::test

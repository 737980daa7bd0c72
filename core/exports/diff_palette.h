#pragma once
// The two sides of a comparison, wherever one is drawn (the HTML page, the window's comparison view): A in
// the weights' blue, B in the temporaries' orange, as "#rrggbb"; growth red, shrinkage green in tables.
namespace memledger {

constexpr const char* kDiffAColourHex = "#4c72b0";
constexpr const char* kDiffBColourHex = "#dd8452";
constexpr const char* kDiffGrewColourHex = "#b03a2e";
constexpr const char* kDiffShrankColourHex = "#1e7b4a";

} // namespace memledger

#pragma once
#include "report/report.h"

#include <string>

namespace memledger {

// One self-contained HTML page: run settings, ledger summary, a timeline chart (canvas, drawn by inline
// script) with hover details, and the layer table. No network fetch, no external script or style.
// `extraSectionsHtml` is inserted before the layer table (the what-if table, for example).
std::string reportToHtml(const Report& r, const std::string& extraSectionsHtml = {});
std::string htmlEscape(const std::string& s);

} // namespace memledger

#pragma once
#include "report/report.h"

#include <string>

namespace memledger {

// The readable report of `memledger analyze`: layer tree with ledger columns, then the totals.
std::string reportToText(const Report& r, int maxDepth = 64);
// Every parameter and buffer as stored in the file: name, kind, shape, dtype, bytes.
std::string tensorsToText(const Report& r);

} // namespace memledger

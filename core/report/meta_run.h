#pragma once
// A run on PyTorch's meta device (--device meta, docs/meta.md): its figures are computed from shapes, never
// measured. Every view of such a report says so with the same words.
#include "report/report.h"

namespace memledger {

inline constexpr const char* kMetaRunBadge = "meta: shapes only \u2014 not measured; kernel temporaries absent";

inline bool isMetaRun(const Report& r)
{
    return r.source == ReportSource::Model && r.run.device == "meta";
}

} // namespace memledger

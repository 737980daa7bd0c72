#pragma once
// A run on PyTorch's meta device (--device meta, docs/meta.md): its figures are computed from shapes, never
// measured. Every view of such a report says so with the same words.
#include "report/report.h"

#include <string>

namespace memledger {

inline constexpr const char* kMetaRunBadge = "meta: shapes only \u2014 not measured; kernel temporaries absent";

// What a report of a meta run says about its figures (a note of its own).
inline std::string metaRunNote()
{
    return "a meta-device run: the figures are computed from the tensors' shapes, not measured; temporaries that "
           "kernels allocate inside themselves (oneDNN scratch, im2col buffers, cuBLAS and cuDNN workspaces) do not "
           "exist on the meta device, so the temporaries ledger and the peak can be lower than a real run's";
}

inline bool isMetaRun(const Report& r)
{
    return r.source == ReportSource::Model && r.run.device == "meta";
}

} // namespace memledger

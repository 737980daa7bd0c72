#pragma once
// The one rule for a weight's resident bytes at a run's type (the load tax, the what-if's weights, the remedies'
// weights, serving's weights): a floating-point tensor takes the type's width where that type is floating too;
// every other tensor (integer buffers, int8 data, BatchNorm's num_batches_tracked) stays as stored.
#include "report/report.h"
#include "support/dtype.h"

#include <cstdint>
#include <string>

namespace memledger {

inline std::int64_t weightBytesAt(const TensorInfo& t, const std::string& dtype)
{
    return isFloatingDtype(t.dtype) && isFloatingDtype(dtype) ? numelOf(t.shape) * dtypeSize(dtype) : t.bytes;
}

} // namespace memledger

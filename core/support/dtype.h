#pragma once
// Element types as PyTorch names them, and tensor sizes: one rule for every place that scales a tensor to a
// run's precision (ledgers, GPU replay, what-if).
#include <cstdint>
#include <string>
#include <vector>

namespace memledger {

bool isSupportedDtype(const std::string& dtype); // a precision a run takes: float32, bfloat16, float16
int dtypeSize(const std::string& dtype); // bytes per element, 0 if unknown
bool isFloatingDtype(const std::string& dtype); // float32, float16, bfloat16, float64
std::int64_t numelOf(const std::vector<std::int64_t>& shape); // 1 for a scalar

} // namespace memledger

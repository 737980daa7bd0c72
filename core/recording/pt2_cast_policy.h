#pragma once
// Private to core/recording: which casts of a torch.export graph keep the type the program was exported in when
// it runs in another (ExportedProgram::convert): those the model's own source names (x.float(),
// .to(torch.float32), softmax(..., dtype=torch.float32)), told from each node's torch_fn and stack_trace.
#include <c10/core/ScalarType.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace memledger::pt2 {

// Whether node `n`, which passes the exported type `exported` as an argument, does so because the model's own
// source names that type, and not because it follows the type of a tensor (.to(h.dtype), type_as). In a float32
// program both read to(float32); its source line tells them apart:
//   - x.float() (torch_fn "method_descriptor.float") names it;
//   - a cast (aten.to.*, _to_copy) on a line with .to(...) or .type(...) calls: the k-th cast node of that line
//     is its k-th call, which names it when its argument spells the type (.to(torch.float32), not .to(x.dtype));
//   - any other op: the line passes dtype=torch.float32 (F.softmax(x, dim=-1, dtype=torch.float32)).
// `castsOnLine` counts the cast nodes seen per source line. Without a source line (stack_trace), no.
bool namesTypeOnPurpose(const nlohmann::json& n, c10::ScalarType exported, std::map<std::string, std::size_t>& castsOnLine);

} // namespace memledger::pt2

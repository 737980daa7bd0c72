#pragma once
// Writes a memledger trace or report as a PyTorch CUDA memory snapshot pickle (protocol 4; dicts, lists,
// str and int only), which torch.cuda._memory_viz and pytorch.org/memory_viz read.
#include "allocator/caching_allocator.h"
#include "report/report.h"
#include "report/trace.h"

#include <string>

namespace memledger {

// Segments come from replaying the trace through the caching-allocator model; device_traces hold every
// event with the model's addresses, so blocks and trace agree.
std::string encodeSnapshot(const Trace& trace, const AllocatorSettings& settings = {});
// A report read from a snapshot keeps its recorded segments and addresses; other reports go through the model.
std::string encodeSnapshot(const Report& report);
// Throws std::runtime_error naming the path and the reason.
void writeSnapshotFile(const std::string& path, const Report& report);

} // namespace memledger

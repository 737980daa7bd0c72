#pragma once
// What a snapshot's allocations carry beside their frames, summed per value: user_metadata (a string the user
// attached with torch.cuda.memory._set_memory_metadata) and compile_context (torch.compile's frame and graph).
#include "report/report.h"

#include <cstdint>
#include <string>
#include <vector>

namespace memledger {

struct Snapshot;

enum class ContextKind : std::uint8_t { UserMetadata, CompileContext };
// "user_metadata" | "compile_context": as the file and the JSON spell them.
const char* contextKindName(ContextKind k);

struct TraceContext;
// The string id (in the trace's strings) of `kind`'s value in an event's context; 0: none.
std::uint32_t contextId(const TraceContext& c, ContextKind kind);

struct ContextFigure {
    std::string value; // "": the allocations without one
    std::int64_t allocations = 0; // alloc events of the report's events (its range, when it has one)
    std::int64_t allocated_bytes = 0; // their sizes, summed
    std::int64_t peak_bytes = 0; // of them, what is alive after the report's peak event
};

// Per distinct value of `kind` in the allocations of report `r` (a snapshot report; its range when it has
// one): the values by allocated bytes, largest first, then the allocations without a value ("") when there
// are any. Empty when no allocation of the trace has a value of `kind`.
std::vector<ContextFigure> contextFigures(const Report& r, ContextKind kind);

// Event i's value of `kind` in snapshot `s` ("" for none or an event past the trace).
const std::string& contextOfEvent(const Snapshot& s, std::size_t event, ContextKind kind);
// True when some event of the snapshot's trace has a user_metadata or a compile_context.
bool hasContexts(const Snapshot& s);

struct TensorAnnotation;
// The annotations (torch.cuda.memory._annotate_tensor) of the allocation made by alloc event `event`, by time.
std::vector<const TensorAnnotation*> annotationsOfEvent(const Snapshot& s, std::size_t event);

} // namespace memledger

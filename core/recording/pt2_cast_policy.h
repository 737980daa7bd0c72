#pragma once
// Private to core/recording: which casts of a torch.export graph keep the type the program was exported in when
// it runs in another (ExportedProgram::convert): those the model's own source names (x.float(),
// .to(torch.float32), softmax(..., dtype=torch.float32)), told from each node's torch_fn and stack_trace.
#include <c10/core/ScalarType.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <map>
#include <optional>
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
// `casts` counts the cast nodes of each execution of a line. Without a source line (stack_trace), no.
class LineCasts;
bool namesTypeOnPurpose(const nlohmann::json& n, c10::ScalarType exported, LineCasts& casts);

// The cast nodes of each execution of a source line, so that the k-th cast node of an execution is the line's k-th
// call. One line runs once per call of its function: each decoder layer's `x.to(torch.float32)` is the first call
// of its own execution, not the layer's k-th. An execution of a line ends at a node of another line that is not
// inside a call the line makes.
class LineCasts {
public:
    // Every node, in the graph's order, before namesTypeOnPurpose is asked about it.
    void see(const std::string& stackTrace);
    // The index, in its line's current execution, of a cast node of the line `lineTrace` (see's key).
    std::size_t next(const std::string& lineTrace) { return count_[lineTrace]++; }

private:
    std::map<std::string, std::size_t> count_;
    std::string previous_; // the last node's line (its trace without the innermost frame's markers)
};

// Autocast and the types a program passes where its source takes them from a tensor's (`.to(query.dtype)`, `q_type =
// q.dtype; ... .to(q_type)`): the graph holds the type the tensor had at export, float32, where eager code under
// autocast passes bfloat16 when the tensor came out of a linear. memledger.export records which calls autocast
// changes (extra/memledger_autocast.json, python/memledger/autocast_types.py), under each device's rules.
enum class AutocastRules { Cpu = 0, Cuda = 1 }; // CPU autocast's; CUDA's (a CUDA run, and a meta run that stands for one)

// A type a node passes that autocast changes: `from` becomes `to`, or autocast's own type where `to` is unset.
struct AutocastType {
    c10::ScalarType from = c10::kFloat;
    std::optional<c10::ScalarType> to;
};

// The source line a node passing a type was made by, as the record keys it ("FILE:LINE", the innermost frame of
// its stack_trace); "" without one.
std::string typeSiteOf(const nlohmann::json& node);

// The record of one program, read once.
class AutocastTypes {
public:
    // `record`: the archive's extra/memledger_autocast.json; nullopt for a file memledger.export did not save.
    explicit AutocastTypes(std::optional<nlohmann::json> record);
    // Whether the record knows the calls of the program's forward under these rules.
    bool known(AutocastRules rules) const;
    // What autocast makes of the type the k-th node passing a type on `site` passes (`calls`: how many such nodes
    // the program has on that site); nullopt where it leaves it as traced, or the program's nodes are not the
    // forward's calls on that line.
    std::optional<AutocastType> at(AutocastRules rules, const std::string& site, std::size_t k, std::size_t calls) const;

private:
    const nlohmann::json* lines(AutocastRules rules) const; // the record's lines under these rules, or null
    std::optional<nlohmann::json> record_;
};

// A stack trace without the lines of carets (^^^~~~) Python 3.11 and later print under the innermost frame's
// source line: one key for every node of one line.
std::string lineTraceOf(std::string stackTrace);

} // namespace memledger::pt2

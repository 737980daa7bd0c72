#pragma once
// Private to core/recording: how long each value of a torch.export program lives when it runs.
//
// Two answers, one per way the same ops can run:
//   graph: each value is dropped after the last node that reads it, as the Python code FX generates for the graph
//     does (torch.export.load(path).module(), torch.compile): an activation is freed when nothing needs it.
//   eager: as the eager Python the program was exported from keeps it, told from each node's source lines
//     (stack_trace) and module stack (nn_module_stack). A value a statement assigns to a local (`x = ...`,
//     `q, k, v = ...`) lives until that name is assigned again in the same call or the call returns; a value passed
//     to a call (an argument of a module's forward, of a helper) lives until that call returns; a value used only
//     inside the statement that made it is dropped after its last reader, as the graph drops it. A loop over a
//     ModuleList or Sequential (`for block in self.blocks: x = block(x)`) is one statement per iteration.
//     What the source lines do not show (the locals of torch.nn.functional's code, which the trace leaves out, a
//     loop that calls no module) keeps the graph's lifetimes.
//
// Without libtorch: it reads the program's JSON only.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

namespace memledger::pt2 {

// A value's name -> the index of the node after which it is dropped. A name absent from `graphEnd` is never
// dropped (a user output, a buffer mutation).
using ValueEnds = std::unordered_map<std::string, std::size_t>;

// The graph's lifetimes of `nodes` (graph_module.graph.nodes): the last node that reads each value or makes it.
// `keep` names the values the caller reads (the outputs), which are never dropped.
ValueEnds graphLifetimes(const nlohmann::json& nodes, const std::vector<std::string>& keep);

// Eager lifetimes: each value of `graphEnd` dropped no earlier than there, and later where the eager code holds it.
// Values of nodes without source lines keep their graph end. `sources`, where memledger.export saved them
// (extra/memledger_sources.json, python/memledger/source_facts.py), tell what each traced function returns and what
// each traced line binds: a returned value its caller binds to a name it never reads (`hidden, _ = self.attn(x)`)
// lives as long as that name.
ValueEnds eagerLifetimes(const nlohmann::json& nodes, const ValueEnds& graphEnd, const nlohmann::json* sources = nullptr);

// Whether the nodes carry the source lines eager lifetimes are told from: a stack_trace with a frame that is not
// torch.export's own.
bool hasSourceLines(const nlohmann::json& nodes);

// The forward of a torch.autograd.Function subclass the program was traced through (Bloom's
// `GeLUFunction.apply(x)`): nodes first..last, one call. Eager Python runs it under no_grad and keeps for backward
// only what it saves, where the graph's ops would each save their own inputs. Told from the stack traces: a frame
// whose statement calls `.apply(` with a frame in a `forward` below it that is no module's; nodes without source
// lines between two nodes of one call belong to it. `name` is what the statement applies ("GeLUFunction").
struct FunctionCall {
    std::size_t first = 0, last = 0;
    std::string name;
};
std::vector<FunctionCall> autogradFunctionCalls(const nlohmann::json& nodes);

} // namespace memledger::pt2

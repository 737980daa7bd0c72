// libFuzzer target for a torch.export program's JSON (core/recording/pt2_graph.h, pt2_arithmetic.h): the model
// JSON (models/<name>.json), where the graph, its signature and its tensors' layouts are, and a weights config
// (data/weights/<name>_weights_config.json). Any input must either pass the checks or fail with an exception
// that says why; never crash, hang, recurse without bound or overflow. What passes is walked the way the loader
// walks it: every name, every module stack, every tensor layout.
//
// The zip around them is libtorch's (caffe2's PyTorchStreamReader over miniz), and what the loader does with the
// records after these checks needs ATen; neither is linked here (tests/test_pt2_hostile.cpp covers the archive
// through the command line).
#include "recording/pt2_arithmetic.h"
#include "recording/pt2_graph.h"
#include "recording/pt2_lifetimes.h"

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

using namespace memledger::pt2;

namespace {

// The tensor layouts of a weights config ({"config": {name: {"tensor_meta": ...}}}), each checked.
void weightsConfig(const json& doc)
{
    if (!doc.is_object() || !doc.contains("config") || !doc.at("config").is_object())
        return;
    for (const auto& [name, entry] : doc.at("config").items()) {
        try {
            if (entry.is_object() && entry.contains("tensor_meta")) {
                auto layout = tensorLayout(entry.at("tensor_meta"), name);
                checkedBytes(layout.reach, 16, name);
                if (layout.sizes.size() != layout.strides.size() || layout.offset < 0 || layout.reach < 0)
                    std::abort(); // a layout the checks let through unchecked
            }
        } catch (const std::exception&) {
        }
    }
}

// What the loader reads of a program that passed checkProgram.
void program(const json& root)
{
    const auto& graph = root.at("graph_module").at("graph");
    std::vector<std::string> names;
    for (const auto& n : graph.at("nodes")) {
        for (const auto& in : n.at("inputs"))
            if (in.contains("arg"))
                unionTag(in.at("arg"), "an argument"); // checked already: must not throw
        namesIn(n, names);
        if (n.contains("metadata") && n.at("metadata").contains("nn_module_stack")
            && n.at("metadata").at("nn_module_stack").is_string()) {
            std::vector<ModuleName> stack;
            innermostModule(n.at("metadata").at("nn_module_stack").get<std::string>(), &stack);
        }
    }
    if (graph.contains("tensor_values"))
        for (const auto& [name, meta] : graph.at("tensor_values").items()) {
            try {
                tensorLayout(meta, name);
            } catch (const std::exception&) {
            }
        }
    // Both lifetimes, told from the nodes' source lines and module stacks as the loader tells them.
    std::vector<std::string> outputs;
    const auto& signature = root.at("graph_module").at("signature");
    for (const auto& spec : signature.at("output_specs"))
        namesIn(spec, outputs);
    const auto graphEnds = graphLifetimes(graph.at("nodes"), outputs);
    (void)eagerLifetimes(graph.at("nodes"), graphEnds);
    (void)root.dump(); // recursive, bounded by parseJson's depth check
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string text(reinterpret_cast<const char*>(data), size);
    json doc;
    try {
        doc = parseJson(text, "fuzz-input");
    } catch (const std::runtime_error&) {
        return 0;
    }
    weightsConfig(doc);
    try {
        checkProgram(doc);
    } catch (const std::exception&) {
        return 0;
    }
    program(doc);
    // The arithmetic on the numbers the input holds, pairwise, by every operator the graph may name.
    std::vector<SizeValue> numbers;
    for (const auto& n : doc.at("graph_module").at("graph").at("nodes"))
        for (const auto& in : n.at("inputs"))
            if (in.contains("arg") && in.at("arg").contains("as_int") && in.at("arg").at("as_int").is_number_integer()
                && numbers.size() < 8)
                numbers.push_back(SizeValue::ofInt(in.at("arg").at("as_int").get<std::int64_t>()));
    for (const char* op : {"add", "sub", "mul", "floordiv", "mod", "truediv", "pow", "neg", "ceil", "sym_int"})
        for (std::size_t i = 0; i + 1 < numbers.size(); ++i)
            try {
                pythonArithmetic(std::string("_operator.") + op, {numbers[i], numbers[i + 1]});
                pythonArithmetic(std::string("math.") + op, {numbers[i]});
            } catch (const std::runtime_error&) {
            }
    return 0;
}

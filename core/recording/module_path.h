#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace memledger {

// Turns torch::jit::currentModuleHierarchy() frames ("TOP(ResNet)::forward", "layer1(Sequential)::forward",
// "SELF(ResNet)::_forward_impl", "CALL_FUNCTION::relu()::relu") into a module path as PyTorch prints it
// ("layer1.0.conv1").
//
// TorchScript unrolls loops over a ModuleList and its frames then name only the item ("0(Conv2d)"), not
// the list. The resolver finds the item among the list children of the module on the path; when several
// match (loc.0 and conf.0), the op's own weight decides (`hint`), else calls take the candidates in
// registration order, which is the order a forward over ModuleLists calls them.
class ModulePathResolver {
public:
    struct Module {
        std::string path;
        std::string type;
    };
    explicit ModulePathResolver(std::vector<Module> modules);
    // op: index of the outermost op, to tell a new call from the same call continuing.
    std::string resolve(const std::vector<std::string>& frames, std::uint32_t op, const std::string& hint = {});

private:
    struct Ambiguity {
        std::size_t cursor = 0;
        std::int64_t last_op = -2;
    };
    std::vector<std::string> candidates(
        const std::string& parent, const std::string& name, const std::string& type) const;
    std::vector<std::string> nestedCandidates(
        const std::string& parent, const std::string& name, const std::string& type) const;
    // Modules named `name` of type `type` below parent's children (not its children themselves), in
    // registration order; containersOnly: looking inside ModuleLists, ModuleDicts and Sequentials only.
    std::vector<std::string> below(
        const std::string& parent, const std::string& name, const std::string& type, bool containersOnly) const;
    std::unordered_map<std::string, std::string> type_of_;
    std::map<std::string, std::vector<std::string>> children_;
    std::unordered_map<std::string, Ambiguity> ambiguous_;
};

// Without a module tree: the names on the frames joined with dots.
std::string modulePathFromHierarchy(const std::vector<std::string>& frames);

} // namespace memledger

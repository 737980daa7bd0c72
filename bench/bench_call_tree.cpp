// Call-tree speed: a trace of N events (default 1,000,000: allocs and their frees over 2,000 distinct stacks
// 30 to 60 frames deep), buildCallTree (one pass per event, then each distinct stack expanded once) against
// expanding every allocation's stack into the tree one by one, side by side, best of 5 each.
// Usage: bench_call_tree [EVENTS]
#include "analysis/call_tree.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

using namespace memledger;

namespace {

Trace makeTrace(std::size_t events)
{
    Trace t;
    t.reserve(events);
    std::vector<std::uint32_t> frames;
    for (int i = 0; i < 400; ++i) {
        auto file = t.strings.intern(i % 3 ? "/home/user/project/model_" + std::to_string(i % 17) + ".py" : "??");
        auto name = t.strings.intern(
            i % 3 ? "forward_" + std::to_string(i) : "at::_ops::op" + std::to_string(i) + "::call()");
        frames.push_back(t.stacks.internFrame(file, i % 3 ? 10 + i : 0, name));
    }
    std::uint32_t seed = 1;
    auto rnd = [&] { return seed = seed * 1664525u + 1013904223u; };
    std::vector<std::uint32_t> stacks;
    for (int s = 0; s < 2000; ++s) {
        std::vector<std::uint32_t> f;
        auto depth = 30 + rnd() % 31;
        for (std::uint32_t d = 0; d < depth; ++d)
            f.push_back(frames[(s * 7 + d * (1 + s % 5) + rnd() % 3) % frames.size()]);
        stacks.push_back(t.stacks.internStack(f));
    }
    std::vector<std::size_t> live;
    std::uint64_t addr = 0x1000;
    while (t.size() < events) {
        if (live.size() < 32 || (live.size() < 2048 && rnd() % 2 == 0)) {
            auto i = t.push(
                static_cast<std::int64_t>(t.size()), 512 * (1 + rnd() % 64), addr += 0x100000, Action::Alloc, 0);
            t.stack[i] = stacks[rnd() % stacks.size()];
            live.push_back(i);
        } else {
            auto k = rnd() % live.size();
            auto a = live[k];
            live[k] = live.back();
            live.pop_back();
            auto f = t.push(static_cast<std::int64_t>(t.size()), t.bytes[a], t.address[a], Action::Free, 0);
            t.stack[f] = t.stack[a];
            t.partner[f] = static_cast<std::int32_t>(a);
            t.partner[a] = static_cast<std::int32_t>(f);
        }
    }
    return t;
}

// The baseline: every allocation walks its own stack into a map-based tree.
std::size_t naiveTree(const Trace& t)
{
    struct Node {
        std::map<std::uint32_t, std::size_t> children;
        std::int64_t allocated = 0, count = 0;
    };
    std::vector<Node> nodes(1);
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.action[i] != Action::Alloc)
            continue;
        std::size_t at = 0;
        nodes[0].allocated += t.bytes[i];
        for (auto f = t.stacks.end(t.stack[i]); f != t.stacks.begin(t.stack[i]);) {
            --f;
            auto it = nodes[at].children.find(*f);
            std::size_t next;
            if (it == nodes[at].children.end()) {
                next = nodes.size();
                nodes[at].children.emplace(*f, next);
                nodes.emplace_back();
            } else {
                next = it->second;
            }
            nodes[next].allocated += t.bytes[i];
            ++nodes[next].count;
            at = next;
        }
    }
    return nodes.size();
}

template <class F> double best(F&& f)
{
    double b = 1e30;
    for (int k = 0; k < 5; ++k) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        b = std::min(b, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return b;
}

} // namespace

int main(int argc, char** argv)
{
    std::size_t events = argc > 1 ? std::stoull(argv[1]) : 1000000;
    Trace t = makeTrace(events);
    std::size_t treeNodes = 0, naiveNodes = 0;
    double ours = best([&] {
        CallTreeOptions o;
        o.frames = CallTreeFrames::All;
        treeNodes = buildCallTree(t, o).nodes.size();
    });
    double naive = best([&] { naiveNodes = naiveTree(t); });
    std::printf("events %zu, distinct stacks %zu, tree nodes %zu (per-event tree %zu)\n", t.size(),
        t.stacks.stackCount() - 1, treeNodes, naiveNodes);
    std::printf(
        "buildCallTree %.1f ms, per-event expansion %.1f ms: %.1fx faster\n", ours * 1e3, naive * 1e3, naive / ours);
    return 0;
}

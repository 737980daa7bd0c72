#pragma once
#include "report/report.h"

#include <memory>
#include <random>

// A report whose trace holds `events` allocation events over a three-level module tree, shaped like a
// forward pass: activations that live a while, temporaries freed within a few events.
inline memledger::Report makeSyntheticReport(std::size_t events, unsigned seed = 7)
{
    using namespace memledger;
    Report r;
    r.weight_bytes = 5 << 20;
    r.input_bytes = 360000;
    r.layers.resize(7);
    const char* paths[] = {"", "features", "features.0", "features.1", "head", "head.conv", "head.relu"};
    const char* types[] = {"Net", "Sequential", "Conv2d", "ReLU", "Sequential", "Conv2d", "ReLU"};
    const int parents[] = {-1, 0, 1, 1, 0, 4, 4};
    for (int i = 0; i < 7; ++i) {
        auto& l = r.layers[static_cast<std::size_t>(i)];
        l.path = paths[i];
        l.name = i == 0 ? types[i] : l.path.substr(l.path.rfind('.') == std::string::npos ? 0 : l.path.rfind('.') + 1);
        l.type = types[i];
        l.parent = parents[i];
        l.depth = i == 0 ? 0 : r.layers[static_cast<std::size_t>(parents[i])].depth + 1;
        if (parents[i] >= 0)
            r.layers[static_cast<std::size_t>(parents[i])].children.push_back(i);
        l.weight_bytes = (7 - i) * 1000;
        l.activation_bytes = i * 4096;
        l.temporary_peak_bytes = (i % 3) * 512;
        l.peak_bytes = i * 9000;
        l.output_shapes = {"1x8x16x16"};
    }
    auto t = std::make_shared<Trace>();
    t->reserve(events);
    std::mt19937 rng(seed);
    std::uint32_t where[] = {t->strings.intern("features.0"), t->strings.intern("features.1"),
        t->strings.intern("head.conv"), t->strings.intern("head.relu")};
    std::uint32_t op = t->strings.intern("aten::conv2d");
    std::vector<std::size_t> liveActivations;
    std::int64_t live = 0;
    for (std::size_t i = 0; t->size() < events; ++i) {
        auto time = static_cast<std::int64_t>(t->size()) * 1000;
        bool temporary = rng() % 2 == 0;
        bool freeOne = !liveActivations.empty() && (rng() % 3 == 0 || live > (64 << 20));
        if (freeOne) {
            auto k = rng() % liveActivations.size();
            auto a = liveActivations[k];
            liveActivations.erase(liveActivations.begin() + static_cast<std::ptrdiff_t>(k));
            auto f = t->push(time, t->bytes[a], t->address[a], Action::Free, -1);
            t->partner[f] = static_cast<std::int32_t>(a);
            t->partner[a] = static_cast<std::int32_t>(f);
            t->ledger[f] = Ledger::Activations;
            t->where[f] = t->where[a];
            t->op_seq[f] = static_cast<std::uint32_t>(t->size() / 16);
            live -= t->bytes[a];
            continue;
        }
        auto bytes = static_cast<std::int64_t>(256 + rng() % (1 << 20));
        auto a = t->push(time, bytes, 0x1000 + t->size() * 64, Action::Alloc, -1);
        t->where[a] = where[rng() % 4];
        t->outer_op[a] = op;
        t->op_seq[a] = static_cast<std::uint32_t>(t->size() / 16);
        if (temporary && t->size() + 1 < events) {
            t->ledger[a] = Ledger::Temporaries;
            auto f = t->push(time + 500, bytes, t->address[a], Action::Free, -1);
            t->partner[f] = static_cast<std::int32_t>(a);
            t->partner[a] = static_cast<std::int32_t>(f);
            t->ledger[f] = Ledger::Temporaries;
            t->where[f] = t->where[a];
            t->op_seq[f] = t->op_seq[a];
        } else {
            t->ledger[a] = Ledger::Activations;
            liveActivations.push_back(a);
            live += bytes;
        }
    }
    r.trace = t;
    r.ledgers[0] = {r.weight_bytes, r.weight_bytes};
    r.ledgers[1] = {r.input_bytes, r.input_bytes};
    r.load_tax = {2 << 20, "float16", 5 << 20, "float32"};
    r.model.type = "Net";
    return r;
}

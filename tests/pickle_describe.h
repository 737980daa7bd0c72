#pragma once
// Test helpers for the pickle reader, shared by the unit tests and the fuzz target: a pickle's tree (or the
// error it gives) as text, and a source that hands the bytes over in pieces of changing sizes, so that a
// streamed read can be compared with a read of the bytes held whole.
#include "snapshot/pickle_reader.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>

namespace memledger::testing {

// A container met again (shared through the memo) is written as "@N", N its order of first meeting, so that
// sharing shows and a pickle that shares a lot never blows up the text.
inline void describePickle(
    const PickleValue& v, std::string& out, std::unordered_map<const void*, std::size_t>& seen, int depth = 0)
{
    if (depth > 200) {
        out += "...";
        return;
    }
    switch (v.kind()) {
    case PickleKind::None:
        out += "N";
        return;
    case PickleKind::Bool:
        out += v.asBool() ? "T" : "F";
        return;
    case PickleKind::Int:
        out += "i" + std::to_string(v.asInt());
        return;
    case PickleKind::Float: {
        const double f = v.asFloat();
        std::uint64_t bits = 0;
        std::memcpy(&bits, &f, sizeof bits);
        out += "f" + std::to_string(bits);
        return;
    }
    case PickleKind::Str:
    case PickleKind::Bytes:
        out += (v.kind() == PickleKind::Str ? "s" : "b") + std::to_string(v.asStr().size()) + ":";
        out += v.asStr();
        return;
    case PickleKind::Reduced:
        out += "r" + std::to_string(v.reducedType()) + "/" + std::to_string(v.reducedId());
        return;
    default:
        break;
    }
    if (auto [it, fresh] = seen.emplace(v.identity(), seen.size()); !fresh) {
        out += "@" + std::to_string(it->second);
        return;
    }
    out += v.kind() == PickleKind::Dict ? "{" : v.kind() == PickleKind::Tuple ? "(" : "[";
    for (const auto& e : v.items()) {
        describePickle(e, out, seen, depth + 1);
        out += ",";
    }
    out += "}";
}

// Hands out the bytes in pieces of 1 to 13 bytes, now and then a large one, from a fixed pseudo-random
// sequence; `stopAt` ends the data early (a file truncated while it is read).
class PieceSource : public PickleSource {
public:
    PieceSource(const std::string& bytes, std::uint32_t seed, std::size_t stopAt = SIZE_MAX)
        : bytes_(bytes)
        , state_(seed * 2654435761u + 1)
        , stop_(std::min(stopAt, bytes.size()))
    {
    }
    std::size_t read(char* dst, std::size_t n) override
    {
        state_ = state_ * 1103515245u + 12345u;
        std::size_t piece = (state_ >> 16) % 8 == 0 ? (state_ >> 8) % 70000 + 1 : (state_ >> 16) % 13 + 1;
        piece = std::min({piece, n, stop_ - at_});
        std::memcpy(dst, bytes_.data() + at_, piece);
        at_ += piece;
        return piece;
    }

private:
    const std::string& bytes_;
    std::uint32_t state_;
    std::size_t stop_;
    std::size_t at_ = 0;
};

// The tree, or "error at N: reason", of a read of the bytes whole (source == nullptr) or streamed.
inline std::string pickleOutcome(const std::string& bytes, PickleSource* source, PickleReducer* reducer = nullptr)
{
    try {
        PickleReadHooks hooks;
        hooks.reducer = reducer;
        auto owned = std::make_shared<const std::string>(bytes);
        PickleDocument doc = source ? readPickle(*source, bytes.size(), hooks)
                                    : readPickle(owned, owned->data(), owned->size(), hooks);
        std::string out = "p" + std::to_string(doc.protocol()) + " ";
        std::unordered_map<const void*, std::size_t> seen;
        describePickle(doc.root(), out, seen);
        return out;
    } catch (const PickleError& e) {
        return "error at " + std::to_string(e.offset()) + ": " + e.reason();
    }
}

} // namespace memledger::testing

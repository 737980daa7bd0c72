#pragma once
// A Python pickle reader for data only (protocols 2 to 5): None, bool, int, float, str, bytes, list, tuple
// and dict. It never runs code: opcodes that name a global or call something are refused.
#include <cstdint>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace memledger {

// The bytes are not a pickle we read; offset is where the offending opcode starts.
class PickleError : public std::runtime_error {
public:
    PickleError(std::uint64_t offset, const std::string& reason)
        : std::runtime_error(reason + " at byte " + std::to_string(offset)), offset_(offset), reason_(reason)
    {
    }
    std::uint64_t offset() const { return offset_; }
    const std::string& reason() const { return reason_; }

private:
    std::uint64_t offset_;
    std::string reason_;
};

enum class PickleKind : std::uint8_t { None, Bool, Int, Float, Str, Bytes, List, Tuple, Dict };
const char* pickleKindName(PickleKind k);

struct PickleContainer;

// One value of the tree. Scalars are held inline; strings point into the document's bytes; lists, tuples
// and dicts point at containers owned by the document (shared when the pickle shares them through its memo).
class PickleValue {
public:
    PickleValue() = default;
    static PickleValue none() { return {}; }
    static PickleValue boolean(bool b);
    static PickleValue integer(std::int64_t i);
    static PickleValue real(double f);
    static PickleValue text(PickleKind k, const char* p, std::size_t n); // Str or Bytes
    static PickleValue container(PickleKind k, PickleContainer* c);

    PickleKind kind() const { return kind_; }
    bool isNone() const { return kind_ == PickleKind::None; }
    bool isInt() const { return kind_ == PickleKind::Int || kind_ == PickleKind::Bool; }
    bool isNumber() const { return isInt() || kind_ == PickleKind::Float; }
    bool isStr() const { return kind_ == PickleKind::Str; }
    bool isDict() const { return kind_ == PickleKind::Dict; }
    bool isSequence() const { return kind_ == PickleKind::List || kind_ == PickleKind::Tuple; }

    std::int64_t asInt() const; // int or bool; throws std::runtime_error otherwise
    double asFloat() const;     // any number
    bool asBool() const;        // bool or int
    std::string_view asStr() const; // str or bytes

    // List or tuple elements; empty for other kinds.
    const std::vector<PickleValue>& items() const;
    // Dict entries, key and value alternating; empty for other kinds.
    const std::vector<PickleValue>& entries() const { return items(); }
    std::size_t dictSize() const { return kind_ == PickleKind::Dict ? items().size() / 2 : 0; }
    // The value under a str key (the last one set), or nullptr; nullptr when this is not a dict.
    const PickleValue* get(std::string_view key) const;
    // Identity of the container (for caches); nullptr for scalars.
    const void* identity() const { return isContainerKind() ? container_ : nullptr; }

private:
    friend class PickleParser;
    bool isContainerKind() const
    {
        return kind_ == PickleKind::List || kind_ == PickleKind::Tuple || kind_ == PickleKind::Dict;
    }

    PickleKind kind_ = PickleKind::None;
    std::uint64_t size_ = 0; // string length
    union {
        std::int64_t int_ = 0;
        double float_;
        const char* chars_;
        PickleContainer* container_;
    };
};

struct PickleContainer {
    std::vector<PickleValue> items;
    std::uint32_t depth = 1; // levels of nesting below and including this one, as built
};

// A decoded pickle. Owns the bytes (strings point into them) and every container.
class PickleDocument {
public:
    const PickleValue& root() const { return root_; }
    int protocol() const { return protocol_; }
    std::size_t containerCount() const { return containers_ ? containers_->size() : 0; }

private:
    friend class PickleParser;
    std::shared_ptr<const std::string> bytes_;
    std::unique_ptr<std::deque<PickleContainer>> containers_;
    PickleValue root_;
    int protocol_ = 0;
};

struct PickleLimits {
    std::uint32_t max_depth = 1000;         // nesting of containers and of MARKs
    std::size_t max_stack = 1u << 20;       // values waiting on the stack
};

// Throws PickleError (with the byte offset) on anything that is not a well-formed data-only pickle.
PickleDocument readPickle(std::string bytes, const PickleLimits& limits = {});

} // namespace memledger

#pragma once
// A Python pickle reader for data only (protocols 2 to 5): None, bool, int, float, str, bytes, list, tuple
// and dict. It never runs code: opcodes that name a global or call something are refused.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace memledger {

// The bytes are not a pickle we read; offset is where the offending opcode starts.
class PickleError : public std::runtime_error {
public:
    PickleError(std::uint64_t offset, const std::string& reason)
        : std::runtime_error(reason + " at byte " + std::to_string(offset))
        , offset_(offset)
        , reason_(reason)
    {
    }
    std::uint64_t offset() const { return offset_; }
    const std::string& reason() const { return reason_; }

private:
    std::uint64_t offset_;
    std::string reason_;
};

// Reduced: a container that the reader's PickleReducer replaced by an id of its own once it was complete.
enum class PickleKind : std::uint8_t { None, Bool, Int, Float, Str, Bytes, List, Tuple, Dict, Reduced };
const char* pickleKindName(PickleKind k);

struct PickleContainer;
class PickleValue;

// A read-only run of values: the elements of a list or tuple, or a dict's keys and values alternating.
class PickleItems {
public:
    PickleItems() = default;
    PickleItems(const PickleValue* b, std::size_t n)
        : begin_(b)
        , size_(n)
    {
    }
    const PickleValue* begin() const { return begin_; }
    const PickleValue* end() const;
    std::size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    const PickleValue& operator[](std::size_t i) const;
    const PickleValue& front() const { return *begin_; }
    const PickleValue& back() const;

private:
    const PickleValue* begin_ = nullptr;
    std::size_t size_ = 0;
};

struct PickleScalar;

// One value of the tree, 8 bytes: small ints, None and bools inline; strings, floats and big ints point at
// a record (strings point into the document's bytes); lists, tuples and dicts point at containers owned by
// the document (shared when the pickle shares them through its memo).
class PickleValue {
public:
    PickleValue() = default;

    PickleKind kind() const;
    bool isNone() const { return bits_ == kNone; }
    bool isInt() const;
    bool isNumber() const { return isInt() || kind() == PickleKind::Float; }
    bool isStr() const { return kind() == PickleKind::Str; }
    bool isDict() const { return kind() == PickleKind::Dict; }
    bool isSequence() const
    {
        auto k = kind();
        return k == PickleKind::List || k == PickleKind::Tuple;
    }

    std::int64_t asInt() const // int or bool; throws std::runtime_error otherwise
    {
        return tag() == kTagInt ? static_cast<std::int64_t>(bits_) >> 3 : asIntSlow();
    }
    double asFloat() const; // any number
    bool asBool() const; // bool or int
    std::string_view asStr() const; // str or bytes

    // List or tuple elements; empty for other kinds.
    PickleItems items() const;
    // Dict entries, key and value alternating; empty for other kinds.
    PickleItems entries() const;
    std::size_t dictSize() const;
    // The value under a str key (the last one set), or nullptr; nullptr when this is not a dict.
    const PickleValue* get(std::string_view key) const;
    // The same value: the same scalar record, container, small int or reduced value (not equal contents).
    bool sameAs(const PickleValue& o) const { return bits_ == o.bits_; }
    // Identity of the container (for caches); nullptr for scalars.
    const void* identity() const { return tag() == kTagContainer ? container() : nullptr; }

    // What a PickleReducer made of a container: a type of its choosing (0 to 31) and a 32-bit id.
    static PickleValue reduced(unsigned type, std::uint32_t id)
    {
        PickleValue v;
        v.bits_ = (std::uint64_t {id} << 8) | (std::uint64_t {type & 31} << 3) | kTagReduced;
        return v;
    }
    // Items of a list or tuple, entries times two of a dict (readable while parsing, unlike items()); 0 else.
    std::size_t containerSize() const;
    bool isReduced() const { return tag() == kTagReduced; }
    unsigned reducedType() const { return static_cast<unsigned>((bits_ >> 3) & 31); }
    std::uint32_t reducedId() const { return static_cast<std::uint32_t>(bits_ >> 8); }

private:
    friend class PickleParser;
    static constexpr std::uint64_t kTagContainer = 0, kTagInt = 1, kTagScalar = 2, kTagSpecial = 3,
                                   kTagReduced = 4;
    static constexpr std::uint64_t kUnset = 0; // a memo slot never stored
    static constexpr std::uint64_t kNone = (0 << 3) | kTagSpecial, kFalse = (1 << 3) | kTagSpecial,
                                   kTrue = (2 << 3) | kTagSpecial;
    static constexpr std::int64_t kSmallIntLimit = std::int64_t {1} << 59;

    std::uint64_t tag() const { return bits_ & 7; }
    std::int64_t asIntSlow() const;
    [[noreturn]] void throwNotStr() const;
    PickleContainer* container() const { return reinterpret_cast<PickleContainer*>(bits_); }
    const PickleScalar* scalar() const { return reinterpret_cast<const PickleScalar*>(bits_ & ~std::uint64_t {7}); }
    bool isContainerKind() const { return tag() == kTagContainer && bits_ != kUnset; }

    std::uint64_t bits_ = kNone;
};

// A string, bytes, float or an int too large to be held inline.
struct alignas(8) PickleScalar {
    PickleKind kind = PickleKind::Str;
    std::uint64_t size = 0;
    union {
        const char* chars;
        std::int64_t i;
        double f;
    };
};

inline std::string_view PickleValue::asStr() const
{
    if (tag() == kTagScalar) {
        const auto* sc = scalar();
        if (sc->kind == PickleKind::Str || sc->kind == PickleKind::Bytes)
            return {sc->chars, static_cast<std::size_t>(sc->size)};
    }
    throwNotStr();
}

// Items of all containers live in one arena owned by the document; a container is a slice of it.
struct alignas(8) PickleContainer {
    union {
        std::uint64_t offset = 0; // in the arena, while parsing
        const PickleValue* data; // once parsing is done
    };
    std::uint32_t size = 0;
    std::uint32_t capacity = 0;
    std::uint32_t memo = 0; // while parsing: 1 + the memo slot that holds it; 0 none; UINT32_MAX several
    std::uint16_t depth = 1; // levels of nesting below and including this one, as built
    PickleKind kind = PickleKind::List;
    std::uint8_t flags = 0; // while parsing: kShared, kConsumed
    static constexpr std::uint8_t kShared = 1; // pushed again from the memo or by DUP
    static constexpr std::uint8_t kConsumed = 2; // put into a container without being reduced
};

inline const PickleValue* PickleItems::end() const
{
    return begin_ + size_;
}
inline const PickleValue& PickleItems::operator[](std::size_t i) const
{
    return begin_[i];
}
inline const PickleValue& PickleItems::back() const
{
    return begin_[size_ - 1];
}
inline PickleItems PickleValue::entries() const
{
    return items();
}
inline std::size_t PickleValue::containerSize() const
{
    return isContainerKind() ? container()->size : 0;
}
inline std::size_t PickleValue::dictSize() const
{
    return kind() == PickleKind::Dict ? items().size() / 2 : 0;
}
inline PickleKind PickleValue::kind() const
{
    switch (tag()) {
    case kTagContainer:
        return bits_ == kUnset ? PickleKind::None : container()->kind;
    case kTagInt:
        return PickleKind::Int;
    case kTagScalar:
        return scalar()->kind;
    case kTagReduced:
        return PickleKind::Reduced;
    default:
        return bits_ == kNone ? PickleKind::None : PickleKind::Bool;
    }
}
inline bool PickleValue::isInt() const
{
    auto t = tag();
    return t == kTagInt || bits_ == kTrue || bits_ == kFalse || (t == kTagScalar && scalar()->kind == PickleKind::Int);
}
inline PickleItems PickleValue::items() const
{
    return isContainerKind() ? PickleItems(container()->data, container()->size) : PickleItems();
}

// Memory for a chunk of records (std::free releases it); large chunks are backed by huge pages where the
// system allows, since a big snapshot fills tens of MB of them.
void* allocatePickleChunk(std::size_t bytes);

// Stable storage for many small records: chunks that double in size, so an address never moves and a
// million records cost a dozen allocations.
template <typename T> class PickleChunks {
    static_assert(std::is_trivially_destructible_v<T> && alignof(T) <= alignof(std::max_align_t));

public:
    PickleChunks() = default;
    PickleChunks(const PickleChunks&) = delete;
    PickleChunks& operator=(const PickleChunks&) = delete;
    ~PickleChunks()
    {
        for (T* c : chunks_)
            std::free(c);
    }
    T& emplace_back()
    {
        if (chunks_.empty() || used_ == chunkCapacity(chunks_.size() - 1)) {
            // raw: each record is constructed when handed out
            void* p = allocatePickleChunk(sizeof(T) * chunkCapacity(chunks_.size()));
            chunks_.push_back(static_cast<T*>(p));
            used_ = 0;
        }
        ++size_;
        return *new (chunks_.back() + used_++) T();
    }
    std::size_t size() const { return size_; }
    template <typename F> void forEach(F&& f)
    {
        for (std::size_t c = 0; c < chunks_.size(); ++c)
            for (std::size_t i = 0, n = c + 1 == chunks_.size() ? used_ : chunkCapacity(c); i < n; ++i)
                f(chunks_[c][i]);
    }

private:
    static std::size_t chunkCapacity(std::size_t chunk)
    {
        return std::size_t {4096} << std::min<std::size_t>(chunk, 6);
    }
    std::vector<T*> chunks_;
    std::size_t used_ = 0;
    std::size_t size_ = 0;
};

// Releases a document's arena of items (mapped or malloc'ed).
struct PickleArenaFree {
    std::size_t bytes = 0;
    void operator()(PickleValue* p) const;
};

// A decoded pickle. Owns the bytes (strings point into them) and every container.
class PickleDocument {
public:
    const PickleValue& root() const { return root_; }
    int protocol() const { return protocol_; }
    std::size_t containerCount() const { return containers_ ? containers_->size() : 0; }

private:
    friend class PickleParser;
    std::shared_ptr<const void> bytes_; // whatever holds the bytes: a string, a mapped file
    std::vector<std::unique_ptr<char[]>> texts_; // copies of the strings of a streamed pickle
    std::unique_ptr<PickleChunks<PickleContainer>> containers_;
    std::unique_ptr<PickleChunks<PickleScalar>> scalars_;
    std::unique_ptr<PickleValue, PickleArenaFree> arena_; // never value-initialised: pages are touched as filled
    PickleValue root_;
    int protocol_ = 0;
};

struct PickleLimits {
    std::uint32_t max_depth = 1000; // nesting of containers and of MARKs (at most 65535)
    std::size_t max_stack = 1u << 20; // values waiting on the stack
};

// Lets the reader's user turn containers into compact values of its own while the pickle is read, so that a
// large file never exists as a whole tree: a CUDA snapshot's million trace entries, each with its list of
// frames, become rows and interned stacks as they are read.
class PickleReducer {
public:
    virtual ~PickleReducer() = default;
    // Called for every list, tuple and dict when it is put into another container (it is complete then in
    // what Python's pickler writes). `items` are its elements (a dict's keys and values alternating);
    // containers among them that were not reduced must not be read (their items are not in place yet).
    // Return true and set `out` (PickleValue::reduced) to put `out` in its place. When nothing else refers
    // to the container, its memo slot takes `out` too and the container's memory is reused.
    virtual bool reduce(PickleKind kind, PickleItems items, PickleValue& out) = 0;
};

// What a read may do besides building the tree.
struct PickleReadHooks {
    PickleReducer* reducer = nullptr;
    // Called about every 4 MB read and at the end with (bytes read, bytes in all); from the reading thread.
    std::function<void(std::size_t, std::size_t)> progress;
    // Checked with each progress step; when set, the read stops with PickleCancelled.
    const std::atomic<bool>* cancel = nullptr;
};

// The read was stopped through PickleReadHooks::cancel.
class PickleCancelled : public std::runtime_error {
public:
    PickleCancelled()
        : std::runtime_error("cancelled")
    {
    }
};

// Where a streamed pickle's bytes come from: read() puts up to n bytes at dst and returns how many; 0 means
// the data ended. It may throw (a read error), and the read stops with that exception.
class PickleSource {
public:
    virtual ~PickleSource() = default;
    virtual std::size_t read(char* dst, std::size_t n) = 0;
};

// Throws PickleError (with the byte offset) on anything that is not a well-formed data-only pickle.
PickleDocument readPickle(std::string bytes, const PickleLimits& limits = {});
// The same over bytes held by `owner` (a mapped file, say), which the document keeps alive.
PickleDocument readPickle(
    std::shared_ptr<const void> owner, const char* data, std::size_t size, const PickleLimits& limits = {});
PickleDocument readPickle(std::shared_ptr<const void> owner, const char* data, std::size_t size,
    const PickleReadHooks& hooks, const PickleLimits& limits = {});
// Reads the `size` bytes of `source` as they come, through a buffer of a few hundred KB, so that the pickle
// is never held whole: strings are copied as they are read. Data that ends before `size` bytes is truncated.
PickleDocument readPickle(
    PickleSource& source, std::size_t size, const PickleReadHooks& hooks, const PickleLimits& limits = {});

} // namespace memledger

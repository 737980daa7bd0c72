#include "snapshot/pickle_reader.h"

#include "support/huge_pages.h"

#include <algorithm>
#include <cstdlib>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <cstring>
#include <unordered_map>

namespace memledger {

const char* pickleKindName(PickleKind k)
{
    switch (k) {
    case PickleKind::None:
        return "None";
    case PickleKind::Bool:
        return "bool";
    case PickleKind::Int:
        return "int";
    case PickleKind::Float:
        return "float";
    case PickleKind::Str:
        return "str";
    case PickleKind::Bytes:
        return "bytes";
    case PickleKind::List:
        return "list";
    case PickleKind::Tuple:
        return "tuple";
    case PickleKind::Dict:
        return "dict";
    case PickleKind::Reduced:
        return "reduced value";
    }
    return "?";
}

std::int64_t PickleValue::asIntSlow() const
{
    switch (tag()) {
    case kTagInt:
        return static_cast<std::int64_t>(bits_) >> 3;
    case kTagSpecial:
        if (bits_ != kNone)
            return bits_ == kTrue ? 1 : 0;
        break;
    case kTagScalar:
        if (scalar()->kind == PickleKind::Int)
            return scalar()->i;
        break;
    default:
        break;
    }
    throw std::runtime_error(std::string("expected an int, found ") + pickleKindName(kind()));
}

double PickleValue::asFloat() const
{
    if (tag() == kTagScalar && scalar()->kind == PickleKind::Float)
        return scalar()->f;
    return static_cast<double>(asInt());
}

bool PickleValue::asBool() const
{
    return asInt() != 0;
}

void PickleValue::throwNotStr() const
{
    throw std::runtime_error(std::string("expected a str, found ") + pickleKindName(kind()));
}

const PickleValue* PickleValue::get(std::string_view key) const
{
    if (kind() != PickleKind::Dict)
        return nullptr;
    const PickleValue* e = container()->data;
    for (std::size_t i = container()->size; i >= 2; i -= 2) {
        const auto& k = e[i - 2];
        if (k.tag() != kTagScalar)
            continue;
        const auto* sc = k.scalar();
        if (sc->kind == PickleKind::Str && sc->size == key.size()
            && std::memcmp(sc->chars, key.data(), key.size()) == 0)
            return &e[i - 1];
    }
    return nullptr;
}

namespace {

#if defined(__SANITIZE_ADDRESS__)
#define MEMLEDGER_ARENA_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEMLEDGER_ARENA_MALLOC 1
#endif
#endif

// The arena of container items: large snapshots fill hundreds of MB of it, so on Linux it is mapped with
// huge pages where the kernel allows (far fewer page faults). Under AddressSanitizer it is plain malloc.
void* allocateArena(std::size_t bytes)
{
#if defined(__linux__) && !defined(MEMLEDGER_ARENA_MALLOC)
    if (bytes >= (std::size_t {4} << 20)) {
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            throw std::bad_alloc();
        madvise(p, bytes, MADV_HUGEPAGE);
        return p;
    }
#endif
    void* p = std::malloc(std::max<std::size_t>(bytes, 1));
    if (!p)
        throw std::bad_alloc();
    return p;
}

} // namespace

static void releaseArena(PickleValue* p, std::size_t bytes)
{
    if (!p)
        return;
#if defined(__linux__) && !defined(MEMLEDGER_ARENA_MALLOC)
    if (bytes >= (std::size_t {4} << 20)) {
        munmap(static_cast<void*>(p), bytes);
        return;
    }
#endif
    std::free(static_cast<void*>(p));
}

void* allocatePickleChunk(std::size_t bytes)
{
    void* p = std::malloc(std::max<std::size_t>(bytes, 1));
    if (!p)
        throw std::bad_alloc();
    adviseHugePages(p, bytes);
    return p;
}

// The parser's stack of values: what it needs of a vector, and its end as a pointer, so that the loop of gets
// pushes through a local copy of it.
class ValueStack {
public:
    std::size_t size() const { return static_cast<std::size_t>(end_ - slots_.data()); }
    bool empty() const { return end_ == slots_.data(); }
    PickleValue* data() { return slots_.data(); }
    PickleValue& operator[](std::size_t i) { return slots_[i]; }
    PickleValue& back() { return end_[-1]; }
    void push_back(const PickleValue& v) { *room(1) = v, ++end_; }
    void pop_back() { --end_; }
    void truncate(std::size_t n) { end_ = slots_.data() + std::min(n, size()); } // never grows
    // Makes room for at least n more values; returns where they go (the end).
    PickleValue* room(std::size_t n)
    {
        if (static_cast<std::size_t>(cap_ - end_) < n)
            grow(n);
        return end_;
    }
    void setEnd(PickleValue* end) { end_ = end; } // after writing values from the end up to `end`

private:
    [[gnu::noinline]] void grow(std::size_t n)
    {
        const std::size_t used = size();
        slots_.resize(std::max(used + n, slots_.size() * 2));
        end_ = slots_.data() + used;
        cap_ = slots_.data() + slots_.size();
    }
    std::vector<PickleValue> slots_; // its size is the capacity
    PickleValue* end_ = nullptr;
    PickleValue* cap_ = nullptr;
};

// The parser is a loop over opcodes with an explicit stack: no recursion, so nesting cannot overflow the
// C++ stack, and every declared length is checked against the bytes left before anything is allocated.
// Hidden: its calls to itself (dispatch(), once an opcode) are direct, never through the library's PLT.
class __attribute__((visibility("hidden"))) PickleParser {
public:
    PickleParser(std::shared_ptr<const void> owner, const char* data, std::size_t size, const PickleLimits& limits,
        const PickleReadHooks& hooks = {})
        : limits_(limits)
        , hooks_(hooks)
    {
        limits_.max_depth = std::min<std::uint32_t>(limits_.max_depth, 65535); // PickleContainer::depth
        doc_.bytes_ = std::move(owner);
        doc_.containers_ = std::make_unique<PickleChunks<PickleContainer>>();
        doc_.scalars_ = std::make_unique<PickleChunks<PickleScalar>>();
        data_ = reinterpret_cast<const unsigned char*>(data);
        avail_ = total_ = size;
    }

    // A streamed pickle: its bytes pass through a window that is refilled from `source`.
    PickleParser(PickleSource& source, std::size_t size, const PickleLimits& limits, const PickleReadHooks& hooks)
        : PickleParser(nullptr, nullptr, 0, limits, hooks)
    {
        source_ = &source;
        total_ = size;
        windowCapacity_ = kWindow;
        window_.reset(new unsigned char[windowCapacity_]);
        data_ = window_.get();
    }

    ~PickleParser() { releaseArena(arena_, arenaCapacity_ * sizeof(PickleValue)); }
    PickleParser(const PickleParser&) = delete;
    PickleParser& operator=(const PickleParser&) = delete;

    PickleDocument run()
    {
        stack_.room(256);
        // Every item costs at least one opcode byte, two on average in real files: reserving that much
        // address space up front spares the copies of a growing arena (pages are only touched when used).
        growArena(total_ / 2 + 16);
        memo_.reserve(std::min<std::size_t>(total_ / 8 + 16, std::size_t {1} << 24));
        adviseHugePages(memo_.data(), memo_.capacity() * sizeof(PickleValue));
        const bool hooked = hooks_.progress || hooks_.cancel;
        std::size_t nextReport = hooked ? kReportEvery : SIZE_MAX;
        for (;;) {
            if (avail_ - pos_ < kSlack && source_) // every fixed-size opcode is then whole in the window
                fill(kSlack);
            op_start_ = base_ + pos_;
            if (op_start_ >= nextReport) {
                report();
                nextReport = op_start_ + kReportEvery;
            }
            if (pos_ >= avail_)
                fail(op_start_ == 0 ? "empty file, not a pickle" : "truncated: the data ends before the STOP opcode");
            unsigned char op = data_[pos_++];
            // Memo gets, most of a snapshot, in a loop of their own; every other opcode's rule is in dispatch().
            if ((op | 2) == 'j' && avail_ - pos_ >= 4) {
                // BINGET ('h') or LONG_BINGET ('j'), one path without a branch, and the gets that follow it (most
                // of a snapshot: a frame of a stack is one) in a loop of their own. A get that is not plain goes
                // to dispatch(), which gives its error.
                // Everything the loop reads is local: the stack's end a pointer, writing through it no member.
                std::size_t p = pos_; // past the op byte
                const unsigned char* const d = data_;
                const std::size_t avail = avail_;
                const std::size_t memoSize = memo_.size();
                const PickleValue* const memo = memo_.data();
                const std::size_t used = stack_.size();
                const std::size_t room = limits_.max_stack > used ? std::min<std::size_t>(limits_.max_stack - used, 4096) : 0;
                PickleValue* const begin = stack_.room(room);
                PickleValue* top = begin;
                PickleValue* const full = begin + room;
                for (;;) { // op is a get, p past it, and 4 bytes readable from p
                    const bool shortGet = op == 'h';
                    const std::uint32_t raw = loadLE32(d + p);
                    const std::size_t idx = shortGet ? (raw & 0xffu) : raw;
                    if (idx >= memoSize || top == full) {
                        --p; // back to its op byte
                        break;
                    }
                    const PickleValue v = memo[idx];
                    if (v.bits_ == PickleValue::kUnset) {
                        --p;
                        break;
                    }
                    p += shortGet ? 1 : 4;
                    *top++ = sharedRef(v);
                    if (avail - p < 5)
                        break;
                    op = d[p];
                    if ((op | 2) != 'j')
                        break;
                    ++p;
                }
                stack_.setEnd(top);
                if (top != begin) {
                    pos_ = p;
                    continue;
                }
            }
            if (dispatch(op))
                break;
        }
        if (hooked)
            report();
        if (stack_.empty())
            fail("STOP with nothing on the stack");
        doc_.root_ = stack_.back();
        // The arena stops moving: containers can now point into it.
        doc_.arena_ = std::unique_ptr<PickleValue, PickleArenaFree>(
            arena_, PickleArenaFree {arenaCapacity_ * sizeof(PickleValue)});
        arena_ = nullptr;
        arenaCapacity_ = 0;
        const PickleValue* base = doc_.arena_.get();
        doc_.containers_->forEach([base](PickleContainer& c) {
            const PickleValue* p = base + c.offset;
            c.data = p;
        });
        return std::move(doc_);
    }

private:
    static constexpr std::size_t kReportEvery = std::size_t {4} << 20;
    static constexpr std::size_t kWindow = std::size_t {256} << 10; // a streamed pickle's buffer
    static constexpr std::size_t kSlack = 16; // more than any fixed-size opcode takes

    // Makes n bytes from pos_ readable (a streamed pickle: the rest of the window moves to its start and the
    // source refills it, the window growing when n is larger); false when the data ends first.
    bool fill(std::size_t n)
    {
        if (avail_ - pos_ >= n)
            return true;
        if (!source_)
            return false;
        const std::size_t keep = avail_ - pos_;
        if (n > windowCapacity_) {
            const std::size_t cap = std::max(n, windowCapacity_ * 2);
            std::unique_ptr<unsigned char[]> w(new unsigned char[cap]);
            std::memcpy(w.get(), data_ + pos_, keep);
            window_ = std::move(w);
            windowCapacity_ = cap;
        } else if (keep > 0 && pos_ > 0) {
            std::memmove(window_.get(), data_ + pos_, keep);
        }
        data_ = window_.get();
        base_ += pos_;
        pos_ = 0;
        avail_ = keep;
        while (avail_ < windowCapacity_ && base_ + avail_ < total_) {
            const std::size_t want = std::min(windowCapacity_ - avail_, total_ - (base_ + avail_));
            const std::size_t got = source_->read(reinterpret_cast<char*>(window_.get() + avail_), want);
            if (got == 0) { // the data ended early: it is truncated from here
                total_ = base_ + avail_;
                break;
            }
            avail_ += std::min(got, want);
        }
        return avail_ - pos_ >= n;
    }
    std::size_t leftInData() const { return total_ - (base_ + pos_); }
    // std::endian is C++20; the Debian build is C++17 (GCC and Clang predefine the byte order).
    static constexpr bool kBigEndian = __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__;
    static std::uint64_t fromLE(std::uint64_t v)
    {
        if constexpr (kBigEndian)
            v = __builtin_bswap64(v);
        return v;
    }
    static std::uint32_t loadLE32(const unsigned char* p)
    {
        std::uint32_t v;
        std::memcpy(&v, p, sizeof v);
        if constexpr (kBigEndian)
            v = __builtin_bswap32(v);
        return v;
    }

    [[noreturn]] void fail(const std::string& reason) const { throw PickleError(op_start_, reason); }

    void report()
    {
        if (hooks_.cancel && hooks_.cancel->load(std::memory_order_relaxed))
            throw PickleCancelled();
        if (hooks_.progress)
            hooks_.progress(base_ + pos_, total_);
    }

    // A second reference to a container (a memo get, DUP): it can no longer be reused when reduced. The one
    // rule of a get, for dispatch() and the loop of gets in run().
    static const PickleValue& sharedRef(const PickleValue& v)
    {
        if (v.isContainerKind())
            v.container()->flags |= PickleContainer::kShared;
        return v;
    }
    void pushShared(const PickleValue& v) { stack_.push_back(sharedRef(v)); }

    // Offers the container items[i] (about to be put into a container with the others of `items`) to the
    // reducer; true when it took it. A reduced container's memo slot takes the reduced value; when nothing
    // else refers to it (one memo slot at most, never pushed twice, never put anywhere else) it is released
    // (releaseReduced): its items' room at the arena's end is given back, and the next new container reuses it.
    bool reduceItem(PickleValue* items, std::size_t n, std::size_t i)
    {
        PickleValue& v = items[i];
        PickleContainer* c = v.container();
        PickleValue out;
        if (!hooks_.reducer->reduce(c->kind, PickleItems(arena_ + c->offset, c->size), out)) {
            c->flags |= PickleContainer::kConsumed;
            return false;
        }
        // Later references through the memo get the reduced value (the same for the reducer).
        if (c->memo != 0 && c->memo != UINT32_MAX && memo_[c->memo - 1].bits_ == v.bits_)
            memo_[c->memo - 1] = out;
        if (!(c->flags & (PickleContainer::kShared | PickleContainer::kConsumed)) && c->memo != UINT32_MAX)
            released_.push_back(c);
        if (c->flags & PickleContainer::kShared)
            for (std::size_t j = i + 1; j < n; ++j) // the same container again in this batch
                if (items[j].bits_ == v.bits_)
                    items[j] = out;
        v = out;
        return true;
    }
    void releaseReduced()
    {
        for (std::size_t i = released_.size(); i-- > 0;) {
            PickleContainer* c = released_[i];
            if (c->capacity > 0 && c->offset + c->capacity == arenaSize_)
                arenaSize_ = c->offset;
            freeContainers_.push_back(c);
        }
        released_.clear();
    }

    static std::string hex(unsigned char op)
    {
        static const char* d = "0123456789abcdef";
        return std::string("0x") + d[op >> 4] + d[op & 15];
    }

    void need(std::uint64_t n)
    {
        if (n > avail_ - pos_ && (n > leftInData() || !fill(static_cast<std::size_t>(n))))
            fail("truncated: the opcode needs " + std::to_string(n) + " bytes, " + std::to_string(leftInData())
                + " are left");
    }
    std::uint64_t readLE(int n)
    {
        need(static_cast<std::uint64_t>(n));
        std::uint64_t v = 0;
        for (int i = n - 1; i >= 0; --i)
            v = (v << 8) | data_[pos_ + static_cast<std::size_t>(i)];
        pos_ += static_cast<std::size_t>(n);
        return v;
    }
    // A declared length must fit in the bytes that are left: a huge one is an error, never an allocation.
    std::size_t declaredLength(int width)
    {
        std::uint64_t n = readLE(width);
        if (n > leftInData())
            fail("declared length " + std::to_string(n) + " is larger than the " + std::to_string(leftInData())
                + " bytes left");
        return static_cast<std::size_t>(n);
    }

    void push(const PickleValue& v)
    {
        if (stack_.size() >= limits_.max_stack)
            failStackFull();
        stack_.push_back(v);
    }
    [[noreturn]] void failStackFull() const
    {
        fail("more than " + std::to_string(limits_.max_stack) + " values on the stack");
    }
    PickleValue pop()
    {
        if (stack_.size() <= markFloor())
            fail("stack underflow");
        PickleValue v = stack_.back();
        stack_.pop_back();
        return v;
    }
    PickleValue& top()
    {
        if (stack_.size() <= markFloor())
            fail("stack underflow");
        return stack_.back();
    }
    std::size_t markFloor() const { return marks_.empty() ? 0 : marks_.back(); }
    std::size_t popMark()
    {
        if (marks_.empty())
            fail("no MARK to close");
        auto m = marks_.back();
        marks_.pop_back();
        return m;
    }

    static PickleValue bits(std::uint64_t b)
    {
        PickleValue v;
        v.bits_ = b;
        return v;
    }
    PickleValue newContainer(PickleKind k)
    {
        PickleContainer* reused = nullptr;
        if (!freeContainers_.empty()) {
            reused = freeContainers_.back();
            freeContainers_.pop_back();
        }
        auto& c = reused ? *reused : doc_.containers_->emplace_back();
        c = PickleContainer {};
        c.kind = k;
        return bits(reinterpret_cast<std::uint64_t>(&c));
    }
    PickleValue newScalar(const PickleScalar& sc)
    {
        auto& r = doc_.scalars_->emplace_back();
        r = sc;
        return bits(reinterpret_cast<std::uint64_t>(&r) | PickleValue::kTagScalar);
    }
    PickleValue integer(std::int64_t i)
    {
        if (i >= -PickleValue::kSmallIntLimit && i < PickleValue::kSmallIntLimit)
            return bits((static_cast<std::uint64_t>(i) << 3) | PickleValue::kTagInt);
        PickleScalar sc;
        sc.kind = PickleKind::Int;
        sc.i = i;
        return newScalar(sc);
    }
    PickleValue real(double f)
    {
        PickleScalar sc;
        sc.kind = PickleKind::Float;
        sc.f = f;
        return newScalar(sc);
    }
    // Appends n values to a container's slice of the arena. A fresh container takes exactly n slots at the end;
    // a container that grows again either extends in place (it is last) or moves to the end with twice the
    // room, so long lists built in batches of 1000 stay linear.
    void append(PickleContainer& c, PickleValue* src, std::size_t n)
    {
        if (n == 0)
            return;
        std::uint32_t depth = c.depth;
        for (std::size_t i = 0; i < n; ++i) {
            const PickleValue& v = src[i];
            if (!v.isContainerKind())
                continue;
            if (v.container() == &c)
                fail("a container put inside itself (a recursive structure, which a snapshot never holds)");
            if (hooks_.reducer && reduceItem(src, n, i))
                continue;
            v.container()->flags |= PickleContainer::kConsumed; // no longer changed (mutableOf)
            std::uint32_t d = v.container()->depth + 1u;
            if (d > limits_.max_depth)
                fail("nesting deeper than " + std::to_string(limits_.max_depth) + " levels");
            depth = std::max(depth, d);
        }
        if (!released_.empty())
            releaseReduced();
        c.depth = static_cast<std::uint16_t>(depth);
        if (static_cast<std::uint64_t>(c.size) + n > UINT32_MAX)
            fail("a container with more than 4 billion items");
        if (c.size + n > c.capacity) {
            std::size_t need = c.size + n;
            if (c.capacity > 0 && c.offset + c.capacity == arenaSize_) {
                std::size_t cap = std::max(need, static_cast<std::size_t>(c.capacity) * 2);
                reserveArena(c.offset + cap);
                arenaSize_ = c.offset + cap;
                c.capacity = static_cast<std::uint32_t>(cap);
            } else {
                std::size_t cap = c.capacity == 0 ? need : std::max(need, static_cast<std::size_t>(c.capacity) * 2);
                std::size_t off = arenaSize_;
                reserveArena(off + cap);
                arenaSize_ = off + cap;
                std::copy(arena_ + c.offset, arena_ + c.offset + c.size, arena_ + off);
                c.offset = off;
                c.capacity = static_cast<std::uint32_t>(cap);
            }
        }
        std::copy(src, src + n, arena_ + c.offset + c.size);
        c.size += static_cast<std::uint32_t>(n);
    }
    void reserveArena(std::size_t n)
    {
        if (n > arenaCapacity_)
            growArena(std::max(n, arenaCapacity_ * 2));
    }
    void growArena(std::size_t n)
    {
        if (n > SIZE_MAX / sizeof(PickleValue) / 2)
            throw std::bad_alloc();
        auto* p = static_cast<PickleValue*>(allocateArena(n * sizeof(PickleValue)));
        if (arenaSize_ > 0)
            std::memcpy(static_cast<void*>(p), static_cast<const void*>(arena_), arenaSize_ * sizeof(PickleValue));
        releaseArena(arena_, arenaCapacity_ * sizeof(PickleValue));
        arena_ = p;
        arenaCapacity_ = n;
    }

    void appendFromStack(PickleContainer& c, std::size_t first)
    {
        append(c, stack_.data() + first, stack_.size() - first);
        stack_.truncate(first);
    }

    PickleValue tupleFrom(std::size_t first)
    {
        auto t = newContainer(PickleKind::Tuple);
        appendFromStack(*t.container(), first);
        return t;
    }
    PickleContainer& mutableOf(PickleValue& target, PickleKind want, const char* opname)
    {
        if (target.kind() != want)
            fail(std::string(opname) + " on a " + pickleKindName(target.kind()) + ", expected a "
                + pickleKindName(want));
        // A container already inside another is complete in what Python's pickler writes: growing it now would
        // nest deeper than its parents' depth says (the depth limit bypassed) or make a cycle.
        if (target.container()->flags & PickleContainer::kConsumed)
            fail(std::string(opname) + " on a " + pickleKindName(want)
                + " already inside another container (a recursive or re-nested structure)");
        return *target.container();
    }

    // The memo: slots 0..n in a vector, as Python's pickler numbers them (one after another); a slot far past
    // them (a hand-made BINPUT or LONG_BINPUT) in a map of its own, so that the vector never grows by more than
    // the puts made so far: a 5-byte opcode never makes a memo of gigabytes.
    void memoPut(std::uint64_t idx)
    {
        if (stack_.size() <= markFloor())
            fail("memo put with an empty stack");
        if (idx > total_) // a pickle cannot define more memo entries than it has bytes
            fail("memo index " + std::to_string(idx) + " is out of range");
        const PickleValue& v = stack_.back();
        ++puts_;
        const bool far = idx >= memo_.size() && idx + 1 > 2 * puts_ + 1024;
        if (far) {
            farMemo_[idx] = v;
        } else {
            if (idx == memo_.size()) // MEMOIZE, and what Python's pickler numbers the same way
                memo_.push_back(bits(PickleValue::kUnset));
            else if (idx > memo_.size())
                memo_.resize(static_cast<std::size_t>(idx) + 1, bits(PickleValue::kUnset));
            memo_[idx] = v;
            if (!farMemo_.empty())
                farMemo_.erase(idx);
        }
        if (v.isContainerKind()) { // its slot takes its reduced value (reduceItem): a far one never does
            auto& m = v.container()->memo;
            m = m == 0 && !far && idx < UINT32_MAX - 1 ? static_cast<std::uint32_t>(idx + 1) : UINT32_MAX;
        }
    }
    void memoGet(std::uint64_t idx)
    {
        const PickleValue* v = idx < memo_.size() && memo_[idx].bits_ != PickleValue::kUnset ? &memo_[idx] : nullptr;
        if (!v && !farMemo_.empty())
            if (auto it = farMemo_.find(idx); it != farMemo_.end())
                v = &it->second;
        if (!v)
            fail("memo index " + std::to_string(idx) + " was never stored");
        if (stack_.size() >= limits_.max_stack)
            failStackFull();
        pushShared(*v);
    }

    // LONG1 / LONG4: two's complement, little-endian. Up to 64 bits signed is an int; an unsigned 64-bit value
    // (real snapshots write a frame's unknown line as 18446744073709551615, 9 bytes) keeps its 64 bits, so that
    // it reads back as -1 and as an address as the same bits; anything wider becomes a float (its value,
    // rounded), so that one odd field never refuses the whole file.
    PickleValue longValue(std::size_t n)
    {
        if (n == 0)
            return integer(0);
        need(n);
        const unsigned char* p = data_ + pos_;
        pos_ += n;
        if (n <= 8) { // the common case (addresses take 7 or 8 bytes)
            std::uint64_t v = 0;
            if (avail_ - (pos_ - n) >= 8) { // one load; the bytes past n are shifted out
                std::memcpy(&v, p, 8);
                v = fromLE(v);
            } else {
                for (std::size_t i = n; i-- > 0;)
                    v = (v << 8) | p[i];
            }
            return longOfBits(v, n);
        }
        bool negative = (p[n - 1] & 0x80) != 0;
        std::size_t used = n;
        while (used > 1 && p[used - 1] == (negative ? 0xff : 0x00) && ((p[used - 2] & 0x80) != 0) == negative)
            --used;
        const bool unsigned64 = !negative && used == 9 && p[8] == 0x00;
        if (used <= 8 || unsigned64) {
            std::uint64_t v = negative ? ~std::uint64_t {0} : 0;
            for (std::size_t i = 0; i < std::min<std::size_t>(used, 8); ++i) {
                v &= ~(std::uint64_t {0xff} << (8 * i));
                v |= std::uint64_t {p[i]} << (8 * i);
            }
            return integer(static_cast<std::int64_t>(v));
        }
        double value = 0;
        for (std::size_t i = n; i-- > 0;)
            value = value * 256.0 + static_cast<double>(negative ? static_cast<unsigned char>(~p[i]) : p[i]);
        PickleScalar sc;
        sc.kind = PickleKind::Float;
        sc.f = negative ? -(value + 1.0) : value;
        return newScalar(sc);
    }

    // The int of a LONG1 or LONG4 of n bytes (1 to 8) whose little-endian bytes, and any after them, are `bits`:
    // the top byte sign-extended.
    PickleValue longOfBits(std::uint64_t bits, std::size_t n)
    {
        const unsigned shift = static_cast<unsigned>(64 - 8 * n);
        return integer(static_cast<std::int64_t>(bits << shift) >> shift);
    }

    PickleValue text(PickleKind k, std::size_t n)
    {
        PickleScalar sc;
        sc.kind = k;
        sc.size = n;
        if (!source_) { // the document owns all the bytes: point into them
            sc.chars = reinterpret_cast<const char*>(data_ + pos_);
            pos_ += n;
        } else {
            char* to = newText(n);
            sc.chars = to;
            while (n > 0) {
                if (pos_ == avail_ && !fill(1))
                    fail("truncated: the data ends inside a string");
                const std::size_t k = std::min(n, avail_ - pos_);
                std::memcpy(to, data_ + pos_, k);
                to += k;
                pos_ += k;
                n -= k;
            }
        }
        return newScalar(sc);
    }
    // Room for a streamed string: blocks of 64 KB, a larger string a block of its own.
    char* newText(std::size_t n)
    {
        constexpr std::size_t kBlock = std::size_t {64} << 10;
        if (n > textLeft_) {
            if (n >= kBlock / 4) {
                doc_.texts_.emplace_back(new char[std::max<std::size_t>(n, 1)]);
                return doc_.texts_.back().get();
            }
            doc_.texts_.emplace_back(new char[kBlock]);
            textAt_ = doc_.texts_.back().get();
            textLeft_ = kBlock;
        }
        char* p = textAt_;
        textAt_ += n;
        textLeft_ -= n;
        return p;
    }

    bool dispatch(unsigned char op)
    {
        switch (op) {
        case 0x80: { // PROTO
            auto v = readLE(1);
            if (v > 5)
                fail("unsupported pickle protocol " + std::to_string(v) + " (2 to 5 are read)");
            doc_.protocol_ = static_cast<int>(v);
            return false;
        }
        case 0x95: { // FRAME: a length prefix we only check
            auto n = readLE(8);
            if (n > leftInData())
                fail("frame of " + std::to_string(n) + " bytes is larger than the " + std::to_string(leftInData())
                    + " bytes left");
            return false;
        }
        case '.':
            return true; // STOP
        case '(': // MARK
            if (marks_.size() >= limits_.max_depth)
                fail("more than " + std::to_string(limits_.max_depth) + " nested MARKs");
            marks_.push_back(stack_.size());
            return false;
        case '}':
            push(newContainer(PickleKind::Dict));
            return false;
        case ']':
            push(newContainer(PickleKind::List));
            return false;
        case ')':
            push(newContainer(PickleKind::Tuple));
            return false;
        case 0x8f:
            push(newContainer(PickleKind::List));
            return false; // EMPTY_SET: read as a list
        case 'N':
            push(PickleValue());
            return false;
        case 0x88:
            push(bits(PickleValue::kTrue));
            return false;
        case 0x89:
            push(bits(PickleValue::kFalse));
            return false;
        case 'J':
            push(integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(readLE(4)))));
            return false;
        case 'K':
            push(integer(static_cast<std::int64_t>(readLE(1))));
            return false;
        case 'M':
            push(integer(static_cast<std::int64_t>(readLE(2))));
            return false;
        case 0x8a: { // LONG1
            auto n = declaredLength(1);
            push(longValue(n));
            return false;
        }
        case 0x8b: { // LONG4
            auto n = declaredLength(4);
            push(longValue(n));
            return false;
        }
        case 'G': { // BINFLOAT, big-endian
            need(8);
            std::uint64_t bits = 0;
            for (int i = 0; i < 8; ++i)
                bits = (bits << 8) | data_[pos_ + static_cast<std::size_t>(i)];
            pos_ += 8;
            double d;
            std::memcpy(&d, &bits, sizeof d);
            push(real(d));
            return false;
        }
        case 0x8c:
            push(text(PickleKind::Str, declaredLength(1)));
            return false; // SHORT_BINUNICODE
        case 'X':
            push(text(PickleKind::Str, declaredLength(4)));
            return false; // BINUNICODE
        case 0x8d:
            push(text(PickleKind::Str, declaredLength(8)));
            return false; // BINUNICODE8
        case 'U':
            push(text(PickleKind::Str, declaredLength(1)));
            return false; // SHORT_BINSTRING
        case 'T':
            push(text(PickleKind::Str, declaredLength(4)));
            return false; // BINSTRING
        case 'C':
            push(text(PickleKind::Bytes, declaredLength(1)));
            return false; // SHORT_BINBYTES
        case 'B':
            push(text(PickleKind::Bytes, declaredLength(4)));
            return false; // BINBYTES
        case 0x8e:
            push(text(PickleKind::Bytes, declaredLength(8)));
            return false; // BINBYTES8
        case 0x96:
            push(text(PickleKind::Bytes, declaredLength(8)));
            return false; // BYTEARRAY8
        case 0x94:
            memoPut(memo_.size());
            return false; // MEMOIZE
        case 'q':
            memoPut(readLE(1));
            return false; // BINPUT
        case 'r':
            memoPut(readLE(4));
            return false; // LONG_BINPUT
        case 'h':
            memoGet(readLE(1));
            return false; // BINGET
        case 'j':
            memoGet(readLE(4));
            return false; // LONG_BINGET
        case '0':
            pop();
            return false; // POP
        case '1':
            stack_.truncate(popMark());
            return false; // POP_MARK
        case '2': {
            auto v = top();
            if (stack_.size() >= limits_.max_stack)
                failStackFull();
            pushShared(v);
            return false; // DUP
        }
        case 0x85: { // TUPLE1
            if (stack_.size() < markFloor() + 1)
                fail("stack underflow");
            auto t = tupleFrom(stack_.size() - 1);
            push(t);
            return false;
        }
        case 0x86:
        case 0x87: { // TUPLE2, TUPLE3
            std::size_t n = op == 0x86 ? 2 : 3;
            if (stack_.size() < markFloor() + n)
                fail("stack underflow");
            auto t = tupleFrom(stack_.size() - n);
            push(t);
            return false;
        }
        case 't': { // TUPLE
            auto t = tupleFrom(popMark());
            push(t);
            return false;
        }
        case 'l': { // LIST
            auto first = popMark();
            auto l = newContainer(PickleKind::List);
            appendFromStack(*l.container(), first);
            push(l);
            return false;
        }
        case 'd': { // DICT
            auto first = popMark();
            if ((stack_.size() - first) % 2 != 0)
                fail("DICT with an odd number of items");
            auto d = newContainer(PickleKind::Dict);
            appendFromStack(*d.container(), first);
            push(d);
            return false;
        }
        case 'a': { // APPEND
            auto v = pop();
            auto& c = mutableOf(top(), PickleKind::List, "APPEND");
            append(c, &v, 1);
            return false;
        }
        case 'e': // APPENDS
        case 0x90: { // ADDITEMS (sets are read as lists)
            auto first = popMark();
            if (first == 0 || first <= markFloor())
                fail("APPENDS without a list below the MARK");
            auto& c = mutableOf(stack_[first - 1], PickleKind::List, op == 'e' ? "APPENDS" : "ADDITEMS");
            appendFromStack(c, first);
            return false;
        }
        case 0x91: { // FROZENSET
            auto first = popMark();
            auto l = newContainer(PickleKind::List);
            appendFromStack(*l.container(), first);
            push(l);
            return false;
        }
        case 's': { // SETITEM
            auto v = pop();
            auto k = pop();
            auto& c = mutableOf(top(), PickleKind::Dict, "SETITEM");
            PickleValue kv[2] = {k, v};
            append(c, kv, 2);
            return false;
        }
        case 'u': { // SETITEMS
            auto first = popMark();
            if (first == 0 || first <= markFloor())
                fail("SETITEMS without a dict below the MARK");
            if ((stack_.size() - first) % 2 != 0)
                fail("SETITEMS with an odd number of items");
            auto& c = mutableOf(stack_[first - 1], PickleKind::Dict, "SETITEMS");
            appendFromStack(c, first);
            return false;
        }
        default:
            break;
        }
        const char* name = refusedName(op);
        if (name)
            fail(std::string("refused opcode ") + name + " (" + hex(op)
                + "): this pickle imports or calls Python code, which memledger never runs");
        fail("unknown or unsupported pickle opcode " + hex(op));
    }

    static const char* refusedName(unsigned char op)
    {
        switch (op) {
        case 'c':
            return "GLOBAL";
        case 0x93:
            return "STACK_GLOBAL";
        case 'R':
            return "REDUCE";
        case 'b':
            return "BUILD";
        case 'i':
            return "INST";
        case 'o':
            return "OBJ";
        case 0x81:
            return "NEWOBJ";
        case 0x92:
            return "NEWOBJ_EX";
        case 'P':
            return "PERSID";
        case 'Q':
            return "BINPERSID";
        case 0x82:
            return "EXT1";
        case 0x83:
            return "EXT2";
        case 0x84:
            return "EXT4";
        case 0x97:
            return "NEXT_BUFFER";
        case 0x98:
            return "READONLY_BUFFER";
        default:
            return nullptr;
        }
    }

    PickleLimits limits_;
    PickleReadHooks hooks_;
    PickleDocument doc_;
    std::vector<PickleContainer*> freeContainers_; // reduced and released, to be reused
    std::vector<PickleContainer*> released_;
    const unsigned char* data_ = nullptr; // the window: all the bytes, or a streamed pickle's buffer
    std::size_t avail_ = 0; // bytes in the window
    std::size_t pos_ = 0; // in the window
    std::size_t base_ = 0; // offset of the window's start in the data
    std::size_t total_ = 0; // bytes in all (less when a streamed pickle ends early)
    PickleSource* source_ = nullptr;
    std::unique_ptr<unsigned char[]> window_;
    std::size_t windowCapacity_ = 0;
    char* textAt_ = nullptr;
    std::size_t textLeft_ = 0;
    std::size_t op_start_ = 0;
    ValueStack stack_;
    std::vector<std::size_t> marks_;
    std::vector<PickleValue> memo_;
    std::unordered_map<std::uint64_t, PickleValue> farMemo_; // slots far past memo_'s end (memoPut)
    std::uint64_t puts_ = 0;
    PickleValue* arena_ = nullptr; // handed to the document at STOP
    std::size_t arenaSize_ = 0;
    std::size_t arenaCapacity_ = 0;
};

void PickleArenaFree::operator()(PickleValue* p) const
{
    releaseArena(p, bytes);
}

PickleDocument readPickle(std::string bytes, const PickleLimits& limits)
{
    auto owned = std::make_shared<const std::string>(std::move(bytes));
    return PickleParser(owned, owned->data(), owned->size(), limits).run();
}

PickleDocument readPickle(
    std::shared_ptr<const void> owner, const char* data, std::size_t size, const PickleLimits& limits)
{
    return PickleParser(std::move(owner), data, size, limits).run();
}

PickleDocument readPickle(std::shared_ptr<const void> owner, const char* data, std::size_t size,
    const PickleReadHooks& hooks, const PickleLimits& limits)
{
    return PickleParser(std::move(owner), data, size, limits, hooks).run();
}

PickleDocument readPickle(
    PickleSource& source, std::size_t size, const PickleReadHooks& hooks, const PickleLimits& limits)
{
    return PickleParser(source, size, limits, hooks).run();
}

} // namespace memledger

#include "snapshot/snapshot.h"
#include "snapshot/frames.h"
#include "snapshot/snapshot_ledgers.h"

#include "support/huge_pages.h"
#include "support/atomic_file.h"
#include "support/errors.h"
#include "snapshot/pickle_reader.h"
#include "support/node_recycler.h"
#include "support/second_thread.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#if defined(__linux__)
#endif
#include <fstream>
#include <functional>
#include <memory_resource>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <unordered_map>

namespace memledger {

namespace {

// The structure is wrong (a pickle, but not a snapshot); becomes a FileError naming the file.
struct ShapeError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::int64_t intOr(const PickleValue& d, std::string_view key, std::int64_t fallback)
{
    const PickleValue* v = d.get(key);
    if (!v || v->isNone())
        return fallback;
    if (!v->isNumber())
        throw ShapeError("'" + std::string(key) + "' is a " + pickleKindName(v->kind()) + ", not a number");
    if (v->kind() != PickleKind::Float)
        return v->asInt();
    // A float where an int belongs (or an integer wider than 64 bits, which the reader gives as a float):
    // its value when it fits, else the fallback.
    double f = v->asFloat();
    return std::isfinite(f) && f > -9.2e18 && f < 9.2e18 ? static_cast<std::int64_t>(f) : fallback;
}

std::string strOr(const PickleValue& d, std::string_view key, std::string_view fallback = {})
{
    const PickleValue* v = d.get(key);
    if (!v || !(v->isStr() || v->kind() == PickleKind::Bytes))
        return std::string(fallback);
    return std::string(v->asStr());
}

const PickleValue& requireList(const PickleValue* v, const char* what)
{
    if (!v || !v->isSequence())
        throw ShapeError(std::string(what) + " is missing or not a list");
    return *v;
}

SnapshotFrame frameOf(const PickleValue& f)
{
    SnapshotFrame out;
    if (!f.isDict())
        return out;
    out.filename = strOr(f, "filename");
    out.line = intOr(f, "line", 0);
    out.name = fxFrameName(strOr(f, "name"), strOr(f, "fx_node_name"), strOr(f, "fx_node_target"));
    return out;
}

BlockState stateOf(std::string_view s)
{
    if (s == "active_allocated")
        return BlockState::ActiveAllocated;
    if (s == "active_pending_free")
        return BlockState::ActivePendingFree;
    if (s == "inactive")
        return BlockState::Inactive;
    return BlockState::Other;
}

// The inverse of actionName(): the trace spells actions as memledger names them.
bool actionOf(std::string_view s, Action& a)
{
    for (int i = 0; i <= static_cast<int>(Action::Snapshot); ++i)
        if (s == actionName(static_cast<Action>(i))) {
            a = static_cast<Action>(i);
            return true;
        }
    return false;
}

// Types of the values SnapshotReducer makes of containers while the pickle is read (PickleValue::reducedType).
enum ReducedType : unsigned { kFrameValue = 1, kStackValue = 2, kRowValue = 3, kSkippedValue = 4 };

// A trace's call stacks, interned: each frame once, each stack once (report/call_stacks.h), and each stack's
// allocation site (snapshot/frames.h) worked out once.
class StackTables {
public:
    explicit StackTables(Trace& t)
        : strings_(t.strings)
        , stacks_(t.stacks)
    {
    }

    std::uint32_t frame(std::string_view file, std::int64_t line, std::string_view name)
    {
        return stacks_.internFrame(strings_.intern(file), line, strings_.intern(name));
    }
    std::uint32_t stack(const std::vector<std::uint32_t>& frames) { return stacks_.internStack(frames); }
    std::uint32_t where(std::uint32_t stack)
    {
        if (stack == 0)
            return 0;
        if (stack >= where_.size())
            where_.resize(std::max<std::size_t>(stack + 1, where_.size() * 2), kUnknown);
        if (where_[stack] == kUnknown) {
            views_.clear();
            for (const auto* f = stacks_.begin(stack); f != stacks_.end(stack); ++f) {
                const auto& fr = stacks_.frame(*f);
                views_.push_back({strings_.at(fr.file), fr.line, strings_.at(fr.name)});
            }
            auto site = allocationSite(views_);
            where_[stack] = site.empty() ? 0u : strings_.intern(site);
        }
        return where_[stack];
    }

    // A frames value as the finished tree holds it: a stack the reducer made, or a list of frames it did not
    // take (an odd item among them: it reads as an empty frame).
    std::uint32_t stackOfTree(const PickleValue* frames)
    {
        if (!frames)
            return 0;
        if (frames->isReduced())
            return frames->reducedType() == kStackValue ? frames->reducedId() : 0;
        if (!frames->isSequence() || frames->items().empty())
            return 0;
        std::vector<std::uint32_t> ids;
        ids.reserve(frames->items().size());
        for (const auto& f : frames->items())
            ids.push_back(frameOfTree(f));
        return stack(ids);
    }
    std::uint32_t frameOfTree(const PickleValue& f)
    {
        if (f.isReduced())
            return f.reducedType() == kFrameValue ? f.reducedId() : frame({}, 0, {});
        if (!f.isDict())
            return frame({}, 0, {});
        return frame(strOr(f, "filename"), intOr(f, "line", 0),
            fxFrameName(strOr(f, "name"), strOr(f, "fx_node_name"), strOr(f, "fx_node_target")));
    }

    std::vector<std::uint32_t> frameIds(std::uint32_t stack) const
    {
        return {stacks_.begin(stack), stacks_.end(stack)};
    }
    SnapshotFrame snapshotFrame(std::uint32_t id) const
    {
        const auto& fr = stacks_.frame(id);
        return {strings_.at(fr.file), fr.line, strings_.at(fr.name)};
    }

private:
    static constexpr std::uint32_t kUnknown = UINT32_MAX;
    StringTable& strings_;
    CallStacks& stacks_;
    std::vector<std::uint32_t> where_;
    std::vector<FrameView> views_;
};

// Frames of a block or segment: a reduced stack, or a list of frames (reduced or not).
std::vector<SnapshotFrame> framesOf(const PickleValue* frames, StackTables& tables)
{
    std::vector<SnapshotFrame> out;
    if (!frames)
        return out;
    if (frames->isReduced()) {
        if (frames->reducedType() == kStackValue)
            for (auto id : tables.frameIds(frames->reducedId()))
                out.push_back(tables.snapshotFrame(id));
        return out;
    }
    if (!frames->isSequence())
        return out;
    out.reserve(frames->items().size());
    for (const auto& f : frames->items()) {
        if (f.isReduced())
            out.push_back(f.reducedType() == kFrameValue ? tables.snapshotFrame(f.reducedId()) : SnapshotFrame {});
        else
            out.push_back(frameOf(f));
    }
    return out;
}

// A trace entry's row waits in the trace's columns with its device still to be told when the entry has no
// `device` field: the index of the list it is in.
constexpr std::int8_t kDeviceOfList = -128;
constexpr std::int64_t kNoDevice = INT64_MIN;
// The action of torch.cuda.memory._annotate_tensor's entries (Snapshot::tensor_annotations).
constexpr std::string_view kAnnotateAction = "annotate";

// Slots of the keys the decoder reads in trace entries and frames.
// Entry keys come before kName, frame keys from kName on (the reducer tells frames from entries by them).
enum KeySlot : int { kAction, kAddr, kSize, kStream, kTime, kFrames, kDevice, kDeviceFree, kUserMetadata,
    kCompileContext, kName, kFilename, kLine, kFxNodeOp, kFxNodeName, kFxNodeTarget, kFxOriginalTrace, kSlotCount,
    kOtherKey = kSlotCount };

// Knows keys by where their bytes are: keys are memoized strings in what Python writes, so after the first
// comparison a key is one pointer probe.
// What a string read from the pickle means, remembered by where its bytes are: a memoized string (a dict key,
// an action name) is the same bytes every time, so each is worked out once. Open addressing on the address,
// never evicting; a string met when the table is half full is worked out each time.
template <typename T> class TextMeaning {
public:
    template <typename F> T get(std::string_view text, F&& workOut)
    {
        const auto p = reinterpret_cast<std::uintptr_t>(text.data());
        std::size_t i = static_cast<std::size_t>((p * 0x9e3779b97f4a7c15ULL) >> 58); // 64 slots
        for (;; i = (i + 1) % kSlots) {
            Entry& e = table_[i];
            if (e.ptr == text.data() && e.len == text.size() && e.ptr)
                return e.value;
            if (!e.ptr)
                break;
        }
        T value = workOut(text);
        if (used_ < kSlots / 2 && text.data()) {
            table_[i] = {text.data(), text.size(), value};
            ++used_;
        }
        return value;
    }

private:
    static constexpr std::size_t kSlots = 64;
    struct Entry {
        const char* ptr = nullptr;
        std::size_t len = 0;
        T value {};
    };
    Entry table_[kSlots];
    std::size_t used_ = 0;
};

class KeySlots {
public:
    int slotOf(std::string_view text)
    {
        return meaning_.get(text, [](std::string_view t) {
            static const std::pair<std::string_view, int> kNames[] = {
                {"action", kAction},
                {"addr", kAddr},
                {"size", kSize},
                {"stream", kStream},
                {"time_us", kTime},
                {"frames", kFrames},
                {"device", kDevice},
                {"device_free", kDeviceFree},
                {"user_metadata", kUserMetadata},
                {"compile_context", kCompileContext},
                {"name", kName},
                {"filename", kFilename},
                {"line", kLine},
                {"fx_node_op", kFxNodeOp},
                {"fx_node_name", kFxNodeName},
                {"fx_node_target", kFxNodeTarget},
                {"fx_original_trace", kFxOriginalTrace},
            };
            for (const auto& [name, slot] : kNames)
                if (t == name)
                    return slot;
            return static_cast<int>(kOtherKey);
        });
    }

private:
    TextMeaning<int> meaning_;
};

// The inverse of actionName(), remembered by where the action's bytes are (memoized strings).
class ActionNames {
public:
    bool find(std::string_view name, Action& a)
    {
        const int found = meaning_.get(name, [](std::string_view t) {
            Action act = Action::Alloc;
            return actionOf(t, act) ? static_cast<int>(act) : -1;
        });
        if (found < 0)
            return false;
        a = static_cast<Action>(found);
        return true;
    }

private:
    TextMeaning<int> meaning_;
};

std::int64_t numberOr(const PickleValue* v, const char* what, std::int64_t fallback)
{
    if (!v || v->isNone())
        return fallback;
    if (v->kind() == PickleKind::Float) {
        double f = v->asFloat();
        return std::isfinite(f) && f > -9.2e18 && f < 9.2e18 ? static_cast<std::int64_t>(f) : fallback;
    }
    if (!v->isInt())
        throw ShapeError(
            std::string("'") + what + "' of a trace entry is a " + pickleKindName(v->kind()) + ", not a number");
    return v->asInt();
}

// A trace entry's user_metadata or compile_context as a string id of `strings`; 0 for none: absent, not a
// string, "" (and compile_context's "N/A", PyTorch's word for none). Never fails.
std::uint32_t contextText(const PickleValue* v, bool compile, StringTable& strings)
{
    if (!v || !v->isStr())
        return 0;
    const std::string_view t = v->asStr();
    if (t.empty() || (compile && t == "N/A"))
        return 0;
    return strings.intern(t);
}

TraceContext contextOf(const PickleValue* userMetadata, const PickleValue* compileContext, StringTable& strings)
{
    return {contextText(userMetadata, false, strings), contextText(compileContext, true, strings)};
}

// Where trace entries become rows of the trace (time_ns holding time_us until all are read). Rows wait in blocks
// of a few thousand; while the pickle is read, a second thread (where there is a core for it) puts full blocks
// into the trace's columns and the stream column, in order: those pushes and their fresh pages are up to a fifth
// of the reading. finish() puts in the rest and waits; the columns are read only after it. Meanwhile the reading
// thread keeps to the trace's strings and call stacks, which the second never touches.
class TraceRows {
public:
    TraceRows(Trace& t, StreamColumn& streams, TraceContextColumn& contexts)
        : trace(t)
        , streams_(streams)
        , contexts_(contexts)
    {
    }
    ~TraceRows() { stop(); } // after an error: the rows waiting are dropped
    TraceRows(const TraceRows&) = delete;
    TraceRows& operator=(const TraceRows&) = delete;

    Trace& trace; // its strings and stacks; its columns once finish() returns
    std::size_t untimed = 0; // rows without a time_us
    std::vector<bool> untimedRow; // which rows, filled from the first one on (a timed file holds none)

    std::size_t size() const { return size_; }
    std::uint32_t push(std::int64_t timeUs, bool timed, std::int64_t size, std::uint64_t addr, Action a,
        std::int8_t device, std::uint64_t stream, std::uint32_t stack, std::uint32_t where, TraceContext context)
    {
        const std::size_t i = size_++;
        if (current_.empty())
            current_.reserve(kBlock);
        current_.push_back({timed ? timeUs : 0, std::max<std::int64_t>(0, size), addr, stream, stack, where, a, device});
        if (context.user_metadata != 0 || context.compile_context != 0)
            contexts_.set(i, context);
        if (!timed) {
            ++untimed;
            untimedRow.resize(i + 1, false);
            untimedRow[i] = true;
        }
        if (current_.size() == kBlock || finished_)
            handOver();
        return static_cast<std::uint32_t>(i);
    }
    // Every row pushed so far is in the columns, and every row pushed from now on as it comes; the second
    // thread is gone. Throws what filling threw.
    void finish()
    {
        stop();
        finished_ = true;
        if (error_)
            std::rethrow_exception(std::exchange(error_, nullptr));
        fill(current_);
        current_.clear();
    }

private:
    struct Row {
        std::int64_t time;
        std::int64_t size;
        std::uint64_t addr;
        std::uint64_t stream;
        std::uint32_t stack;
        std::uint32_t where;
        Action action;
        std::int8_t device;
    };
    using Block = std::vector<Row>;
    static constexpr std::size_t kBlock = 4096, kMostWaiting = 16;

    void fill(const Block& rows)
    {
        for (const Row& r : rows) {
            const auto i = trace.push(r.time, r.size, r.addr, r.action, r.device);
            trace.where[i] = r.where;
            trace.stack[i] = r.stack;
            streams_.push_back(r.stream);
        }
    }
    // The current block to the second thread (started with the first full block), or into the columns here.
    void handOver()
    {
        if (!filler_.joinable() && !finished_ && !threadless_) {
            filler_ = secondThread([this] { run(); });
            threadless_ = !filler_.joinable(); // none to be had: filled here
        }
        if (!filler_.joinable()) {
            fill(current_);
            current_.clear();
            return;
        }
        std::unique_lock<std::mutex> lock(m_);
        changed_.wait(lock, [&] { return full_.size() < kMostWaiting || error_; });
        if (error_) { // filling failed: finish() says so; the rows are no longer kept
            current_.clear();
            return;
        }
        full_.push_back(std::move(current_));
        current_ = Block();
        if (!spare_.empty()) {
            current_ = std::move(spare_.back());
            spare_.pop_back();
        }
        changed_.notify_all();
    }
    void run()
    {
        std::unique_lock<std::mutex> lock(m_);
        for (;;) {
            changed_.wait(lock, [&] { return done_ || !full_.empty(); });
            if (full_.empty() || (done_ && dropping_))
                return;
            Block rows = std::move(full_.front());
            full_.pop_front();
            changed_.notify_all();
            lock.unlock();
            try {
                fill(rows);
            } catch (...) {
                lock.lock();
                error_ = std::current_exception();
                full_.clear();
                changed_.notify_all();
                return;
            }
            rows.clear();
            lock.lock();
            spare_.push_back(std::move(rows));
        }
    }
    // Lets the second thread fill what waits (or drops it, from the destructor) and waits for it to end.
    void stop()
    {
        if (!filler_.joinable())
            return;
        {
            std::lock_guard<std::mutex> lock(m_);
            done_ = true;
            dropping_ = std::uncaught_exceptions() > 0;
        }
        changed_.notify_all();
        filler_.join();
    }

    StreamColumn& streams_;
    TraceContextColumn& contexts_;
    std::size_t size_ = 0; // rows pushed
    Block current_;
    std::mutex m_;
    std::condition_variable changed_;
    std::deque<Block> full_; // waiting for the second thread, oldest first
    std::vector<Block> spare_; // emptied by it, to be filled again
    bool done_ = false, dropping_ = false; // guarded by m_
    bool finished_ = false, threadless_ = false;
    std::exception_ptr error_;
    std::thread filler_;
};

// Adds "device_traces[].KEY" to the keys read past, once.
void noteIgnoredEntryKey(std::vector<std::string>& ignored, std::string_view key)
{
    std::string name = "device_traces[]." + std::string(key);
    if (std::find(ignored.begin(), ignored.end(), name) == ignored.end())
        ignored.push_back(std::move(name));
}

// Reads the snapshot while the pickle is read: a frame dict becomes an interned frame, a list of them an
// interned stack, a trace entry a row of the trace, so that a million entries never exist as a tree. What it
// does not take (odd types, an oom entry, a float time) stays in the tree for decodeTraces, which reads it
// the same way and gives the errors.
class SnapshotReducer : public PickleReducer {
public:
    SnapshotReducer(StackTables& tables, TraceRows& rows, std::vector<std::string>& ignoredKeys)
        : tables_(tables)
        , rows_(rows)
        , ignored_(ignoredKeys)
    {
    }

    bool reduce(PickleKind kind, PickleItems items, PickleValue& out) override
    {
        if (kind == PickleKind::Dict)
            return reduceDict(items, out);
        // Frames lists are most of a snapshot: one pass without a branch per frame. Other lists (the trace's
        // million rows) are told by their first item.
        if (items.empty() || !items[0].isReduced() || items[0].reducedType() != kFrameValue)
            return false;
        ids_.resize(items.size());
        bool frames = true;
        for (std::size_t i = 0; i < items.size(); ++i) {
            const PickleValue& v = items[i];
            frames &= v.isReduced() & (v.reducedType() == kFrameValue);
            ids_[i] = v.reducedId();
        }
        if (!frames)
            return false;
        out = PickleValue::reduced(kStackValue, tables_.stack(ids_));
        return true;
    }

private:
    static bool intField(const PickleValue* v, std::int64_t& out)
    {
        if (!v || v->isNone())
            return true; // the default stays
        if (!v->isInt())
            return false;
        out = v->asInt();
        return true;
    }
    static std::string_view text(const PickleValue* v)
    {
        if (!v || !(v->isStr() || v->kind() == PickleKind::Bytes))
            return {};
        return v->asStr();
    }

    bool reduceDict(PickleItems items, PickleValue& out)
    {
        if (items.empty())
            return false;
        const PickleValue* f[kSlotCount] = {};
        bool other = false;
        const std::size_t nKeys = items.size() / 2;
        bool same = nKeys == layoutCount_;
        for (std::size_t i = 0; same && i < nKeys; ++i)
            same = items[2 * i].sameAs(layoutKeys_[i]);
        if (same) { // the keys of the dict before: a trace entry after a trace entry
            for (std::size_t i = 0; i < nKeys; ++i) {
                if (layoutSlots_[i] != kOtherKey)
                    f[layoutSlots_[i]] = &items[2 * i + 1];
                else
                    other = true;
            }
        } else {
            otherKeys_.clear();
            for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
                const PickleValue& k = items[i];
                if (!k.isStr())
                    return false;
                int slot = keys_.slotOf(k.asStr());
                if (slot == kOtherKey) {
                    other = true;
                    otherKeys_.push_back(k.asStr());
                } else {
                    f[slot] = &items[i + 1];
                }
                if (i / 2 < kLayoutKeys) {
                    layoutKeys_[i / 2] = k;
                    layoutSlots_[i / 2] = static_cast<std::int8_t>(slot);
                }
            }
            layoutCount_ = nKeys <= kLayoutKeys ? nKeys : SIZE_MAX;
            if (f[kAction]) // a trace entry's keys that memledger reads past (pool_id, forward_frames)
                for (auto key : otherKeys_)
                    noteIgnoredEntryKey(ignored_, key);
        }
        if (f[kAction])
            return reduceEntry(f, out);
        if (other || !(f[kName] || f[kFilename] || f[kLine]))
            return false;
        for (int s = kAction; s < kName; ++s)
            if (f[s])
                return false;
        std::int64_t line = 0;
        if (!intField(f[kLine], line))
            return false;
        std::string_view name = text(f[kName]);
        if (f[kFxNodeName] || f[kFxNodeTarget]) { // fx_node_op and fx_original_trace are read past
            fxName_ = fxFrameName(name, text(f[kFxNodeName]), text(f[kFxNodeTarget]));
            name = fxName_;
        }
        out = PickleValue::reduced(kFrameValue, tables_.frame(text(f[kFilename]), line, name));
        return true;
    }

    bool reduceEntry(const PickleValue* const* f, PickleValue& out)
    {
        if (!f[kAction]->isStr())
            return false;
        Action a = Action::Alloc;
        if (!actions_.find(f[kAction]->asStr(), a)) {
            if (f[kAction]->asStr() == kAnnotateAction)
                return false; // rare: decodeTraces reads it from the tree
            out = PickleValue::reduced(kSkippedValue, 0);
            return true;
        }
        if (a == Action::Oom || rows_.size() >= UINT32_MAX - 1)
            return false;
        std::int64_t time = 0, size = 0, addr = 0, stream = 0, device = kNoDevice;
        const bool timed = f[kTime] && !f[kTime]->isNone();
        if (!intField(f[kTime], time) || !intField(f[kSize], size) || !intField(f[kAddr], addr)
            || !intField(f[kStream], stream) || !intField(f[kDevice], device))
            return false;
        if (device == kNoDevice)
            device = kDeviceOfList;
        else if (device < -1 || device > 127)
            return false;
        std::uint32_t stack = 0;
        if (const PickleValue* fr = f[kFrames]) {
            if (fr->isReduced())
                stack = fr->reducedType() == kStackValue ? fr->reducedId() : 0;
            else if (fr->isSequence() && fr->containerSize() > 0)
                return false; // frames it could not read: the tree's reading says what they are
        }
        auto row = rows_.push(time, timed, size, static_cast<std::uint64_t>(addr), a, static_cast<std::int8_t>(device),
            static_cast<std::uint64_t>(stream), stack, tables_.where(stack),
            {contextId(f[kUserMetadata], false, userMetadata_), contextId(f[kCompileContext], true, compileContext_)});
        out = PickleValue::reduced(kRowValue, row);
        return true;
    }

    // A user_metadata or compile_context value as a string id, remembered by where its bytes are (the writer
    // memoizes them: one probe per entry).
    std::uint32_t contextId(const PickleValue* v, bool compile, TextMeaning<std::uint32_t>& known)
    {
        if (!v || !v->isStr())
            return 0;
        return known.get(
            v->asStr(), [&](std::string_view) { return contextText(v, compile, rows_.trace.strings); });
    }

    StackTables& tables_;
    TraceRows& rows_;
    KeySlots keys_;
    TextMeaning<std::uint32_t> userMetadata_;
    TextMeaning<std::uint32_t> compileContext_;
    // The keys of the last dict reduced and their slots: trace entries all have the same keys, the same
    // memoized strings, so one comparison per key finds the slots again.
    static constexpr std::size_t kLayoutKeys = 12;
    PickleValue layoutKeys_[kLayoutKeys];
    std::int8_t layoutSlots_[kLayoutKeys] = {};
    std::size_t layoutCount_ = SIZE_MAX; // each layout slot is right for its key, even after a refused dict
    ActionNames actions_;
    std::vector<std::uint32_t> ids_;
    std::vector<std::string>& ignored_;
    std::vector<std::string_view> otherKeys_;
    std::string fxName_;
};

// The rows of one trace of the file, in list order, with the list each is in: device_traces' lists (list d is
// device d) or host_traces (every row on kHostDevice).
struct TracePart {
    struct Ref {
        std::uint32_t row;
        std::uint32_t list;
    };
    std::vector<Ref> order;
    std::vector<std::pair<std::uint32_t, std::int64_t>> oomFree; // row, device_free
    std::size_t nonEmpty = 0; // lists with entries
    int device = kDeviceOfList; // kHostDevice: every row's device, whatever its entry says
};

// An `annotate` entry as read, before the trace's clock and the allocation it names are known.
struct PendingAnnotation {
    std::int64_t time_us = 0;
    bool timed = false;
    std::uint64_t addr = 0;
    std::int64_t device = kNoDevice; // kNoDevice: its list's
    std::string text;
    std::uint32_t stack = 0;
};

enum class EntryKind { Row, Skipped, Annotation };

// Makes a row of a trace entry: the row the reducer made, or the entry read from the tree (its errors are
// ShapeErrors). Skipped: an action memledger does not know; Annotation: an `annotate` entry, read into `ann`.
EntryKind entryRow(const PickleValue& e, TraceRows& rows, StackTables& tables, KeySlots& keys, ActionNames& actions,
    std::vector<std::string>& ignored, std::uint32_t& row, std::vector<std::pair<std::uint32_t, std::int64_t>>& oomFree,
    PendingAnnotation& ann)
{
    if (e.isReduced() && e.reducedType() == kRowValue) {
        row = e.reducedId();
        return EntryKind::Row;
    }
    if (e.isReduced() && (e.reducedType() == kSkippedValue || e.reducedType() == kFrameValue))
        return EntryKind::Skipped;
    if (!e.isDict())
        throw ShapeError("a trace entry is not a dict");
    const PickleValue* f[kSlotCount] = {};
    const auto items = e.entries();
    for (std::size_t i = 0; i + 1 < items.size(); i += 2)
        if (items[i].isStr()) {
            if (int slot = keys.slotOf(items[i].asStr()); slot != kOtherKey)
                f[slot] = &items[i + 1];
            else
                noteIgnoredEntryKey(ignored, items[i].asStr());
        }
    Action a = Action::Alloc;
    if (f[kAction] && f[kAction]->isStr() && f[kAction]->asStr() == kAnnotateAction) {
        try { // an annotation of another shape is skipped, never fatal
            const PickleValue* t = f[kTime];
            ann.timed = t && t->isNumber();
            ann.time_us = ann.timed ? numberOr(t, "time_us", 0) : 0;
            ann.addr = static_cast<std::uint64_t>(numberOr(f[kAddr], "addr", 0));
            ann.device = numberOr(f[kDevice], "device", kNoDevice);
            if (ann.device != kNoDevice && (ann.device < -1 || ann.device > 127))
                return EntryKind::Skipped; // as a row naming such a device would be refused
            const PickleValue* um = f[kUserMetadata];
            if (!um || !um->isStr() || um->asStr().empty())
                return EntryKind::Skipped; // an annotation without its text names nothing
            ann.text = std::string(um->asStr());
            ann.stack = tables.stackOfTree(f[kFrames]);
        } catch (const ShapeError&) {
            return EntryKind::Skipped;
        }
        return EntryKind::Annotation;
    }
    if (!f[kAction] || !f[kAction]->isStr() || !actions.find(f[kAction]->asStr(), a))
        return EntryKind::Skipped;
    const PickleValue* t = f[kTime];
    const bool timed = t && t->isNumber();
    std::int64_t timeUs = timed ? numberOr(t, "time_us", 0) : 0;
    auto device = numberOr(f[kDevice], "device", kNoDevice);
    if (device == kNoDevice)
        device = kDeviceOfList;
    else if (device < -1 || device > 127)
        throw ShapeError("a trace entry names device " + std::to_string(device));
    std::int64_t size = numberOr(f[kSize], "size", 0);
    std::uint64_t addr = a == Action::Oom ? 0 : static_cast<std::uint64_t>(numberOr(f[kAddr], "addr", 0));
    auto stream = static_cast<std::uint64_t>(numberOr(f[kStream], "stream", 0));
    auto stack = tables.stackOfTree(f[kFrames]);
    row = rows.push(timeUs, timed, size, addr, a, static_cast<std::int8_t>(device), stream, stack, tables.where(stack),
        contextOf(f[kUserMetadata], f[kCompileContext], rows.trace.strings));
    if (a == Action::Oom)
        oomFree.push_back({row, numberOr(f[kDeviceFree], "device_free", 0)});
    return EntryKind::Row;
}

// Makes `out`'s trace of `part`'s rows of `trace` (in place when `inPlace`: the rows the reducer made are then
// the device traces' own, gathered only when another order or rows of another trace say so); lists of several
// devices merged on one clock; partners, out-of-memory events, times from the trace's start.
void finishTrace(TracePart& part, std::shared_ptr<Trace> trace, TraceRows& rows, Snapshot& src, Snapshot& out,
    bool inPlace, std::set<int>& devices)
{
    rows.finish(); // every row in the columns
    using Ref = TracePart::Ref;
    auto& order = part.order;
    bool inOrder = inPlace;
    for (std::size_t k = 0; inOrder && k < order.size(); ++k)
        inOrder = order[k].row == k;
    inOrder = inOrder && order.size() == trace->size();
    bool timed = true;
    if (rows.untimed > 0)
        for (const auto& r : order)
            if (r.row < rows.untimedRow.size() && rows.untimedRow[r.row]) {
                timed = false;
                break;
            }

    // Devices are recorded in separate ring buffers: merge them on one clock (list order without times).
    if (part.nonEmpty > 1 && timed) {
        std::stable_sort(order.begin(), order.end(),
            [&](const Ref& a, const Ref& b) { return trace->time_ns[a.row] < trace->time_ns[b.row]; });
        inOrder = false;
    }
    auto deviceOf = [&](std::int8_t dev, std::uint32_t list) {
        if (part.device != kDeviceOfList)
            return static_cast<std::int8_t>(part.device);
        return dev == kDeviceOfList ? static_cast<std::int8_t>(list) : dev;
    };
    if (inOrder) {
        for (const auto& r : order)
            trace->device[r.row] = deviceOf(trace->device[r.row], r.list);
    } else {
        // Rows in another order, twice, or not at all (entries outside these lists): gather them.
        auto t = std::make_shared<Trace>();
        t->strings = trace->strings;
        t->stacks = trace->stacks;
        t->reserve(order.size());
        StreamColumn streams;
        streams.reserve(order.size());
        TraceContextColumn contexts;
        std::vector<std::int32_t> newIndex(trace->size(), -1);
        for (const auto& r : order) {
            auto i = t->push(trace->time_ns[r.row], trace->bytes[r.row], trace->address[r.row],
                trace->action[r.row], deviceOf(trace->device[r.row], r.list));
            t->where[i] = trace->where[r.row];
            t->stack[i] = trace->stack[r.row];
            streams.push_back(src.trace_stream[r.row]);
            if (const auto& c = src.trace_context[r.row]; c.user_metadata != 0 || c.compile_context != 0)
                contexts.set(i, c);
            newIndex[r.row] = static_cast<std::int32_t>(i);
        }
        for (auto& [row, free] : part.oomFree)
            row = newIndex[row] < 0 ? UINT32_MAX : static_cast<std::uint32_t>(newIndex[row]);
        if (inPlace)
            *trace = std::move(*t);
        else
            trace = std::move(t);
        out.trace_stream = std::move(streams);
        out.trace_context = std::move(contexts);
    }

    // One pass in time order: devices, alloc/free partners, out-of-memory events, times from the start.
    auto& oomFree = part.oomFree;
    std::size_t nextOom = 0;
    std::sort(oomFree.begin(), oomFree.end());
    NodeRecycler nodes; // hash nodes: allocs and frees churn them
    std::pmr::unordered_map<std::uint64_t, std::int32_t> openAlloc(&nodes); // (device, addr) -> alloc event
    openAlloc.reserve(4096);
    std::int64_t lastDevice = -128;
    std::int64_t minTime = INT64_MAX;
    const std::size_t n = trace->size();
    for (std::size_t i = 0; i < n; ++i) {
        const Action a = trace->action[i];
        const std::int64_t device = trace->device[i];
        if (device != lastDevice) {
            devices.insert(static_cast<int>(device));
            lastDevice = device;
        }
        minTime = std::min(minTime, trace->time_ns[i]);
        const std::uint64_t addr = trace->address[i];
        const std::uint64_t key = (static_cast<std::uint64_t>(device & 0xff) << 56) ^ addr;
        if (a == Action::Alloc) {
            openAlloc[key] = static_cast<std::int32_t>(i);
        } else if (a == Action::Free) {
            auto it = openAlloc.find(key);
            if (it != openAlloc.end()) {
                trace->partner[i] = it->second;
                trace->partner[static_cast<std::size_t>(it->second)] = static_cast<std::int32_t>(i);
                openAlloc.erase(it);
            } // else: allocated before the trace began
        } else if (a == Action::Oom) {
            while (nextOom < oomFree.size() && oomFree[nextOom].first < i)
                ++nextOom;
            SnapshotOom oom;
            oom.device = static_cast<int>(device);
            oom.bytes_requested = trace->bytes[i];
            oom.device_free = nextOom < oomFree.size() && oomFree[nextOom].first == i ? oomFree[nextOom].second : 0;
            oom.time_ns = static_cast<std::int64_t>(i); // made a time below
            oom.where = trace->strings.at(trace->where[i]);
            out.ooms.push_back(std::move(oom));
        }
    }

    out.trace_has_time = timed && n > 0;
    out.trace_start_us = out.trace_has_time ? minTime : 0;
    for (std::size_t i = 0; i < n; ++i)
        trace->time_ns[i] = out.trace_has_time // wrapping, never undefined, for a damaged file's times
            ? static_cast<std::int64_t>(
                (static_cast<std::uint64_t>(trace->time_ns[i]) - static_cast<std::uint64_t>(minTime)) * 1000u)
            : static_cast<std::int64_t>(i) * 1000;
    for (auto& oom : out.ooms)
        oom.time_ns = trace->time_ns[static_cast<std::size_t>(oom.time_ns)];
    // Never shrunk to fit: the columns were reserved for the most entries the file could hold, and the pages
    // past the last entry were never touched, so they take no memory; copying them smaller would (twice).
    out.trace = std::move(trace);
}

// Puts the `annotate` entries on the trace's clock and finds the allocation each names: the one at its address
// on its device, allocated at or before it and not yet freed (kBeforeTrace: none in the trace, so one made
// before the trace began). One pass over the trace, looking up only the addresses annotated.
void resolveAnnotations(std::vector<PendingAnnotation>& pending, Snapshot& s)
{
    if (pending.empty())
        return;
    using Key = std::pair<int, std::uint64_t>;
    std::vector<TensorAnnotation> out(pending.size());
    std::set<Key> wanted;
    for (std::size_t k = 0; k < pending.size(); ++k) {
        auto& p = pending[k];
        auto& a = out[k];
        a.address = p.addr;
        a.device = static_cast<int>(p.device); // -1..127, or its list's index
        // Untimed (or a trace without times): after every event, so the last allocation at the address.
        a.time_ns = p.timed && s.trace_has_time
            ? static_cast<std::int64_t>(
                (static_cast<std::uint64_t>(p.time_us) - static_cast<std::uint64_t>(s.trace_start_us)) * 1000u)
            : INT64_MAX;
        a.text = std::move(p.text);
        a.stack = p.stack;
        wanted.insert({a.device, a.address});
    }
    std::stable_sort(out.begin(), out.end(),
        [](const TensorAnnotation& a, const TensorAnnotation& b) { return a.time_ns < b.time_ns; });
    std::map<Key, std::uint32_t> live;
    std::size_t next = 0;
    auto settle = [&](std::int64_t before) {
        for (; next < out.size() && out[next].time_ns < before; ++next)
            if (auto it = live.find({out[next].device, out[next].address}); it != live.end())
                out[next].event = it->second;
    };
    if (s.trace) {
        const Trace& t = *s.trace;
        for (std::size_t i = 0; i < t.size(); ++i) {
            settle(t.time_ns[i]); // an annotation at the time of an alloc comes after it
            const Key key {t.device[i], t.address[i]};
            if (t.action[i] == Action::Alloc && wanted.count(key))
                live[key] = static_cast<std::uint32_t>(i);
            else if (t.action[i] == Action::Free)
                live.erase(key);
        }
    }
    settle(INT64_MAX);
    for (; next < out.size(); ++next) // untimed ones
        if (auto it = live.find({out[next].device, out[next].address}); it != live.end())
            out[next].event = it->second;
    s.tensor_annotations = std::move(out);
}

// Makes the snapshot's trace of its device_traces lists (`traces`, may be null) and its host's of host_traces
// (`hostTraces`, may be null): rows the reducer made and entries left in the tree, in list order. A device list
// of another shape fails the file; a host entry of another shape is counted in host_skipped and left out.
void decodeTraces(const PickleValue* traces, const PickleValue* hostTraces, Snapshot& s, Snapshot* host,
    std::shared_ptr<Trace> trace, TraceRows& rows, StackTables& tables)
{
    KeySlots keys;
    ActionNames actions;
    TracePart gpu;
    std::uint32_t lists = 0;
    std::size_t entries = 0;
    if (traces)
        for (const auto& dev : traces->items()) {
            if (!dev.isSequence())
                throw ShapeError("device_traces[" + std::to_string(lists) + "] is not a list");
            gpu.nonEmpty += !dev.items().empty();
            entries += dev.items().size();
            ++lists;
        }
    gpu.order.reserve(entries);
    std::set<int> devices(s.devices.begin(), s.devices.end());
    for (std::uint32_t d = 0; d < lists; ++d)
        devices.insert(static_cast<int>(d)); // one list per device, even an empty one
    std::vector<PendingAnnotation> annotated;
    PendingAnnotation ann;
    if (traces) {
        std::uint32_t d = 0;
        for (const auto& dev : traces->items()) {
            for (const auto& e : dev.items()) {
                std::uint32_t row = 0;
                switch (entryRow(e, rows, tables, keys, actions, s.ignored_keys, row, gpu.oomFree, ann)) {
                case EntryKind::Row:
                    gpu.order.push_back({row, d});
                    break;
                case EntryKind::Skipped:
                    ++s.skipped_entries;
                    break;
                case EntryKind::Annotation:
                    if (ann.device == kNoDevice)
                        ann.device = d;
                    annotated.push_back(std::move(ann));
                    ann = {};
                    break;
                }
            }
            ++d;
        }
    }
    // The host's first: the device traces' own may be gathered in place below.
    if (host && hostTraces) {
        TracePart part;
        part.device = kHostDevice;
        if (hostTraces->isSequence()) {
            part.nonEmpty = !hostTraces->items().empty();
            std::vector<std::string> hostIgnored; // the host's entries say nothing of device_traces' keys
            for (const auto& e : hostTraces->items()) {
                std::uint32_t row = 0;
                try {
                    if (entryRow(e, rows, tables, keys, actions, hostIgnored, row, part.oomFree, ann) == EntryKind::Row)
                        part.order.push_back({row, 0});
                    else
                        ++host->skipped_entries; // _annotate_tensor takes CUDA tensors only
                } catch (const ShapeError&) {
                    ++s.host_skipped;
                }
            }
        } else {
            ++s.host_skipped;
        }
        std::set<int> hostDevices {kHostDevice};
        finishTrace(part, trace, rows, s, *host, false, hostDevices);
    }
    if (traces || !gpu.order.empty()) {
        finishTrace(gpu, trace, rows, s, s, true, devices);
        s.devices.assign(devices.begin(), devices.end());
    }
    resolveAnnotations(annotated, s);
}

SnapshotSegment segmentOf(const PickleValue& s, bool& legacy, StackTables& tables)
{
    if (!s.isDict())
        throw ShapeError(std::string("a segment is a ") + pickleKindName(s.kind()) + ", not a dict");
    SnapshotSegment seg;
    seg.device = static_cast<int>(intOr(s, "device", 0));
    seg.address = static_cast<std::uint64_t>(intOr(s, "address", 0));
    seg.total_size = intOr(s, "total_size", 0);
    seg.allocated_size = intOr(s, "allocated_size", 0);
    seg.active_size = intOr(s, "active_size", 0);
    seg.requested_size = intOr(s, "requested_size", 0);
    seg.stream = static_cast<std::uint64_t>(intOr(s, "stream", 0));
    seg.segment_type = strOr(s, "segment_type");
    if (const auto* e = s.get("is_expandable"); e && e->isInt())
        seg.is_expandable = e->asBool();
    if (const auto* p = s.get("segment_pool_id"); p && p->isSequence() && p->items().size() == 2)
        for (int k = 0; k < 2; ++k)
            if (p->items()[static_cast<std::size_t>(k)].isInt())
                seg.pool_id[k] = p->items()[static_cast<std::size_t>(k)].asInt();
    if (seg.total_size < 0)
        throw ShapeError("a segment has a negative total_size");
    const PickleValue* blocks = s.get("blocks");
    if (blocks && blocks->isSequence()) {
        std::uint64_t at = seg.address;
        seg.blocks.reserve(blocks->items().size());
        for (const auto& b : blocks->items()) {
            if (!b.isDict())
                throw ShapeError("a block is not a dict");
            SnapshotBlock blk;
            blk.size = intOr(b, "size", 0);
            blk.requested_size = intOr(b, "requested_size", blk.size);
            blk.address = static_cast<std::uint64_t>(intOr(b, "address", static_cast<std::int64_t>(at)));
            blk.state = stateOf(strOr(b, "state"));
            if (const PickleValue* h = b.get("history"); h && h->isSequence()) {
                legacy = true;
                if (!h->items().empty()) {
                    const auto& last = h->items().back();
                    blk.frames = framesOf(last.get("frames"), tables);
                    if (!b.get("address"))
                        blk.address = static_cast<std::uint64_t>(intOr(last, "addr", static_cast<std::int64_t>(at)));
                }
            } else {
                blk.frames = framesOf(b.get("frames"), tables);
            }
            at = blk.address + static_cast<std::uint64_t>(std::max<std::int64_t>(blk.size, 0));
            seg.blocks.push_back(std::move(blk));
        }
    }
    return seg;
}

void decodeSettings(const PickleValue& v, SnapshotSettings& out)
{
    if (!v.isDict())
        return;
    out.present = true;
    out.conf = strOr(v, "PYTORCH_CUDA_ALLOC_CONF");
    out.max_split_size = intOr(v, "max_split_size", -1);
    if (const auto* e = v.get("expandable_segments"); e && e->isInt())
        out.expandable_segments = e->asBool();
    if (const auto* g = v.get("garbage_collection_threshold"); g && g->isNumber())
        out.garbage_collection_threshold = g->asFloat();
    if (const auto* r = v.get("roundup_power2_divisions"); r && r->isDict()) {
        const auto& e = r->entries();
        for (std::size_t i = 0; i + 1 < e.size(); i += 2) {
            std::int64_t bucket = 0;
            if (e[i].isStr())
                bucket = std::atoll(std::string(e[i].asStr()).c_str());
            else if (e[i].isInt())
                bucket = e[i].asInt();
            auto div = e[i + 1].isInt() ? e[i + 1].asInt() : 0;
            if (div > 0)
                out.roundup_power2_divisions[bucket] = static_cast<int>(div);
        }
    }
}

// external_annotations: {stage: START|END, name, device, time_us} entries; an END closes the latest open START
// of the same name on the same device. Entries of another shape are counted and left out; none fails the file.
void decodeAnnotations(const PickleValue& list, Snapshot& s)
{
    if (!list.isSequence())
        return;
    std::map<std::pair<std::string, int>, std::vector<std::size_t>> open;
    for (const auto& e : list.items()) {
        ++s.annotation_entries;
        if (!e.isDict())
            continue;
        const PickleValue* stage = e.get("stage");
        const PickleValue* name = e.get("name");
        const PickleValue* time = e.get("time_us");
        const PickleValue* device = e.get("device");
        if (!stage || !stage->isStr() || !name || !name->isStr() || !time || !time->isNumber())
            continue;
        SnapshotAnnotation a;
        a.name = std::string(name->asStr());
        a.device = device && device->isInt() ? static_cast<int>(device->asInt()) : 0;
        const auto us = time->isInt() ? time->asInt() : static_cast<std::int64_t>(time->asFloat());
        auto& stack = open[{a.name, a.device}];
        if (stage->asStr() == "START") {
            a.start_us = us;
            stack.push_back(s.annotations.size());
            s.annotations.push_back(std::move(a));
        } else if (stage->asStr() == "END" && !stack.empty()) {
            s.annotations[stack.back()].end_us = us;
            stack.pop_back();
        }
    }
    std::stable_sort(s.annotations.begin(), s.annotations.end(),
        [](const SnapshotAnnotation& a, const SnapshotAnnotation& b) { return a.start_us < b.start_us; });
}

// host_segments: PyTorch's host allocator never splits a segment (HostSegmentInfo: address, size, allocated,
// active, segment_pool_id, frames), so each is one block; a segment written with the device's keys
// (total_size, blocks) reads as one. An entry of another shape is counted in `skipped` and left out.
void decodeHostSegments(const PickleValue& list, Snapshot& host, std::int64_t& skipped, StackTables& tables)
{
    if (!list.isSequence()) {
        ++skipped;
        return;
    }
    for (const auto& v : list.items()) {
        try {
            if (!v.isDict())
                throw ShapeError("a host segment is not a dict");
            bool legacy = false;
            SnapshotSegment seg = segmentOf(v, legacy, tables);
            seg.device = kHostDevice;
            if (!v.get("total_size"))
                seg.total_size = intOr(v, "size", 0);
            if (seg.total_size < 0)
                throw ShapeError("a host segment has a negative size");
            if (!v.get("blocks")) {
                SnapshotBlock b;
                b.address = seg.address;
                b.size = b.requested_size = seg.total_size;
                auto flag = [&](const char* key) {
                    const PickleValue* f = v.get(key);
                    return f && f->isInt() && f->asBool();
                };
                b.state = flag("allocated") ? BlockState::ActiveAllocated
                    : flag("active")        ? BlockState::ActivePendingFree
                                            : BlockState::Inactive;
                b.frames = framesOf(v.get("frames"), tables);
                seg.blocks.push_back(std::move(b));
            }
            for (const auto& b : seg.blocks) {
                if (b.state == BlockState::ActiveAllocated)
                    seg.allocated_size += v.get("allocated_size") ? 0 : b.size;
                if (b.state != BlockState::Inactive)
                    seg.active_size += v.get("active_size") ? 0 : b.size;
            }
            host.segments.push_back(std::move(seg));
        } catch (const ShapeError&) {
            ++skipped;
        }
    }
}

// `trace`, `rows` and `tables` hold what the reducer made of the pickle while it was read.
Snapshot decodeTree(const PickleValue& root, Snapshot&& s, std::shared_ptr<Trace> trace, TraceRows& rows,
    StackTables& tables)
{
    bool legacy = false;
    const PickleValue* segments = nullptr;
    if (root.isSequence()) {
        s.layout = "segment-list";
        segments = &root;
    } else if (root.isDict()) {
        segments = &requireList(root.get("segments"), "'segments'");
        s.layout = root.get("allocator_settings") ? "dict" : "dict-2.1";
    } else {
        throw ShapeError(
            std::string("the pickle holds a ") + pickleKindName(root.kind()) + ", not a dict or list of segments");
    }
    std::set<int> devices;
    s.segments.reserve(segments->items().size());
    for (const auto& seg : segments->items()) {
        s.segments.push_back(segmentOf(seg, legacy, tables));
        devices.insert(s.segments.back().device);
    }
    s.devices.assign(devices.begin(), devices.end());
    if (legacy)
        s.layout = "legacy-history";
    std::shared_ptr<Snapshot> host;
    if (root.isDict()) {
        const PickleValue* t = root.get("device_traces");
        if (t && !t->isSequence())
            throw ShapeError("'device_traces' is not a list");
        const PickleValue* hs = root.get("host_segments");
        const PickleValue* ht = root.get("host_traces");
        if (hs || ht) {
            host = std::make_shared<Snapshot>();
            host->layout = s.layout;
            host->devices = {kHostDevice};
            if (hs)
                decodeHostSegments(*hs, *host, s.host_skipped, tables);
        }
        if (const PickleValue* st = root.get("allocator_settings"))
            decodeSettings(*st, s.settings);
        if (const PickleValue* a = root.get("external_annotations"))
            decodeAnnotations(*a, s);
        if (t || ht)
            decodeTraces(t, ht, s, host.get(), trace, rows, tables);
        // Top-level keys memledger reads past: newer ones.
        const auto& e = root.entries();
        for (std::size_t i = 0; i + 1 < e.size(); i += 2) {
            if (!e[i].isStr())
                continue;
            const std::string_view key = e[i].asStr();
            if (key != "segments" && key != "device_traces" && key != "allocator_settings"
                && key != "external_annotations" && key != "host_segments" && key != "host_traces")
                s.ignored_keys.push_back(std::string(key));
        }
    }
    if (trace && s.trace == trace) // the annotations first: they tell the optimizer's ranges
        assignSnapshotLedgers(*trace, s);
    if (host) {
        // The host's allocations get ledgers by the same rules, with the same record_function ranges.
        host->annotations = s.annotations;
        host->annotation_entries = s.annotation_entries;
        if (!host->trace) {
            host->trace = std::make_shared<Trace>();
        } else {
            auto ht = std::const_pointer_cast<Trace>(host->trace);
            assignSnapshotLedgers(*ht, *host);
        }
        s.host = std::move(host);
    }
    if (!s.trace) {
        s.trace = std::make_shared<Trace>();
        s.trace_stream.clear();
    }
    return std::move(s);
}

} // namespace

bool SnapshotSettings::isDefault() const
{
    return !expandable_segments && max_split_size < 0 && roundup_power2_divisions.empty()
        && garbage_collection_threshold == 0.0;
}

AllocatorSettings SnapshotSettings::toModel() const
{
    AllocatorSettings a;
    if (max_split_size > 0)
        a.max_split_size = max_split_size;
    a.expandable_segments = expandable_segments;
    // The model takes one division count for all sizes: use the most common non-zero one.
    int best = 0, bestCount = 0;
    std::map<int, int> counts;
    for (const auto& [bucket, div] : roundup_power2_divisions)
        if (++counts[div] > bestCount) {
            bestCount = counts[div];
            best = div;
        }
    a.roundup_power2_divisions = best;
    return a;
}

void TraceContextColumn::set(std::size_t row, const TraceContext& c)
{
    const std::uint64_t key = (static_cast<std::uint64_t>(c.user_metadata) << 32) | c.compile_context;
    std::uint32_t id = 0;
    if (key != 0) {
        auto [it, added] = ids_.try_emplace(key, static_cast<std::uint32_t>(values_.size()));
        if (added)
            values_.push_back(c);
        id = it->second;
    }
    if (id == 0 && row >= index_.size())
        return; // past the column's end reads as none
    if (index_.capacity() == 0 && reserve_ > row)
        index_.reserve(reserve_); // address space: pages are used as events arrive
    if (index_.size() <= row)
        index_.resize(row + 1, 0);
    index_[row] = id;
}

std::int64_t Snapshot::reservedBytes() const
{
    std::int64_t n = 0;
    for (const auto& s : segments)
        n += s.total_size;
    return n;
}

std::int64_t Snapshot::allocatedBytes() const
{
    std::int64_t n = 0;
    for (const auto& s : segments)
        for (const auto& b : s.blocks)
            if (b.state == BlockState::ActiveAllocated)
                n += b.size;
    return n;
}

std::size_t Snapshot::traceCount(Action a) const
{
    if (!trace)
        return 0;
    return static_cast<std::size_t>(std::count(trace->action.begin(), trace->action.end(), a));
}

bool looksLikePickleFile(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    char c = 0;
    return in.get(c) && static_cast<unsigned char>(c) == 0x80;
}

namespace {

// Decodes a snapshot whose pickle `read` reads with the hooks it is given; `size` is the file's size and
// `firstByte` its first byte (-1 when empty).
Snapshot decodeWith(std::size_t size, int firstByte, const std::string& name, const SnapshotReadOptions& options,
    const std::function<PickleDocument(const PickleReadHooks&)>& read)
{
    if (size == 0 || firstByte < 0)
        throw FileError(name, "empty file, not a PyTorch memory snapshot");
    if (firstByte != 0x80)
        throw FileError(name, "not a PyTorch memory snapshot: no pickle PROTO opcode (0x80) at byte 0");
    try {
        // The trace is made while the pickle is read (SnapshotReducer); the tree keeps the rest.
        Snapshot s;
        auto trace = std::make_shared<Trace>();
        // Room for as many entries as the file can hold (an entry takes at least about 48 bytes of pickle), so
        // that the columns never move while they fill: address space only, pages are used as rows arrive.
        const std::size_t expected = size / 48 + 1024;
        trace->reserve(expected);
        s.trace_stream.reserve(expected);
        s.trace_context.reserve(expected);
        TraceRows rows(*trace, s.trace_stream, s.trace_context);
        StackTables tables(*trace);
        SnapshotReducer reducer(tables, rows, s.ignored_keys);
        PickleReadHooks hooks;
        hooks.reducer = &reducer;
        hooks.progress = options.progress;
        hooks.cancel = options.cancel;
        PickleDocument doc = read(hooks);
        rows.finish(); // the rows the reducer made are in the trace's columns
        if (doc.protocol() < 2)
            throw FileError(name, "pickle protocol " + std::to_string(doc.protocol()) + " is not supported (2 to 5)");
        return decodeTree(doc.root(), std::move(s), trace, rows, tables);
    } catch (const PickleCancelled&) {
        throw Cancelled();
    } catch (const Cancelled&) {
        throw;
    } catch (const PickleError& e) {
        throw FileError(name, "damaged or unsafe pickle: " + std::string(e.what()));
    } catch (const ShapeError& e) {
        throw FileError(name,
            std::string("a Python pickle, but not a PyTorch memory snapshot (") + e.what()
                + ") nor a TorchScript model (a zip archive written by torch.jit.save)");
    } catch (const FileError&) {
        throw;
    } catch (const std::bad_alloc&) {
        throw FileError(name, "out of memory while decoding the snapshot");
    } catch (const std::exception& e) {
        throw FileError(name, std::string("not a PyTorch memory snapshot: ") + e.what());
    }
}

// A source whose first byte is read ahead (decodeWith checks it before the pickle is read).
class PeekedSource : public PickleSource {
public:
    explicit PeekedSource(PickleSource& source)
        : source_(source)
    {
        char c = 0;
        if (source_.read(&c, 1) == 1) {
            first_ = static_cast<unsigned char>(c);
            pending_ = true;
        }
    }
    int firstByte() const { return first_; }
    std::size_t read(char* dst, std::size_t n) override
    {
        if (!pending_ || n == 0)
            return source_.read(dst, n);
        pending_ = false;
        dst[0] = static_cast<char>(first_);
        return 1 + (n > 1 ? source_.read(dst + 1, n - 1) : 0);
    }

private:
    PickleSource& source_;
    int first_ = -1;
    bool pending_ = false;
};

class FileSource : public PickleSource {
public:
    explicit FileSource(FileReader& file)
        : file_(file)
    {
    }
    std::size_t read(char* dst, std::size_t n) override { return file_.read(dst, n); }

private:
    FileReader& file_;
};

} // namespace

Snapshot decodeSnapshot(std::string bytes, const std::string& name, const SnapshotReadOptions& options)
{
    auto owned = std::make_shared<const std::string>(std::move(bytes));
    const int first = owned->empty() ? -1 : static_cast<unsigned char>((*owned)[0]);
    return decodeWith(owned->size(), first, name, options,
        [&](const PickleReadHooks& hooks) { return readPickle(owned, owned->data(), owned->size(), hooks); });
}

Snapshot decodeSnapshotStream(
    PickleSource& source, std::size_t size, const std::string& name, const SnapshotReadOptions& options)
{
    PeekedSource peeked(source);
    return decodeWith(size, peeked.firstByte(), name, options,
        [&](const PickleReadHooks& hooks) { return readPickle(peeked, size, hooks); });
}

Snapshot readSnapshotFile(const std::string& path, const SnapshotReadOptions& options)
{
    // Read in pieces as it is decoded: the file is never held whole (its strings are copied as they come).
    FileReader file(path); // names the problem (missing, a directory, cannot be opened)
    FileSource source(file);
    return decodeSnapshotStream(source, file.size(), path, options);
}

std::string snapshotDeviceName(int device)
{
    if (device == kHostDevice)
        return "host (pinned)";
    if (device == -1)
        return "cpu";
    return "cuda:" + std::to_string(device);
}

const char* blockStateName(BlockState s)
{
    switch (s) {
    case BlockState::ActiveAllocated:
        return "active_allocated";
    case BlockState::ActivePendingFree:
        return "active_pending_free";
    case BlockState::Inactive:
        return "inactive";
    case BlockState::Other:
        break;
    }
    return "other";
}

} // namespace memledger

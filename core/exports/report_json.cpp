#include "report/report_summary.h"
#include "support/format.h"
#include "exports/report_json.h"
#include "whatif/whatif.h"
#include "whatif/remedies.h"
#include "exports/remedies_export.h"
#include "exports/whatif_export.h"

#include "support/atomic_file.h"
#include "support/errors.h"
#include "support/second_thread.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_contexts.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <type_traits>

namespace memledger {

namespace {
template <class T>
struct Identity { // std::type_identity is C++20; the Debian build is C++17
    using type = T;
};
} // namespace


using nlohmann::json;

namespace {

json ledgerNames()
{
    json names = json::array();
    for (int l = 0; l < kLedgerKinds; ++l)
        names.push_back(ledgerName(static_cast<Ledger>(l)));
    return names;
}

// The event columns of a report's JSON, in the order of "columns". Each is written by appendColumns (text, for
// writeReportJson) or eventsToJson (JSON values, for reportToJson): one list of the columns for both.
template <class Visit>
void forEachColumn(const Trace& t, Visit&& visit)
{
    visit("time_ns", t.time_ns);
    visit("bytes", t.bytes);
    visit("address", t.address);
    visit("action", t.action);
    visit("device", t.device);
    visit("ledger", t.ledger);
    visit("op_seq", t.op_seq);
    visit("outer_op", t.outer_op);
    visit("inner_op", t.inner_op);
    visit("where", t.where);
    visit("partner", t.partner);
    visit("stack", t.stack);
}

template <class T>
long long columnValue(T v)
{
    if constexpr (std::is_enum_v<T>)
        return static_cast<long long>(static_cast<std::underlying_type_t<T>>(v));
    else
        return static_cast<long long>(v);
}

// Everything of the events but their columns: strings, frames, stacks, names.
json eventsHead(const Trace& t)
{
    json strings = json::array();
    for (std::size_t i = 0; i < t.strings.size(); ++i)
        strings.push_back(t.strings.at(static_cast<std::uint32_t>(i)));
    // Call stacks: each frame [file, line, name] (string ids) once, each stack (frame ids, innermost first) once.
    json frames = json::array(), stacks = json::array();
    for (std::size_t f = 0; f < t.stacks.frameCount(); ++f) {
        const auto& fr = t.stacks.frame(static_cast<std::uint32_t>(f));
        frames.push_back({fr.file, fr.line, fr.name});
    }
    for (std::size_t s = 1; s < t.stacks.stackCount(); ++s)
        stacks.push_back(std::vector<std::uint32_t>(
            t.stacks.begin(static_cast<std::uint32_t>(s)), t.stacks.end(static_cast<std::uint32_t>(s))));
    json columns = json::array();
    forEachColumn(t, [&](const char* name, const auto&) { columns.push_back(name); });
    return json {{"count", t.size()}, {"strings", strings}, {"frames", frames}, {"stacks", stacks},
        {"columns", columns},
        {"action_names",
            {"alloc", "free", "free_requested", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom",
                "snapshot"}},
        {"ledger_names", ledgerNames()}};
}

json eventsToJson(const Trace& t)
{
    json e = eventsHead(t);
    forEachColumn(t, [&](const char* name, const auto& column) {
        json values = json::array();
        for (auto v : column)
            values.push_back(columnValue(v));
        e[name] = std::move(values);
    });
    return e;
}

// Decimal digits of 0 to 99, two by two.
constexpr char kDigitPairs[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                               "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                               "8081828384858687888990919293949596979899";

// `v` in decimal at `p` (as std::to_chars writes it, a little faster: most of a column's values are one digit);
// returns the end.
char* writeDecimal(char* p, std::uint64_t v)
{
    if (v < 10) {
        *p = static_cast<char>('0' + v);
        return p + 1;
    }
    static constexpr std::uint64_t kPowers[] = {0, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000,
        1000000000, 10000000000, 100000000000, 1000000000000, 10000000000000, 100000000000000, 1000000000000000,
        10000000000000000, 100000000000000000, 1000000000000000000, 10000000000000000000u};
    const int guess = (64 - __builtin_clzll(v)) * 1233 >> 12; // log10 from log2 (v >= 10), at most one too small
    char* const end = p + guess + (v >= kPowers[guess]);
    char* q = end;
    for (; v >= 100; v /= 100) {
        q -= 2;
        std::memcpy(q, kDigitPairs + (v % 100) * 2, 2);
    }
    if (v < 10) {
        *--q = static_cast<char>('0' + v);
    } else {
        q -= 2;
        std::memcpy(q, kDigitPairs + v * 2, 2);
    }
    return end;
}

template <class T> char* writeValue(char* p, T value)
{
    const long long v = columnValue(value);
    if (v >= 0)
        return writeDecimal(p, static_cast<std::uint64_t>(v));
    *p = '-';
    return writeDecimal(p + 1, static_cast<std::uint64_t>(0) - static_cast<std::uint64_t>(v));
}

// One column's text to write: its name, its values and how to write some of them.
struct ColumnText {
    const char* name;
    const void* values;
    std::size_t size;
    std::size_t perPiece; // values per piece of at most kJsonPiece bytes
    char* (*write)(const void* values, std::size_t first, std::size_t end, char* out); // ",v" each (no comma first)
};
constexpr std::size_t kJsonPiece = std::size_t {1} << 20;

template <class T> char* writeValues(const void* values, std::size_t first, std::size_t end, char* p)
{
    const T* v = static_cast<const T*>(values);
    for (std::size_t i = first; i < end; ++i) {
        if (i)
            *p++ = ',';
        p = writeValue(p, v[i]);
    }
    return p;
}

// Makes pieces 0 to n - 1 of a text (make(k, out) writes piece k at out, at most `capacity` bytes, and returns its
// size) and hands them to `sink` in order, from this thread, which makes what nobody else has taken. A second
// thread (support/second_thread.h) makes pieces ahead meanwhile: at most kSlots pieces wait.
void makePiecesInOrder(std::size_t n, std::size_t capacity, const std::function<std::size_t(std::size_t, char*)>& make,
    const JsonSink& sink)
{
    constexpr std::size_t kSlots = 4;
    struct Slot {
        std::unique_ptr<char[]> data; // never value-initialised: pages are touched as written
        std::size_t size = 0;
        bool ready = false;
    };
    std::array<Slot, kSlots> slots;
    for (auto& s : slots)
        s.data.reset(new char[capacity]);
    std::mutex m;
    std::condition_variable changed;
    std::size_t nextMake = 0, handedOn = 0; // guarded by m
    bool stop = false;
    // Takes the next piece to make when its slot is free (under the lock); n when there is none now.
    auto claim = [&] { return nextMake < n && nextMake < handedOn + kSlots ? nextMake++ : n; };
    auto makeInSlot = [&](std::unique_lock<std::mutex>& lock, std::size_t k) {
        Slot& s = slots[k % kSlots];
        lock.unlock();
        const std::size_t size = make(k, s.data.get());
        lock.lock();
        s.size = size;
        s.ready = true;
        changed.notify_all();
    };
    std::thread helper = secondThread([&] {
        std::unique_lock<std::mutex> lock(m);
        for (;;) {
            changed.wait(lock, [&] { return stop || nextMake >= n || nextMake < handedOn + kSlots; });
            const std::size_t k = stop ? n : claim();
            if (k == n)
                return;
            makeInSlot(lock, k);
        }
    });
    try {
        for (std::size_t k = 0; k < n; ++k) {
            Slot& s = slots[k % kSlots];
            std::unique_lock<std::mutex> lock(m);
            while (!s.ready) {
                if (const std::size_t ahead = claim(); ahead < n)
                    makeInSlot(lock, ahead);
                else
                    changed.wait(lock);
            }
            lock.unlock();
            sink(s.data.get(), s.size); // the helper leaves a ready slot alone
            lock.lock();
            s.ready = false;
            handedOn = k + 1;
            changed.notify_all();
        }
    } catch (...) {
        {
            std::lock_guard<std::mutex> lock(m);
            stop = true;
        }
        changed.notify_all();
        if (helper.joinable())
            helper.join();
        throw;
    }
    if (helper.joinable())
        helper.join();
}

// `,"name":[v,v,...]` for every column, as nlohmann would write them, without building them as JSON values (a
// 1,000,000-entry trace is 12 million numbers), handed to `sink` in pieces of at most about 1 MiB after `head`.
void writeColumns(const Trace& t, const std::string& head, const JsonSink& sink)
{
    sink(head.data(), head.size());
    std::vector<ColumnText> columns;
    forEachColumn(t, [&](const char* name, const auto& column) {
        using T = typename std::decay_t<decltype(column)>::value_type;
        using Number = typename std::conditional_t<std::is_enum_v<T>, std::underlying_type<T>, Identity<T>>::type;
        constexpr std::size_t kWidest = std::numeric_limits<Number>::digits10 + 3; // a comma, a sign, the digits
        columns.push_back({name, column.data(), column.size(), (kJsonPiece - 64) / kWidest, &writeValues<T>});
    });
    struct Piece {
        const ColumnText* column;
        std::size_t first, end;
    };
    std::vector<Piece> pieces;
    for (const auto& c : columns) {
        std::size_t first = 0;
        do {
            const std::size_t end = std::min(c.size, first + c.perPiece);
            pieces.push_back({&c, first, end});
            first = end;
        } while (first < c.size);
    }
    makePiecesInOrder(pieces.size(), kJsonPiece, [&](std::size_t k, char* out) {
        const Piece& piece = pieces[k];
        const ColumnText& c = *piece.column;
        char* p = out;
        if (piece.first == 0) {
            const std::size_t len = std::strlen(c.name);
            std::memcpy(p, ",\"", 2);
            std::memcpy(p + 2, c.name, len);
            std::memcpy(p + 2 + len, "\":[", 3);
            p += len + 5;
        }
        p = c.write(c.values, piece.first, piece.end, p);
        if (piece.end == c.size)
            *p++ = ']';
        return static_cast<std::size_t>(p - out);
    }, sink);
}

// The forward's tensor uses, column by column (event: the allocation; op: Trace::op_seq; op_name and module:
// string ids of the events' strings; modified: 1 when the op changed it in place), and the blocks of the model's
// output. The checkpointing what-if and the remedies of a reopened report need them; absent in reports saved
// before they were recorded.
void usesToJson(const Report& r, json& e)
{
    if (!r.forward_uses_recorded)
        return;
    json uses = {{"event", json::array()}, {"op", json::array()}, {"op_name", json::array()}, {"module", json::array()},
        {"modified", json::array()}};
    for (const auto& u : r.forward_uses) {
        uses["event"].push_back(u.event);
        uses["op"].push_back(u.op);
        uses["op_name"].push_back(u.op_name);
        uses["module"].push_back(u.module);
        uses["modified"].push_back(u.modified ? 1 : 0);
    }
    e["forward_uses"] = uses;
    e["output_events"] = r.output_events;
}

void usesFromJson(const json& e, const Trace& t, Report& r)
{
    if (!e.contains("forward_uses"))
        return;
    const auto& u = e["forward_uses"];
    auto event = u.at("event").get<std::vector<std::uint32_t>>();
    auto op = u.at("op").get<std::vector<std::uint32_t>>();
    auto name = u.at("op_name").get<std::vector<std::uint32_t>>();
    auto module = u.at("module").get<std::vector<std::uint32_t>>();
    auto modified = u.value("modified", std::vector<int>(event.size(), 0));
    if (op.size() != event.size() || name.size() != event.size() || module.size() != event.size()
        || modified.size() != event.size())
        throw std::runtime_error("forward_uses columns have different lengths");
    for (std::size_t k = 0; k < event.size(); ++k) {
        if (event[k] >= t.size() || name[k] >= t.strings.size() || module[k] >= t.strings.size())
            throw std::runtime_error("forward_uses names a missing event or string");
        r.forward_uses.push_back({event[k], op[k], name[k], module[k], modified[k] != 0});
    }
    r.output_events = e.value("output_events", std::vector<std::uint32_t> {});
    for (auto ev : r.output_events)
        if (ev >= t.size())
            throw std::runtime_error("an output names a missing event");
    r.forward_uses_recorded = true;
}

template <typename T> void readColumn(const json& e, const char* key, std::vector<T>& out, std::size_t n)
{
    out = e.at(key).get<std::vector<T>>();
    if (out.size() != n)
        throw std::runtime_error(std::string("events column '") + key + "' has the wrong length");
}

Trace eventsFromJson(const json& e)
{
    Trace t;
    auto n = e.at("count").get<std::size_t>();
    for (const auto& s : e.at("strings"))
        t.strings.intern(s.get<std::string>());
    readColumn(e, "time_ns", t.time_ns, n);
    readColumn(e, "bytes", t.bytes, n);
    readColumn(e, "address", t.address, n);
    readColumn(e, "device", t.device, n);
    readColumn(e, "op_seq", t.op_seq, n);
    readColumn(e, "outer_op", t.outer_op, n);
    readColumn(e, "inner_op", t.inner_op, n);
    readColumn(e, "where", t.where, n);
    readColumn(e, "partner", t.partner, n);
    // Call stacks (reports written before they were kept have none).
    for (const auto& f : e.value("frames", json::array())) {
        auto file = f.at(0).get<std::uint32_t>(), name = f.at(2).get<std::uint32_t>();
        if (file >= t.strings.size() || name >= t.strings.size())
            throw std::runtime_error("a call-stack frame names a missing string");
        t.stacks.internFrame(file, f.at(1).get<std::int64_t>(), name);
    }
    for (const auto& st : e.value("stacks", json::array())) {
        auto ids = st.get<std::vector<std::uint32_t>>();
        for (auto id : ids)
            if (id >= t.stacks.frameCount())
                throw std::runtime_error("a call stack names a missing frame");
        t.stacks.internStack(ids);
    }
    if (e.contains("stack"))
        readColumn(e, "stack", t.stack, n);
    else
        t.stack.assign(n, 0);
    std::vector<int> actions, ledgers;
    readColumn(e, "action", actions, n);
    readColumn(e, "ledger", ledgers, n);
    // Ledger numbers index the file's own ledger_names: a report written before a ledger was added reads the same.
    std::vector<Ledger> byNumber;
    for (const auto& name : e.value("ledger_names", ledgerNames())) {
        auto l = ledgerFromName(name.get<std::string>());
        if (!l)
            throw std::runtime_error("unknown ledger '" + name.get<std::string>() + "'");
        byNumber.push_back(*l);
    }
    for (std::size_t i = 0; i < n; ++i) {
        if (actions[i] < 0 || actions[i] > static_cast<int>(Action::Snapshot) || ledgers[i] < 0
            || static_cast<std::size_t>(ledgers[i]) >= byNumber.size())
            throw std::runtime_error("event " + std::to_string(i) + " has an unknown action or ledger");
        t.action.push_back(static_cast<Action>(actions[i]));
        t.ledger.push_back(byNumber[static_cast<std::size_t>(ledgers[i])]);
        auto p = t.partner[i];
        if (p != kNoPartner && (p < 0 || static_cast<std::size_t>(p) >= n))
            throw std::runtime_error("event " + std::to_string(i) + " points at a missing partner");
        for (auto id : {t.outer_op[i], t.inner_op[i], t.where[i]})
            if (id >= t.strings.size())
                throw std::runtime_error("event " + std::to_string(i) + " names a missing string");
        if (t.stack[i] >= t.stacks.stackCount())
            throw std::runtime_error("event " + std::to_string(i) + " names a missing call stack");
    }
    return t;
}

void snapshotToJson(const Snapshot& s, json& j)
{
    json counts = json::object();
    if (s.trace) {
        std::array<std::size_t, 256> perAction {}; // one pass over the actions, not one per action
        for (Action a : s.trace->action)
            ++perAction[static_cast<std::uint8_t>(a)];
        for (int a = 0; a <= static_cast<int>(Action::Snapshot); ++a)
            if (auto n = perAction[static_cast<std::size_t>(a)])
                counts[actionName(static_cast<Action>(a))] = n;
    }
    j["snapshot"] = {{"layout", s.layout}, {"devices", s.devices}, {"segments", s.segments.size()},
        {"reserved_bytes", s.reservedBytes()}, {"allocated_bytes", s.allocatedBytes()},
        {"trace_entries", s.trace ? s.trace->size() : 0}, {"trace_actions", counts}, {"ooms", s.ooms.size()}};
    // record_function ranges (external_annotations), in the file's microseconds and from the trace's start.
    json annotations = json::array();
    for (const auto& a : s.annotations)
        annotations.push_back({{"name", a.name}, {"device", a.device}, {"start_us", a.start_us},
            {"end_us", a.end_us >= 0 ? json(a.end_us) : json(nullptr)},
            {"start_ms", static_cast<double>(s.startNs(a)) / 1e6},
            {"end_ms", a.end_us >= 0 ? json(static_cast<double>(s.endNs(a)) / 1e6) : json(nullptr)}});
    j["snapshot"]["annotations"] = annotations;
    j["snapshot"]["annotation_entries"] = s.annotation_entries;
    // Allocations annotated after the fact (torch.cuda.memory._annotate_tensor): `annotate` entries.
    json tensorAnnotations = json::array();
    for (const auto& a : s.tensor_annotations) {
        const bool inTrace = a.event != TensorAnnotation::kBeforeTrace && s.trace;
        tensorAnnotations.push_back({{"text", a.text}, {"device", a.device}, {"address", a.address},
            {"time_ms", a.time_ns == INT64_MAX ? json(nullptr) : json(static_cast<double>(a.time_ns) / 1e6)},
            {"alloc_event", inTrace ? json(a.event) : json(nullptr)},
            {"bytes", inTrace ? json(s.trace->bytes[a.event]) : json(nullptr)}});
    }
    j["snapshot"]["tensor_annotations"] = tensorAnnotations;
    // Devices by name ("cuda:0", "host (pinned)"); `devices` stays the GPUs' indices. The host's pinned memory
    // is a device of its own: none of the GPU figures above count it.
    json names = json::array();
    for (int d : s.devices)
        names.push_back(snapshotDeviceName(d));
    if (const auto h = hostFigures(s); h.present) {
        names.push_back(snapshotDeviceName(kHostDevice));
        j["snapshot"]["host"] = {{"device", kHostDevice}, {"name", snapshotDeviceName(kHostDevice)},
            {"allocations", h.allocations}, {"allocated_bytes", h.allocated_bytes}, {"peak_bytes", h.peak_bytes},
            {"segments", h.segments}, {"reserved_bytes", h.reserved_bytes},
            {"allocated_at_end_bytes", h.allocated_at_end_bytes}, {"trace_entries", h.trace_entries},
            {"skipped", h.skipped}};
    } else if (h.skipped > 0) {
        j["snapshot"]["host"] = {{"device", kHostDevice}, {"name", snapshotDeviceName(kHostDevice)},
            {"skipped", h.skipped}};
    }
    j["snapshot"]["device_names"] = names;
    if (s.capture.present())
        j["snapshot"]["capture"] = {{"device", s.capture.device}, {"source", s.capture.source},
            {"torch", s.capture.torch}, {"steps", s.capture.steps}, {"note", s.capture.note}};
    if (s.onCpu())
        return; // a CPU capture: no caching allocator to model
    const auto c = s.allocator_check.done ? s.allocator_check : checkAllocatorModel(s);
    j["allocator_model"] = {{"unit", c.unit}, {"recorded_segment_allocs", c.recorded},
        {"reproduced_segment_allocs", c.reproduced}, {"model_segment_allocs", c.model_total},
        {"settings",
            {{"present", s.settings.present}, {"conf", s.settings.conf}, {"max_split_size", s.settings.max_split_size},
                {"expandable_segments", s.settings.expandable_segments}, {"default", s.settings.isDefault()}}},
        {"matched", c.matched}};
    if (c.departure_event >= 0)
        j["allocator_model"]["departure"] = {{"trace_entry", c.departure_event}, {"text", c.departure}};
}

} // namespace

json reportToJson(const Report& r, bool withEvents)
{
    json j;
    j["format"] = "memledger-report";
    j["version"] = kReportVersion;
    j["source"] = nameOf(r.source);
    json tensors = json::array();
    for (const auto& t : r.model.tensors)
    {
        tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", t.dtype}, {"bytes", t.bytes},
            {"kind", t.is_buffer ? "buffer" : "parameter"}});
        if (!t.is_buffer && !t.requires_grad)
            tensors.back()["requires_grad"] = false; // frozen: no gradient, no optimizer state
    }
    j["model"] = {{"path", r.model.path}, {"type", r.model.type}, {"file_bytes", r.model.file_bytes},
        {"parameter_bytes", r.model.parameter_bytes}, {"buffer_bytes", r.model.buffer_bytes},
        {"file_bytes_by_dtype", r.model.bytes_by_dtype}, {"tensors", tensors}};
    json shapes = json::array();
    for (const auto& s : r.run.input_shapes)
        shapes.push_back(s);
    json inputs = json::array(); // "2x512:int64": shape and type, as --input takes them
    for (std::size_t i = 0; i < r.run.input_shapes.size(); ++i)
        inputs.push_back(inputToString(r.run.input_shapes[i], inputTypeAt(r.run.input_types, i)));
    j["run"] = {{"input_shapes", shapes}, {"inputs", inputs}, {"input_guessed", r.run.input_guessed}, {"batch", r.run.batch},
        {"seq", r.run.seq}, {"dtype", r.run.dtype}, {"mode", r.source == ReportSource::Snapshot ? "snapshot" : nameOf(r.run.mode)}, {"device", r.run.device}, {"threads", r.run.threads},
        {"duration_ms", r.run.duration_ms}};
    if (!r.run.autocast.empty()) {
        j["run"]["autocast"] = r.run.autocast;
        j["run"]["autocast_cache"] = r.run.autocast_cache;
    }
    if (!r.run.lifetimes.empty())
        j["run"]["lifetimes"] = r.run.lifetimes;
    if (r.run.mode == RunMode::Train) {
        j["run"]["optimizer"] = r.run.optimizer;
        j["run"]["loss"] = r.run.loss;
        if (!r.run.hold_output.empty())
            j["run"]["hold_output"] = r.run.hold_output;
        // The micro-batches accumulated per optimizer step, and the samples each step sees over every rank.
        j["run"]["grad_accum"] = r.run.grad_accum;
        j["run"]["global_batch"] = globalBatch(r.run);
        j["gradient_bytes"] = r.gradient_bytes;
        j["optimizer_state_bytes"] = r.optimizer_state_bytes;
    }
    if (r.run.mode == RunMode::Generate) {
        j["run"]["new_tokens"] = r.run.new_tokens;
        j["run"]["cache"] = nameOf(r.run.cache);
        j["kv_cache_bytes"] = r.kv_cache_bytes;
    }
    if (const auto& g = r.model.generation; !g.cache.empty())
        j["model"]["generation"] = {{"cache", g.cache}, {"layers", g.layers}, {"kv_heads", g.kv_heads},
            {"head_dim", g.head_dim}, {"attention_heads", g.attention_heads}, {"vocab", g.vocab},
            {"static_cache", g.static_cache}, {"static_reason", g.static_reason}};
    if (r.run.mode == RunMode::Train || r.run.mode == RunMode::Generate) {
        json phases = json::array();
        for (const auto& p : r.phases)
            phases.push_back({{"name", p.name}, {"start_ns", p.start_ns}, {"end_ns", p.end_ns},
                {"first_event", p.first_event}, {"end_event", p.end_event}, {"peak_bytes", p.peak_bytes}});
        j["phases"] = phases;
    }
    if (const auto& par = r.run.parallel) {
        j["run"]["parallel"] = {{"gpus", par->gpus}, {"shard", par->shard}, {"param_dtype", par->param_dtype},
            {"reduce_dtype", par->reduce_dtype}, {"master_dtype", par->master_dtype}, {"units", par->units},
            {"reshard_after_forward", par->reshard_after_forward},
            {"root_reshard_after_forward", par->root_reshard_after_forward}, {"backend", par->backend}, {"rank", par->rank},
            {"resident_blocks", par->resident_blocks}, {"full_parameter_bytes", par->full_parameter_bytes},
            {"offload", par->offload}, {"host_bytes", par->host_bytes}, {"gpus_per_node", par->gpus_per_node},
            {"host_bytes_per_node", par->host_bytes * par->gpus_per_node}};
    }
    j["load_tax"] = {{"file_tensor_bytes", r.load_tax.file_tensor_bytes}, {"file_dtype", r.load_tax.file_dtype},
        {"resident_bytes", r.load_tax.resident_bytes}, {"resident_dtype", r.load_tax.resident_dtype}};
    j["weight_bytes"] = r.weight_bytes;
    j["input_bytes"] = r.input_bytes;
    j["peak_bytes"] = r.peak_bytes;
    j["peak_total_bytes"] = r.peak_total_bytes;
    j["peak_time_ns"] = r.peak_time_ns;
    j["peak_event"] = r.peak_event;
    if (r.simulated_reserved_peak_bytes > 0)
        j["simulated_gpu"] = {{"reserved_peak_bytes", r.simulated_reserved_peak_bytes},
            {"note", "simulated: the run replayed through a model of PyTorch's CUDA caching allocator"}};
    if (r.gpu) {
        json reserved = json::array();
        for (const auto& [ns, bytes] : r.gpu->reserved_over_time)
            reserved.push_back({ns, bytes});
        j["gpu"] = {{"name", r.gpu->name}, {"total_memory_bytes", r.gpu->total_memory_bytes},
            {"reserved_peak_bytes", r.gpu->reserved_peak_bytes}, {"library_bytes", r.gpu->library_bytes},
            {"reserved_over_time", reserved}};
        j["reserved_peak_bytes"] = r.gpu->reserved_peak_bytes;
    }
    // A snapshot adds its unattributed and resident ledgers to a model run's.
    const int ledgerKinds = r.source == ReportSource::Snapshot ? kLedgerKinds : kLedgerCount;
    for (int l = 0; l < ledgerKinds; ++l) {
        const auto& f = r.ledgers[static_cast<std::size_t>(l)];
        j["ledgers"][ledgerName(static_cast<Ledger>(l))] = {{"at_peak", f.at_peak}, {"total", f.total}, {"max", f.max}};
    }
    json layers = json::array();
    for (const auto& l : r.layers) {
        layers.push_back({{"path", l.path}, {"name", l.name}, {"type", l.type}, {"parent", l.parent},
            {"depth", l.depth}, {"weight_bytes", l.weight_bytes}, {"activation_bytes", l.activation_bytes},
            {"temporary_peak_bytes", l.temporary_peak_bytes}, {"peak_bytes", l.peak_bytes}, {"calls", l.calls},
            {"output_shapes", l.output_shapes}});
        if (r.run.mode == RunMode::Train || r.source == ReportSource::Snapshot) {
            auto& lj = layers.back();
            lj["gradient_bytes"] = l.gradient_bytes;
            lj["saved_activation_bytes"] = l.saved_activation_bytes;
            lj["backward_temporary_peak_bytes"] = l.backward_temporary_peak_bytes;
            lj["backward_peak_bytes"] = l.backward_peak_bytes;
            lj["forward_ns"] = l.forward_ns;
        }
        if (l.largest_block_bytes > 0)
            layers.back()["largest_block_bytes"] = l.largest_block_bytes;
    }
    j["layers"] = layers;
    json alive = json::array();
    for (const auto& a : r.alive_at_peak)
        alive.push_back({{"bytes", a.bytes}, {"ledger", ledgerName(a.ledger)}, {"where", a.where}, {"op", a.op},
            {"event", a.event}});
    j["alive_at_peak"] = alive;
    j["notes"] = r.notes;
    if (r.whatif)
        j["whatif"] = whatIfToJson(*r.whatif);
    if (r.snapshot)
    {
        snapshotToJson(*r.snapshot, j);
        // Each range's peak and what it added, of the bytes the trace allocated.
        auto figures = annotationFigures(r);
        auto& list = j["snapshot"]["annotations"];
        for (std::size_t i = 0; i < figures.size() && i < list.size(); ++i) {
            list[i]["peak_bytes"] = figures[i].peak_bytes;
            list[i]["added_bytes"] = figures[i].added_bytes;
        }
        // Allocations per user_metadata and compile_context value (docs/snapshots.md, "Keys").
        for (auto kind : {ContextKind::UserMetadata, ContextKind::CompileContext}) {
            json values = json::array();
            for (const auto& f : contextFigures(r, kind))
                values.push_back({{"value", f.value.empty() ? json(nullptr) : json(f.value)},
                    {"allocations", f.allocations}, {"allocated_bytes", f.allocated_bytes},
                    {"peak_bytes", f.peak_bytes}});
            j["snapshot"][kind == ContextKind::UserMetadata ? "user_metadata" : "compile_contexts"] = values;
        }
        j["snapshot"]["ignored_keys"] = r.snapshot->ignored_keys;
    }
    if (r.buffer_reads_recorded)
        j["unread_buffers"] = r.unread_buffers;
    if (r.remedies)
        j["remedies"] = remediesToJson(*r.remedies);
    if (withEvents && r.trace) {
        j["events"] = eventsToJson(*r.trace);
        usesToJson(r, j["events"]);
    }
    return j;
}

void writeReportJson(const Report& r, const JsonSink& sink)
{
    std::string out = reportToJson(r, false).dump();
    if (r.trace) {
        json head = eventsHead(*r.trace);
        usesToJson(r, head);
        std::string events = head.dump(); // an object: its closing brace goes after the columns
        out.pop_back();
        out += ",\"events\":";
        out.append(events, 0, events.size() - 1);
        writeColumns(*r.trace, out, sink);
        out = "}}";
    }
    out += '\n';
    sink(out.data(), out.size());
}

std::string reportToJsonText(const Report& r)
{
    std::string text;
    writeReportJson(r, [&](const char* data, std::size_t n) { text.append(data, n); });
    return text;
}

void writeReportJsonFile(const Report& r, const std::string& path)
{
    AtomicFileWriter file(path);
    writeReportJson(r, [&](const char* data, std::size_t n) { file.write(data, n); });
    file.commit();
}

Report reportFromJson(const json& j, const std::string& name)
{
    if (!j.is_object() || j.value("format", "") != "memledger-report")
        throw FileError(name, "not a memledger report (no \"format\": \"memledger-report\")");
    if (j.value("version", 0) != kReportVersion)
        throw FileError(name, "memledger report version " + j.value("version", json(0)).dump() + " is not supported");
    try {
        Report r;
        r.source = fromName(j.value("source", "model"), ReportSource::Model);
        const auto& m = j.at("model");
        r.model.path = m.at("path").get<std::string>();
        r.model.type = m.value("type", "");
        r.model.file_bytes = m.at("file_bytes").get<std::int64_t>();
        r.model.parameter_bytes = m.at("parameter_bytes").get<std::int64_t>();
        r.model.buffer_bytes = m.at("buffer_bytes").get<std::int64_t>();
        r.model.bytes_by_dtype = m.value("file_bytes_by_dtype", std::map<std::string, std::int64_t> {});
        for (const auto& t : m.value("tensors", json::array()))
            r.model.tensors.push_back({t.at("name"), t.at("shape").get<Shape>(), t.at("dtype"), t.at("bytes"),
                t.at("kind") == "buffer", t.at("kind") != "buffer" && t.value("requires_grad", true)});
        const auto& run = j.at("run");
        for (const auto& s : run.at("input_shapes"))
            r.run.input_shapes.push_back(s.get<Shape>());
        if (run.contains("inputs")) { // the types (reports written before them have float32 inputs)
            for (const auto& text : run.at("inputs")) {
                auto parsed = parseInputs(text.get<std::string>());
                r.run.input_types.push_back(parsed.types.front());
            }
            r.run.input_types.resize(r.run.input_shapes.size());
        }
        r.run.input_guessed = run.value("input_guessed", false);
        r.run.batch = run.at("batch").get<std::int64_t>();
        r.run.seq = run.value("seq", std::int64_t {0});
        r.run.dtype = run.at("dtype").get<std::string>();
        r.run.autocast = run.value("autocast", std::string());
        r.run.autocast_cache = run.value("autocast_cache", true);
        r.run.mode = fromName(run.value("mode", "inference"), RunMode::Inference);
        r.run.device = run.value("device", "cpu");
        r.run.duration_ms = run.value("duration_ms", 0.0);
        r.run.threads = run.value("threads", 0);
        r.run.optimizer = run.value("optimizer", "");
        r.run.loss = run.value("loss", "");
        r.run.hold_output = run.value("hold_output", "");
        r.run.grad_accum = std::max(1, run.value("grad_accum", 1));
        r.run.lifetimes = run.value("lifetimes", "");
        r.gradient_bytes = j.value("gradient_bytes", std::int64_t {0});
        r.optimizer_state_bytes = j.value("optimizer_state_bytes", std::int64_t {0});
        r.run.new_tokens = run.value("new_tokens", std::int64_t {0});
        r.run.cache = fromName(run.value("cache", std::string()), GenerationCache::Dynamic);
        r.kv_cache_bytes = j.value("kv_cache_bytes", std::int64_t {0});
        if (m.contains("generation") && m.at("generation").is_object()) {
            const auto& g = m.at("generation");
            r.model.generation.cache = g.value("cache", std::string());
            r.model.generation.layers = g.value("layers", 0);
            r.model.generation.kv_heads = g.value("kv_heads", 0);
            r.model.generation.head_dim = g.value("head_dim", 0);
            r.model.generation.attention_heads = g.value("attention_heads", 0);
            r.model.generation.vocab = g.value("vocab", std::int64_t {0});
            r.model.generation.static_cache = g.value("static_cache", false);
            r.model.generation.static_reason = g.value("static_reason", std::string());
        }
        if (run.contains("parallel")) {
            const auto& pj = run.at("parallel");
            ParallelInfo par;
            par.gpus = pj.at("gpus").get<int>();
            par.shard = pj.at("shard").get<std::string>();
            par.param_dtype = pj.value("param_dtype", r.run.dtype);
            par.reduce_dtype = pj.value("reduce_dtype", par.param_dtype);
            par.master_dtype = pj.value("master_dtype", par.param_dtype);
            par.units = pj.value("units", std::vector<std::string> {});
            par.reshard_after_forward = pj.value("reshard_after_forward", true);
            par.root_reshard_after_forward = pj.value("root_reshard_after_forward", false);
            par.offload = pj.value("offload", std::string());
            par.host_bytes = pj.value("host_bytes", std::int64_t {0});
            par.gpus_per_node = std::max(1, pj.value("gpus_per_node", 8));
            par.backend = pj.value("backend", std::string("nccl"));
            par.rank = pj.value("rank", 0);
            par.resident_blocks = pj.value("resident_blocks", std::vector<std::int64_t> {});
            par.full_parameter_bytes = pj.value("full_parameter_bytes", std::int64_t {0});
            r.run.parallel = par;
        }
        for (const auto& p : j.value("phases", json::array()))
            r.phases.push_back({p.at("name"), p.at("start_ns"), p.at("end_ns"), p.at("first_event"), p.at("end_event"),
                p.at("peak_bytes")});
        if (j.contains("load_tax")) {
            const auto& lt = j["load_tax"];
            r.load_tax
                = {lt.at("file_tensor_bytes"), lt.at("file_dtype"), lt.at("resident_bytes"), lt.at("resident_dtype")};
        }
        r.weight_bytes = j.value("weight_bytes", std::int64_t {0});
        r.input_bytes = j.value("input_bytes", std::int64_t {0});
        r.peak_bytes = j.at("peak_bytes").get<std::int64_t>();
        r.peak_total_bytes = j.at("peak_total_bytes").get<std::int64_t>();
        r.peak_time_ns = j.value("peak_time_ns", std::int64_t {0});
        r.peak_event = j.value("peak_event", -1);
        if (j.contains("simulated_gpu"))
            r.simulated_reserved_peak_bytes = j["simulated_gpu"].value("reserved_peak_bytes", std::int64_t {0});
        if (j.contains("gpu")) {
            const auto& g = j["gpu"];
            GpuRun gpu;
            gpu.name = g.value("name", "");
            gpu.total_memory_bytes = g.value("total_memory_bytes", std::int64_t {0});
            gpu.reserved_peak_bytes = g.value("reserved_peak_bytes", std::int64_t {0});
            gpu.library_bytes = g.value("library_bytes", std::int64_t {0});
            for (const auto& p : g.value("reserved_over_time", json::array()))
                gpu.reserved_over_time.emplace_back(p.at(0).get<std::int64_t>(), p.at(1).get<std::int64_t>());
            r.gpu = std::move(gpu);
        }
        for (int l = 0; l < kLedgerKinds; ++l) {
            const auto* key = ledgerName(static_cast<Ledger>(l));
            if (!j.at("ledgers").contains(key))
                continue; // written before this ledger existed, or a model run's report
            const auto& lj = j["ledgers"][key];
            r.ledgers[static_cast<std::size_t>(l)] = {lj.at("at_peak").get<std::int64_t>(),
                lj.at("total").get<std::int64_t>(), lj.value("max", std::int64_t {0})};
        }
        for (const auto& lj : j.at("layers")) {
            LayerStats l;
            l.path = lj.at("path");
            l.name = lj.value("name", l.path);
            l.type = lj.at("type");
            l.parent = lj.value("parent", -1);
            l.depth = lj.value("depth", 0);
            l.weight_bytes = lj.at("weight_bytes");
            l.activation_bytes = lj.at("activation_bytes");
            l.temporary_peak_bytes = lj.at("temporary_peak_bytes");
            l.peak_bytes = lj.at("peak_bytes");
            l.calls = lj.at("calls");
            l.output_shapes = lj.value("output_shapes", std::vector<std::string> {});
            l.gradient_bytes = lj.value("gradient_bytes", std::int64_t {0});
            l.saved_activation_bytes = lj.value("saved_activation_bytes", std::int64_t {0});
            l.backward_temporary_peak_bytes = lj.value("backward_temporary_peak_bytes", std::int64_t {0});
            l.backward_peak_bytes = lj.value("backward_peak_bytes", std::int64_t {0});
            l.largest_block_bytes = lj.value("largest_block_bytes", std::int64_t {0});
            l.forward_ns = lj.value("forward_ns", std::int64_t {0});
            auto self = static_cast<int>(r.layers.size());
            if (l.parent >= self)
                throw std::runtime_error("layer " + l.path + " comes before its parent");
            if (l.parent >= 0)
                r.layers[static_cast<std::size_t>(l.parent)].children.push_back(self);
            r.layers.push_back(std::move(l));
        }
        for (const auto& a : j.value("alive_at_peak", json::array())) {
            PeakItem p;
            p.bytes = a.at("bytes");
            if (auto l = ledgerFromName(a.at("ledger").get<std::string>()))
                p.ledger = *l;
            p.where = a.value("where", "");
            p.op = a.value("op", "");
            p.event = a.value("event", -1);
            r.alive_at_peak.push_back(std::move(p));
        }
        r.notes = j.value("notes", std::vector<std::string> {});
        if (j.contains("whatif") && j["whatif"].is_object())
            r.whatif = std::make_shared<const WhatIfTable>(whatIfFromJson(j["whatif"]));
        r.trace = std::make_shared<const Trace>(j.contains("events") ? eventsFromJson(j["events"]) : Trace {});
        if (j.contains("events"))
            usesFromJson(j["events"], *r.trace, r);
        if (j.contains("unread_buffers")) {
            r.unread_buffers = j["unread_buffers"].get<std::vector<std::string>>();
            r.buffer_reads_recorded = true;
        }
        if (j.contains("remedies") && j["remedies"].is_array())
            r.remedies = std::make_shared<const std::vector<Remedy>>(remediesFromJson(j["remedies"]));
        return r;
    } catch (const FileError&) {
        throw;
    } catch (const std::exception& e) {
        throw FileError(name, std::string("damaged memledger report: ") + e.what());
    }
}

Report readReportFile(const std::string& path)
{
    auto text = readWholeFile(path);
    json j;
    try {
        j = json::parse(text);
    } catch (const json::parse_error& e) {
        throw FileError(path, std::string("not valid JSON: ") + e.what());
    }
    return reportFromJson(j, path);
}

} // namespace memledger

#include "snapshot/snapshot_entries.h"

namespace memledger::snapdecode {

namespace {

// A number field read `how`: true with `out` set (kept when absent or None); false when declined.
bool number(const PickleValue* v, const char* what, EntryRead how, std::int64_t& out)
{
    if (!v || v->isNone())
        return true;
    if (v->isInt()) {
        out = v->asInt();
        return true;
    }
    if (how == EntryRead::WhileParsing)
        return false;
    out = numberOr(v, what, out);
    return true;
}

std::string_view text(const PickleValue* v)
{
    if (!v || !(v->isStr() || v->kind() == PickleKind::Bytes))
        return {};
    return v->asStr();
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

} // namespace

EntryKind EntryDecoder::decode(const PickleValue* const* f, EntryRead how, std::uint32_t& row,
    std::optional<std::int64_t>& deviceFree, PendingAnnotation& ann)
{
    const bool parsing = how == EntryRead::WhileParsing;
    const PickleValue* action = f[kAction];
    if (!action || !action->isStr())
        return parsing ? EntryKind::Declined : EntryKind::Skipped;
    Action a = Action::Alloc;
    if (!actions_.find(action->asStr(), a)) {
        if (action->asStr() == kAnnotateAction) // rare: read from the tree
            return parsing ? EntryKind::Declined : annotation(f, ann);
        return EntryKind::Skipped;
    }
    if (parsing && (a == Action::Oom || rows_.size() >= UINT32_MAX - 1))
        return EntryKind::Declined;
    // A time of another type leaves the entry untimed (from the tree).
    const PickleValue* t = f[kTime];
    const bool timed = t && t->isNumber();
    if (parsing && t && !t->isNone() && !t->isInt())
        return EntryKind::Declined;
    std::int64_t time = 0, size = 0, addr = 0, stream = 0, device = kNoDevice;
    if (timed)
        number(t, "time_us", how, time);
    if (!number(f[kDevice], "device", how, device))
        return EntryKind::Declined;
    if (device == kNoDevice) {
        device = kDeviceOfList;
    } else if (device < -1 || device > 127) {
        if (parsing)
            return EntryKind::Declined;
        throw ShapeError("a trace entry names device " + std::to_string(device));
    }
    if (!number(f[kSize], "size", how, size) || (a != Action::Oom && !number(f[kAddr], "addr", how, addr))
        || !number(f[kStream], "stream", how, stream))
        return EntryKind::Declined;
    std::uint32_t stack = 0;
    if (const PickleValue* fr = f[kFrames]) {
        if (fr->isReduced() || !parsing)
            stack = tables_.stackOfTree(fr);
        else if (fr->isSequence() && fr->containerSize() > 0)
            return EntryKind::Declined; // frames it could not read: the tree's reading says what they are
    }
    row = rows_.push(time, timed, size, static_cast<std::uint64_t>(addr), a, static_cast<std::int8_t>(device),
        static_cast<std::uint64_t>(stream), stack, tables_.where(stack),
        {contextId(f[kUserMetadata], false, userMetadata_), contextId(f[kCompileContext], true, compileContext_)});
    if (a == Action::Oom)
        deviceFree = numberOr(f[kDeviceFree], "device_free", 0);
    return EntryKind::Row;
}

EntryKind EntryDecoder::annotation(const PickleValue* const* f, PendingAnnotation& ann)
{
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
        ann.stack = tables_.stackOfTree(f[kFrames]);
    } catch (const ShapeError&) {
        return EntryKind::Skipped;
    }
    return EntryKind::Annotation;
}

// A user_metadata or compile_context value as a string id, remembered by where its bytes are (the writer
// memoizes them: one probe per entry).
std::uint32_t EntryDecoder::contextId(const PickleValue* v, bool compile, TextMeaning<std::uint32_t>& known)
{
    if (!v || !v->isStr())
        return 0;
    return known.get(v->asStr(), [&](std::string_view) { return contextText(v, compile, rows_.trace.strings); });
}

bool SnapshotReducer::reduce(PickleKind kind, PickleItems items, PickleValue& out)
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


bool SnapshotReducer::reduceDict(PickleItems items, PickleValue& out)
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
    if (f[kAction]) {
        std::uint32_t row = 0;
        std::optional<std::int64_t> deviceFree; // never: an oom is declined
        switch (entries_.decode(f, EntryRead::WhileParsing, row, deviceFree, unusedAnnotation_)) {
        case EntryKind::Row:
            out = PickleValue::reduced(kRowValue, row);
            return true;
        case EntryKind::Skipped:
            out = PickleValue::reduced(kSkippedValue, 0);
            return true;
        default:
            return false; // the tree's reading (entryRow) says what it is
        }
    }
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

EntryKind entryRow(const PickleValue& e, EntryDecoder& decoder, KeySlots& keys, std::vector<std::string>& ignored,
    std::uint32_t& row, std::vector<std::pair<std::uint32_t, std::int64_t>>& oomFree, PendingAnnotation& ann)
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
    std::optional<std::int64_t> deviceFree;
    const EntryKind kind = decoder.decode(f, EntryRead::FromTree, row, deviceFree, ann);
    if (deviceFree)
        oomFree.push_back({row, *deviceFree});
    return kind;
}

} // namespace memledger::snapdecode

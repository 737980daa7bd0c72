#pragma once
// A snapshot's trace entries (internal to snapshot/): one decoder of an entry's fields, used while the pickle is
// read (SnapshotReducer: an entry becomes a row as soon as it is complete, so that a million entries never exist
// as a tree) and afterwards for what it declined (entryRow: the entries left in the tree, with their errors).
#include "snapshot/snapshot_fields.h"
#include "snapshot/snapshot_stacks.h"
#include "snapshot/trace_rows.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace memledger::snapdecode {

// An `annotate` entry as read, before the trace's clock and the allocation it names are known.
struct PendingAnnotation {
    std::int64_t time_us = 0;
    bool timed = false;
    std::uint64_t addr = 0;
    std::int64_t device = kNoDevice; // kNoDevice: its list's
    std::string text;
    std::uint32_t stack = 0;
};

// Row: a row of the trace; Skipped: an action memledger does not know (or an annotation it cannot use);
// Annotation: an `annotate` entry; Declined: left for the tree's reading (while the pickle is read only).
enum class EntryKind { Row, Skipped, Annotation, Declined };

// While the pickle is read, an entry of an unusual shape (a float, an odd type, an oom, an annotation, frames
// the reducer did not take) is declined and stays in the tree; from the tree, it is read (floats as numbers)
// or is a ShapeError naming the field.
enum class EntryRead { WhileParsing, FromTree };

class EntryDecoder {
public:
    EntryDecoder(TraceRows& rows, StackTables& tables)
        : rows_(rows)
        , tables_(tables)
    {
    }
    // An entry of fields `f` (by KeySlot; null: absent). Row: `row` is its row, and an oom's device_free is set
    // in `deviceFree`. Annotation: read into `ann`.
    EntryKind decode(const PickleValue* const* f, EntryRead how, std::uint32_t& row,
        std::optional<std::int64_t>& deviceFree, PendingAnnotation& ann);

private:
    EntryKind annotation(const PickleValue* const* f, PendingAnnotation& ann);
    std::uint32_t contextId(const PickleValue* v, bool compile, TextMeaning<std::uint32_t>& known);

    TraceRows& rows_;
    StackTables& tables_;
    ActionNames actions_;
    TextMeaning<std::uint32_t> userMetadata_;
    TextMeaning<std::uint32_t> compileContext_;
};

// Reads the snapshot while the pickle is read: a frame dict becomes an interned frame, a list of them an
// interned stack, a trace entry a row of the trace. What it does not take stays in the tree for entryRow.
class SnapshotReducer : public PickleReducer {
public:
    SnapshotReducer(StackTables& tables, TraceRows& rows, std::vector<std::string>& ignoredKeys)
        : tables_(tables)
        , entries_(rows, tables)
        , ignored_(ignoredKeys)
    {
    }
    bool reduce(PickleKind kind, PickleItems items, PickleValue& out) override;

private:
    bool reduceDict(PickleItems items, PickleValue& out);
    static bool intField(const PickleValue* v, std::int64_t& out)
    {
        if (!v || v->isNone())
            return true; // the default stays
        if (!v->isInt())
            return false;
        out = v->asInt();
        return true;
    }

    StackTables& tables_;
    EntryDecoder entries_;
    KeySlots keys_;
    // The keys of the last dict reduced and their slots: trace entries all have the same keys, the same
    // memoized strings, so one comparison per key finds the slots again.
    static constexpr std::size_t kLayoutKeys = 12;
    PickleValue layoutKeys_[kLayoutKeys];
    std::int8_t layoutSlots_[kLayoutKeys] = {};
    std::size_t layoutCount_ = SIZE_MAX; // each layout slot is right for its key, even after a refused dict
    std::vector<std::uint32_t> ids_;
    std::vector<std::string>& ignored_;
    std::vector<std::string_view> otherKeys_;
    std::string fxName_;
    PendingAnnotation unusedAnnotation_; // never set: an annotation is declined
};

// A trace entry as the finished tree holds it: the row the reducer made, or the entry read from the tree (its
// errors are ShapeErrors); never Declined. Keys it reads past go to `ignored`; an oom's device_free to `oomFree`.
EntryKind entryRow(const PickleValue& e, EntryDecoder& decoder, KeySlots& keys, std::vector<std::string>& ignored,
    std::uint32_t& row, std::vector<std::pair<std::uint32_t, std::int64_t>>& oomFree, PendingAnnotation& ann);

} // namespace memledger::snapdecode

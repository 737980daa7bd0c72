#pragma once
// Reading a snapshot's pickle values (internal to snapshot/): fields of a dict by name or by slot, numbers and
// strings with their fallbacks, and the error a value of the wrong shape raises.
#include "report/trace.h"
#include "snapshot/pickle_reader.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memledger::snapdecode {

// The structure is wrong (a pickle, but not a snapshot); becomes a FileError naming the file.
struct ShapeError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// d[key] as an int (a float where an int belongs: its value when it fits); `fallback` when absent or None.
std::int64_t intOr(const PickleValue& d, std::string_view key, std::int64_t fallback);
// d[key] as a string (str or bytes); `fallback` when absent or of another kind.
std::string strOr(const PickleValue& d, std::string_view key, std::string_view fallback = {});
const PickleValue& requireList(const PickleValue* v, const char* what);
// A trace entry's field `what` as a number: an int, a float's value when it fits (else `fallback`), `fallback`
// when absent or None; a ShapeError naming the field for another kind.
std::int64_t numberOr(const PickleValue* v, const char* what, std::int64_t fallback);

// The inverse of actionName(): the trace spells actions as memledger names them.
bool actionOf(std::string_view s, Action& a);

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


// Adds "device_traces[].KEY" to the keys read past, once.
void noteIgnoredEntryKey(std::vector<std::string>& ignored, std::string_view key);

} // namespace memledger::snapdecode

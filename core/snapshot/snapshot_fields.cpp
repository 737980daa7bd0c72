#include "snapshot/snapshot_fields.h"

#include <algorithm>
#include <cmath>

namespace memledger::snapdecode {

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

std::string strOr(const PickleValue& d, std::string_view key, std::string_view fallback)
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

bool actionOf(std::string_view s, Action& a)
{
    for (int i = 0; i <= static_cast<int>(Action::Snapshot); ++i)
        if (s == actionName(static_cast<Action>(i))) {
            a = static_cast<Action>(i);
            return true;
        }
    return false;
}

void noteIgnoredEntryKey(std::vector<std::string>& ignored, std::string_view key)
{
    std::string name = "device_traces[]." + std::string(key);
    if (std::find(ignored.begin(), ignored.end(), name) == ignored.end())
        ignored.push_back(std::move(name));
}

} // namespace memledger::snapdecode

#include "snapshot/snapshot_stacks.h"

namespace memledger::snapdecode {

namespace {

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

} // namespace

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

} // namespace memledger::snapdecode

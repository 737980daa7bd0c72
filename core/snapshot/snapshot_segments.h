#pragma once
// A snapshot's other keys (internal to snapshot/): segments and their blocks, allocator_settings,
// external_annotations, host_segments.
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_stacks.h"

namespace memledger::snapdecode {

// A segment dict; `legacy` is set when its blocks have a `history` (the legacy layout).
SnapshotSegment segmentOf(const PickleValue& s, bool& legacy, StackTables& tables);
void decodeSettings(const PickleValue& v, SnapshotSettings& out);
// external_annotations: {stage: START|END, name, device, time_us} entries; an END closes the latest open START
// of the same name on the same device. Entries of another shape are counted and left out; none fails the file.
void decodeAnnotations(const PickleValue& list, Snapshot& s);
// host_segments: PyTorch's host allocator never splits a segment (HostSegmentInfo: address, size, allocated,
// active, segment_pool_id, frames), so each is one block; a segment written with the device's keys
// (total_size, blocks) reads as one. An entry of another shape is counted in `skipped` and left out.
void decodeHostSegments(const PickleValue& list, Snapshot& host, std::int64_t& skipped, StackTables& tables);

} // namespace memledger::snapdecode

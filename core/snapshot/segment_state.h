#pragma once
// The segments of a CUDA snapshot at an earlier moment of its trace, rebuilt from the end state.
#include "allocator/caching_allocator.h"
#include "report/trace.h"
#include "snapshot/snapshot.h"

#include <cstddef>
#include <vector>

namespace memledger {

// The segments and their blocks after the first `events` events of `s.trace` (events >= trace size: the end
// state, unchanged). Made by undoing the later events, newest first, on the snapshot's end state: an alloc
// frees its block again (merged with its inactive neighbours), a free_completed brings its block back
// (split out of the inactive range, as big as the allocator rounds the request), a free_requested turns a
// pending block back into an allocated one, segment_alloc / segment_map take the segment or range away and
// segment_free / segment_unmap bring it back as one inactive block. Blocks kept from the end state keep their
// frames; blocks brought back get the trace's top frame. Events on addresses outside every known segment,
// or that contradict the state, are skipped. Segments come sorted by device and address.
std::vector<SnapshotSegment> segmentsAt(const Snapshot& s, std::size_t events);

// The segments the caching-allocator model leaves at the end of its replay of a trace, as a snapshot's: the
// window's segment map of a model run and the snapshot writer both show these. The replay's first `preloaded`
// events are the resident set's (weights and inputs), then the trace's; an allocated block gets its request and
// the trace's frame.
std::vector<SnapshotSegment> segmentsOfReplay(const Trace& t, const AllocatorReplay& replay, std::size_t preloaded = 0);

// "file:line name", the trace's `where`, as one frame; anything else (a module path) is the file name.
SnapshotFrame frameOfWhere(const std::string& where);

} // namespace memledger

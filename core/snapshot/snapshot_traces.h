#pragma once
// A snapshot's traces (internal to snapshot/): device_traces and host_traces made into the snapshot's trace and
// its host's, in time order with their partners, out-of-memory events and tensor annotations.
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_entries.h"

#include <memory>

namespace memledger::snapdecode {

// Makes the snapshot's trace of its device_traces lists (`traces`, may be null) and its host's of host_traces
// (`hostTraces`, may be null): rows the reducer made and entries left in the tree, in list order. A device list
// of another shape fails the file; a host entry of another shape is counted in host_skipped and left out.
void decodeTraces(const PickleValue* traces, const PickleValue* hostTraces, Snapshot& s, Snapshot* host,
    std::shared_ptr<Trace> trace, TraceRows& rows, StackTables& tables);

} // namespace memledger::snapdecode

#pragma once
// Large buffers that are filled once (a snapshot file's bytes, a million-event trace's columns) cost one page
// fault per 4 KiB touched: tens of thousands for a big snapshot, a third of its load time. Asking for
// transparent huge pages before the first write makes that a few dozen. Internal to core.
#include <cstddef>

namespace memledger {

// Advises the kernel to back the whole 2 MiB pages inside [p, p + bytes) with huge pages. Call it before
// the memory is first written. A no-op for small ranges and off Linux; only a hint, never an error.
void adviseHugePages(void* p, std::size_t bytes);

} // namespace memledger

// libFuzzer target for the pickle reader and the snapshot decoder: any input must either decode or fail with
// PickleError / FileError, never crash, hang or leak. A decoded snapshot also goes through the allocator
// model, the report and the writer, and what the writer makes must decode again.
#include "support/errors.h"
#include "snapshot/pickle_reader.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_writer.h"

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace memledger;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    std::string bytes(reinterpret_cast<const char*>(data), size);
    try {
        auto doc = readPickle(bytes);
        (void)doc.root().kind();
    } catch (const PickleError&) {
    }
    try {
        Snapshot s = decodeSnapshot(bytes, "fuzz-input");
        Report r = reportFromSnapshot(std::move(s), "fuzz-input");
        std::string again = encodeSnapshot(r);
        Snapshot back = decodeSnapshot(again, "fuzz-rewritten");
        if (back.segments.size() != r.snapshot->segments.size() || back.trace->size() != r.trace->size())
            std::abort(); // the writer lost something
    } catch (const FileError&) {
    }
    return 0;
}

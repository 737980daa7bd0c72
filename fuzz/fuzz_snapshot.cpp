// libFuzzer target for the pickle reader and the snapshot decoder: any input must either decode or fail with
// PickleError / FileError, never crash, hang or leak. A decoded snapshot also goes through the allocator
// model, the report and the writer, and what the writer makes must decode again. A streamed read (the
// bytes handed over in pieces, as readSnapshotFile reads a file) must give what a read of the bytes whole does.
#include "support/errors.h"
#include "snapshot/pickle_reader.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_writer.h"
#include "../tests/pickle_describe.h"

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace memledger;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    std::string bytes(reinterpret_cast<const char*>(data), size);
    const std::string whole = testing::pickleOutcome(bytes, nullptr);
    testing::PieceSource pieces(bytes, static_cast<std::uint32_t>(size));
    if (testing::pickleOutcome(bytes, &pieces) != whole)
        std::abort(); // the streamed read differs
    std::string streamed = "ok";
    try {
        testing::PieceSource again(bytes, static_cast<std::uint32_t>(size) + 1);
        Snapshot s = decodeSnapshotStream(again, bytes.size(), "fuzz-input");
        streamed = std::to_string(s.trace->size()) + "/" + std::to_string(s.segments.size());
    } catch (const FileError& e) {
        streamed = e.what();
    }
    try {
        Snapshot s = decodeSnapshot(bytes, "fuzz-input");
        if (streamed != std::to_string(s.trace->size()) + "/" + std::to_string(s.segments.size()))
            std::abort(); // the streamed decode differs
        Report r = reportFromSnapshot(std::move(s), "fuzz-input");
        std::string again = encodeSnapshot(r);
        Snapshot back = decodeSnapshot(again, "fuzz-rewritten");
        if (back.segments.size() != r.snapshot->segments.size() || back.trace->size() != r.trace->size())
            std::abort(); // the writer lost something
    } catch (const FileError& e) {
        if (streamed != e.what())
            std::abort(); // the streamed decode differs
    }
    return 0;
}

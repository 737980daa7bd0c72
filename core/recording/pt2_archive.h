#pragma once
// Private to core/recording: the zip archive torch.export.save writes (a .pt2): which kind of archive it is, its
// records, the program's JSON, and the weights and constants stored in data/, each tensor read after its layout
// is checked against the bytes its record holds. serde's numbering of types, memory formats and layouts
// (torch/_export/serde/schema.py) to c10's lives here too, with the records that use it.
#include <ATen/core/Tensor.h>
#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace caffe2::serialize {
class PyTorchStreamReader;
}

namespace memledger {

// Whether the zip archive `reader` holds is a torch.export program (its archive_format record says "pt2", or it
// has models/*.json), and what kind: "" when it is not one.
std::string exportedArchiveKind(caffe2::serialize::PyTorchStreamReader& reader);

namespace pt2 {

// A record's bytes as text.
std::string recordText(caffe2::serialize::PyTorchStreamReader& reader, const std::string& name);

#if MEMLEDGER_EXPORTED_PROGRAMS // decided in core/CMakeLists.txt

// The archive's models/*.json records, sorted. Throws when the zip lists any name twice.
std::vector<std::string> modelJsonRecords(caffe2::serialize::PyTorchStreamReader& reader);

// A JSON record parsed with pt2_graph.h's care; its size checked before it is read.
nlohmann::json recordJson(caffe2::serialize::PyTorchStreamReader& reader, const std::string& name);

c10::ScalarType scalarOf(int serde);
c10::MemoryFormat memoryFormatOf(int serde);
c10::Layout layoutOf(int serde);

// A weight saved from the meta device (a model built under torch.device("meta")): its shape, no data.
bool isMetaEntry(const nlohmann::json& entry);

// The tensor a weights or constants config `entry` describes, read from `dir` + its path_name (a meta tensor for
// a meta entry). `name` (the weight's) goes into each reason.
at::Tensor readTensor(caffe2::serialize::PyTorchStreamReader& reader, const std::string& dir,
    const nlohmann::json& entry, const std::string& name);

#endif

} // namespace pt2

} // namespace memledger

// torch.export.save's archive: <archive>/archive_format ("pt2"), models/<name>.json (the program), and
// data/weights/ and data/constants/ (a <name>_weights_config.json that maps each weight to its record and layout).
#include "recording/pt2_archive.h"

#include "recording/pt2_graph.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

namespace memledger {

namespace pt2 {

std::string recordText(caffe2::serialize::PyTorchStreamReader& reader, const std::string& name)
{
    auto [data, size] = reader.getRecord(name);
    return std::string(static_cast<const char*>(data.get()), size);
}

} // namespace pt2

std::string exportedArchiveKind(caffe2::serialize::PyTorchStreamReader& reader)
{
    bool aoti = false, models = false;
    for (const auto& r : reader.getAllRecords()) {
        if (r.rfind("data/aotinductor/", 0) == 0)
            aoti = true;
        if (r.rfind("models/", 0) == 0)
            models = true;
    }
    if (aoti)
        return "aotinductor";
    if (models || (reader.hasRecord("archive_format") && pt2::recordText(reader, "archive_format") == "pt2"))
        return "export";
    return "";
}

#if MEMLEDGER_EXPORTED_PROGRAMS

namespace pt2 {

namespace {

// The largest JSON record read: a program's graph is megabytes (a 70B Llama's some tens); a record that says it
// is larger is refused before its bytes are allocated.
constexpr std::size_t kMaxJsonRecord = std::size_t(1) << 30;

} // namespace

std::vector<std::string> modelJsonRecords(caffe2::serialize::PyTorchStreamReader& reader)
{
    auto all = reader.getAllRecords();
    std::sort(all.begin(), all.end());
    auto twice = std::adjacent_find(all.begin(), all.end());
    if (twice != all.end())
        throw std::runtime_error("the archive lists " + *twice + " twice (zip readers differ on which one is meant)");
    std::vector<std::string> out;
    for (const auto& r : all)
        if (r.rfind("models/", 0) == 0 && r.size() > 12 && r.compare(r.size() - 5, 5, ".json") == 0)
            out.push_back(r);
    return out;
}

nlohmann::json recordJson(caffe2::serialize::PyTorchStreamReader& reader, const std::string& name)
{
    const auto size = reader.getRecordSize(name);
    if (size > kMaxJsonRecord)
        throw std::runtime_error(name + " says it holds " + std::to_string(size) + " bytes, more than the "
            + std::to_string(kMaxJsonRecord >> 20) + " MiB a program's JSON is read up to");
    return parseJson(recordText(reader, name), name);
}

c10::ScalarType scalarOf(int serde)
{
    switch (serde) {
    case 1:
        return c10::kByte;
    case 2:
        return c10::kChar;
    case 3:
        return c10::kShort;
    case 4:
        return c10::kInt;
    case 5:
        return c10::kLong;
    case 6:
        return c10::kHalf;
    case 7:
        return c10::kFloat;
    case 8:
        return c10::kDouble;
    case 9:
        return c10::kComplexHalf;
    case 10:
        return c10::kComplexFloat;
    case 11:
        return c10::kComplexDouble;
    case 12:
        return c10::kBool;
    case 13:
        return c10::kBFloat16;
    default:
        throw std::runtime_error("a tensor of element type " + std::to_string(serde) + " (serde's numbering), which memledger does not read");
    }
}

c10::MemoryFormat memoryFormatOf(int serde)
{
    switch (serde) {
    case 2:
        return c10::MemoryFormat::ChannelsLast;
    case 3:
        return c10::MemoryFormat::ChannelsLast3d;
    case 4:
        return c10::MemoryFormat::Preserve;
    default:
        return c10::MemoryFormat::Contiguous;
    }
}

c10::Layout layoutOf(int serde)
{
    switch (serde) {
    case 1:
        return c10::kSparse;
    case 2:
        return c10::kSparseCsr;
    case 6:
        return c10::kMkldnn;
    default:
        return c10::kStrided;
    }
}

bool isMetaEntry(const nlohmann::json& entry)
{
    if (!entry.is_object() || !entry.contains("tensor_meta") || !entry.at("tensor_meta").is_object())
        return false;
    const auto& meta = entry.at("tensor_meta");
    if (!meta.contains("device") || !meta.at("device").is_object())
        return false;
    return meta.at("device").value("type", "") == "meta";
}

at::Tensor readTensor(caffe2::serialize::PyTorchStreamReader& reader, const std::string& dir, const nlohmann::json& entry,
    const std::string& name)
{
    if (!entry.is_object())
        throw std::runtime_error(name + ": its entry in the weights config is not an object");
    if (entry.value("use_pickle", false))
        throw std::runtime_error(name + " is stored as a pickled tensor (a tensor subclass), which memledger does not read");
    if (!entry.contains("tensor_meta"))
        throw std::runtime_error(name + ": its entry in the weights config has no tensor_meta");
    const auto layout = tensorLayout(entry.at("tensor_meta"), name);
    const auto scalar = scalarOf(layout.dtype);
    const auto element = static_cast<std::int64_t>(c10::elementSize(scalar));
    checkedBytes(layout.reach, element, name);
    auto options = torch::TensorOptions().dtype(scalar);
    if (isMetaEntry(entry)) // shapes only: torch.export.save writes a meta weight as an empty record
        return at::empty_strided(layout.sizes, layout.strides, options.device(c10::kMeta));
    auto record = dir + entry.at("path_name").get<std::string>();
    if (!reader.hasRecord(record))
        throw std::runtime_error(name + ": the archive has no " + record);
    const auto declared = static_cast<std::int64_t>(reader.getRecordSize(record));
    if (checkedBytes(layout.reach, element, name) > declared)
        throw std::runtime_error(name + ": " + record + " holds " + std::to_string(declared) + " bytes, fewer than its shape needs");
    auto [data, size] = reader.getRecord(record);
    if (checkedBytes(layout.reach, element, name) > static_cast<std::int64_t>(size))
        throw std::runtime_error(name + ": " + record + " holds " + std::to_string(size) + " bytes, fewer than its shape needs");
    auto stored = torch::from_blob(data.get(), {static_cast<std::int64_t>(size) / element}, options);
    auto out = at::empty_strided(layout.sizes, layout.strides, options);
    if (out.numel() > 0)
        out.copy_(stored.as_strided(layout.sizes, layout.strides, layout.offset));
    return out;
}

} // namespace pt2

#endif

} // namespace memledger

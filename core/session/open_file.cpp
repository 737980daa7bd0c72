#include "session/open_file.h"

#include "exports/report_json.h"
#include "recording/build_report.h"
#include "snapshot/snapshot.h"
#include "support/errors.h"

#include <filesystem>
#include <fstream>

namespace memledger {

namespace fs = std::filesystem;

const char* fileKindName(FileKind kind)
{
    switch (kind) {
    case FileKind::Model:
        return "model";
    case FileKind::Report:
        return "report";
    case FileKind::Snapshot:
        return "snapshot";
    }
    return "?";
}

FileKind detectFileKind(const std::string& path)
{
    std::error_code ec;
    auto status = fs::status(path, ec);
    if (ec || !fs::exists(status))
        throw FileError(path, "no such file");
    if (fs::is_directory(status))
        throw FileError(path, "is a directory, not a model, report or snapshot file");
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw FileError(path, "cannot open for reading");
    char head[64];
    in.read(head, sizeof head);
    const auto n = static_cast<std::size_t>(in.gcount());
    if (n == 0)
        throw FileError(path, "the file is empty");
    if (n >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4)
        return FileKind::Model;
    if (static_cast<unsigned char>(head[0]) == 0x80)
        return FileKind::Snapshot; // pickle PROTO opcode
    std::size_t i = 0;
    if (n >= 3 && static_cast<unsigned char>(head[0]) == 0xEF && static_cast<unsigned char>(head[1]) == 0xBB
        && static_cast<unsigned char>(head[2]) == 0xBF)
        i = 3; // UTF-8 byte order mark
    while (i < n && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t'))
        ++i;
    if (i < n && head[i] == '{')
        return FileKind::Report;
    // Anything else is taken for a model: the model loader names what the file is instead (a text file, a
    // zip of something else, a truncated archive, ...).
    return FileKind::Model;
}

std::vector<Shape> OpenedFile::inputsFor(const RunOptions& options, std::string* how, std::vector<InputType>* types) const
{
    if (!options.inputs.empty()) {
        if (types)
            *types = options.input_types;
        return options.inputs;
    }
    if (!default_inputs.empty()) {
        if (types)
            *types = default_input_types;
        return default_inputs;
    }
    return model ? model->guessInputs(how, types) : std::vector<Shape> {};
}

OpenedFile openFile(const std::string& path, const SnapshotReadOptions& read)
{
    OpenedFile f;
    f.kind = detectFileKind(path);
    f.path = path;
    f.name = path;
    switch (f.kind) {
    case FileKind::Model:
        f.model = std::make_shared<Model>(Model::open(path));
        break;
    case FileKind::Report:
        f.report = std::make_shared<const Report>(readReportFile(path));
        break;
    case FileKind::Snapshot:
        f.report = std::make_shared<const Report>(readSnapshotReport(path, true, read));
        break;
    }
    return f;
}

OpenedFile openModelBytes(
    const std::string& bytes, const std::string& name, std::vector<Shape> inputs, std::vector<InputType> inputTypes)
{
    OpenedFile f;
    f.kind = FileKind::Model;
    f.name = name;
    f.model = std::make_shared<Model>(Model::openBytes(bytes, name));
    f.default_inputs = std::move(inputs);
    f.default_input_types = std::move(inputTypes);
    return f;
}

Report analyzeOpened(const OpenedFile& file, RunOptions options)
{
    if (file.report)
        return *file.report;
    if (options.inputs.empty() && !file.default_inputs.empty()) {
        options.inputs = file.default_inputs;
        options.input_types = file.default_input_types;
    }
    if (!options.mode) {
        options.mode = file.default_mode;
        if (!file.default_optimizer.empty())
            options.optimizer = file.default_optimizer;
    }
    return analyzeModel(*file.model, options);
}

} // namespace memledger

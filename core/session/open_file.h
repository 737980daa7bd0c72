#pragma once
// One way to open a file, for the CLI and the window alike: what the file is, told by its content once, and
// the model opened once and shared by every run and what-if record made of it.
#include "recording/model.h"
#include "report/report.h"
#include "snapshot/snapshot.h"

#include <memory>
#include <string>
#include <vector>

namespace memledger {

enum class FileKind {
    Model, // a TorchScript archive (torch.jit.save): a zip file
    Report, // a memledger JSON report
    Snapshot, // a CUDA memory snapshot (torch.cuda.memory._dump_snapshot): a pickle
};
const char* fileKindName(FileKind kind);

// By content, not by name: a pickle's PROTO opcode is a snapshot, JSON text a report, anything else a model
// (whose loader names what the file is not). Throws FileError naming the file and the reason when it is
// missing, empty or a folder.
FileKind detectFileKind(const std::string& path);

// An opened file. A model is loaded once (its weights stay in memory) and shared, through `model`, by the
// run and by what-if records; Model::run serialises runs of the same model. Reports and snapshots are read
// when opened.
struct OpenedFile {
    FileKind kind = FileKind::Model;
    std::string path; // "" for a model given as bytes (the built-in demo)
    std::string name; // the path, or the built-in model's name: used in messages
    std::shared_ptr<Model> model; // kind Model
    std::vector<Shape> default_inputs; // inputs the built-in model comes with; empty: give or guess
    std::vector<InputType> default_input_types; // their types (token ids of the GPT demo)
    RunMode default_mode = RunMode::Inference; // what a run without a mode records
    std::string default_optimizer; // a built-in training demo's optimizer; "": the run's (sgd)
    std::shared_ptr<const Report> report; // kind Report or Snapshot

    // The inputs a run without --input uses: the built-in ones, or the model's guess (`how` says why).
    // `types` gets their types.
    std::vector<Shape> inputsFor(
        const RunOptions& options, std::string* how = nullptr, std::vector<InputType>* types = nullptr) const;
};

// Throws FileError naming the file and the reason; Cancelled when `read.cancel` stops a snapshot's reading
// (`read.progress` reports it).
OpenedFile openFile(const std::string& path, const SnapshotReadOptions& read = {});
OpenedFile openModelBytes(const std::string& bytes, const std::string& name, std::vector<Shape> inputs,
    std::vector<InputType> inputTypes = {});

// Runs an opened model (inputs from OpenedFile::inputsFor when none are given) and builds its report; for a
// report or snapshot file, the report read when it was opened. Throws RunError, Cancelled.
Report analyzeOpened(const OpenedFile& file, RunOptions options);

} // namespace memledger

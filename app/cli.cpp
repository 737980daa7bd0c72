#include "cli.h"
#include "whatif_cli.h"

#include "demo_model.h"
#include "report/build_report.h"
#include "support/atomic_file.h"
#include "support/errors.h"
#include "exports/report_html.h"
#include "exports/report_json.h"
#include "exports/report_text.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_writer.h"

#include <nlohmann/json.hpp>

#include <iostream>

namespace memledger {

Report analyzeFile(const std::string& path, RunOptions options)
{
    if (path.empty()) {
        auto model = Model::openBytes(demoModelBytes(), kDemoModelName);
        if (options.inputs.empty())
            options.inputs = demoModelInput();
        return analyzeModel(model, options);
    }
    auto model = Model::open(path);
    return analyzeModel(model, options);
}

namespace {

PngRenderer& pngRenderer()
{
    static PngRenderer renderer;
    return renderer;
}

bool looksLikeJson(const std::string& path)
{
    auto dot = path.rfind('.');
    return dot != std::string::npos && path.substr(dot) == ".json";
}

int runAnalyze(const CliOptions& o)
{
    Report report;
    try {
        if (looksLikeJson(o.model))
            report = readReportFile(o.model);
        else if (!o.model.empty() && looksLikePickleFile(o.model)) // by content: pickle PROTO byte 0x80
            report = readSnapshotReport(o.model);
        else
            report = analyzeFile(o.model, o.run);
    } catch (const FileError& e) {
        std::cerr << "memledger: " << e.what() << "\n";
        return kExitBadFile;
    } catch (const RunError& e) {
        std::cerr << "memledger: " << (o.model.empty() ? kDemoModelName : o.model) << ": " << e.what() << "\n";
        return kExitRunFailed;
    }
    if (!o.whatif_batches.empty() && report.source == "model") {
        try {
            CliOptions w = o;
            w.batches = o.whatif_batches;
            w.dtypes = {"float32", "bfloat16", "float16"};
            report.whatif = std::make_shared<const nlohmann::json>(computeWhatIfTable(w));
        } catch (const std::exception& e) {
            std::cerr << "memledger: what-if: " << e.what() << "\n";
            return kExitRunFailed;
        }
    }
    std::cout << reportToText(report, o.depth);
    if (o.tensors)
        std::cout << "\n" << tensorsToText(report);
    if (report.whatif) {
        std::cout << "\nWhat if (predicted from runs at batch 1 and 2):\n";
        printWhatIfTable(*report.whatif, std::cout);
    }
    try {
        if (!o.json.empty()) {
            writeFileAtomically(o.json, reportToJson(report).dump() + "\n");
            std::cout << "Wrote " << o.json << "\n";
        }
        if (!o.html.empty()) {
            writeFileAtomically(o.html, reportToHtml(report));
            std::cout << "Wrote " << o.html << "\n";
        }
        if (!o.snapshot_out.empty()) {
            writeSnapshotFile(o.snapshot_out, report);
            std::cout << "Wrote " << o.snapshot_out << "\n";
        }
        if (!o.png.empty()) {
            if (!pngRenderer())
                throw std::runtime_error(o.png + ": this build has no GUI to render the timeline with");
            auto error = pngRenderer()(report, o.png);
            if (!error.empty())
                throw std::runtime_error(error);
            std::cout << "Wrote " << o.png << "\n";
        }
    } catch (const std::exception& e) {
        std::cerr << "memledger: " << e.what() << "\n";
        return kExitRunFailed;
    }
    return kExitOk;
}

} // namespace

void setPngRenderer(PngRenderer renderer)
{
    pngRenderer() = std::move(renderer);
}

int runCli(const CliOptions& o)
{
    if (o.command == "whatif")
        return runWhatIf(o);
    return runAnalyze(o);
}

} // namespace memledger

#include "cli.h"

#include "demo_model.h"
#include "memledger/analysis.h"
#include "memledger/atomic_file.h"
#include "memledger/errors.h"
#include "memledger/report_json.h"
#include "memledger/report_text.h"

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

bool looksLikeJson(const std::string& path)
{
    auto dot = path.rfind('.');
    return dot != std::string::npos && path.substr(dot) == ".json";
}

int runAnalyze(const CliOptions& o)
{
    Report report;
    try {
        report = looksLikeJson(o.model) ? readReportFile(o.model) : analyzeFile(o.model, o.run);
    } catch (const FileError& e) {
        std::cerr << "memledger: " << e.what() << "\n";
        return kExitBadFile;
    } catch (const RunError& e) {
        std::cerr << "memledger: " << (o.model.empty() ? kDemoModelName : o.model) << ": " << e.what() << "\n";
        return kExitRunFailed;
    }
    std::cout << reportToText(report, o.depth);
    try {
        if (!o.json.empty()) {
            writeFileAtomically(o.json, reportToJson(report).dump() + "\n");
            std::cout << "Wrote " << o.json << "\n";
        }
    } catch (const std::exception& e) {
        std::cerr << "memledger: " << e.what() << "\n";
        return kExitRunFailed;
    }
    return kExitOk;
}

} // namespace

int runCli(const CliOptions& o)
{
    if (o.command == "whatif") {
        std::cerr << "memledger: whatif is not available yet\n";
        return kExitUsage;
    }
    return runAnalyze(o);
}

} // namespace memledger

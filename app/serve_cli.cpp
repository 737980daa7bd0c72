#include "serve_cli.h"

#include "cli.h"
#include "demo_model.h"
#include "session/open_file.h"
#include "exports/serve_export.h"
#include "support/errors.h"

#include <nlohmann/json.hpp>

#include <iostream>

namespace memledger {

int runServe(const CliOptions& o)
{
    const std::string name = o.model.empty() ? kDemoModelName : o.model;
    ServePlan plan;
    try {
        auto file = openFileOrDemo(o.model);
        if (!file.model)
            throw RunError("fit --serve needs a model file, not a " + std::string(fileKindName(file.kind)));
        std::cerr << "memledger: recording one prefill on the meta device (vLLM's profile run)\n";
        plan = serveModel(*file.model, o.serve_request);
    } catch (const std::exception&) {
        return failureExit({}, name);
    }
    std::cout << servePlanToText(plan, name);
    return writeOutputs(
        o, [&] { return servePlanToJson(plan, name).dump(2) + "\n"; }, [&] { return servePlanToHtml(plan, name); });
}

} // namespace memledger

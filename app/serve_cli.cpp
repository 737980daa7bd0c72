#include "serve_cli.h"

#include "cli.h"
#include "demo_model.h"
#include "session/open_file.h"
#include "exports/serve_export.h"
#include "support/atomic_file.h"
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
    try {
        if (!o.json.empty()) {
            writeFileAtomically(o.json, servePlanToJson(plan, name).dump(2) + "\n");
            std::cout << "Wrote " << o.json << "\n";
        }
        if (!o.html.empty()) {
            writeFileAtomically(o.html, servePlanToHtml(plan, name));
            std::cout << "Wrote " << o.html << "\n";
        }
    } catch (const std::exception&) {
        return failureExit();
    }
    return kExitOk;
}

} // namespace memledger

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
        const auto& info = file.model->info();
        if (info.generation.cache.empty())
            throw UsageError("fit --serve sizes the KV cache from the generation programs memledger.export saves "
                             "with generate=True, which this file does not hold: export the model again with "
                             "memledger.export(model, (input_ids,), PATH, generate=True)");
        const auto& r = o.serve_request;
        // vLLM's profile run: one prefill of the largest chunk, no longer than a sequence the model takes
        auto chunk = r.max_batched_tokens;
        if (info.generation.max_tokens > 0)
            chunk = std::min(chunk, info.generation.max_tokens);
        std::cerr << "memledger: recording one prefill of " << chunk << " tokens on the meta device\n";
        const auto peak = prefillActivationPeak(*file.model, r.dtype, chunk);
        plan = planServing(info.generation, weightBytesAt(info, r.dtype), peak, info.generation.max_tokens, r);
        plan.prefill_tokens = chunk;
        if (chunk < r.max_batched_tokens)
            plan.notes.push_back("the prefill chunk recorded is " + std::to_string(chunk)
                + " tokens, the longest sequence the model takes");
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

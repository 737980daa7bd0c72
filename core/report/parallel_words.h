#pragma once
// One rank of a data-parallel job (ParallelInfo): how its step was laid out, in the words each view of the
// report prints (the text report and the HTML).
#include "report/report.h"

#include <string>

namespace memledger {

// FSDP's layout of the rank's step: "8 units, parameters gathered in bfloat16, gradients reduced in float32,
// resharded after forward". "" for zero1 and ddp, which gather nothing.
inline std::string shardingLayoutWords(const ParallelInfo& par)
{
    if (par.shard == "ds-zero3")
        return std::to_string(par.units.size()) + " modules with parameters of their own, each gathered in "
            + par.param_dtype + " around its forward and backward (DeepSpeed's stage 3)";
    if (par.shard == "ds-zero1" || par.shard == "ds-zero2")
        return "the " + par.param_dtype + " model whole on every rank (DeepSpeed's stage " + par.shard.substr(7) + ")";
    if (par.shard != "fsdp" && par.shard != "zero2")
        return {};
    return std::to_string(par.units.size()) + (par.units.size() == 1 ? " unit" : " units")
        + ", parameters gathered in " + par.param_dtype + ", gradients reduced in " + par.reduce_dtype + ", "
        + (!par.reshard_after_forward           ? "kept from forward to backward"
                : par.root_reshard_after_forward ? "resharded after forward, the root too"
                                                 : "resharded after forward");
}

// What the rank keeps whole and where its collectives run: "master weights, gradients and optimizer state in
// float32" and, for a CPU job, "gloo's collectives".
inline std::string shardingStateWords(const ParallelInfo& par)
{
    if (par.shard.rfind("ds-", 0) == 0)
        return "a " + par.master_dtype + " master partition and optimizer state, gradients in " + par.param_dtype
            + (par.backend == "gloo" ? "; gloo's collectives (a CPU job)" : "");
    return "master weights, gradients and optimizer state in " + par.master_dtype
        + (par.backend == "gloo" ? "; gloo's collectives (a CPU job)" : "");
}

} // namespace memledger

#pragma once
// The command line's side of one rank of a data-parallel job: --gpus, --shard, --param-dtype, --reduce-dtype,
// --no-reshard-after-forward, --shard-units, --gradient-as-bucket-view (core/whatif/parallel.h does the work).
#include "cli_options.h"
#include "whatif/parallel.h"

#include <string>

namespace memledger {

// The plan for `gpus` ranks with strategy `shard` (defaults: the first --gpus and --shard given, 1 and fsdp),
// the master dtype being --dtype; the units from --shard-units over `layers`. Throws std::invalid_argument.
ParallelPlan parallelPlanFromCli(const CliOptions& o, const std::vector<LayerStats>& layers, std::int64_t gpus = 0,
    const std::string& shard = {});

// `memledger fit MODEL --budget SIZE [--precision P,...] [--shard S,...] [--gpus N,...] [--json FILE]`: the fit
// table (whatif/gpu_fit.h) of the model's training step; returns the exit code.
int runFit(const CliOptions& o);
// `memledger whatif MODEL --mode train --gpus 1,8,64 --shard fsdp,zero1,ddp [--precision P,...] [--batch ...]`:
// rank 0's figures per row; returns the exit code.
int runRankWhatIf(const CliOptions& o);

} // namespace memledger

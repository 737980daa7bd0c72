#pragma once
// --ds-config FILE: a DeepSpeed configuration (the JSON a job passes to deepspeed.initialize, or Hugging Face's
// TrainingArguments(deepspeed=...)) read into the flags it stands for: zero_optimization.stage as --shard ds-zeroN,
// bf16 / fp16 as --param-dtype, offload_optimizer / offload_param as --offload, gradient_accumulation_steps as
// --grad-accum, and the buckets and stage 3's thresholds (DeepSpeedOptions). A flag given on the command line must
// agree with the file. "auto" (Hugging Face's placeholders) keeps memledger's flag or DeepSpeed's default, and says so.
#include "cli_options.h"

#include <string>
#include <vector>

namespace memledger {

// Reads o.ds_config into `o`; returns the notes it has for the user ("auto" values). Throws std::invalid_argument
// naming the file and the key on a file that cannot be read, is not JSON, or asks for what memledger does not model.
std::vector<std::string> applyDeepSpeedConfig(CliOptions& o);

} // namespace memledger

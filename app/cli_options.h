#pragma once
#include "recording/model.h"
#include "whatif/serving.h"
#include "whatif/checkpoint.h"
#include "whatif/parallel.h"

#include <optional>
#include <string>
#include <vector>

namespace memledger {

struct CliOptions {
    std::string command = "analyze"; // analyze | whatif | fit | diff | ranks | gui
    std::vector<std::string> rank_files; // ranks (and the window given several files): the files or folders
    std::string model; // empty: the built-in demo
    RunOptions run;
    std::vector<std::int64_t> batches; // whatif
    std::vector<std::int64_t> seqs; // whatif --seq: sequence lengths (dimension 1 of every token input)
    std::vector<std::string> dtypes; // whatif
    std::vector<std::int64_t> whatif_batches; // analyze --whatif: add the what-if table to the reports
    std::optional<std::int64_t> budget;
    std::string budget_text; // --budget as typed: "80GB", "H100-80GB"
    std::string json, html, png, snapshot_out;
    int depth = 64;
    bool help = false, version = false;
    bool watch = false; // --watch FILE: the window reloads FILE (in `model`) whenever it is rewritten
    bool tensors = false; // analyze --tensors: list every parameter and buffer
    // diff (app/diff_cli.h): `model` is A, `model_b` B, run with `run_b` (the shared options and the --b- ones).
    std::string model_b;
    RunOptions run_b;
    std::vector<std::string> diff_b_flags; // the --b- options given
    std::size_t diff_rows = 40; // --rows: entries the text lists
    bool remedies = false; // analyze --remedies: "What would help"
    std::vector<std::int64_t> tile; // analyze --tile HxW: the tiling remedy's tile
    std::int64_t tile_overlap = 0; // --tile-overlap N: context on each side of a tile
    std::string tile_program; // --tile-program FILE: a program of the tile's input size (fixed-size models)
    // --checkpoint none|full|selective|auto|PATH,... with --checkpoint-every K and --checkpoint-impl: activation
    // checkpointing of the training step (whatif/checkpoint.h). One spec, or for fit and whatif --gpus several
    // (--checkpoint none,selective,full: an axis of the table). Empty: not asked (the step as recorded).
    std::vector<CheckpointSpec> checkpoints;
    bool checkpointed() const { return !checkpoints.empty(); }
    // One rank of a data-parallel training job (whatif/parallel.h): --gpus N and --shard S (lists for whatif).
    std::vector<std::int64_t> gpus;
    std::vector<std::string> shards; // fsdp | zero2 | zero1 | ddp | ds-zero1 | ds-zero2 | ds-zero3
    std::string ds_config; // --ds-config FILE (app/deepspeed_config.h), read into the flags it stands for
    DeepSpeedOptions deepspeed; // ds-zero1/2/3: from --ds-config
    std::string param_dtype, reduce_dtype; // --param-dtype, --reduce-dtype ("": --dtype)
    bool reshard_after_forward = true; // --no-reshard-after-forward
    // --reshard-root-after-forward: fully_shard(model, reshard_after_forward=True) on the root too (FSDP2's default,
    // None, keeps the root's parameters gathered from its forward to its backward)
    bool reshard_root_after_forward = false;
    std::string shard_units; // --shard-units PATTERN
    bool gradient_as_bucket_view = false; // --gradient-as-bucket-view (ddp, zero1)
    std::string backend; // --backend nccl|gloo ("": nccl)
    // --grad-accum K: micro-batches whose gradients are accumulated before each optimizer step (whatif/accumulation.h)
    int grad_accum = 1;
    // fit --global-batch G: samples per optimizer step over all GPUs; each answer chooses its micro-batch and the
    // micro-batches accumulated to reach it (0: not asked)
    std::int64_t global_batch = 0;
    // --offload none|params|optimizer (FSDP2's CPUOffloadPolicy; DeepSpeed's offload_optimizer and offload_param), with
    // --gpus-per-node (the ranks sharing a host) and fit's --host-budget (a node's pinned memory; 0: not checked)
    std::string offload;
    std::vector<std::string> offloads; // fit --offload none,optimizer,params: the offload axis ("" none; empty: offload)
    int gpus_per_node = 8;
    std::int64_t host_budget = 0;
    std::vector<std::string> precisions; // fit --precision: bfloat16-mixed, bfloat16, float32, ...
    bool parallel() const { return !gpus.empty() || !shards.empty(); }
    // fit --serve (whatif/serving.h): a serving engine's layout of one GPU and how many sequences fit; `serve.gpus`
    // from --gpus (one count), `serve.batch` from --batch, the rest from their flags.
    bool serve = false;
    ServeRequest serve_request;
    bool cache_given = false; // --cache (run.cache) was given: generate's only

};

// Throws std::invalid_argument with a message for the user on a usage error.
CliOptions parseCli(const std::vector<std::string>& args);
std::string usageText();
// Throws std::invalid_argument when an output path (flag: --json, --html, --png, --snapshot) is one of the files
// being opened or, for a report, an existing model or snapshot file.
void checkOutputPath(const std::string& flag, const std::string& out, const std::vector<std::string>& inputs);

} // namespace memledger

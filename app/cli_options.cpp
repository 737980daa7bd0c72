#include "cli_options.h"
#include "deepspeed_config.h"
#include "diff_cli.h"

#include "support/dtype.h"
#include "support/format.h"
#include "whatif/gpu_fit.h"
#include "whatif/parallel.h"

#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace memledger {

namespace {

std::int64_t parsePositive(const std::string& what, const std::string& text)
{
    std::size_t used = 0;
    long long v = 0;
    try {
        v = std::stoll(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != text.size() || v <= 0)
        throw std::invalid_argument(what + " must be a positive whole number, not '" + text + "'");
    return v;
}

} // namespace

// An output (--json, --html, --png, --snapshot) never overwrites what the user reads from: the file being opened,
// or, for the reports, any existing model or snapshot file (`analyze --json run.pickle` once wrote a report over
// the snapshot it was meant to read, with no word).
void checkOutputPath(const std::string& flag, const std::string& out, const std::vector<std::string>& inputs)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    if (out.empty() || !fs::exists(out, ec))
        return;
    for (const auto& in : inputs)
        if (!in.empty() && fs::equivalent(out, in, ec))
            throw std::invalid_argument(flag + " " + out + " is the file being opened: name another file to write");
    if (flag == "--snapshot")
        return; // it writes a snapshot: a .pickle is what it is asked for
    std::string ext = fs::path(out).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    for (const char* input : {".pt", ".pt2", ".pth", ".pickle", ".pkl", ".ptl", ".zip"})
        if (ext == input)
            throw std::invalid_argument(flag + " " + out + " would overwrite an existing model or snapshot file: "
                + "name the output FILE" + (flag == "--json" ? ".json" : flag == "--html" ? ".html" : ".png"));
}

std::string usageText()
{
    return "Usage:\n"
           "  memledger [MODEL.pt | REPORT.json | SNAPSHOT.pickle]   open the window (no file: the demo model)\n"
           "  memledger SNAPSHOT.pickle SNAPSHOT.pickle...           the window with one snapshot per rank (Ranks tab)\n"
           "  memledger --watch SNAPSHOT.pickle | REPORT.json         the window, reloading the file at each rewrite\n"
           "  memledger analyze [FILE] [--input SHAPE] [--batch N] [--dtype T] [RUN] [--json FILE] [--html FILE]\n"
           "                    [--png FILE] [--snapshot FILE] [--depth N] [--tensors] [--whatif 8,32,64 [--budget "
           "16GiB]]\n"
           "                    [--remedies [--budget 16GiB] [--tile 512x512 [--tile-overlap N] [--tile-program FILE]]]\n"
           "  memledger whatif MODEL.pt [--input SHAPE] --batch 1,8,32 --dtype float32,bfloat16 [RUN] [--budget 16GiB]\n"
           "                    [--json FILE]\n"
           "  memledger diff A B [RUN] [--b-input SHAPE] [--b-batch N] [--b-dtype T] [--b-mode M] [--b-...]\n"
           "                    [--json FILE] [--html FILE] [--rows N]   compare two models' runs, reports or snapshots\n"
           "                    (RUN options apply to both; --b-... to B only: diff m.pt m.pt --b-dtype bfloat16)\n"
           "  memledger whatif MODEL --input 2x512:int64 --seq 512,2048,8192 [--batch 1,8] [--dtype ...] [--budget SIZE]\n"
           "                    [--json FILE]   along the sequence length of the token inputs\n"
           "  memledger whatif MODEL.pt --mode train --checkpoint PATH[,PATH...]|auto [--budget SIZE]\n"
           "                    [--checkpoint-impl reentrant|non-reentrant] [RUN] [--json FILE]\n"
           "  memledger analyze|whatif|fit MODEL ... --checkpoint none|full|selective [--checkpoint-every K]\n"
           "  memledger analyze|whatif|fit MODEL ... --grad-accum K   (K micro-batches per optimizer step)\n"
           "  memledger fit MODEL --budget SIZE --global-batch G   (the micro-batch and micro-steps that reach G)\n"
           "  memledger analyze|whatif|fit MODEL ... --offload params|optimizer [--gpus-per-node N] [--host-budget SIZE]\n"
           "                    activation checkpointing of each repeated block (non-reentrant; selective keeps\n"
           "                    the outputs of matmuls and attention), on one device or per rank (--gpus,\n"
           "                    --shard); fit and whatif --gpus take several: --checkpoint none,selective,full\n"
           "                    PATH may hold * for any one module name: layers.*.feed_forward\n"
           "  memledger analyze MODEL --mode train --gpus N --shard fsdp|zero2|zero1|ddp|ds-zero1|ds-zero2|ds-zero3\n"
           "                    [--param-dtype T] [--ds-config ds_config.json]\n"
           "                    [--reduce-dtype T] [--no-reshard-after-forward] [--reshard-root-after-forward]\n"
           "                    [--shard-units PATH.*,PATH] [--gradient-as-bucket-view] [--backend nccl|gloo] [RUN]\n"
           "                    one rank of a data-parallel job (rank 0); gloo: a CPU job's collectives, with their\n"
           "                    own buffers\n"
           "  memledger whatif MODEL --mode train --gpus 1,8,64 --shard fsdp,zero1,ddp [--batch ...] [--budget SIZE]\n"
           "                    [--precision bfloat16-mixed,float32] [--json FILE]   rank 0 per row\n"
           "  memledger fit MODEL --budget SIZE [--input SHAPE] [--precision bfloat16-mixed,bfloat16,float32]\n"
           "                    [--shard fsdp,zero2,zero1,ddp] [--gpus 1,2,...,1024] [--optimizer O] [--json FILE] [--html FILE]\n"
           "                    the fewest GPUs and the largest micro-batch per rank that fit, per precision and strategy\n"
           "  memledger fit MODEL --serve --budget SIZE --context C [--batch B] [--gpus N] [--dtype T] [--kv-dtype T]\n"
           "                    [--block-size 16] [--memory-fraction 0.9] [--max-batched-tokens 8192] [--json FILE]\n"
           "                    [--html FILE]   serving: the most sequences of C tokens at once on a GPU (N: tensor\n"
           "                    parallel), the longest context at B, in a serving engine's layout (vLLM's); a .pt2 saved\n"
           "                    with generate=True\n"
           "  memledger ranks FILE... | FOLDER [--json FILE] [--html FILE]   one snapshot (or report) per rank: which\n"
           "                    rank peaks highest, the spread, where each peak falls\n"
           "  memledger --help | --version\n\n"
           "  SHAPE   inputs, comma-separated, each a shape with an optional type and fill: 1x3x224x224 or\n"
           "          2x512:int64,2x512:bool (token ids filled with 0, masks with false; =V fills V: 2x512:int64=7);\n"
           "          types float32 (default), float16, bfloat16, int64, int32, bool\n"
           "  T       float32 | bfloat16 | float16 (floating-point weights and inputs are converted before the run);\n"
           "          whatif's --dtype also takes bfloat16-mixed | float16-mixed: the float32 model under --autocast\n"
           "  SIZE    a budget: 16GiB, 80GB (powers of 1000), or a GPU by name, its memory as PyTorch reports it:\n"
           "          H200, H100-80GB, A100-80GB, A100-40GB, L40S, L4, A10G, 4090, 3090, V100-32GB, V100-16GB, T4\n"
           "  RUN     --mode inference|train|generate (train: one training step: forward, loss, backward, optimizer;\n"
           "          generate: greedy generation of --new-tokens N tokens per row from the prompt given with --input\n"
           "          BxP:int64, as transformers' generate runs it: the prefill, then a decode step per token with the\n"
           "          KV cache; a .pt2 saved by memledger.export(model, (ids,), PATH, generate=True))\n"
           "          --cache dynamic|static (generate: transformers' DynamicCache, the default, or StaticCache,\n"
           "          cache_implementation=\"static\": prompt + new tokens - 1 slots per layer from the prefill on)\n"
           "          --optimizer sgd|adam|adamw|none (train; sgd: momentum 0.9)  --loss auto|sum|cross_entropy|next_token\n"
           "          --hold-output step|backward|none (train: how long the loop holds the output and the loss; step,\n"
           "          the default: until the step returns, the previous step's until the forward returns, as nanoGPT's\n"
           "          and Hugging Face's loops; backward: freed after backward; none: never named)\n"
           "          --lifetimes eager|graph (a .pt2: eager, the default: each value lives as the eager Python it\n"
           "          was exported from holds it, a local until reassigned or its function returns; graph: until its\n"
           "          last reader, as torch.export.load(FILE).module() and torch.compile run it)\n"
           "          --ops LIB,... (operator libraries to load, as torch.ops.load_library; torchvision's is found)\n"
           "          --threads N (libtorch's intra-op threads)  --seq N (dimension 1 of every token input)\n"
           "          --device cpu|meta|cuda|cuda:N (meta: shapes only, no memory, figures computed from shapes; a GPU\n"
           "          needs a memledger built against a libtorch with CUDA; default cpu, meta for a .pt2 whose weights\n"
           "          are meta tensors, exported from a model built under torch.device(\"meta\"))\n"
           "          --cudnn-benchmark on|off (CUDA: cuDNN's autotuner; default off)\n"
           "          --autocast bfloat16|float16 (libtorch's autocast for the run's device around the forward and\n"
           "          the loss, the weights staying in --dtype)  --autocast-cache on|off (its weight-cast cache; default on)\n"
           "  FILE    a torch.export program (torch.export.save, .pt2), a TorchScript model (torch.jit.save), a\n"
           "          memledger JSON report, or a CUDA memory snapshot\n"
           "          (torch.cuda.memory._dump_snapshot); no FILE: the built-in demo (RFBNet, 1x1x300x300);\n"
           "          demo:mnist-train.pt: an MNIST CNN (conv1 1->32, conv2 32->64, fc1, fc2), one SGD training\n"
           "          step at batch 64\n\n"
           "Exit codes: 0 ok, 2 usage, 3 bad model file, 4 run failed.\n";
}

CliOptions parseCli(const std::vector<std::string>& args)
{
    if (!args.empty() && args.front() == "diff")
        return parseDiffCli(std::vector<std::string>(args.begin() + 1, args.end()));
    CliOptions o;
    std::string checkpointText; // --checkpoint, typed once the flags that qualify it are read
    int checkpointEvery = 1;
    std::optional<CheckpointImpl> checkpointImpl;
    std::size_t i = 0;
    if (i < args.size() && (args[i] == "analyze" || args[i] == "whatif" || args[i] == "ranks" || args[i] == "fit")) {
        o.command = args[i];
        ++i;
        if (o.command == "fit") { // a fine-tune's question: an AdamW training step unless told otherwise
            o.run.mode = RunMode::Train;
            o.run.optimizer = "adamw";
        }
    } else {
        o.command = "gui";
    }
    auto value = [&](const std::string& flag) -> std::string {
        if (i + 1 >= args.size())
            throw std::invalid_argument(flag + " needs a value");
        return args[++i];
    };
    // --batch and --seq: a list for 'whatif', one number (the run's) for the other commands.
    auto counts = [&](const std::string& flag, std::vector<std::int64_t>& list, std::optional<std::int64_t>& run) {
        auto v = value(flag);
        list.clear();
        for (const auto& n : splitComma(v))
            list.push_back(parsePositive(flag, n));
        if (list.empty())
            throw std::invalid_argument(flag + " needs a number");
        if (o.command != "whatif") {
            if (list.size() != 1)
                throw std::invalid_argument(flag + " takes one number here (several are for 'whatif')");
            run = list.front();
        }
    };
    for (; i < args.size(); ++i) {
        const auto& a = args[i];
        if (a == "--help" || a == "-h")
            o.help = true;
        else if (a == "--version")
            o.version = true;
        else if (a == "--tensors")
            o.tensors = true;
        else if (a == "--watch") {
            if (o.command != "gui")
                throw std::invalid_argument("--watch is for the window: memledger --watch FILE, not '" + o.command + "'");
            o.watch = true;
            auto file = value(a);
            if (!o.model.empty() && o.model != file)
                throw std::invalid_argument("--watch follows one file, not also '" + o.model + "'");
            o.model = file;
        }
        else if (a == "--remedies")
            o.remedies = true;
        else if (a == "--tile") {
            const auto v = value(a);
            std::vector<std::vector<std::int64_t>> shapes;
            try {
                shapes = parseShapes(v);
            } catch (const std::exception&) {
            }
            if (shapes.size() != 1 || shapes[0].empty()
                || std::any_of(shapes[0].begin(), shapes[0].end(), [](std::int64_t d) { return d <= 0; }))
                throw std::invalid_argument("--tile '" + v + "' is not a tile shape like 512x512");
            o.tile = shapes[0];
        }
        else if (a == "--tile-overlap")
            o.tile_overlap = parsePositive(a, value(a));
        else if (a == "--tile-program")
            o.tile_program = value(a);
        else if (a == "--input") {
            auto parsed = parseInputs(value(a));
            o.run.inputs = std::move(parsed.shapes);
            o.run.input_types = std::move(parsed.types);
        }
        else if (a == "--batch")
            counts(a, o.batches, o.run.batch);
        else if (a == "--seq")
            counts(a, o.seqs, o.run.seq);
        else if (a == "--dtype") {
            o.dtypes = splitComma(value(a));
            for (const auto& d : o.dtypes)
                if (o.command == "whatif" ? !isSupportedPrecision(d) : !isSupportedDtype(d))
                    throw std::invalid_argument("--dtype '" + d + "' is not one of float32, bfloat16, float16"
                        + (o.command == "whatif" ? ", bfloat16-mixed, float16-mixed (autocast over float32 weights)" : ""));
            if (o.dtypes.empty())
                throw std::invalid_argument("--dtype needs a value");
            if (o.command != "whatif" && o.dtypes.size() != 1)
                throw std::invalid_argument("--dtype takes one value here (several are for 'whatif')");
            o.run.dtype = masterDtypeOf(o.dtypes.front());
            if (isMixedPrecision(o.dtypes.front()))
                o.run.autocast = autocastDtypeOf(o.dtypes.front());
        } else if (a == "--whatif") {
            for (const auto& b : splitComma(value(a)))
                o.whatif_batches.push_back(parsePositive("--whatif", b));
            if (o.whatif_batches.empty())
                throw std::invalid_argument("--whatif needs batch sizes like 1,8,32");
        } else if (a == "--budget") {
            auto v = value(a);
            o.budget = parseBudget(v);
            if (!o.budget || *o.budget <= 0)
                throw std::invalid_argument("--budget '" + v + "' is not a size like 16GiB nor a GPU (" + gpuPresetList() + ")");
            o.budget_text = v;
        } else if (a == "--mode") {
            const std::string mode = value(a);
            o.run.mode = fromName<RunMode>(mode);
            if (!o.run.mode)
                throw std::invalid_argument("--mode '" + mode + "' is not inference, train or generate");
        } else if (a == "--new-tokens") {
            o.run.new_tokens = parsePositive(a, value(a));
        } else if (a == "--cache") {
            const std::string cache = value(a);
            const auto kind = fromName<GenerationCache>(cache);
            if (!kind)
                throw std::invalid_argument("--cache '" + cache + "' is not dynamic or static");
            o.run.cache = *kind;
            o.cache_given = true;
        } else if (a == "--optimizer") {
            o.run.optimizer = value(a);
            if (o.run.optimizer != "sgd" && o.run.optimizer != "adam" && o.run.optimizer != "adamw"
                && o.run.optimizer != "none")
                throw std::invalid_argument("--optimizer '" + o.run.optimizer + "' is not sgd, adam, adamw or none");
        } else if (a == "--loss") {
            o.run.loss = value(a);
            if (o.run.loss != "auto" && o.run.loss != "sum" && o.run.loss != "cross_entropy" && o.run.loss != "next_token")
                throw std::invalid_argument("--loss '" + o.run.loss + "' is not auto, sum, cross_entropy or next_token");
        } else if (a == "--hold-output") {
            o.run.hold_output = value(a);
            if (o.run.hold_output != "step" && o.run.hold_output != "backward" && o.run.hold_output != "none")
                throw std::invalid_argument("--hold-output '" + o.run.hold_output + "' is not step, backward or none");
        } else if (a == "--lifetimes") {
            o.run.lifetimes = value(a);
            if (o.run.lifetimes != "eager" && o.run.lifetimes != "graph")
                throw std::invalid_argument("--lifetimes '" + o.run.lifetimes + "' is not eager or graph");
        } else if (a == "--ops") { // operator libraries (torch.ops.load_library's), loaded where an operator is missing
            for (const auto& path : splitComma(value(a))) {
                std::error_code ec;
                if (!std::filesystem::is_regular_file(path, ec))
                    throw std::invalid_argument("--ops '" + path + "': no such file (an operator library, a .so)");
                const char* had = std::getenv("MEMLEDGER_OPS");
                const std::string list = had && *had ? std::string(had) + ":" + path : path;
                setenv("MEMLEDGER_OPS", list.c_str(), 1);
            }
        } else if (a == "--threads") {
            o.run.threads = static_cast<int>(parsePositive("--threads", value(a)));
        } else if (a == "--device") {
            o.run.device = value(a);
            const auto& d = o.run.device;
            bool cuda = d == "cuda"
                || (d.rfind("cuda:", 0) == 0 && d.size() > 5
                    && d.find_first_not_of("0123456789", 5) == std::string::npos);
            if (d != "cpu" && d != "meta" && !cuda)
                throw std::invalid_argument("--device '" + d + "' is not cpu, meta, cuda or cuda:N");
        } else if (a == "--cudnn-benchmark") {
            auto v = value(a);
            if (v != "on" && v != "off")
                throw std::invalid_argument("--cudnn-benchmark '" + v + "' is not on or off");
            o.run.cudnn_benchmark = v == "on";
        } else if (a == "--autocast") {
            o.run.autocast = value(a);
            if (o.run.autocast != "bfloat16" && o.run.autocast != "float16")
                throw std::invalid_argument("--autocast '" + o.run.autocast + "' is not bfloat16 or float16");
        } else if (a == "--autocast-cache") {
            auto v = value(a);
            if (v != "on" && v != "off")
                throw std::invalid_argument("--autocast-cache '" + v + "' is not on or off");
            o.run.autocast_cache = v == "on";
        } else if (a == "--checkpoint") {
            checkpointText = value(a);
            if (splitComma(checkpointText).empty())
                throw std::invalid_argument("--checkpoint needs none, full, selective, auto or module paths (layers.*)");
        } else if (a == "--grad-accum") {
            const auto k = parsePositive(a, value(a));
            if (k > 1 << 20)
                throw std::invalid_argument("--grad-accum " + std::to_string(k) + " is more micro-batches than any job accumulates");
            o.grad_accum = static_cast<int>(k);
        } else if (a == "--offload") {
            o.offloads.clear();
            for (auto v : splitComma(value(a))) {
                if (v != "none" && v != "params" && v != "optimizer")
                    throw std::invalid_argument("--offload '" + v + "' is not none, params or optimizer");
                o.offloads.push_back(v == "none" ? std::string() : v);
            }
            if (o.offloads.empty())
                throw std::invalid_argument("--offload takes none, params or optimizer");
            if (o.offloads.size() > 1 && o.command != "fit")
                throw std::invalid_argument("--offload takes one here (several, an axis, are for 'fit')");
            o.offload = o.offloads.size() == 1 ? o.offloads.front() : std::string();
            if (o.offloads.size() == 1)
                o.offloads.clear();
        } else if (a == "--ds-config") {
            o.ds_config = value(a);
        } else if (a == "--gpus-per-node") {
            o.gpus_per_node = static_cast<int>(parsePositive(a, value(a)));
        } else if (a == "--host-budget") {
            auto v = value(a);
            auto b = parseBudget(v);
            if (!b)
                throw std::invalid_argument("--host-budget '" + v + "' is not a size (512GiB, 1TB)");
            o.host_budget = *b;
        } else if (a == "--global-batch") {
            o.global_batch = parsePositive(a, value(a));
        } else if (a == "--serve") {
            o.serve = true;
        } else if (a == "--context") {
            o.serve_request.context = parsePositive(a, value(a));
        } else if (a == "--kv-dtype") {
            o.serve_request.kv_dtype = value(a);
            if (kvTypeBytes(o.serve_request.kv_dtype) == 0)
                throw std::invalid_argument("--kv-dtype '" + o.serve_request.kv_dtype
                    + "' is not float32, bfloat16, float16 or float8");
        } else if (a == "--block-size") {
            o.serve_request.block_size = parsePositive(a, value(a));
        } else if (a == "--max-batched-tokens") {
            o.serve_request.max_batched_tokens = parsePositive(a, value(a));
        } else if (a == "--memory-fraction") {
            const auto v = value(a);
            char* end = nullptr;
            const double f = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end != '\0' || !(f > 0.0 && f <= 1.0))
                throw std::invalid_argument("--memory-fraction '" + v + "' is not a share in (0, 1], such as 0.9");
            o.serve_request.memory_fraction = f;
        } else if (a == "--checkpoint-every") {
            checkpointEvery = static_cast<int>(parsePositive(a, value(a)));
        } else if (a == "--checkpoint-impl") {
            auto v = value(a);
            checkpointImpl = checkpointImplFromName(v);
            if (!checkpointImpl)
                throw std::invalid_argument("--checkpoint-impl '" + v + "' is not reentrant or non-reentrant");
        } else if (a == "--gpus") {
            o.gpus.clear();
            for (const auto& n : splitComma(value(a)))
                o.gpus.push_back(parsePositive(a, n));
            if (o.gpus.empty() || (o.command != "whatif" && o.command != "fit" && o.gpus.size() != 1))
                throw std::invalid_argument("--gpus takes one number here (several are for 'whatif')");
        } else if (a == "--shard") {
            o.shards = splitComma(value(a));
            for (const auto& s : o.shards)
                if (!shardingFromName(s))
                    throw std::invalid_argument("--shard '" + s + "' is not one of " + shardingNames());
            if (o.shards.empty() || (o.command != "whatif" && o.command != "fit" && o.shards.size() != 1))
                throw std::invalid_argument("--shard takes one strategy here (several are for 'whatif')");
        } else if (a == "--param-dtype" || a == "--reduce-dtype") {
            auto d = value(a);
            if (!isSupportedDtype(d) && d != "float64")
                throw std::invalid_argument(a + " '" + d + "' is not one of float32, bfloat16, float16");
            (a == "--param-dtype" ? o.param_dtype : o.reduce_dtype) = d;
        } else if (a == "--precision") {
            o.precisions = splitComma(value(a));
            checkPrecisions(o.precisions);
        } else if (a == "--no-reshard-after-forward")
            o.reshard_after_forward = false;
        else if (a == "--reshard-root-after-forward")
            o.reshard_root_after_forward = true;
        else if (a == "--shard-units")
            o.shard_units = value(a);
        else if (a == "--gradient-as-bucket-view")
            o.gradient_as_bucket_view = true;
        else if (a == "--backend") {
            o.backend = value(a);
            if (o.backend != "nccl" && o.backend != "gloo")
                throw std::invalid_argument("--backend '" + o.backend + "' is not nccl or gloo");
        }
        else if (a == "--json")
            o.json = value(a);
        else if (a == "--html")
            o.html = value(a);
        else if (a == "--png")
            o.png = value(a);
        else if (a == "--snapshot")
            o.snapshot_out = value(a);
        else if (a == "--depth")
            o.depth = static_cast<int>(parsePositive("--depth", value(a)));
        else if (!a.empty() && a[0] == '-')
            throw std::invalid_argument("unknown option " + a);
        else if (o.command == "ranks")
            o.rank_files.push_back(a);
        else if (o.command == "gui" && !o.model.empty()) { // the window with one file per rank
            if (o.rank_files.empty())
                o.rank_files.push_back(o.model);
            o.rank_files.push_back(a);
        }
        else if (o.model.empty())
            o.model = a;
        else
            throw std::invalid_argument("only one file can be given, not also '" + a + "'");
    }
    if (!o.ds_config.empty()) {
        if (o.command != "analyze" && o.command != "whatif" && o.command != "fit")
            throw std::invalid_argument("--ds-config is for analyze, whatif and fit (a rank of a DeepSpeed job)");
        for (const auto& note : applyDeepSpeedConfig(o))
            std::cerr << "memledger: " << note << "\n";
    }
    std::vector<std::string> inputs = o.rank_files;
    inputs.push_back(o.model);
    checkOutputPath("--json", o.json, inputs);
    checkOutputPath("--html", o.html, inputs);
    checkOutputPath("--png", o.png, inputs);
    checkOutputPath("--snapshot", o.snapshot_out, inputs);
    if (o.watch && !o.rank_files.empty())
        throw std::invalid_argument("--watch follows one file, not one per rank");
    if (o.watch && o.model.rfind("demo:", 0) == 0)
        throw std::invalid_argument("--watch follows a file a job rewrites, not the built-in " + o.model);
    if (o.command == "ranks" && o.rank_files.empty() && !o.help)
        throw std::invalid_argument("ranks needs the snapshots (or reports) of the ranks, or a folder of them");
    if (o.grad_accum > 1) {
        if (o.command != "whatif" && o.command != "analyze" && o.command != "fit")
            throw std::invalid_argument("--grad-accum is for analyze, whatif and fit (a training step)");
        if (o.remedies)
            throw std::invalid_argument("--remedies with --grad-accum is not built yet (each remedy's figures are one "
                                        "micro-step's): ask for the remedies without --grad-accum");
        if (o.command == "whatif" && !checkpointText.empty() && !o.parallel())
            throw std::invalid_argument("--grad-accum with a one-device whatif --checkpoint (the checkpoint planner's "
                                        "table): use analyze MODEL --checkpoint ... --grad-accum K, or whatif --gpus");
        if (o.run.mode == RunMode::Inference && !o.parallel())
            throw std::invalid_argument("--grad-accum accumulates a training step's gradients: use --mode train");
    }
    if (!o.offload.empty() && !o.parallel() && o.command != "fit")
        throw std::invalid_argument("--offload lays out a rank of a sharded job: give --gpus N --shard fsdp (or zero2)");
    if (o.host_budget > 0 && (o.command != "fit" || (o.offload.empty() && o.offloads.empty())))
        throw std::invalid_argument("--host-budget checks fit's offloaded ranks: fit MODEL --offload params --host-budget SIZE");
    if (o.global_batch > 0) {
        if (o.command != "fit")
            throw std::invalid_argument("--global-batch is fit's: it chooses each answer's micro-batch and micro-steps "
                                        "(analyze and whatif take --batch and --grad-accum)");
        if (o.grad_accum > 1)
            throw std::invalid_argument("--global-batch chooses the micro-batches accumulated: give it or --grad-accum");
    }
    if (checkpointText.empty() && (checkpointEvery != 1 || checkpointImpl))
        throw std::invalid_argument("--checkpoint-every and --checkpoint-impl qualify --checkpoint full|selective|PATH,...");
    if (!checkpointText.empty()) {
        o.checkpoints = parseCheckpointSpecs(checkpointText, checkpointEvery, checkpointImpl);
        if (o.command != "whatif" && o.command != "analyze" && o.command != "fit")
            throw std::invalid_argument("--checkpoint is for analyze, whatif and fit (a training step)");
        if (o.run.mode == RunMode::Inference)
            throw std::invalid_argument("--checkpoint predicts a training step: use --mode train");
        if (o.checkpoints.size() > 1 && o.command != "fit" && !(o.command == "whatif" && o.parallel()))
            throw std::invalid_argument("--checkpoint takes several of none, full and selective for fit and whatif "
                                        "--gpus (a column each); analyze and a one-device whatif take one");
        const bool automatic = o.checkpoints.front().mode == CheckpointMode::Auto;
        const bool oneRank = o.command == "analyze" && o.parallel();
        if (automatic && !oneRank && (o.parallel() || o.command != "whatif"))
            throw std::invalid_argument("--checkpoint auto plans the checkpoints of one device (memledger whatif MODEL "
                                        "--checkpoint auto --budget SIZE) or of one rank (analyze MODEL --gpus N --shard "
                                        "S --checkpoint auto --budget GPU); fit and whatif --gpus take none, selective "
                                        "and full as a column");
        if (automatic && oneRank && o.grad_accum > 1)
            throw std::invalid_argument("--checkpoint auto with --grad-accum is not built yet: give --checkpoint "
                                        "none|selective|full");
    }
    if (o.command == "fit" && !o.budget && !o.help)
        throw std::invalid_argument("fit needs --budget: a GPU (H100-80GB, A100-40GB, H200, ...) or a size (80GB)");
    if (!o.precisions.empty() && o.command != "fit" && !(o.command == "whatif" && o.parallel()))
        throw std::invalid_argument("--precision is for 'memledger fit' and 'whatif --gpus ... --shard ...' (analyze "
                                    "takes --dtype and --param-dtype)");
    if (o.command == "fit") {
    } else if (o.parallel() && o.command != "analyze" && o.command != "whatif")
        throw std::invalid_argument("--gpus and --shard are for 'analyze' and 'whatif' with --mode train");
    if (o.parallel() && o.run.mode && *o.run.mode != RunMode::Train) // unset: a training step, whatever the file's
        throw std::invalid_argument("--gpus and --shard lay out a training step, not --mode inference");
    if ((!o.param_dtype.empty() || !o.reduce_dtype.empty() || !o.reshard_after_forward || o.reshard_root_after_forward
            || !o.shard_units.empty() || o.gradient_as_bucket_view || !o.backend.empty())
        && !o.parallel() && o.command != "fit")
        throw std::invalid_argument("--param-dtype, --reduce-dtype, --no-reshard-after-forward, "
                                    "--reshard-root-after-forward, --shard-units, --gradient-as-bucket-view and "
                                    "--backend describe a sharded job: add --gpus N --shard S");
    if (o.reshard_root_after_forward && !o.reshard_after_forward)
        throw std::invalid_argument("--reshard-root-after-forward and --no-reshard-after-forward contradict each other: "
                                    "the root reshards after its forward only where the blocks do");
    if (o.reshard_root_after_forward && !o.shards.empty()
        && std::find(o.shards.begin(), o.shards.end(), "fsdp") == o.shards.end())
        throw std::invalid_argument("--reshard-root-after-forward is fsdp's: zero2 keeps every unit gathered from "
                                    "its forward to its backward, and zero1 and ddp never gather (add --shard fsdp)");
    if (o.checkpointed() && o.checkpoints.front().mode == CheckpointMode::Auto && !o.budget)
        throw std::invalid_argument("--checkpoint auto needs --budget SIZE (the peak total to fit)");
    const bool servingFlags = o.serve_request.context > 0 || !o.serve_request.kv_dtype.empty()
        || o.serve_request.block_size != 16 || o.serve_request.max_batched_tokens != 8192
        || o.serve_request.memory_fraction != 0.9;
    if (servingFlags && !o.serve)
        throw std::invalid_argument("--context, --kv-dtype, --block-size, --max-batched-tokens and --memory-fraction "
                                    "describe serving: memledger fit MODEL --serve --budget SIZE --context C");
    if (o.serve) {
        if (o.command != "fit")
            throw std::invalid_argument("--serve is fit's: memledger fit MODEL --serve --budget SIZE --context C");
        if (o.serve_request.context <= 0 && !o.help)
            throw std::invalid_argument("fit --serve needs --context C: the tokens of one sequence (prompt and "
                                        "generated)");
        if (o.gpus.size() > 1 || !o.shards.empty() || !o.precisions.empty() || o.checkpointed() || o.global_batch > 0
            || !o.offloads.empty() || !o.offload.empty() || o.grad_accum > 1 || o.batches.size() > 1)
            throw std::invalid_argument("fit --serve takes --gpus N (one count: tensor parallel), --batch B (one), "
                                        "--dtype T and the serving flags; --shard, --precision, --checkpoint, "
                                        "--offload, --grad-accum and --global-batch are a training fit's");
        o.serve_request.gpus = o.gpus.empty() ? 1 : static_cast<int>(o.gpus.front());
        o.serve_request.batch = o.run.batch.value_or(0);
        o.serve_request.dtype = o.dtypes.empty() ? "bfloat16" : o.dtypes.front();
        if (o.budget) {
            o.serve_request.budget = *o.budget;
            o.serve_request.budget_text = o.budget_text;
        }
    }
    if (o.run.new_tokens > 0 && o.run.mode != RunMode::Generate)
        throw std::invalid_argument("--new-tokens is the generated tokens of --mode generate: add it");
    if (o.cache_given && o.run.mode != RunMode::Generate)
        throw std::invalid_argument("--cache is the KV cache of --mode generate: add it");
    if (o.run.mode == RunMode::Generate) {
        if (o.run.new_tokens < 1)
            throw std::invalid_argument("--mode generate needs --new-tokens N (the tokens generated per row)");
        if (o.command != "analyze" && o.command != "gui" && !(o.command == "fit" && o.serve))
            throw std::invalid_argument("--mode generate is analyze's (and the window's) for now: " + o.command
                + " does not vary generation yet (run analyze once per setting)");
        if (!o.whatif_batches.empty() || o.remedies || o.parallel() || o.grad_accum > 1 || o.checkpointed())
            throw std::invalid_argument("--mode generate records one generation: --whatif, --remedies, --gpus, "
                                        "--grad-accum and --checkpoint do not apply to it yet");
    }
    if (!o.tile.empty() && !o.remedies)
        throw std::invalid_argument("--tile is the tiling remedy's: add --remedies");
    if ((o.tile_overlap > 0 || !o.tile_program.empty()) && o.tile.empty())
        throw std::invalid_argument(std::string(o.tile_overlap > 0 ? "--tile-overlap" : "--tile-program")
            + " describes the tiles of --tile HxW: add it");
    return o;
}

} // namespace memledger

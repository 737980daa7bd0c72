#include "deepspeed_config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <stdexcept>

namespace memledger {

namespace {

bool isAuto(const nlohmann::json& v)
{
    return v.is_string() && v.get<std::string>() == "auto";
}

} // namespace

std::vector<std::string> applyDeepSpeedConfig(CliOptions& o)
{
    std::vector<std::string> notes;
    const auto& path = o.ds_config;
    std::ifstream in(path);
    if (!in)
        throw std::invalid_argument("--ds-config " + path + ": cannot be read");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in, nullptr, true, true);
    } catch (const std::exception& e) {
        throw std::invalid_argument("--ds-config " + path + ": not JSON (" + e.what() + ")");
    }
    if (!j.is_object())
        throw std::invalid_argument("--ds-config " + path + ": not a DeepSpeed configuration (a JSON object)");
    auto fail = [&](const std::string& key, const std::string& why) {
        throw std::invalid_argument("--ds-config " + path + ": " + key + " " + why);
    };
    // A count: an integer, or a float such as 5e8; "auto" keeps `fallback`.
    auto count = [&](const nlohmann::json& parent, const std::string& key, std::int64_t& into) {
        if (!parent.contains(key) || parent[key].is_null())
            return;
        const auto& v = parent[key];
        if (isAuto(v)) {
            notes.push_back("--ds-config " + path + ": " + key + " is \"auto\" (Hugging Face sets it from the model's "
                "hidden size): DeepSpeed's default, " + std::to_string(into) + ", is used");
            return;
        }
        if (!v.is_number() || v.get<double>() < 0 || std::floor(v.get<double>()) != v.get<double>())
            fail(key, "is not a count of elements");
        into = static_cast<std::int64_t>(v.get<double>());
    };
    auto enabled = [&](const char* section) {
        if (!j.contains(section) || !j[section].is_object() || !j[section].contains("enabled"))
            return false;
        const auto& v = j[section]["enabled"];
        if (isAuto(v)) {
            notes.push_back("--ds-config " + path + ": " + section + ".enabled is \"auto\": --param-dtype decides");
            return false;
        }
        if (!v.is_boolean())
            fail(std::string(section) + ".enabled", "is not true or false");
        return v.get<bool>();
    };

    const nlohmann::json zero = j.value("zero_optimization", nlohmann::json::object());
    if (!zero.is_object())
        fail("zero_optimization", "is not an object");
    const int stage = zero.value("stage", 0);
    if (stage < 1 || stage > 3)
        fail("zero_optimization.stage", std::to_string(stage) + " is not a ZeRO stage memledger lays out (1, 2 or 3; "
                                                                 "stage 0 is data parallelism: --shard ddp)");
    const std::string shard = "ds-zero" + std::to_string(stage);
    if (o.shards.empty())
        o.shards = {shard};
    else if (o.shards.size() != 1 || o.shards.front() != shard)
        fail("zero_optimization.stage", std::to_string(stage) + " is " + shard + ", not --shard " + o.shards.front());

    const bool bf16 = enabled("bf16"), fp16 = enabled("fp16");
    if (bf16 && fp16)
        fail("bf16 and fp16", "are both enabled");
    const std::string dtype = bf16 ? "bfloat16" : fp16 ? "float16" : "";
    if (!dtype.empty()) {
        if (!o.param_dtype.empty() && o.param_dtype != dtype)
            fail(bf16 ? "bf16.enabled" : "fp16.enabled", "computes in " + dtype + ", not --param-dtype " + o.param_dtype);
        o.param_dtype = dtype;
    }

    auto device = [&](const char* section) -> std::string {
        if (!zero.contains(section) || !zero[section].is_object())
            return "none";
        const auto d = zero[section].value("device", std::string("none"));
        if (d == "nvme")
            fail(std::string("zero_optimization.") + section + ".device", "\"nvme\" (ZeRO-Infinity) is not modelled: cpu or none");
        if (d != "cpu" && d != "none")
            fail(std::string("zero_optimization.") + section + ".device", "\"" + d + "\" is not cpu or none");
        return d;
    };
    const auto optimizerDevice = device("offload_optimizer"), paramDevice = device("offload_param");
    std::string offload = paramDevice == "cpu" ? "params" : optimizerDevice == "cpu" ? "optimizer" : "";
    if (paramDevice == "cpu" && optimizerDevice != "cpu")
        fail("zero_optimization.offload_param", "without offload_optimizer is not modelled (give both, as DeepSpeed's "
                                                "estimators do)");
    if (paramDevice == "cpu" && stage != 3)
        fail("zero_optimization.offload_param", "is stage 3's");
    if (!o.offloads.empty())
        fail("zero_optimization.offload_optimizer", "sets the job's offload: fit's --offload axis and --ds-config "
                                                    "are one or the other");
    if (!o.offload.empty() && o.offload != offload)
        fail("offload", "is \"" + (offload.empty() ? std::string("none") : offload) + "\", not --offload " + o.offload);
    o.offload = offload;

    auto& d = o.deepspeed;
    count(zero, "reduce_bucket_size", d.reduce_bucket_size);
    count(zero, "stage3_prefetch_bucket_size", d.prefetch_bucket_size);
    count(zero, "stage3_max_live_parameters", d.max_live_parameters);
    count(zero, "stage3_max_reuse_distance", d.max_reuse_distance);
    count(zero, "stage3_param_persistence_threshold", d.param_persistence_threshold);
    if (zero.contains("overlap_comm") && !isAuto(zero["overlap_comm"])) {
        if (!zero["overlap_comm"].is_boolean())
            fail("zero_optimization.overlap_comm", "is not true or false");
        d.overlap_comm = zero["overlap_comm"].get<bool>() && stage < 3;
    }
    if (j.contains("data_types") && j["data_types"].is_object() && j["data_types"].contains("grad_accum_dtype")
        && !j["data_types"]["grad_accum_dtype"].is_null()) {
        const auto g = j["data_types"]["grad_accum_dtype"].get<std::string>();
        d.grad_accum_dtype = g == "fp32" || g == "float32" ? "float32" : g == "bf16" || g == "bfloat16" ? "bfloat16"
            : g == "fp16" || g == "float16"                                                     ? "float16"
                                                                                                 : "";
        if (d.grad_accum_dtype.empty())
            fail("data_types.grad_accum_dtype", "\"" + g + "\" is not fp32, bf16 or fp16");
    }
    if (j.contains("gradient_accumulation_steps") && !isAuto(j["gradient_accumulation_steps"])) {
        const auto& v = j["gradient_accumulation_steps"];
        if (!v.is_number_integer() || v.get<std::int64_t>() < 1)
            fail("gradient_accumulation_steps", "is not a positive integer");
        const int k = static_cast<int>(v.get<std::int64_t>());
        if (o.grad_accum != 1 && o.grad_accum != k)
            fail("gradient_accumulation_steps", std::to_string(k) + " is not --grad-accum " + std::to_string(o.grad_accum));
        if (o.command != "fit" || o.global_batch == 0)
            o.grad_accum = k;
    }
    if (j.contains("train_micro_batch_size_per_gpu") && j["train_micro_batch_size_per_gpu"].is_number_integer()
        && o.command != "fit")
        notes.push_back("--ds-config " + path + ": train_micro_batch_size_per_gpu is " + std::to_string(
            j["train_micro_batch_size_per_gpu"].get<std::int64_t>()) + "; the rank's micro-batch is --batch (or --input)");
    return notes;
}

} // namespace memledger

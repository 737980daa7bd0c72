#pragma once
#include "support/dtype.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace memledger {

// 1024-based: "512 B", "3.0 KiB", "2.69 MiB", "16.00 GiB".
std::string formatBytes(std::int64_t bytes);
// How `after` differs from `before`: "no change", "+1.50 MiB", or `minus` then the bytes ("-" in text, "&minus;"
// in HTML, U+2212 on screen).
std::string formatByteChange(std::int64_t before, std::int64_t after, const char* minus = "-");
// A table cell: `s` padded with spaces to `width` (on the left when `right`), cut with "~" when longer.
std::string padCell(std::string s, std::size_t width, bool right = false);
// Names shortened to at most `width` characters (at least 5) each, told apart: what all of them share at the start
// and the end is elided ("~") before what tells them apart is; a name that fits stays whole; one name alone is
// elided in the middle. Names that differ only past the width of what tells them apart may still meet.
std::vector<std::string> distinctLabels(const std::vector<std::string>& names, std::size_t width);
// "a,b,,c" -> {"a", "b", "c"}: the items of a comma-separated list, empty ones left out, as typed.
std::vector<std::string> splitComma(const std::string& text);
std::string formatPercent(double v); // "12.5%"
// "16GiB", "16 GB", "512MiB", "1024" (bytes). KiB, MiB, GiB, TiB (and K, M, G, T) are powers of 1024;
// kB, MB, GB, TB are powers of 1000, as on a disk's label. nullopt if not a size.
std::optional<std::int64_t> parseBytes(const std::string& text);
// A memory budget: a size as parseBytes reads it, or a GPU by name ("H100-80GB", "A100-40GB", "H200", "4090";
// case, spaces, dashes and an "RTX " prefix do not matter), which means the total memory PyTorch reports for
// that card (torch.cuda.get_device_properties().total_memory, rounded down over the cards' variants; the
// CUDA context is not subtracted). nullopt if neither.
std::optional<std::int64_t> parseBudget(const std::string& text);
// The GPU names parseBudget knows, with their sizes, for --help and error messages: "A100-40GB (39.39 GiB), ..."
std::string gpuPresetList();
// The same GPUs as (name, bytes), largest first, each once (no aliases): the window's budget list.
std::vector<std::pair<std::string, std::int64_t>> gpuPresets();
// Round axis ticks for bytes: a 1-2-5 step in the unit (B, KiB, MiB, GiB) that the largest value reads in,
// and labels with as many decimals as the step needs ("0", "512 MiB", "1.5 GiB"). The window's axis, the
// PNG export and the HTML chart all label their byte axes with it.
struct ByteTicks {
    double unit = 1; // bytes per unit
    double step = 1; // bytes between ticks
    std::vector<double> values; // in bytes, from the first multiple of step at or above lo
    std::vector<std::string> labels;
};
double byteTickUnit(double magnitude);
const char* byteUnitName(double unit);
double byteTickStep(double range, double unit, int count);
std::string byteTickLabel(double value, double unit, double step);
ByteTicks byteTicks(double lo, double hi, int count = 5);
// The same 1-2-5 rule for a plain axis (milliseconds, op sequence).
std::vector<double> niceTicks(double lo, double hi, int count = 6);

// Shapes, comma-separated: "1x3x224x224,1x10". Every dimension a positive whole number; throws
// std::invalid_argument with a message for the user otherwise ("3x224x224x" has an empty dimension).
std::vector<std::vector<std::int64_t>> parseShapes(const std::string& text);
// Inputs with their types: "2x512:int64,2x512:bool", "1x3x224x224" (float32), "2x512:int64=7",
// "2x512:bool=true"; a List[Tensor] argument in brackets: "[3x480x640,3x512x512]" (its elements' InputType::list).
// Throws std::invalid_argument with a message for the user (an unknown dtype names the ones there are).
struct ParsedInputs {
    std::vector<std::vector<std::int64_t>> shapes;
    std::vector<InputType> types; // one per shape
};
ParsedInputs parseInputs(const std::string& text);
// "2x512:int64" (":float32" left out when the type is the default and there is no fill); the inverse of
// parseInputs, comma-separated.
std::string inputToString(const std::vector<std::int64_t>& shape, const InputType& type);
// `separator` between arguments (a list's own tensors are always comma-separated): "," for the CLI's --input, ", "
// for a report's text.
std::string inputsToString(const std::vector<std::vector<std::int64_t>>& shapes, const std::vector<InputType>& types,
    const char* separator = ",");

} // namespace memledger

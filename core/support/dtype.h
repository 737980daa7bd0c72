#pragma once
// Element types as PyTorch names them, and tensor sizes: one rule for every place that scales a tensor to a
// run's precision (ledgers, GPU replay, what-if).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memledger {

bool isSupportedDtype(const std::string& dtype); // a precision a run takes: float32, bfloat16, float16
int dtypeSize(const std::string& dtype); // bytes per element, 0 if unknown
bool isFloatingDtype(const std::string& dtype); // float32, float16, bfloat16, float64
std::int64_t numelOf(const std::vector<std::int64_t>& shape); // 1 for a scalar

// A precision as a what-if records it: a dtype the model is converted to and runs in ("bfloat16": pure), or
// "<dtype>-mixed": torch.autocast in <dtype> over float32 weights (a run's --autocast), what a fine-tune means by it.
bool isMixedPrecision(const std::string& precision);
bool isSupportedPrecision(const std::string& precision); // a supported dtype, or one of them "-mixed"
std::string masterDtypeOf(const std::string& precision); // the weights' dtype: "float32" for a mixed one
std::string autocastDtypeOf(const std::string& precision); // a mixed one's compute dtype; "" for a pure one
// A rank's record of FSDP2 in mixed precision, "<dtype>-fsdp": what fsdp and zero2 record for "<dtype>-mixed"
// (MixedPrecisionPolicy over float32 master weights): the model converted to <dtype> (the gathered parameters),
// each unit's floating-point inputs cast to it as the unit's forward begins (cast_forward_inputs). A what-if's
// record only (ParallelPlan::recordedPrecision), not a precision a user names: isSupportedPrecision says no.
bool isFsdpRecordPrecision(const std::string& precision);
std::string fsdpRecordPrecision(const std::string& dtype); // "bfloat16" -> "bfloat16-fsdp"
// The dtype a record of `precision` runs the model's weights in: masterDtypeOf, or an FSDP record's <dtype>.
std::string recordDtypeOf(const std::string& precision);
// The precision of a run at `dtype` under `autocast` ("": none).
std::string precisionOf(const std::string& dtype, const std::string& autocast);

// The element type of a model input and what it holds: `--input 2x512:int64`, `2x512:bool=true`.
// Floating-point inputs (float32, the default) hold random normal values and take the run's precision when
// --dtype asks for one; integer inputs (token ids) are filled with 0, a valid id in every vocabulary, and bool
// inputs (masks) with false, unless a fill is given.
struct InputType {
    std::string dtype = "float32"; // float32 | float16 | bfloat16 | int64 | int32 | bool
    std::optional<double> fill; // "=V": every element V
    // -1: a tensor argument of its own; else the index of the List[Tensor] argument it is an element of
    // ("[3x480x640,3x512x512]": consecutive inputs with one index are one argument, as torchvision's detectors take).
    int list = -1;
    bool operator==(const InputType& o) const { return dtype == o.dtype && fill == o.fill && list == o.list; }
    bool operator!=(const InputType& o) const { return !(*this == o); }
    // What the input is made as in a run at `runDtype`: --dtype converts floating-point inputs only.
    std::string runDtype(const std::string& runDtype) const;
    // Token ids and masks: integer and bool inputs, whose dimension 1 is the sequence length.
    bool isToken() const;
};
bool isInputDtype(const std::string& dtype); // one an input takes
// The type of input `i` of a run (float32 where the list is shorter: inputs given by shape alone).
InputType inputTypeAt(const std::vector<InputType>& types, std::size_t i);
// The batch of a run's inputs: the first argument's dimension 0, or its length where it is a List[Tensor].
std::int64_t batchOfInputs(const std::vector<std::vector<std::int64_t>>& shapes, const std::vector<InputType>& types);
// The arguments `count` inputs make (a List[Tensor]'s elements are one).
std::size_t argumentCount(const std::vector<InputType>& types, std::size_t count);
// The inputs at batch `batch`: dimension 0 of each tensor argument; each List[Tensor] argument made `batch` tensors
// long, its given shapes taken in turn (types follow the shapes).
void setInputBatch(std::vector<std::vector<std::int64_t>>& shapes, std::vector<InputType>& types, std::int64_t batch);
// Bytes of the inputs of a run at `runDtype`.
std::int64_t inputBytes(
    const std::vector<std::vector<std::int64_t>>& shapes, const std::vector<InputType>& types, const std::string& runDtype);

} // namespace memledger

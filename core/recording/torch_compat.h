#pragma once
// Private to core/recording: every difference between the libtorches memledger builds against (Debian's
// 1.13, CPU only; PyTorch 2.x from pip, with CUDA) lives here and nowhere else.
#include <torch/version.h>

#include <ATen/autocast_mode.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Logging.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <torch/csrc/autograd/function.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#define MEMLEDGER_TORCH_AT_LEAST(major, minor)                                                                         \
    (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if MEMLEDGER_TORCH_AT_LEAST(2, 0)
#include <c10/core/impl/alloc_cpu.h>
#else
namespace c10 {
// Exported by libc10 (c10/core/impl/alloc_cpu.h), whose header Debian's 1.13 does not ship.
C10_API void free_cpu(void* data);
} // namespace c10
#endif

// aten::_grouped_mm(self, mat2, offs?, bias?, out_dtype?), the grouped matmul of mixture-of-experts layers (2.8 on).
#define MEMLEDGER_HAS_GROUPED_MM MEMLEDGER_TORCH_AT_LEAST(2, 8)

namespace memledger::compat {

// c10::MemoryReportingInfoBase::reportMemoryUsage's running totals: int64_t in 1.13, size_t in 2.x.
#if MEMLEDGER_TORCH_AT_LEAST(2, 0)
using ReportedTotal = std::size_t;
#else
using ReportedTotal = std::int64_t;
#endif

// The slot the allocation reporter is installed in: an enum in 1.13, a class with static constants in
// recent 2.x (not usable in a constant expression); the name is the same.
inline c10::DebugInfoKind profilerStateKind()
{
    return c10::DebugInfoKind::PROFILER_STATE;
}

// The least severity c10's LOG() writes (0 info, 1 warning, 2 error): Debian's 1.13 logs through glog
// (FLAGS_minloglevel), PyTorch 2.x from pip through c10's own logger (FLAGS_caffe2_log_level).
inline int& c10LogLevel()
{
#ifdef C10_USE_GLOG
    return FLAGS_minloglevel;
#else
    return ::FLAGS_caffe2_log_level;
#endif
}

// What owns an autograd node: std::shared_ptr<Node> in 1.13 and most of 2.x, c10::intrusive_ptr<Node> in recent 2.x.
using NodePtr = decltype(torch::autograd::Edge::function);

// A new autograd node of type T, owned as the libtorch owns them.
template <typename T, typename... Args>
auto makeNode(Args&&... args)
{
    if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>)
        return std::make_shared<T>(std::forward<Args>(args)...);
    else
        return c10::make_intrusive<T>(std::forward<Args>(args)...);
}

// libtorch's autocast state of one device type. PyTorch 2.4 made the functions take the device; libtorch 1.13
// (Debian's) has one set per device, CPU and CUDA among them.
#if MEMLEDGER_TORCH_AT_LEAST(2, 4)
inline bool autocastEnabled(c10::DeviceType type)
{
    return at::autocast::is_autocast_enabled(type);
}
inline void setAutocastEnabled(c10::DeviceType type, bool on)
{
    at::autocast::set_autocast_enabled(type, on);
}
inline c10::ScalarType autocastDtype(c10::DeviceType type)
{
    return at::autocast::get_autocast_dtype(type);
}
inline void setAutocastDtype(c10::DeviceType type, c10::ScalarType dtype)
{
    at::autocast::set_autocast_dtype(type, dtype);
}
#else
inline bool autocastEnabled(c10::DeviceType type)
{
    return type == c10::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
inline void setAutocastEnabled(c10::DeviceType type, bool on)
{
    if (type == c10::kCUDA)
        at::autocast::set_enabled(on);
    else
        at::autocast::set_cpu_enabled(on);
}
inline c10::ScalarType autocastDtype(c10::DeviceType type)
{
    return type == c10::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
inline void setAutocastDtype(c10::DeviceType type, c10::ScalarType dtype)
{
    if (type == c10::kCUDA)
        at::autocast::set_autocast_gpu_dtype(dtype);
    else
        at::autocast::set_autocast_cpu_dtype(dtype);
}
#endif

} // namespace memledger::compat

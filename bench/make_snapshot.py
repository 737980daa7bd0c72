#!/usr/bin/python3
"""Writes a CUDA memory snapshot pickle in PyTorch's own layout, for bench_snapshot and the tests.

The layout and the sharing of objects follow torch.cuda.memory._snapshot() (torch/csrc/cuda/Module.cpp and
memory_snapshot.cpp, frames made by py_symbolize in torch/csrc/profiler/python/combined_traceback.cpp):

- top level: {"segments", "device_traces", "allocator_settings", "external_annotations"};
- a trace entry: {action, addr, size, stream, time_us, frames}, keys and action names being the same string
  objects throughout (pickle memoizes them);
- frames: one list per captured traceback, shared by the entries that hold that traceback (an alloc and the
  segment_alloc it caused; a free_requested and its free_completed), a new list for every other allocation;
- a frame: a dict {name, filename, line} made once per distinct frame of the dump and shared by every list
  that holds it (pickle writes it once, then refers to it through its memo); its strings are new objects per
  frame dict, as pybind11 makes them.

The trace is a training loop (forward, backward, optimizer step) of a small transformer-like model: each
allocation site has its own stack, innermost first: the caching allocator's C++ frames, the ATen op's frames,
the Python binding, then Python user and torch frames interleaved with CPython's evaluation frames (depth
about 20 to 40, as `_record_memory_history(stacks="all")` records them).

--nesting K puts K more levels of a training framework's loops (a Python frame, CPython's frames) at the outer
end of every stack: deeper stacks, as real traces often have (60 to 100 frames), and larger files.
--unique-frames K gives every captured traceback K frames of its own (new frame dicts with their own line
numbers), for files with many more distinct frames. --share-lists gives every allocation site one frames list
shared by all its entries (a recorded trace repeated, as the benchmark of issue 12 did): smaller files, but
not what PyTorch writes.

--contexts adds compile_context and user_metadata to every entry, as newer PyTorch writes them.

Usage: make_snapshot.py OUT.pickle [--entries N] [--nesting K] [--unique-frames K] [--share-lists] [--seed S]
       [--contexts]
Standard library only (run with /usr/bin/python3).
"""
import argparse
import pickle
import random
import sys


def fresh(s):
    """A new str object with the text of s (pybind11 makes one per frame; literals would be shared)."""
    return s.encode("utf-8").decode("utf-8")


class Frames:
    """Frame dicts made once per distinct (filename, line, name), as py_symbolize's all_frames."""

    def __init__(self):
        self.by_key = {}

    def get(self, filename, line, name):
        key = (filename, line, name)
        f = self.by_key.get(key)
        if f is None:
            f = {"name": fresh(name), "filename": fresh(filename), "line": line}
            self.by_key[key] = f
        return f


PY = "/usr/local/src/conda/python-3.10.14"
SITE = "/opt/conda/lib/python3.10/site-packages"
USER = "/home/user/train"

# The caching allocator's frames, innermost first (what gather_with_cpp records above every allocation).
ALLOC_CPP = [
    ("??", 0, "torch::unwind::unwind()"),
    ("??", 0, "torch::CapturedTraceback::gather(bool, bool, bool)"),
    ("memory_snapshot.cpp", 0, "torch::cuda::(anonymous namespace)::gather_with_cpp()"),
    ("CUDACachingAllocator.cpp", 0,
     "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"),
    ("", 0, "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)"),
    ("", 0, "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"),
    ("", 0, "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)"),
    ("??", 0, "at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, std::optional<c10::MemoryFormat>)"),
]
FREE_CPP = [
    ("??", 0, "torch::unwind::unwind()"),
    ("??", 0, "torch::CapturedTraceback::gather(bool, bool, bool)"),
    ("memory_snapshot.cpp", 0, "torch::cuda::(anonymous namespace)::gather_with_cpp()"),
    ("CUDACachingAllocator.cpp", 0,
     "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free(c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::Block*)"),
    ("", 0, "c10::cuda::CUDACachingAllocator::Native::local_raw_delete(void*)"),
    ("", 0, "c10::StorageImpl::~StorageImpl()"),
    ("??", 0, "c10::TensorImpl::~TensorImpl()"),
    ("python_variable.cpp", 0, "THPVariable_clear(THPVariable*)"),
    ("??", 0, "THPVariable_subclass_dealloc(_object*)"),
    (PY + "/Objects/object.c", 2301, "_Py_Dealloc"),
]


def op_frames(op, kernel_file):
    """An ATen op's C++ frames between the allocator and the Python binding, innermost first."""
    return [
        (kernel_file, 0, "at::(anonymous namespace)::create_out(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::TensorOptions const&)"),
        (kernel_file, 0, "at::(anonymous namespace)::wrapper_CUDA_%s(at::Tensor const&, at::Tensor const&)" % op),
        ("??", 0, "at::_ops::%s::redispatch(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)" % op),
        ("VariableType_3.cpp", 0, "torch::autograd::VariableType::(anonymous namespace)::%s(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)" % op),
        ("??", 0, "at::_ops::%s::call(at::Tensor const&, at::Tensor const&)" % op),
        ("python_torch_functions.cpp", 0, "torch::autograd::THPVariable_%s(_object*, _object*, _object*)" % op),
        (PY + "/Objects/methodobject.c", 543, "cfunction_call"),
        (PY + "/Objects/call.c", 215, "_PyObject_MakeTpCall"),
    ]


def eval_frames():
    return [
        (PY + "/Include/internal/pycore_ceval.h", 46, "_PyEval_EvalFrame"),
        (PY + "/Python/ceval.c", 5945, "do_call_core"),
    ]


def module_call(line_call_impl=1747, line_wrapped=1736):
    """torch.nn.Module.__call__ between two forward() frames, with CPython's frames between."""
    m = SITE + "/torch/nn/modules/module.py"
    return eval_frames() + [(m, line_call_impl, "_call_impl")] + eval_frames() + [(m, line_wrapped, "_wrapped_call_impl")]


NESTING = 0


def framework_frames():
    """Loops of a training framework around train_step, innermost first (--nesting)."""
    out = []
    for i in range(NESTING):
        out += [(SITE + "/trainer/loops/loop_%d.py" % i, 120 + 7 * i, "run")] + eval_frames()
        out += [(PY + "/Objects/call.c", 431, "_PyObject_Call_Prepend")]
    return out


def python_tail(phase, layer, block):
    """Python frames from the op's call site out to the script's entry, innermost first."""
    tail = []
    if phase == "forward":
        tail += [(USER + "/model.py", 40 + 7 * layer, "forward")] + module_call()
        tail += [(USER + "/model.py", 120 + block, "forward")] + module_call()
        tail += [(USER + "/model.py", 160, "forward")] + module_call()
        tail += [(USER + "/train.py", 58, "train_step")]
    elif phase == "backward":
        tail += [(SITE + "/torch/autograd/graph.py", 744, "_engine_run_backward")] + eval_frames()
        tail += [(SITE + "/torch/autograd/__init__.py", 289, "backward")] + eval_frames()
        tail += [(SITE + "/torch/_tensor.py", 581, "backward")] + eval_frames()
        tail += [(USER + "/train.py", 61, "train_step")]
    else:
        tail += [(SITE + "/torch/optim/adam.py", 410 + 3 * layer, "_single_tensor_adam")] + eval_frames()
        tail += [(SITE + "/torch/optim/adam.py", 223, "step")] + eval_frames()
        tail += [(SITE + "/torch/optim/optimizer.py", 487, "wrapper")] + eval_frames()
        tail += [(USER + "/train.py", 63, "train_step")]
    tail += eval_frames() + framework_frames()
    tail += [(USER + "/train.py", 90, "main"), (USER + "/train.py", 101, "<module>")]
    return tail


OPS = [("mm", "RegisterCUDA.cpp"), ("add", "RegisterCUDA.cpp"), ("mul", "RegisterCUDA.cpp"),
       ("softmax", "RegisterCUDA.cpp"), ("gelu", "RegisterCUDA.cpp"), ("native_layer_norm", "RegisterCUDA.cpp")]


def make_sites(frames, layers=12):
    """Allocation sites: (alloc stack, free stack, size) per op of each layer and phase."""
    sites = []
    for phase in ("forward", "backward", "optimizer"):
        for block in range(layers):
            for layer, (op, kfile) in enumerate(OPS):
                if phase == "backward":
                    cpp = op_frames(op + "_backward", "RegisterCUDA.cpp")[:6] + [
                        ("??", 0, "torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"),
                        ("??", 0, "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)"),
                        ("??", 0, "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
                        ("python_engine.cpp", 0, "torch::autograd::python::PythonEngine::execute(std::vector<torch::autograd::Edge, std::allocator<torch::autograd::Edge> > const&)"),
                    ]
                elif phase == "optimizer":
                    cpp = op_frames("_foreach_" + op, kfile)
                else:
                    cpp = op_frames(op, kfile)
                py = python_tail(phase, layer, block)
                alloc = [frames.get(*f) for f in ALLOC_CPP + cpp + py]
                free = [frames.get(*f) for f in FREE_CPP + python_tail(phase, (layer + 1) % len(OPS), block)]
                size = (1 << (14 + (layer * 3 + block) % 10)) * (1 + block % 3)
                sites.append((alloc, free, size))
    return sites


class Trace:
    def __init__(self, args, frames):
        self.rng = random.Random(args.seed)
        self.frames = frames
        self.unique = args.unique_frames
        self.entries = []
        self.time = 1_731_017_396_000_000
        self.next_addr = 139_992_120_688_640
        self.free_addrs = {}
        self.unique_line = 0
        self.share_lists = args.share_lists
        self.lists = {}

    def traceback(self, stack):
        """A new captured traceback: a new list of the shared frame dicts (plus frames of its own)."""
        if self.share_lists:
            return self.lists.setdefault(id(stack), stack)
        lst = list(stack)
        for k in range(self.unique):
            self.unique_line += 1
            f = {"name": fresh("step_%d" % k), "filename": fresh(USER + "/loop.py"), "line": self.unique_line}
            lst.insert(len(lst) - 2, f)
        return lst

    def entry(self, action, addr, size, frames):
        self.time += self.rng.randint(2, 40)
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": self.time, "frames": frames}
        if CONTEXTS:  # as newer PyTorch writes them: on every entry, "" and "N/A" for none
            step = len(self.entries) // 5000
            e["compile_context"] = CONTEXT_NAMES[step % 4]
            e["user_metadata"] = CONTEXT_STEPS[step % len(CONTEXT_STEPS)]
        self.entries.append(e)

    def alloc(self, site):
        alloc_stack, _, size = site
        tb = self.traceback(alloc_stack)
        pool = self.free_addrs.get(size)
        if pool:
            addr = pool.pop()
        else:
            seg = ((size + (2 << 20) - 1) // (2 << 20)) * (2 << 20)
            addr = self.next_addr
            self.next_addr += seg
            self.entry("segment_alloc", addr, seg, tb)  # the same traceback as the alloc it serves
        self.entry("alloc", addr, size, tb)
        return addr

    def free(self, site, addr):
        tb = self.traceback(site[1])
        self.entry("free_requested", addr, site[2], tb)
        self.entry("free_completed", addr, site[2], tb)  # the same traceback object
        self.free_addrs.setdefault(site[2], []).append(addr)


def build(args):
    frames = Frames()
    sites = make_sites(frames)
    t = Trace(args, frames)
    n = len(sites) // 3
    forward, backward, optimizer = sites[:n], sites[n:2 * n], sites[2 * n:]
    for s in optimizer:  # Adam's moments: alive throughout
        t.alloc(s)
    while len(t.entries) < args.entries:
        saved = [(s, t.alloc(s)) for s in forward]
        grads = []
        for s, a in reversed(saved):
            b = backward[forward.index(s)]
            grads.append((b, t.alloc(b)))
            t.free(s, a)
        for s in optimizer:
            tmp = t.alloc(s)
            t.free(s, tmp)
        for s, a in grads:
            t.free(s, a)
    del t.entries[args.entries:]
    live = {}
    for e in t.entries:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    # The segments at the end: every segment the trace made (none is released), holding what is still alive.
    segments = []
    made = {e["addr"]: e["size"] for e in t.entries if e["action"] == "segment_alloc"}
    for addr, seg in sorted(made.items()):
        e = live.get(addr)
        used = e["size"] if e else 0
        blocks = []
        if e:
            blocks.append({"address": addr, "size": used, "requested_size": used, "state": "active_allocated",
                           "frames": e["frames"]})
        if seg > used:
            blocks.append({"address": addr + used, "size": seg - used, "requested_size": 0, "state": "inactive",
                           "frames": []})
        segments.append({"device": 0, "address": addr, "total_size": seg, "allocated_size": used,
                         "active_size": used, "requested_size": used, "stream": 0,
                         "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
                         "frames": e["frames"] if e else [], "blocks": blocks})
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
                "expandable_segments": False, "pinned_num_register_threads": 1,
                "release_lock_on_cudamalloc": False, "pinned_use_cuda_host_register": False,
                "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}}
    return {"segments": segments, "device_traces": [t.entries], "allocator_settings": settings,
            "external_annotations": []}


CONTEXTS = False
# Shared string objects, as the writer's memoized values are.
CONTEXT_NAMES = ["N/A", "torch-compiled frame 0/0", "N/A", "torch-compiled frame 1/0"]
CONTEXT_STEPS = [""] + ["step %d" % k for k in range(1, 64)]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--entries", type=int, default=1_000_000)
    p.add_argument("--nesting", type=int, default=0)
    p.add_argument("--unique-frames", type=int, default=0)
    p.add_argument("--share-lists", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--contexts", action="store_true",
                   help="compile_context and user_metadata on every entry, one value per 5000 entries")
    args = p.parse_args()
    global NESTING, CONTEXTS
    NESTING = args.nesting
    CONTEXTS = args.contexts
    snap = build(args)
    with open(args.out, "wb") as f:
        pickle.dump(snap, f)  # as torch.cuda.memory._dump_snapshot does
    n = sum(len(t) for t in snap["device_traces"])
    print("%s: %d trace entries" % (args.out, n), file=sys.stderr)


if __name__ == "__main__":
    main()

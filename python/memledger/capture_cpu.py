"""The CPU side of memledger.capture: the CPU allocator's events, as torch.profiler records them
(profile_memory=True: every allocation and free with its address, size and time; with_stack=True: the Python
calls around it), written in the layout of torch.cuda.memory._snapshot() so that memledger, PyTorch's
memory_viz and torch.cuda._memory_viz read it as they read a CUDA snapshot.

- device_traces[0]: an `alloc` or `free_completed` entry per event of the CPU allocator, in time order, each with
  its Python frames (innermost first) and `"device": -1` (memledger names it "cpu");
- segments: one per block alive at the end, as its own segment (the CPU allocator has no segments to report): the
  blocks allocated in the trace with their frames, and the tensors alive before it (found among the live
  Python objects: parameters, optimizer state, inputs made before `capture`) without frames;
- external_annotations: the record_function ranges the profiler saw (memledger.forward, memledger.backward,
  Optimizer.step#..., a user's own), START and END;
- memledger_capture: how the file was made ({"device": "cpu", "source": ..., "torch": ..., "note": ...}).

The profiler keeps its events until it stops; every_steps stops it at a step boundary, takes its events and starts
it again, so the trace goes on across the restarts.
"""

import bisect
import gc
import os
import sys
import threading
import time
import weakref

import torch

CPU_DEVICE = -1  # memledger's device number for the CPU (snapshotDeviceName)
NOTE = ("captured on the CPU by memledger.capture: the CPU allocator's events from torch.profiler, written in "
        "the layout of a CUDA memory snapshot; segments are the blocks themselves (no caching allocator), and "
        "tensors alive before the capture are blocks without frames")

_TORCH_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))


def _event_kinds():
    from torch._C._profiler import _EventType
    return _EventType


def _python_frame(name):
    """'torch/nn/modules/linear.py(125): forward' -> a snapshot frame; None for other names. The profiler
    writes torch's own files relative to the folder above torch/: they get that folder back."""
    head, sep, func = name.partition("): ")
    if not sep or "(" not in head:
        return None
    filename, line = head.rsplit("(", 1)
    if not line.isdigit():
        return None
    if not os.path.isabs(filename) and not filename.startswith("<"):
        filename = _absolute(filename)
    return {"filename": filename, "line": int(line), "name": func}


_ABSOLUTE = {}


def _absolute(relative):
    """The profiler writes the files of installed packages relative to their sys.path folder (torch's, but also
    torchvision's and transformers': 'torchvision/models/detection/generalized_rcnn.py'), and a script run by a
    relative path relative to the working directory: the first folder that has the file, else the working
    directory's."""
    found = _ABSOLUTE.get(relative)
    if found is None:
        roots = [_TORCH_ROOT] if relative.startswith("torch/") else []
        roots += [os.getcwd()] + [p for p in sys.path if p and os.path.isdir(p)]
        found = next((os.path.join(r, relative) for r in roots if os.path.isfile(os.path.join(r, relative))),
                     os.path.join(os.getcwd(), relative))
        _ABSOLUTE[relative] = found
    return found


def _same_file(profiled, absolute):
    """The profiler's file name (relative for torch's files and a relative script) names the frame's file."""
    return bool(profiled) and (profiled == absolute or absolute.endswith(os.sep + profiled))


def _is_range(event, kinds):
    """A record_function range of the user's or a library's (not an ATen op, the engine's node, or ours inside)."""
    if event.tag != kinds.TorchOp:
        return False
    scope = getattr(event.extra_fields, "scope", None)
    if scope is not None:
        return str(scope).endswith("USER_SCOPE")
    name = event.name
    return not (name.startswith("aten::") or name.startswith("autograd::") or "::" in name)


def _cpu_tensors():
    """(tensor, storage, address, bytes) of each live Python tensor on the CPU with a storage of its own."""
    tensor = torch.Tensor
    for obj in gc.get_objects():
        try:
            if not issubclass(type(obj), tensor) or obj.device.type != "cpu" or obj.is_sparse:
                continue
            storage = obj.untyped_storage() if hasattr(obj, "untyped_storage") else obj.storage()
            addr, size = storage.data_ptr(), storage.nbytes()
        except Exception:  # mkldnn, a tensor subclass without storage, ...
            continue
        if addr and size > 0:
            yield obj, storage, addr, size


def _cpu_storages():
    return {addr: size for _, _, addr, size in _cpu_tensors()}


def _storage_weak_ref(storage):
    """A weak reference to a storage's StorageImpl (torch.multiprocessing's), None where torch has none."""
    try:
        from torch.multiprocessing.reductions import StorageWeakRef
        return StorageWeakRef(storage)
    except Exception:
        return None


class _Before:
    """A block alive before the trace: its size, a weak reference to its storage (expired once the allocator has
    it back), and when its Python tensors died (weakref callbacks: the moment a .grad set to None goes)."""

    __slots__ = ("size", "ref", "tensors", "died_ns", "alive_ns", "freed_ns", "traced_free")

    def __init__(self, size, ref, now):
        self.size, self.ref = size, ref
        self.tensors = []  # weakref.ref of each Python tensor on the storage, with a callback
        self.died_ns = None  # when the last of them died
        self.alive_ns = now  # the last time it was seen alive
        self.freed_ns = None  # when it was found freed
        self.traced_free = False  # the profiler recorded its free after all (allocated under an earlier profiler)


class CpuRecorder:
    """Runs torch.profiler and turns its events into a snapshot's trace; `flush()` stops and restarts it.

    The profiler records no free of a block allocated before it started (the CPU allocator's reporter does not
    know its size), so the blocks alive before the trace (found among the live Python objects when the capture
    starts) are watched: `poll()`, called at each phase boundary, finds those the allocator has taken back, and the
    trace gets their frees, at the moment their last Python tensor died where that is known, else at the poll.
    """

    def __init__(self):
        self.entries = []  # the trace, in time order
        self.annotations = []
        self.live = {}  # address -> (size, frames) of the blocks the trace allocated and did not free
        self.profile = None  # the running torch.profiler.profile
        self.last_profile = None  # the last one stopped (its events: the categories of torch.profiler._memory_profiler)
        self._frames = {}  # interned frame lists
        self._interned = {}  # (filename, line, name) -> its frame dict
        self._before = None  # address -> _Before, the blocks alive when the capture started
        self._watched = []  # the _Before blocks not yet found freed
        self._lock = threading.Lock()
        self.module_paths = {}  # id(module) -> its path (PhaseHooks.module_paths)

    def start(self):
        from torch.profiler import ProfilerActivity, profile
        if self._before is None:
            self._find_blocks_before()
        self.profile = profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True,
                               record_shapes=True)
        self.profile.__enter__()

    def stop(self):
        if self.profile is None:
            return
        self.poll()
        prof, self.profile = self.profile, None
        prof.__exit__(None, None, None)
        self.last_profile = prof
        self._take(prof)

    # -- the blocks alive before the trace

    def _find_blocks_before(self):
        """The CPU storages of the live Python tensors: the parameters, the optimizer's state, the inputs made before
        the capture. Storages that the CPU allocator did not make are among them only when they were alive then
        (a NumPy array's, torch.from_numpy): one made in the trace is never an allocation of its."""
        self._before = {}
        now = time.time_ns()
        for obj, storage, addr, size in _cpu_tensors():
            block = self._before.get(addr)
            if block is None:
                block = self._before[addr] = _Before(size, _storage_weak_ref(storage), now)
                if block.ref is not None:
                    self._watched.append(block)
            if block.ref is not None:
                try:
                    block.tensors.append(weakref.ref(obj, self._tensor_died(block)))
                except TypeError:
                    pass

    @staticmethod
    def _tensor_died(block):
        def died(ref):
            block.tensors = [r for r in block.tensors if r is not ref]
            if not block.tensors:
                block.died_ns = time.time_ns()
        return died

    def poll(self):
        """Finds the blocks alive before the trace that the allocator has taken back since the last poll."""
        now = time.time_ns()
        with self._lock:
            still = []
            for block in self._watched:
                try:
                    expired = block.ref.expired()
                except Exception:
                    expired = False
                if not expired:
                    block.alive_ns = now
                    still.append(block)
                    continue
                died = block.died_ns
                block.freed_ns = died if died is not None and died >= block.alive_ns else now
                block.tensors = []
            self._watched = still

    def _frees_before(self):
        """The frees of the blocks alive before the trace that it took back, as (index, entry): each at its time,
        and before any alloc the trace made at its address after it was last seen alive (the allocator gave it
        again), so that no two blocks hold one address at once."""
        times = [e["time_us"] for e in self.entries]
        out = []
        for addr, block in self._before.items():
            if block.freed_ns is None or block.traced_free:
                continue
            at = bisect.bisect_right(times, block.freed_ns // 1000)
            k = bisect.bisect_left(times, block.alive_ns // 1000)
            end = addr + block.size
            for i in range(k, at):
                e = self.entries[i]
                if e["action"] == "alloc" and e["addr"] < end and addr < e["addr"] + e["size"]:
                    at = i
                    break
            time_us = block.freed_ns // 1000
            if at < len(times):
                time_us = min(time_us, times[at])
            if at > 0:
                time_us = max(time_us, times[at - 1])
            out.append((at, {"action": "free_completed", "addr": addr, "size": block.size, "stream": 0,
                             "time_us": time_us, "device": CPU_DEVICE, "frames": []}))
        out.sort(key=lambda x: x[0])
        return out

    def flush(self):
        """Takes the events so far: stops the profiler and starts it again."""
        self.stop()
        self.start()

    def _take(self, prof):
        kinds = _event_kinds()
        self._frames = {}
        roots = prof.profiler.kineto_results.experimental_event_tree()
        events = []  # (time_ns, order, kind, event)
        ranges = []
        # Each event with the module call it is inside whose `forward` frame has not been seen yet: that frame is named
        # "forward (module: PATH)", so that the capture's tree rows are the model's modules (docs/python.md).
        stack = [(r, None, None) for r in reversed(roots)]
        order = 0
        # Depth first, each event with the frames of its Python ancestors (innermost first). A frame's line is
        # where it called the frame inside it (the inner call's `caller`); the innermost frame's, the line of a
        # C function it called (a built-in's `caller`) where the profiler saw one, else its first line.
        while stack:
            e, frames, module = stack.pop()
            tag = e.tag
            if tag == kinds.PyCall:
                info = getattr(e.extra_fields, "module", None)
                if info is not None:  # "nn.Module: Linear_0": the call whose forward comes next
                    module = self.module_paths.get(getattr(info, "self_ptr", None), module)
            if tag == kinds.PyCall or tag == kinds.PyCCall:
                caller = getattr(e.extra_fields, "caller", None)
                if frames is not None and caller is not None:
                    head = frames[0]
                    line = getattr(caller, "line_number", 0)
                    # only where the caller is that frame (a hook or a frame the tracer did not see may sit between)
                    if (isinstance(line, int) and line > 0 and line != head["line"]
                            and getattr(caller, "function_name", None) == head["name"].split(" (module: ")[0]
                            and _same_file(getattr(caller, "file_name", ""), head["filename"])):
                        frames = (self._frame(head["filename"], line, head["name"]), frames[1])
                if tag == kinds.PyCall:
                    f = _python_frame(e.name)
                    if f is not None:
                        name = f["name"]
                        if module is not None and name == "forward":
                            name, module = "forward (module: %s)" % module, None
                        frames = (self._frame(f["filename"], f["line"], name), frames)
            elif tag == kinds.Allocation:
                fields = e.extra_fields
                if str(fields.device).startswith("cpu") and fields.alloc_size != 0:
                    events.append((e.start_time_ns, order, fields.ptr, fields.alloc_size, frames))
                    order += 1
            elif _is_range(e, kinds):
                ranges.append((e.name, e.start_time_ns, e.end_time_ns))
            for c in reversed(e.children):
                stack.append((c, frames, module))
        events.sort(key=lambda x: (x[0], x[1]))
        for t, _, ptr, size, frames in events:
            flist = self._frame_list(frames)
            if size > 0:
                self.live[ptr] = (size, flist)
                action = "alloc"
            else:
                size = -size
                if self.live.pop(ptr, None) is None:
                    # allocated under an earlier profiler, before this capture: its free is recorded after all
                    block = self._before.get(ptr) if self._before else None
                    if block is not None and block.size == size:
                        block.traced_free = True
                action = "free_completed"
            self.entries.append({"action": action, "addr": ptr, "size": size, "stream": 0, "time_us": t // 1000,
                                 "device": CPU_DEVICE, "frames": flist})
        for name, start, end in ranges:
            self.annotations.append({"stage": "START", "name": name, "device": CPU_DEVICE, "time_us": start // 1000})
            if end >= start:
                self.annotations.append({"stage": "END", "name": name, "device": CPU_DEVICE, "time_us": end // 1000})
        self.annotations.sort(key=lambda a: (a["time_us"], a["stage"] == "START"))

    def _frame(self, filename, line, name):
        """One dict per distinct frame (the pickle then writes each once)."""
        key = (filename, line, name)
        f = self._interned.get(key)
        if f is None:
            f = self._interned[key] = {"filename": filename, "line": line, "name": name}
        return f

    def _frame_list(self, chain):
        key = id(chain)
        hit = self._frames.get(key)
        if hit is not None and hit[0] is chain:
            return hit[1]
        out = []
        c = chain
        while c is not None:
            out.append(c[0])
            c = c[1]
        self._frames[key] = (chain, out)
        return out

    def snapshot(self, extra=None):
        """The snapshot dict of everything taken so far."""
        self.poll()
        blocks = {addr: (size, frames) for addr, (size, frames) in self.live.items()}
        # The blocks alive before the trace: freed in it (their frees put in), or alive still, without frames.
        with self._lock:
            frees = self._frees_before()
            alive = [(addr, b.size) for addr, b in (self._before or {}).items()
                     if b.freed_ns is None and not b.traced_free]
        entries, last = [], 0
        for at, entry in frees:
            entries.extend(self.entries[last:at])
            entries.append(entry)
            last = at
        entries.extend(self.entries[last:])
        unwatched = {addr for addr, b in (self._before or {}).items() if b.ref is None}
        if unwatched:  # a torch without storage weak references: those alive still are those a tensor holds now
            now = _cpu_storages()
            alive = [(addr, size) for addr, size in alive if addr not in unwatched or now.get(addr) == size]
        for addr, size in alive:
            if addr not in blocks:
                blocks[addr] = (size, [])
        segments = []
        for addr in sorted(blocks):
            size, frames = blocks[addr]
            segments.append({"device": CPU_DEVICE, "address": addr, "total_size": size, "allocated_size": size,
                             "active_size": size, "requested_size": size, "stream": 0, "segment_type": "large",
                             "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                             "blocks": [{"address": addr, "size": size, "requested_size": size,
                                         "state": "active_allocated", "frames": frames}]})
        capture = {"device": "cpu", "source": "torch.profiler (profile_memory, with_stack)",
                   "torch": str(torch.__version__), "note": NOTE}
        if extra:
            capture.update(extra)
        return {"segments": segments, "device_traces": [entries],
                "external_annotations": list(self.annotations), "memledger_capture": capture}

"""memledger.capture: the memory of any code, written as a memory snapshot memledger opens.

    with memledger.capture("step.pickle"):
        for batch in loader:
            loss = model(batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
    # memledger analyze step.pickle    (or: python -m memledger step.pickle)

- On a GPU (device "cuda", the default where CUDA is available): PyTorch's own memory history
  (torch.cuda.memory._record_memory_history, Python stacks), written with torch.cuda.memory._snapshot() on exit;
  an out-of-memory observer writes it at the moment of the failure (and exit then keeps that file).
- On the CPU (device "cpu", the default without CUDA): the CPU allocator's events from torch.profiler, written
  in the same layout (memledger.capture_cpu); the file says it was captured on the CPU.

Both have forward and backward ranges from module hooks (memledger.capture_phases) and PyTorch's own
Optimizer.step / zero_grad ranges, as record_function annotations. `every_steps=N` rewrites the file every N
optimizer steps (written to a temporary name beside it, then os.replace: a reader sees the old file or the new
one, never half of one). docs/python.md, "2. Capture".
"""

import inspect
import os
import pickle
import threading

import torch

from .capture_phases import PhaseHooks

__all__ = ["capture", "Capture"]

_oom_lock = threading.Lock()
_oom_observer_attached = False
_oom_target = None  # the Capture an out-of-memory error writes (an observer cannot be detached)


def capture(path, *, every_steps=None, device=None, max_entries=1_000_000):
    """A context manager that captures the memory of the code inside it into the snapshot file `path`.

    every_steps: rewrite the file every N optimizer steps (None: on exit only).
    device: "cuda" or "cpu"; None takes "cuda" where torch.cuda.is_available(), else "cpu".
    max_entries: the CUDA history's ring buffer (torch.cuda.memory._record_memory_history's max_entries).
    """
    return Capture(path, every_steps=every_steps, device=device, max_entries=max_entries)


def _atomic_write(path, snapshot):
    tmp = "%s.tmp%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as fh:
            pickle.dump(snapshot, fh, protocol=4)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _on_cuda_oom(device, alloc, device_allocated, device_free):
    target = _oom_target
    if target is not None:
        target._write_oom(device, alloc, device_allocated, device_free)


class Capture:
    def __init__(self, path, every_steps=None, device=None, max_entries=1_000_000):
        if every_steps is not None and (isinstance(every_steps, bool) or not isinstance(every_steps, int)
                                        or every_steps < 1):
            raise ValueError("memledger.capture: every_steps must be a positive whole number of optimizer steps, "
                             "not %r" % (every_steps,))
        if device is not None and device not in ("cpu", "cuda"):
            raise ValueError("memledger.capture: device must be 'cpu' or 'cuda', not %r" % (device,))
        self.path = os.fspath(path)
        self.every_steps = every_steps
        self.device = device
        self.max_entries = int(max_entries)
        self.writes = 0  # files written (every_steps, the out-of-memory observer and exit)
        self.oom_written = False
        self._cpu = None
        self._hooks = None
        self._pending = False

    # The profiler that recorded a CPU capture (its events give torch.profiler._memory_profiler's categories).
    @property
    def profile(self):
        return self._cpu.last_profile if self._cpu is not None else None

    def __enter__(self):
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise FileNotFoundError("memledger.capture: %s: the folder %s does not exist" % (self.path, folder))
        if self.device is None:
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("memledger.capture: device='cuda' but torch.cuda.is_available() is False")
        self._hooks = PhaseHooks(on_step=self._on_step, at_rest=self._at_rest)
        if self.device == "cuda":
            self._start_cuda()
        else:
            from .capture_cpu import CpuRecorder
            self._cpu = CpuRecorder()
            self._cpu.start()
            self._hooks.on_phase = self._cpu.poll  # the blocks alive before the capture that it frees
            self._cpu.module_paths = self._hooks.module_paths  # its module rows: "forward (module: backbone)"
        try:
            self._hooks.install()
        except BaseException:
            self._hooks.remove()
            self._stop_backend()
            raise
        if self.every_steps is not None and not self._hooks.step_hooks:
            self._hooks.remove()
            self._stop_backend()
            raise RuntimeError("memledger.capture: every_steps needs torch's global optimizer hooks "
                               "(torch.optim.optimizer.register_optimizer_step_post_hook, torch 2.0 and later); "
                               "torch %s has none" % torch.__version__)
        return self

    def __exit__(self, exc_type, exc, tb):
        self._hooks.remove()
        try:
            if self.device == "cuda":
                # An out-of-memory error that ends the block keeps the file written at the failure.
                if not (self.oom_written and exc_type is not None):
                    self._write_cuda()
            else:
                self._cpu.stop()
                self._write_cpu(exc)
        finally:
            self._stop_backend()
        return False

    # -- every_steps

    def _on_step(self, steps):
        if self.every_steps is None or steps % self.every_steps:
            return
        if self.device == "cuda":
            self._write_cuda()
        else:
            # Inside Optimizer.step's own range: the profiler is stopped at the next rest (the next forward).
            self._pending = True

    def _at_rest(self):
        if self._pending and self._cpu is not None and self._cpu.profile is not None:
            self._pending = False
            self._cpu.flush()
            self._write_cpu(None)

    # -- CPU

    def _write_cpu(self, exc):
        extra = {"steps": self._hooks.steps}
        if exc is not None:
            extra["error"] = "%s: %s" % (type(exc).__name__, exc)
        _atomic_write(self.path, self._cpu.snapshot(extra))
        self.writes += 1

    # -- CUDA

    def _start_cuda(self):
        global _oom_observer_attached, _oom_target
        record = torch.cuda.memory._record_memory_history
        params = inspect.signature(record).parameters
        if "stacks" in params:
            kwargs = {"context": "all", "stacks": "python", "max_entries": self.max_entries}
            if "global_record_annotations" in params:
                kwargs["global_record_annotations"] = True  # the backward's range ends on the engine's thread
            record("all", **kwargs)
        else:  # torch 1.13's signature
            record(True, record_context=True, trace_alloc_max_entries=self.max_entries,
                   trace_alloc_record_context=True)
        with _oom_lock:
            if not _oom_observer_attached and hasattr(torch._C, "_cuda_attach_out_of_memory_observer"):
                torch._C._cuda_attach_out_of_memory_observer(_on_cuda_oom)
                _oom_observer_attached = True
            _oom_target = self

    def _cuda_snapshot(self, extra=None):
        snapshot = torch.cuda.memory._snapshot()
        info = {"device": "cuda", "source": "torch.cuda.memory._record_memory_history (stacks: python)",
                "torch": str(torch.__version__), "steps": self._hooks.steps}
        if extra:
            info.update(extra)
        snapshot["memledger_capture"] = info
        return snapshot

    def _write_cuda(self, extra=None):
        _atomic_write(self.path, self._cuda_snapshot(extra))
        self.writes += 1

    def _write_oom(self, device, alloc, device_allocated, device_free):
        self._write_cuda({"oom": {"device": int(device), "requested": int(alloc),
                                  "device_allocated": int(device_allocated), "device_free": int(device_free)}})
        self.oom_written = True

    def _stop_backend(self):
        global _oom_target
        if self.device == "cuda":
            with _oom_lock:
                if _oom_target is self:
                    _oom_target = None
            params = inspect.signature(torch.cuda.memory._record_memory_history).parameters
            torch.cuda.memory._record_memory_history(None if "stacks" in params else False)
        elif self._cpu is not None:
            self._cpu.stop()

"""The forward and backward ranges of memledger.capture, from module hooks, written as PyTorch's own
record_function ranges (a CUDA memory history keeps them as `external_annotations`; the CPU capture reads them
from the profiler), and the optimizer steps counted by the optimizer's global hooks.

- forward: from the outermost module call's forward pre-hook to its forward hook (torch's global module hooks,
  so any model, without being told which);
- backward: from the first gradient the autograd engine computes for that call's outputs to the end of the
  backward (a callback queued on the engine);
- the optimizer step: PyTorch writes `Optimizer.step#AdamW.step` (and `Optimizer.zero_grad#...`) itself; the
  global step post-hook (torch 2.0 and later) counts the steps for every_steps.

The names contain what memledger's snapshot ledgers read from a range (docs/snapshots.md): "backward" makes an
allocation inside the range a backward one where its stack says no more.
"""

import importlib
import threading

import torch

FORWARD = "memledger.forward"
BACKWARD = "memledger.backward"


def _tensors(value, out, depth=0):
    """The tensors of a module's output (a tensor, or tuples, lists, dicts and dataclass-like objects of them)."""
    if depth > 8:
        return out
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _tensors(v, out, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            _tensors(v, out, depth + 1)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            _tensors(getattr(value, name, None), out, depth + 1)
    return out


class _Range:
    """One open record_function range: PyTorch's own, as torch.autograd.profiler.record_function opens it in
    torch 2 (torch 1.13's record_function makes a tensor handle, an allocation of its own in the capture)."""

    def __init__(self, name):
        ops = torch.ops.profiler
        try:
            self._handle = ops._record_function_enter_new(name, None)
            self._exit = ops._record_function_exit._RecordFunction
        except (AttributeError, RuntimeError):
            rf = torch.autograd.profiler.record_function(name)
            rf.__enter__()
            self._handle, self._exit = rf, lambda r: r.__exit__(None, None, None)

    def close(self):
        if self._handle is not None:
            handle, self._handle = self._handle, None
            self._exit(handle)


class PhaseHooks:
    """Installs the hooks; `on_step()` is called after every optimizer step, `at_rest()` before the outermost
    forward begins (no range of ours open then: the CPU capture rewrites its file there)."""

    def __init__(self, on_step=None, at_rest=None, on_phase=None):
        self.on_step = on_step
        self.at_rest = at_rest
        self.on_phase = on_phase  # called where a forward, a backward or a step begins or ends
        self.steps = 0
        self.step_hooks = False  # torch has global optimizer hooks (2.0 and later)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._backward = None  # the open backward range
        self._handles = []
        # id(module) -> its path in the outermost module called (named_modules; the outermost itself by its class
        # name), for the CPU capture's module rows; the roots seen, so that each is walked once.
        self.module_paths = {}
        self._roots = set()

    def _depth(self):
        return getattr(self._local, "depth", 0)

    def install(self):
        modules = importlib.import_module("torch.nn.modules.module")
        self._handles.append(modules.register_module_forward_pre_hook(self._forward_pre))
        # always_call (torch 2.1 and later): the hook runs when a forward raises too, as torch.utils.checkpoint's
        # recomputation does to stop early, or a loop that catches a bad batch's error; the depth stays right.
        try:
            self._handles.append(modules.register_module_forward_hook(self._forward_post, always_call=True))
        except TypeError:
            self._handles.append(modules.register_module_forward_hook(self._forward_post))
        optim = importlib.import_module("torch.optim.optimizer")
        if hasattr(optim, "register_optimizer_step_post_hook"):
            self._handles.append(optim.register_optimizer_step_post_hook(self._step_post))
            self.step_hooks = True
        return self

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []
        ranges = getattr(self._local, "forward", None)
        if ranges is not None:
            ranges.close()
            self._local.forward = None
        self._local.depth = 0
        self._close_backward()

    def _in_backward(self):
        """A module called by the autograd engine: torch.utils.checkpoint recomputing a forward in the backward."""
        node = getattr(torch._C, "_current_autograd_node", None)
        return self._backward is not None or (node is not None and node() is not None)

    def _forward_pre(self, module, args):
        depth = self._depth()
        if depth == 0 and id(module) not in self._roots:
            self._roots.add(id(module))
            for name, m in module.named_modules():
                self.module_paths.setdefault(id(m), name or type(module).__name__)
        if depth == 0:
            if self._in_backward():
                self._local.forward = None  # a recomputation, part of the backward's range
            else:
                self._phase()
                if self.at_rest is not None:
                    self.at_rest()
                self._local.forward = _Range(FORWARD)
        self._local.depth = depth + 1

    def _forward_post(self, module, args, output):
        depth = self._depth() - 1
        self._local.depth = max(depth, 0)
        if depth > 0:
            return
        forward = getattr(self._local, "forward", None)
        if forward is None:
            return  # a recomputation in the backward
        forward.close()
        self._local.forward = None
        self._phase()
        if not torch.is_grad_enabled():
            return
        for t in _tensors(output, []):
            if t.requires_grad and t.grad_fn is not None:
                t.register_hook(self._first_gradient)

    def _first_gradient(self, grad):
        with self._lock:
            if self._backward is not None:
                return
            self._backward = _Range(BACKWARD)
        self._phase()
        try:
            torch.autograd.Variable._execution_engine.queue_callback(self._close_backward)
        except RuntimeError:  # not inside the engine (cannot happen from a tensor hook): close it now
            self._close_backward()

    def _close_backward(self):
        with self._lock:
            rng, self._backward = self._backward, None
        if rng is not None:
            rng.close()
            self._phase()

    def _phase(self):
        if self.on_phase is not None:
            self.on_phase()

    def _step_post(self, optimizer, args, kwargs):
        # No forward is open when a step returns (a closure's ran inside it): a depth left over by a forward that
        # raised under a torch without always_call hooks starts again from here.
        if self._depth():
            self._local.depth = 0
            forward, self._local.forward = getattr(self._local, "forward", None), None
            if forward is not None:
                forward.close()
        self._phase()
        self.steps += 1
        if self.on_step is not None:
            self.on_step(self.steps)

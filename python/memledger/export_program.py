"""memledger.export: a model to a torch.export program (`.pt2`) that memledger runs, what-ifs and shards.

    memledger.export(model, (input_ids,), "model.pt2", dynamic={"input_ids": {0: "batch", 1: "seq"}})

It does for the user what docs/language-models.md asks of a hand-written `torch.export.export` + `torch.export.save`:

- inputs given by keyword (`kwargs={"input_ids": ..., "attention_mask": ...}`) become the program's inputs, in
  forward's order, under their own names; other values (flags, None, numbers) are fixed in the program;
- an output that is an object or a dict with `logits` (a Hugging Face `CausalLMOutputWithPast`, a cache beside it)
  exports the logits only, with `use_cache=False` where `forward` takes `use_cache`; another output object its
  first tensor; a tuple its tensors;
- `dynamic` names dimensions (`{"input_ids": {0: "batch", 1: "seq"}}`; the same name in two inputs is one size):
  the ranges start at 1, a sequence dimension stops at the model's own limit where it says one (`max_seq`,
  `max_position_embeddings`, `n_positions`, `block_size`, ...), and a limit torch.export finds in the model's code
  is taken from its suggested fix; an example of size 1 in a named dimension is doubled (PyTorch fixes a size of
  1); the ranges the program was saved with are printed;
- a model built on the meta device is exported with meta inputs (its weights saved as shapes only; memledger runs
  it on meta);
- tied weights stay one tensor (torch.export stores them once; memledger counts them once);
- strict export first (TorchDynamo, the graph PyTorch checks most), and, when it fails, non-strict with the reason
  printed;
- the module paths in the file are the model's own (`layers.0.attn.wq`, never a wrapper's prefix): the model is
  exported as itself, its class swapped for the duration of the export for a subclass whose `forward` takes the
  inputs as tensors and returns the logits;
- it prints the memledger command to run next, with the inputs in `--input` syntax.

A model that neither export traces (data-dependent control flow, unsupported Python) raises ExportError with
PyTorch's reason and the advice to record it with memledger.capture instead.

Nothing here runs at import: torch is imported when export() is called, and each torch.export API is looked up by
feature, so the package imports under any PyTorch (the export itself needs torch.export with Dim, PyTorch 2.2+).
"""

import contextlib
import copy
import inspect
import io
import json
import keyword
import logging
import os
import re
import shutil
import sys
import sysconfig
import traceback
import warnings
from collections.abc import Mapping

from . import autocast_types, checkpoint_record, generation, hf_masks, source_facts

__all__ = ["export", "ExportError"]

CAPTURE_ADVICE = ("record it with memledger.capture instead: `with memledger.capture(\"run.pickle\"): model(...)` "
                  "writes a memory snapshot of the real run, which `memledger analyze run.pickle` opens")

# Attributes (of the model or its `config`) that bound a sequence dimension, in the order they are looked for.
SEQUENCE_LIMITS = ("max_seq", "max_seq_len", "max_seq_length", "max_sequence_length", "max_position_embeddings",
                   "n_positions", "n_ctx", "block_size", "context_length", "max_len", "max_length")

# torch's loggers that print a failed strict export's trace to stderr before the exception says the same.
_QUIET_LOGGERS = ("torch._guards", "torch._dynamo", "torch.fx.experimental.symbolic_shapes", "torch._export",
                  "torch.export", "torch._subclasses.fake_tensor")

# memledger's --input types (docs/cli.md), by torch dtype name.
_INPUT_TYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "int64": "int64",
                "int32": "int32", "bool": "bool"}


class ExportError(RuntimeError):
    """The model could not be exported for memledger; the message has PyTorch's reason and what to do instead."""

    def __init__(self, reason, advice=CAPTURE_ADVICE):
        self.reason = reason
        self.advice = advice
        super().__init__("memledger.export: " + reason + ("\n" + advice[0].upper() + advice[1:] if advice else ""))


def _say(verbose, text):
    if verbose:
        print("memledger.export: " + text, flush=True)


# ------------------------------------------------------------------------------------------------ the inputs


class _Input:
    """One tensor the program takes: its name, where it goes in forward's call, the example, the dims named."""

    def __init__(self, name, where, value):
        self.name = name
        self.where = where  # ("arg", parameter name) | ("vararg", index) | ("kwarg", key)
        self.value = value  # the user's example
        self.example = value  # what is traced (on the model's device; a named size-1 dimension doubled)
        self.dims = {}  # dim -> Dim name or torch.export.Dim
        self.undoubled = None  # the example before a size-1 dimension was doubled


def _identifier(name, taken):
    name = re.sub(r"\W", "_", str(name))
    if not name or name[0].isdigit() or keyword.iskeyword(name) or name == "self":
        name = "input_" + name
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _contains_tensor(value, torch):
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_contains_tensor(v, torch) for v in value)
    if isinstance(value, Mapping):
        return any(_contains_tensor(v, torch) for v in value.values())
    return False


def _bind(model, args, kwargs, torch):
    """forward's signature bound to the example: the tensor inputs (in the order given) and the call's constants."""
    forward = model.forward
    try:
        signature = inspect.signature(forward)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError) as e:
        raise ExportError("%s.forward does not take these inputs: %s" % (type(model).__name__, e), advice="") from e
    inputs, taken = [], set()
    parameters = signature.parameters
    for name, value in bound.arguments.items():
        kind = parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            for i, v in enumerate(value):
                if _contains_tensor(v, torch):
                    inputs.append(_Input(_identifier("%s_%d" % (name, i), taken), ("vararg", i), v))
        elif kind == inspect.Parameter.VAR_KEYWORD:
            for key, v in value.items():
                if _contains_tensor(v, torch):
                    inputs.append(_Input(_identifier(key, taken), ("kwarg", key), v))
        elif _contains_tensor(value, torch):
            inputs.append(_Input(_identifier(name, taken), ("arg", name), value))
    if not inputs:
        raise ExportError("the example has no tensor input (args and kwargs hold no torch.Tensor)", advice="")
    return signature, bound, inputs


def _use_cache_off(signature, bound):
    """use_cache=False where forward takes use_cache and the caller did not set it; whether it was set."""
    if "use_cache" in signature.parameters and "use_cache" not in bound.arguments:
        bound.arguments["use_cache"] = False
        return True
    return False


def _model_device(model):
    for t in list(model.parameters()) + list(model.buffers()):
        return t.device
    return None


def _on_device(value, device, torch):
    if isinstance(value, torch.Tensor):
        if device is not None and device.type == "meta" and value.device.type != "meta":
            return torch.empty_like(value, device="meta")
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_on_device(v, device, torch) for v in value)
    if isinstance(value, Mapping):
        return {k: _on_device(v, device, torch) for k, v in value.items()}
    return value


# ------------------------------------------------------------------------------------ the dynamic dimensions


def _sequence_limit(model):
    """The model's own bound on a sequence (an attribute of it or of its config), with the attribute's name. A
    position table that keeps rows for padding (an nn.Embedding of that many rows with a padding_idx: RoBERTa's
    positions start at padding_idx + 1) holds that many fewer positions."""
    for owner, prefix in ((model, ""), (getattr(model, "config", None), "config.")):
        if owner is None:
            continue
        for attr in SEQUENCE_LIMITS:
            value = getattr(owner, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 1:
                modules = model.modules() if hasattr(model, "modules") else ()
                for m in modules:
                    pad = getattr(m, "padding_idx", None)
                    if (type(m).__name__ == "Embedding" and getattr(m, "num_embeddings", None) == value
                            and isinstance(pad, int) and 0 <= pad < value - 1):
                        return value - pad - 1, "%s%s less its position table's padding rows (padding_idx %d)" % (
                            prefix, attr, pad)
                return value, prefix + attr
    return None, None


def _is_token(t, torch):
    return isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex()


def _looks_like_sequence(name, dim, inp, torch):
    lowered = name.lower()
    return (any(w in lowered for w in ("seq", "len", "token", "pos", "ctx", "context"))
            or (dim == 1 and _is_token(inp.value, torch)))


def _read_dynamic(dynamic, inputs, torch):
    """`dynamic` ({input name: {dim: name | Dim | (name, min, max)}}) onto the inputs."""
    if not dynamic:
        return
    by_name = {i.name: i for i in inputs}
    for name, dims in dynamic.items():
        if name not in by_name:
            raise ExportError("dynamic names the input %r, which the example does not have (its tensor inputs: %s)"
                              % (name, ", ".join(by_name)), advice="")
        inp = by_name[name]
        if not isinstance(inp.value, torch.Tensor):
            raise ExportError("dynamic names dimensions of %r, which is not a tensor" % name, advice="")
        if not isinstance(dims, Mapping):
            raise ExportError("dynamic[%r] must be a dict of dimension -> name, such as {0: \"batch\", 1: \"seq\"}"
                              % name, advice="")
        for dim, spec in dims.items():
            d = dim + inp.value.dim() if isinstance(dim, int) and dim < 0 else dim
            if not isinstance(d, int) or not 0 <= d < inp.value.dim():
                raise ExportError("dynamic[%r] names dimension %r; the example %r has %d" % (
                    name, dim, name, inp.value.dim()), advice="")
            inp.dims[d] = spec


class _Dims:
    """The named dimensions: one range per name, shared by every input dimension that has the name."""

    def __init__(self, model, inputs, torch):
        self.torch = torch
        self.ranges = {}  # name -> [min, max or None]
        self.given = {}  # name -> a torch.export.Dim the caller made
        self.fixed = set()  # names torch.export fixed to the example's size
        self.why = {}  # name -> where its maximum came from
        self.doubled = set()  # names whose example of size 1 is traced as 2
        limit, attr = _sequence_limit(model)
        for inp in inputs:
            for dim, spec in list(inp.dims.items()):
                if isinstance(spec, tuple) and len(spec) == 3 and isinstance(spec[0], str):
                    name, lo, hi = spec
                    self.ranges.setdefault(name, [lo if lo is not None else 1, hi])
                    self.why.setdefault(name, "as given")
                elif isinstance(spec, str):
                    name = spec
                    if name not in self.ranges:
                        seq_limit = limit if _looks_like_sequence(name, dim, inp, torch) else None
                        self.ranges[name] = [1, seq_limit]
                        if seq_limit:
                            self.why[name] = "the model's " + attr
                elif isinstance(spec, type) and hasattr(spec, "min") and hasattr(spec, "max"):  # torch.export.Dim
                    name = spec.__name__
                    self.given[name] = spec
                    hi = spec.max if isinstance(spec.max, int) and spec.max < sys.maxsize - 1 else None
                    self.ranges.setdefault(name, [spec.min, hi])
                    self.why.setdefault(name, "as given")
                else:
                    raise ExportError("dynamic[%r][%d] is %r: give a name (\"batch\"), a (name, min, max) tuple or a "
                                      "torch.export.Dim" % (inp.name, dim, spec), advice="")
                inp.dims[dim] = name

    def snapshot(self, inputs):
        """What an export attempt may change (the ranges, the fixed names, the traced examples), for restore."""
        return (copy.deepcopy(self.ranges), dict(self.given), set(self.fixed), dict(self.why),
                [(inp, inp.example) for inp in inputs])

    def restore(self, snapshot, inputs):
        self.ranges, self.given, self.fixed, self.why = (copy.deepcopy(snapshot[0]), dict(snapshot[1]),
                                                          set(snapshot[2]), dict(snapshot[3]))
        for inp, example in snapshot[4]:
            inp.example = example

    def double_size_one(self, inputs):
        """An example of size 1 in a named dimension, doubled (repeated) in every input that has the name:
        torch.export fixes a dimension whose example is 0 or 1. Returns the names doubled."""
        small = {n for inp in inputs for d, n in inp.dims.items() if inp.example.shape[d] <= 1}
        for inp in inputs:
            for d, n in inp.dims.items():
                if n in small and inp.example.shape[d] == 1:
                    repeats = [1] * inp.example.dim()
                    repeats[d] = 2
                    inp.undoubled = inp.example if inp.undoubled is None else inp.undoubled
                    inp.example = inp.example.repeat(*repeats)
        self.doubled = small
        for n in small:
            lo, hi = self.ranges[n]
            if hi is not None and hi < 2:
                raise ExportError("dimension %r has the range %d..%d: nothing to vary" % (n, lo, hi), advice="")
        return sorted(small)

    def undo_doubling_of_fixed(self, inputs):
        """A doubled name that torch.export fixed anyway is traced at the example's own size again, so that the
        program takes the input as given."""
        for inp in inputs:
            if inp.undoubled is not None and any(n in self.fixed and n in self.doubled for n in inp.dims.values()):
                inp.example = inp.undoubled

    def shapes(self, inputs):
        """dynamic_shapes for torch.export.export, by the program's input names; None when nothing is named."""
        if not any(inp.dims for inp in inputs):
            return None
        Dim = self.torch.export.Dim
        made = {}
        for name, (lo, hi) in self.ranges.items():
            if name in self.fixed:
                continue
            if name in self.given:
                made[name] = self.given[name]
                continue
            made[name] = Dim(_dim_identifier(name), min=lo, max=hi) if hi is not None else Dim(
                _dim_identifier(name), min=lo)
        result = {}
        for inp in inputs:
            dims = {d: made[n] for d, n in inp.dims.items() if n in made}
            result[inp.name] = dims or None
        return result

    def apply_fixes(self, text, guards=None):
        """torch.export's "Suggested fixes" (`seq = Dim('seq', max=256)`, `batch = 1`) onto the ranges, and the guards
        it names without one (`... in the specified range seq <= 128 satisfy the generated guard ... != 128`: the
        code branches on that one size, which the program cannot take with the others: the range stops short of it);
        whether any applied."""
        applied = False
        by_identifier = {_dim_identifier(n): n for n in self.ranges}
        for m in re.finditer(r"Not all values of (\w+) = (\S+) in the specified range [^.]*? satisfy the generated "
                             r"guard (\S+) != (\d+)", text):
            name = by_identifier.get(m.group(1))
            if name is None or m.group(2) != m.group(3):
                continue
            lo, hi = self.ranges[name]
            size = int(m.group(4))
            new = [lo, size - 1] if hi == size else [size + 1, hi] if (lo or 1) == size else None
            if new is not None and (new[1] is None or new[0] <= new[1]):
                self.ranges[name] = new
                self.why[name] = "torch.export: the model's code branches on %s == %d" % (name, size)
                self.given.pop(name, None)
                applied = True
        if "Suggested fixes:" not in text:
            return applied
        for line in text.split("Suggested fixes:", 1)[1].splitlines():
            line = line.strip()
            m = re.match(r"^(\w+) = Dim\('(\w+)'(.*)\)$", line)
            if m and m.group(1) in by_identifier:
                name = by_identifier[m.group(1)]
                lo = re.search(r"min=(\d+)", m.group(3))
                hi = re.search(r"max=(\d+)", m.group(3))
                new = [int(lo.group(1)) if lo else self.ranges[name][0], int(hi.group(1)) if hi else
                       self.ranges[name][1]]
                if new != self.ranges[name]:
                    # The model's line behind the bound, where torch.export's guards name it.
                    source = re.search(r"Not all values of %s = (\S+) in the specified range" % re.escape(m.group(1)),
                                       text)
                    where = guards.where(source.group(1), new[1] if hi else new[0]) if guards and source else None
                    self.ranges[name] = new
                    self.why[name] = ("the model's code at " + where) if where else \
                        "torch.export's bound from the model's code"
                    self.given.pop(name, None)
                    applied = True
                continue
            m = re.match(r"^(\w+) = (\d+)$", line)
            if m and m.group(1) in by_identifier and by_identifier[m.group(1)] not in self.fixed:
                self.fixed.add(by_identifier[m.group(1)])
                applied = True
        return applied


def _dim_identifier(name):
    ident = re.sub(r"\W", "_", name)
    return ident if ident and not ident[0].isdigit() else "d_" + ident


# ------------------------------------------------------------------------------------------- the forward


def _first_tensor_field(out, torch):
    values = out.values() if isinstance(out, Mapping) else (
        [getattr(out, f) for f in out.__dataclass_fields__] if hasattr(out, "__dataclass_fields__") else
        [v for v in vars(out).values()] if hasattr(out, "__dict__") else [])
    for v in values:
        if isinstance(v, torch.Tensor):
            return v
    return None


def _select_output(out, torch, seen):
    """What the program returns: a tensor as it is; `logits` of an object or dict that has it; another object's
    first tensor; a tuple's or list's tensors. `seen` records which, for the message."""
    if isinstance(out, torch.Tensor):
        seen.setdefault("output", "tensor")
        return out
    logits = None
    if isinstance(out, Mapping) and "logits" in out:
        logits = out["logits"]
    elif not isinstance(out, (tuple, list)) and isinstance(getattr(out, "logits", None), torch.Tensor):
        logits = out.logits
    if isinstance(logits, torch.Tensor):
        seen.setdefault("output", "logits of " + type(out).__name__)
        return logits
    if isinstance(out, (tuple, list)):
        tensors = tuple(v for v in out if isinstance(v, torch.Tensor))
        if len(tensors) != len(out):
            seen.setdefault("output", "the %d tensors of a %d-item %s" % (len(tensors), len(out), type(out).__name__))
        else:
            seen.setdefault("output", type(out).__name__ + " of tensors")
        return tensors
    first = _first_tensor_field(out, torch)
    if first is not None:
        seen.setdefault("output", "the first tensor of " + type(out).__name__)
        return first
    return out


def _call_plan(signature, bound, inputs):
    """forward's positional and keyword arguments for the example, and where each input goes in them:
    ("pos", index) or ("kw", key). Made before the trace, so the traced forward does list and dict indexing only."""
    markers = {}
    arguments = dict(bound.arguments)
    for inp in inputs:
        marker = object()
        markers[id(marker)] = inp
        kind, key = inp.where
        if kind == "arg":
            arguments[key] = marker
        elif kind == "vararg":
            var = next(p for p in signature.parameters.values() if p.kind == inspect.Parameter.VAR_POSITIONAL)
            values = list(arguments[var.name])
            values[key] = marker
            arguments[var.name] = tuple(values)
        else:
            var = next(p for p in signature.parameters.values() if p.kind == inspect.Parameter.VAR_KEYWORD)
            arguments[var.name] = dict(arguments[var.name], **{key: marker})
    plan = inspect.BoundArguments(signature, arguments)
    args, kwargs = list(plan.args), dict(plan.kwargs)
    slots = {}
    for i, v in enumerate(args):
        if id(v) in markers:
            slots[markers[id(v)].name] = ("pos", i)
            args[i] = None
    for k, v in kwargs.items():
        if id(v) in markers:
            slots[markers[id(v)].name] = ("kw", k)
            kwargs[k] = None
    return args, kwargs, [slots[inp.name] for inp in inputs]


def _make_forward(signature, bound, inputs, torch, original_forward):
    """forward(self, <input names>): the user's forward, called with the bound example's constants and these
    tensors, returning _select_output of its output. Built with the inputs' own names (the program's placeholders
    and dynamic_shapes keys). Also returns call(self, tensors, seen), the same with what was returned recorded in
    `seen` (never during a trace: TorchDynamo does not replay such a side effect into an exported program)."""
    names = [inp.name for inp in inputs]
    args_template, kwargs_template, slots = _call_plan(signature, bound, inputs)

    def call(self, tensors, seen=None):
        args, kwargs = list(args_template), dict(kwargs_template)
        for (kind, key), t in zip(slots, tensors):
            if kind == "pos":
                args[key] = t
            else:
                kwargs[key] = t
        return _select_output(original_forward(self, *args, **kwargs), torch, {} if seen is None else seen)

    source = "def forward(self, {0}):\n    return _call(self, ({0},))\n".format(", ".join(names))
    namespace = {"_call": call}
    exec(compile(source, "<memledger.export forward>", "exec"), namespace)  # noqa: S102 (our own generated text)
    return namespace["forward"], call


class _AsItself:
    """The model's class swapped, for the export, for a subclass with the same name and module whose forward is
    `forward`: the program's module paths and state-dict names stay the model's own (no wrapper prefix)."""

    def __init__(self, model, forward):
        self.model = model
        self.original = type(model)
        self.subclass = type(self.original.__name__, (self.original,), {"forward": forward})
        self.subclass.__qualname__ = self.original.__qualname__
        self.subclass.__module__ = self.original.__module__
        self.own_forward = model.__dict__.pop("forward", None)  # an instance-level forward would shadow ours

    def __enter__(self):
        self.model.__class__ = self.subclass
        return self.model

    def __exit__(self, *exc):
        self.model.__class__ = self.original
        if self.own_forward is not None:
            self.model.__dict__["forward"] = self.own_forward
        return False


# -------------------------------------------------------------------------------------------- the export


class _Quiet:
    """torch's export loggers at CRITICAL: a failed strict attempt prints its trace to stderr, and the reason is
    printed here instead."""

    def __enter__(self):
        self.levels = {n: logging.getLogger(n).level for n in _QUIET_LOGGERS}
        for n in _QUIET_LOGGERS:
            logging.getLogger(n).setLevel(logging.CRITICAL)

    def __exit__(self, *exc):
        for n, level in self.levels.items():
            logging.getLogger(n).setLevel(level)
        return False


class _GuardLog(logging.Handler):
    """The guards torch.export adds while it traces (symbolic_shapes' INFO records, which it writes nowhere else while
    it runs), to name the model's line a range comes from: "eval s77 < 64 [guard added] (upsampling.py:169 in
    forward)", with each symbol's source ("create_symbol s77 = 4 for L['x'].size()[0]"). Printed nowhere."""

    LOGGER = "torch.fx.experimental.symbolic_shapes"

    def __init__(self):
        super().__init__(logging.INFO)
        self.symbols = {}  # "s77" -> "L['x'].size()[0]"
        self.guards = []  # (expression, file as logged, line, function, the line's code where logged, else None)

    def emit(self, record):
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 (a record that cannot be formatted says nothing)
            return
        m = re.match(r"create_symbol (\w+) = \S+ for (.+?) \[", message)
        if m:
            self.symbols[m.group(1)] = m.group(2)
            return
        m = re.match(r"eval (.+?) \[guard added\](.*)$", message)
        if not m:
            return
        # Strict (dynamo): "... [guard added] if x.shape[0] >= 64:  # upsampling.py:169 in forward (internal)";
        # non-strict: "... [guard added] (upsampling.py:169 in forward)".
        rest, code = m.group(2), None
        if "  # " in rest:
            code, rest = rest.split("  # ", 1)
            where = re.match(r"\s*([^()\s]+):(\d+) in ([\w<>]+)", rest)
        else:
            where = re.search(r"\(([^()\s]+):(\d+) in ([\w<>]+)\)", rest)
        if where:
            self.guards.append((m.group(1), where.group(1), int(where.group(2)), where.group(3),
                                code.strip() if code and code.strip() else None))

    def __enter__(self):
        self.symbols, self.guards = {}, []
        log = logging.getLogger(self.LOGGER)
        self._saved = (log.level, log.propagate, list(log.handlers))  # torch._logging's own stderr handler among them
        log.setLevel(logging.INFO)
        log.propagate = False
        log.handlers = [self]
        return self

    def __exit__(self, *exc):
        log = logging.getLogger(self.LOGGER)
        log.setLevel(self._saved[0])
        log.propagate = self._saved[1]
        log.handlers = self._saved[2]
        return False

    def where(self, source, bound):
        """For the dimension whose source is `source` ("L['x'].size()[0]"), the last guard on it that names `bound`
        or the size past it: "upsampling.py:169 in forward (`if x.shape[0] >= 64:`): x.size()[0] < 64"; None."""
        names = [s for s, src in self.symbols.items() if src == source]
        if not names:  # strict: the inputs are flat_args[i]; the same dimension of one of them
            dim = re.search(r"\.size\(\)\[\d+\]$", source)
            names = [s for s, src in self.symbols.items()
                     if dim and src.startswith("L['flat_args']") and src.endswith(dim.group(0))]
        for expr, file, line, func, code in reversed(self.guards):
            if not any(re.search(r"\b%s\b" % re.escape(n), expr) for n in names):
                continue
            if not re.search(r"\b(%d|%d)\b" % (bound, bound + 1), expr):
                continue
            for n in names:
                expr = re.sub(r"\b%s\b" % re.escape(n), _plain_source(source), expr)
            text = code or _source_line(file, line)
            return ("%s:%d in %s%s: torch.export's guard %s; sizes past it take the code's other branch: export "
                    "another program from an example there" % (os.path.basename(file), line, func,
                                                                " (`%s`)" % text if text else "", expr))
        return None


def _plain_source(source):
    """"L['x'].size()[0]" -> "x.size()[0]": the input by its name."""
    return re.sub(r"L\['(\w+)'\]", r"\1", source)


def _source_line(file, line):
    """The text of `line` of the file the log names (a tail of its path), found among the loaded modules' files."""
    import linecache
    tail = file.replace("\\", "/")
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.replace("\\", "/").endswith(tail):
            text = linecache.getline(path, line).strip()
            if text:
                return text
    return None


@contextlib.contextmanager
def full_stack_traces(torch):
    """A non-strict trace keeps only the frames of functions named `forward` in each node's stack_trace
    (TracerBase._record_forward_stack_traces_only): the helper functions a forward calls (transformers'
    eager_attention_forward, Bloom's bloom_gelu_forward) are left out, and with them the lines that tell how long
    eager Python holds their values (the attention weights a layer binds to `_`). Inside this, a non-strict trace
    also keeps the frames of the model's own code between them, as a strict one does: every frame below the first
    forward that is not torch's or Python's own (torch's module forwards, as before, too)."""
    tracer = getattr(getattr(getattr(torch, "fx", None), "proxy", None), "TracerBase", None)
    original = getattr(tracer, "_filter_traceback_frames", None)
    if original is None or not hasattr(tracer, "_record_forward_stack_traces_only"):
        yield  # a torch without that filter keeps what it keeps
        return
    not_the_models = tuple(os.path.join(p, "") for p in {os.path.dirname(os.path.abspath(torch.__file__)),
                                                        sysconfig.get_paths()["stdlib"],
                                                        sysconfig.get_paths()["platstdlib"]})

    def model_frames(self, summary):
        frames = list(summary)
        first = next((i for i, f in enumerate(frames) if f.name == "forward"), None)
        if not self._record_forward_stack_traces_only or first is None:
            return original(self, summary)
        from torch.fx.experimental.symbolic_shapes import uninteresting_files  # the tracer's own, as it drops them
        tracers = uninteresting_files()
        return traceback.StackSummary.from_list([
            f for f in frames[first:] if f.filename not in tracers
            and (f.name == "forward" or not (f.filename.startswith(not_the_models) or f.filename.startswith("<")))])

    tracer._filter_traceback_frames = model_frames
    try:
        yield
    finally:
        tracer._filter_traceback_frames = original


def _short(error):
    lines = [l.strip() for l in str(error).splitlines() if l.strip()]
    return "%s: %s" % (type(error).__name__, lines[0] if lines else "")


def _reason(error):
    """PyTorch's reason in a few lines: the exception's first line and the user's source line it names."""
    text = str(error).strip()
    lines = [l for l in text.splitlines() if l.strip()]
    first = lines[0].strip() if lines else type(error).__name__
    reason = "%s: %s" % (type(error).__name__, first)
    where = None
    m = re.search(r"The following call raised this error:\n\s*(File .*)\n\s*(.+)", text)
    if m:
        where = "%s: %s" % (m.group(1).strip(), m.group(2).strip())
    else:
        for l in lines:
            s = l.strip()
            if (s.startswith("# File") and "code:" in s and "site-packages" not in s
                    and "memledger.export forward" not in s and os.sep + "memledger" + os.sep not in s):
                where = s[len("# File"):].lstrip(": ").strip()
                break
    if where:
        reason += " (at " + where + ")"
    if "data-dependent" in text.lower() or "data dependent" in text.lower():
        reason = "the model branches on a tensor's value (data-dependent control flow), which no graph holds: " + reason
    for l in lines[1:6]:
        s = l.strip()
        if s.startswith("- ") and ("guard" in s or "specialized" in s):
            reason += "; " + s[2:]
            break
    return reason


def _higher_order(ep, torch):
    """The higher-order operators (a subgraph of their own) a program's graph calls, by qualified name."""
    kind = getattr(getattr(torch, "_ops", None), "HigherOrderOperator", None)
    if kind is None:
        return []
    return sorted({"torch.ops.higher_order." + n.target.__name__ for n in ep.graph.nodes if isinstance(n.target, kind)})


def _supports(function, parameter):
    try:
        return parameter in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def _attempt(torch, model, dims, inputs, strict):
    options = {}
    if _supports(torch.export.export, "strict"):
        options["strict"] = strict
    for _ in range(4):  # each round may take torch.export's suggested fixes for the ranges
        shapes = dims.shapes(inputs)
        if shapes is not None:
            options["dynamic_shapes"] = shapes
        captured = io.StringIO()
        guards = _GuardLog()
        try:
            with _Quiet(), guards, contextlib.redirect_stderr(captured), full_stack_traces(torch), \
                    checkpoint_record.traced_plain(model):
                ep = torch.export.export(model, tuple(inp.example for inp in inputs), **options)
        except Exception as e:  # noqa: BLE001 (any failure of the trace is reported with PyTorch's words)
            # What torch printed on the way (the partial graph of a failed trace) is dropped: the reason is
            # printed instead.
            if not dims.apply_fixes(str(e), guards):
                raise
            dims.undo_doubling_of_fixed(inputs)
            continue
        sys.stderr.write(captured.getvalue())  # a successful export's warnings are the user's to see
        return ep
    raise RuntimeError("torch.export kept suggesting other ranges")


def _fake_run(torch, model, call, examples, files):
    """A run of the forward under FakeTensorMode (shapes only, nothing computed): what the program returns
    ({"output": "logits of CausalLMOutput"}) and the lines of `files` it executed ({(file, line)}). Where the forward
    reads a tensor's values (transformers' warn_if_padding_and_no_attention_mask asks whether the pad token is in
    the ids, which a fake tensor cannot answer) and the model and examples hold real values, the run is a real one
    on the examples, under no_grad; ({}, None) where neither is possible."""
    def attempt(fake):
        seen, executed = {}, set()
        with _Quiet(), contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with fake or contextlib.nullcontext(), torch.no_grad(), source_facts.lines_run(files, executed):
                call(model, examples, seen)
        return seen, executed

    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
        return attempt(FakeTensorMode(allow_non_fake_inputs=True))
    except Exception:  # noqa: BLE001 (the description and the lines are optional)
        pass
    tensors = list(model.parameters()) + list(model.buffers()) + [e for e in examples if isinstance(e, torch.Tensor)]
    if any(t.device.type == "meta" for t in tensors):
        return {}, None
    # the user's model as it was: its buffers (a BatchNorm's running statistics in train mode) and the random state
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    rng = torch.get_rng_state()
    try:
        return attempt(None)
    except Exception:  # noqa: BLE001
        return {}, None
    finally:
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        torch.set_rng_state(rng)


def _shape_text(shape):
    return "x".join(str(int(s)) for s in shape) if len(shape) else "1"


def _input_spec(inp, torch):
    """memledger's --input for one example (docs/cli.md): SHAPE:TYPE, with =V when the example holds one value
    other than memledger's fill (0, false); None when memledger has no such input type."""
    t = inp.value
    if not isinstance(t, torch.Tensor):
        return None
    kind = _INPUT_TYPES.get(str(t.dtype).replace("torch.", ""))
    if kind is None:
        return None
    spec = _shape_text(t.shape) + ":" + kind
    if t.device.type != "meta" and t.numel() and _is_token(t, torch):
        flat = t.reshape(-1)
        if bool((flat == flat[0]).all()):
            value = flat[0].item()
            if t.dtype == torch.bool and value:
                spec += "=true"
            elif t.dtype != torch.bool and value != 0:
                spec += "=%d" % value
    return spec


RANGES_RECORD = "memledger_ranges.json"


def _ranges_record(ep, inputs, dims):
    """The RANGES_RECORD text: {"version": 1, "ranges": [{"input": its name in the program, "dim": k, "why": where
    the range comes from ("the model's code at upsampling.py:169 in forward (`...`): torch.export's guard ...")}]}
    for each input dimension whose range the model's code bounds; None when none does."""
    entries = []
    for inp, placeholder in zip(inputs, list(ep.graph_signature.user_inputs)):
        for d, name in inp.dims.items():
            why = dims.why.get(name) if isinstance(name, str) else None
            if why and why.startswith(("the model's code", "torch.export")):
                entries.append({"input": placeholder, "dim": int(d), "why": why})
    return json.dumps({"version": 1, "ranges": entries}, sort_keys=True) if entries else None


def _program_ranges(ep, inputs, dims):
    """{name: (min, max or None)} as the saved program has them (range_constraints of each named dimension's
    symbol); a dimension the program fixed reads (size, size)."""
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    user_inputs = list(ep.graph_signature.user_inputs)
    out = {}
    for inp, placeholder_name in zip(inputs, user_inputs):
        node = placeholders.get(placeholder_name)
        if node is None or "val" not in node.meta:
            continue
        for d, name in inp.dims.items():
            if name in out:
                continue
            size = node.meta["val"].shape[d]
            if isinstance(size, int):
                out[name] = (size, size)
                continue
            vr = ep.range_constraints.get(size.node.expr)
            if vr is None:
                continue
            upper = vr.upper
            finite = getattr(upper, "is_finite", True) and str(upper) not in ("oo", "int_oo")
            out[name] = (int(vr.lower), int(upper) if finite else None)
    return out


def _command():
    """How this machine runs memledger: `memledger` when it is on PATH, else the executable memledger.binary finds
    (relative to the working directory when it is below it, as ./build/app/memledger), else `python -m memledger`."""
    if shutil.which("memledger"):
        return "memledger"
    try:
        from .binary import find_binary
        binary = find_binary()
    except Exception:  # noqa: BLE001 (BinaryNotFound, or a package copied without binary.py)
        return "python -m memledger"
    relative = os.path.relpath(binary)
    return "./" + relative if not relative.startswith("..") else binary


def _whatif_hint(path, inputs, ranges, spec, torch):
    """A what-if along the named sequence and batch dimensions, inside their ranges."""
    if not spec:
        return None
    extra = []
    token_inputs = [i for i in inputs if isinstance(i.value, torch.Tensor) and _is_token(i.value, torch)]
    seq_names = {i.dims.get(1) for i in token_inputs}
    if len(seq_names) == 1 and None not in seq_names and ranges.get(next(iter(seq_names))):
        lo, hi = ranges[next(iter(seq_names))]
        now = int(token_inputs[0].value.shape[1])
        values = sorted({v for v in (now, now * 4, now * 16, hi) if v and v >= lo and (hi is None or v <= hi)})
        if len(values) > 1:
            extra.append("--seq " + ",".join(str(v) for v in values))
    batch_names = {i.dims.get(0) for i in inputs if isinstance(i.value, torch.Tensor)}
    if len(batch_names) == 1 and None not in batch_names and ranges.get(next(iter(batch_names))):
        lo, hi = ranges[next(iter(batch_names))]
        if lo != hi:
            values = [v for v in (1, 8, 32) if v >= lo and (hi is None or v <= hi)]
            if len(values) > 1:
                extra.append("--batch " + ",".join(str(v) for v in values))
    if not extra:
        return None
    return "%s whatif %s --input %s %s" % (_command(), _quoted(path), spec, " ".join(extra))


def _quoted(path):
    return path if re.match(r"^[\w./+-]+$", path) else "'" + path.replace("'", "'\\''") + "'"


def _tied(model):
    """(later name, first name) for each parameter reached under two names."""
    first, tied = {}, []
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            tied.append((name, first[id(p)]))
        else:
            first[id(p)] = name
    return tied


def _dropped_buffers(model, ep):
    """[(name, bytes)] of the model's buffers that the exported program holds under no name (torch.export leaves
    out a non-persistent buffer that no op reads, such as a rotary embedding's original_inv_freq)."""
    kept = set(ep.state_dict) | set(getattr(ep, "constants", {}) or {})
    return [(n, b.numel() * b.element_size()) for n, b in model.named_buffers() if n not in kept]


def _eval_mode_layers(model, torch):
    """A model exported in eval mode: its dropouts that drop (p > 0) and its BatchNorms, which the program runs as
    in eval, in a training step too. (0, 0) for a model in train mode."""
    if model.training:
        return 0, 0
    dropouts = sum(1 for m in model.modules()
                   if isinstance(m, torch.nn.modules.dropout._DropoutNd) and getattr(m, "p", 0) > 0)
    norms = sum(1 for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm))
    return dropouts, norms


def _train_mode_ops(ep):
    """The ops of a program exported from model.train() that run as in training in an inference too: dropouts with
    p != 0 (scaled_dot_product_attention's dropout_p among them) and BatchNorms on the batch's statistics, as
    [text, ...] ("3 dropouts (p > 0)")."""
    dropouts = attentions = norms = 0
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            continue
        args = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
        args.update(zip((a.name for a in schema.arguments), node.args))
        args.update(node.kwargs)
        if schema.name in ("aten::dropout", "aten::native_dropout", "aten::feature_dropout", "aten::alpha_dropout",
                           "aten::feature_alpha_dropout"):
            dropouts += args.get("train") is not False and args.get("p") != 0
        elif schema.name == "aten::scaled_dot_product_attention":
            attentions += args.get("dropout_p") not in (None, 0)
        elif schema.name in ("aten::batch_norm", "aten::_native_batch_norm_legit",
                             "aten::_native_batch_norm_legit_functional"):
            norms += args.get("training") is True
    return [text for text in (_counted(dropouts, "dropout", " (p > 0)"),
                              _counted(attentions, "scaled_dot_product_attention call", " with dropout_p > 0"),
                              _counted(norms, "BatchNorm", " on the batch's statistics")) if text]


def _counted(n, noun, after=""):
    """"2 dropouts (p > 0)": n nouns, then `after`; "" for none."""
    return "%d %s%s%s" % (n, noun, "s" if n > 1 else "", after) if n else ""


def _unpadded_masks(torch, model, forward, dims, inputs):
    """The attention masks (hf_masks.built_masks) of the program traced under hf_masks.unpadded(), the unpadded branch,
    or None where it does not trace. The program is not kept, and the dimensions' ranges are left as they were."""
    before = dims.snapshot(inputs)
    try:
        with _AsItself(model, forward), hf_masks.unpadded():
            for strict in (True, False):
                try:
                    return hf_masks.built_masks(_attempt(torch, model, dims, inputs, strict=strict))
                except Exception:  # noqa: BLE001
                    continue
        return None
    finally:
        dims.restore(before, inputs)


def _trace(torch, model, forward, call, dims, inputs, verbose):
    """torch.export of `model` (strict, else non-strict), then the fake runs that tell which source lines ran and which
    types autocast changes: (program, the strict failure or None, what the output was, lines run, autocast record)."""
    strict_failure = None
    ep = None
    with _AsItself(model, forward):
        try:
            ep = _attempt(torch, model, dims, inputs, strict=True)
        except Exception as e:  # noqa: BLE001
            strict_failure = _reason(e)
            strict_short = _short(e)
            if not _supports(torch.export.export, "strict"):  # an early torch.export: strict is all it does
                raise ExportError("torch.export cannot trace %s: %s" % (type(model).__name__, strict_failure)) from e
            _say(verbose, "strict export failed: %s\n  retrying non-strict" % strict_failure)
        held = _higher_order(ep, torch) if ep is not None else []
        if held and _supports(torch.export.export, "strict"):
            # a strict program with a subgraph operator is tried non-strict, which traces through some of them:
            # strict export makes a custom autograd.Function a no_grad region (wrap_with_set_grad_enabled) whose
            # outputs take no gradient, where eager's take the Function's
            grad_region = held == ["torch.ops.higher_order.wrap_with_set_grad_enabled"]
            strict_failure = strict_short = "the program holds %s, %s" % (", ".join(held), (
                "which a strict trace makes of a torch.autograd.Function without its gradient" if grad_region
                else "which memledger does not run"))
            _say(verbose, "strict export: %s\n  retrying non-strict%s" % (strict_failure, (
                " (a torch.autograd.Function is then traced through its forward, which a training step runs as one "
                "autograd node that keeps its inputs; its backward is the backward of those operators, not the "
                "Function's own)") if grad_region else ""))
            ep = None
        if ep is None:
            try:
                ep = _attempt(torch, model, dims, inputs, strict=False)
            except Exception as e:  # noqa: BLE001
                raise ExportError("torch.export cannot trace %s: %s%s" % (
                    type(model).__name__, _reason(e),
                    "" if strict_failure is None else "; strict export: " + strict_short)) from e
        # a `with torch.no_grad():` block inside the forward (PhiMoE's router) is a subgraph memledger runs in its
        # grad mode; a non-strict trace goes through a torch.autograd.Function instead of making one of it
        held = [h for h in _higher_order(ep, torch) if h != "torch.ops.higher_order.wrap_with_set_grad_enabled"]
        if held:
            raise ExportError("torch.export made a program of %s that memledger cannot run: it holds %s, a "
                              "higher-order operator with a subgraph of its own (a torch.cond, a while_loop, an "
                              "autocast region inside the forward); nothing was saved" % (
                                  type(model).__name__,
                                  ", ".join(held)))
        files = source_facts.files_of(source_facts.traces_of(ep))
        examples = [inp.example for inp in inputs]
        seen, executed = _fake_run(torch, model, call, examples, files)
        # which types the forward takes from a tensor's, which autocast changes (autocast_types.py)
        autocast = autocast_types.record(torch, model, call, examples, files)

    return ep, strict_failure, seen, executed, autocast


def export(model, args, path, *, kwargs=None, dynamic=None, causal_mask=None, generate=False, verbose=True,
           _collect=None):
    """Exports `model` called as model(*args, **kwargs) with torch.export and saves it at `path` (a `.pt2` that
    memledger opens). Returns the torch.export.ExportedProgram.

    dynamic: {input name: {dim: name}} (a name, a (name, min, max) tuple or a torch.export.Dim): dimensions that
    the program takes at any size in their range; one name shared by two inputs is one size.
    causal_mask: for a transformers model called without attention_mask, "built" keeps the attention mask the traced
    program builds, as a padded batch (and FakeTensorMode) runs it: an upper bound; "skipped" exports the unpadded
    batch, which eager transformers runs without a mask (sdpa's is_causal; hf_masks.py). None (the default):
    "skipped" where the inputs hold no token ids (an image model's pixels, an audio model's features called without
    an attention_mask: neither eager nor FakeTensorMode builds the mask), else "built".
    generate: for a transformers causal LM, also save the two programs greedy generation runs (generation.py): the
    prefill of the prompt (input_ids), which returns the last position's logits and the KV cache, and one decode step
    against the cache, its length dynamic; `memledger analyze FILE --mode generate --new-tokens N` runs them as
    transformers' generate does. The program the file opens with stays the forward called with `args`.
    verbose: print what was done, the ranges and the memledger command to run next.
    Raises ExportError (with PyTorch's reason, and the advice to use memledger.capture where the model cannot be
    traced)."""
    try:
        import torch
    except ImportError as e:
        raise ExportError("PyTorch is not installed (%s)" % e) from e
    if not (hasattr(torch, "export") and hasattr(torch.export, "export") and hasattr(torch.export, "save")):
        raise ExportError("torch %s has no torch.export (PyTorch 2.1 or later has it)" % torch.__version__)
    if dynamic and not hasattr(torch.export, "Dim"):
        raise ExportError("torch %s has no torch.export.Dim for named dynamic dimensions (PyTorch 2.2 or later has "
                          "it)" % torch.__version__, advice="export without dynamic=, or " + CAPTURE_ADVICE)
    if not isinstance(model, torch.nn.Module):
        raise ExportError("model is a %s, not a torch.nn.Module" % type(model).__name__, advice="")
    if causal_mask is not None and causal_mask not in hf_masks.CHOICES:
        raise ExportError("causal_mask is %r: use one of %s, or None (the default)"
                          % (causal_mask, ", ".join(map(repr, hf_masks.CHOICES))), advice="")
    path = os.fspath(path)
    if isinstance(args, (torch.Tensor, Mapping)) or not isinstance(args, (tuple, list)):
        args = (args,)
    kwargs = dict(kwargs or {})

    signature, bound, inputs = _bind(model, tuple(args), kwargs, torch)
    cache_off = _use_cache_off(signature, bound)
    device = _model_device(model)
    on_meta = device is not None and device.type == "meta"
    moved = []
    for inp in inputs:
        inp.example = _on_device(inp.value, device, torch)
        if inp.example is not inp.value:
            moved.append(inp.name)
    _read_dynamic(dynamic, inputs, torch)
    dims = _Dims(model, inputs, torch)
    doubled = dims.double_size_one(inputs)

    own = model.__dict__.get("forward")  # a forward set on the instance is the one its callers get
    original = (lambda self, *a, **k: own(*a, **k)) if own is not None else type(model).forward
    forward, call = _make_forward(signature, bound, inputs, torch, original)
    names = [i.name for i in inputs]
    why = hf_masks.why_not_skipped(model, names)
    chosen = causal_mask is None  # the default: skipped where no batch of these inputs is padded
    if chosen:
        causal_mask = "skipped" if why is None and hf_masks.never_padded([i.value for i in inputs]) else "built"
    skip = causal_mask == "skipped"
    # whether causal_mask="skipped" exports this model with these inputs: not where it fell back, nor (untried)
    # where a sliding window makes eager build the mask from the window's length on
    skippable = why is None and hf_masks.sliding_window(model) is None
    own_masks = 0  # attention calls the unpadded branch gives a mask too: the model's own (BEiT's position bias)
    if skip:
        if why:
            raise ExportError("causal_mask='skipped': " + why, advice="")
        before = dims.snapshot(inputs)
        with hf_masks.unpadded():
            traced = _trace(torch, model, forward, call, dims, inputs, verbose)
        masked, total = hf_masks.masked_attention_calls(traced[0])
        unpadded = dims.snapshot(inputs)
        narrowed = unpadded[:4] != before[:4]
        built = None
        if narrowed and not masked:
            # A narrowing the built branch makes too is not the unpadded branch's (MPT's code branches on
            # seq == max_seq_len either way): only a range the unpadded branch alone narrows is a sliding window's.
            dims.restore(before, inputs)
            built = _trace(torch, model, forward, call, dims, inputs, verbose)
            if dims.snapshot(inputs)[:4] == unpadded[:4]:
                narrowed, built = False, None
                dims.restore(unpadded, inputs)
        if masked or narrowed:
            _say(verbose, "causal_mask='skipped' not applied: %s; exported with the mask built, as a padded batch "
                 "runs" % ("%d of %d attention calls still take a mask (a sliding window, or a mask this model builds "
                           "its own way)" % (masked, total) if masked else
                           "the unpadded branch narrows the program's range (a sliding window: eager builds the mask "
                           "from its length on)"))
            if masked and hf_masks.sliding_window(model) is None:
                own_masks = masked  # no causal mask an unpadded batch skips: eager passes these masks too
            skip = skippable = False
            if built is None:
                dims.restore(before, inputs)
                built = _trace(torch, model, forward, call, dims, inputs, verbose)
            traced = built
        else:
            skippable = True
    else:
        traced = _trace(torch, model, forward, call, dims, inputs, verbose)
    ep, strict_failure, seen, executed, autocast = traced
    masked, total = hf_masks.masked_attention_calls(ep)
    skips = 0
    if not skip and total == 0 and skippable:
        # no scaled_dot_product_attention call to count (eager attention): the masks an unpadded batch skips are those
        # the unpadded branch's program does not build
        built = hf_masks.built_masks(ep)
        unpadded = _unpadded_masks(torch, model, forward, dims, inputs) if built else None
        skips = max(built - unpadded, 0) if unpadded is not None else 0

    nested = None
    if generate:
        ids = bound.arguments.get("input_ids")
        if ids is None:
            ids = next((i.value for i in inputs if isinstance(i.value, torch.Tensor) and not i.value.is_floating_point()),
                       None)
        try:
            nested = generation.export_programs(model, ids, torch, lambda m, a, d: _export_nested(m, a, d))
        except generation.NotGenerative as e:
            raise ExportError("generate=True: %s" % e, advice="export without generate=True") from e

    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    if _collect is not None:  # a program of a file another export() writes (generation's)
        extra = source_facts.extra_files(ep, executed)
        ranges = _ranges_record(ep, inputs, dims)
        if ranges is not None:
            extra[RANGES_RECORD] = ranges
        mask = hf_masks.record(model, max(masked - own_masks, 0), total, skippable, skip, skips)
        if mask is not None:
            extra[hf_masks.RECORD] = mask
        if autocast is not None:
            extra[autocast_types.RECORD] = autocast
        _collect["extra"] = extra
        return ep
    if nested is not None and not hasattr(torch.export, "pt2_archive"):
        raise ExportError("generate=True: torch %s cannot save several programs in one file (torch.export.pt2_archive)"
                          % torch.__version__, advice="export without generate=True")
    if _supports(torch.export.save, "extra_files"):
        # what the source says of the traced lines (what each function returns, what each line binds), for eager
        # lifetimes: a value the caller binds to a name it never reads is held by that name
        extra = source_facts.extra_files(ep, executed)
        if autocast is not None:
            extra[autocast_types.RECORD] = autocast
        mask = hf_masks.record(model, max(masked - own_masks, 0), total, skippable, skip, skips)
        if mask is not None:
            extra[hf_masks.RECORD] = mask
        ranges = _ranges_record(ep, inputs, dims)  # where a range comes from the model's code, for memledger's messages
        if ranges is not None:
            extra[RANGES_RECORD] = ranges
        checkpointing = checkpoint_record.record(model)  # torch.export keeps no checkpoint: memledger applies it
        if checkpointing is not None:
            extra[checkpoint_record.RECORD] = checkpointing
        if nested is not None:
            from torch.export.pt2_archive._package import package_pt2

            programs, extras, record = nested
            for name, program in programs.items():
                generation.weights_as_shapes(program, torch)
                for file, text in extras[name].items():
                    extra[name + "/" + file] = text
            extra[generation.RECORD] = record
            package_pt2(path, exported_programs=dict({"model": ep}, **programs), extra_files=extra)
        else:
            torch.export.save(ep, path, extra_files=extra)
    else:
        torch.export.save(ep, path)

    if verbose:
        described = ", ".join("%s %s" % (i.name, _shape_text(i.value.shape) + ":" + str(i.value.dtype).replace(
            "torch.", "") if isinstance(i.value, torch.Tensor) else type(i.value).__name__) for i in inputs)
        _say(True, "%s(%s) -> %s%s" % (type(model).__name__, described, seen.get("output", "output"),
                                       ", use_cache=False" if cache_off else ""))
        found = checkpoint_record.find(model)
        if found:
            _say(True, "activation checkpointing (%s): %d modules, %s; torch.export keeps none, so the file records it "
                 "and memledger analyzes a training step with it (--checkpoint none: without)"
                 % (found["source"], len(found["modules"]), found["implementation"]))
        if on_meta:
            _say(True, "built on the meta device: weights saved as shapes only, memledger runs it on meta%s"
                 % ("; the inputs %s traced as meta tensors" % ", ".join(moved) if moved else ""))
        for later, first in _tied(model):
            _say(True, "tied: %s is %s (stored and counted once)" % (later, first))
        if skip:
            _say(True, "causal_mask='skipped'%s: the batch unpadded, as eager transformers runs one without an "
                 "attention_mask: %s" % (" (the default where the inputs hold no token ids: pixels or audio "
                                         "features, called without an attention_mask)"
                                         if chosen else "",
                                         "no mask in its %d attention calls (sdpa's is_causal where causal)" % total
                                         if total else "its mask functions took that branch (this attention "
                                                       "implementation calls no scaled_dot_product_attention)"))
        elif (masked or skips) and skippable:
            _say(True, "the attention mask is built in the program (%s), as a padded batch and FakeTensorMode run the "
                 "model: an upper bound for an unpadded batch (packed sequences, an all-ones attention_mask), which "
                 "eager transformers runs without it; causal_mask='skipped' exports that"
                 % ("%d attention calls take it" % masked if masked else
                    "%d mask%s an unpadded batch does not build" % (skips, "" if skips == 1 else "s")))
        dropped = _dropped_buffers(model, ep)
        if dropped:
            _say(True, "not in the program: %s (%d bytes: buffers no op reads, which torch.export leaves out; the "
                 "eager model holds them, memledger does not count them)"
                 % (", ".join(n for n, _ in dropped), sum(b for _, b in dropped)))
        dropouts, norms = _eval_mode_layers(model, torch)
        layers = [text for text in (_counted(dropouts, "dropout", " (p > 0)"), _counted(norms, "BatchNorm")) if text]
        if layers:
            _say(True, "eval mode: %s run as in eval in this file, in a training step too; export from "
                 "model.train() for a training step's figures" % " and ".join(layers))
        if model.training:
            ops = _train_mode_ops(ep)
            if ops:
                _say(True, "train mode: %s run as in training in this file, in an inference too; export from "
                     "model.eval() for an inference's figures" % " and ".join(ops))
        doubled = [n for n in doubled if n not in dims.fixed]
        if doubled:
            _say(True, "the example's size 1 in %s was traced as 2 (torch.export fixes a size of 1)"
                 % ", ".join(doubled))
        ranges = _program_ranges(ep, inputs, dims)
        for name in sorted(ranges):
            lo, hi = ranges[name]
            if lo == hi:
                _say(True, "%s: fixed at %d (torch.export could not keep it dynamic)" % (name, lo))
            else:
                _say(True, "%s: %d..%s%s" % (name, lo, hi if hi is not None else "any",
                                              " (%s)" % dims.why[name] if name in dims.why and hi is not None else ""))
        if nested is not None:
            facts = json.loads(nested[2])
            _say(True, "generation: a prefill and a decode-step program (%d layers, a cache of %d KV heads x %d"
                 "%s), run as transformers' generate runs them; %s" % (
                     facts["layers"], facts["kv_heads"], facts["head_dim"],
                     ", grouped-query attention" if facts["grouped_query"] else "",
                     "both for a dynamic and a static cache" if "static" in facts["caches"]
                     else "a dynamic cache only (%s)" % facts["static_reason"]))
        specs = [_input_spec(i, torch) for i in inputs]
        spec = ",".join(specs) if all(specs) else None
        _say(True, "saved %s (%s)" % (path, "strict" if strict_failure is None else "non-strict"))
        print("Next: %s analyze %s%s" % (_command(), _quoted(path), " --input " + spec if spec else ""), flush=True)
        if nested is not None:
            print("      %s analyze %s --mode generate%s --new-tokens 64" % (
                _command(), _quoted(path), " --input " + spec if spec else ""), flush=True)
        whatif = _whatif_hint(path, inputs, ranges, spec, torch)
        if whatif:
            print("      " + whatif, flush=True)
    return ep


def _export_nested(model, args, dynamic):
    """One program of a file export() writes: (ExportedProgram, its extra files)."""
    collected = {}
    ep = export(model, args, os.devnull, dynamic=dynamic, causal_mask="skipped", verbose=False, _collect=collected)
    return ep, collected["extra"]

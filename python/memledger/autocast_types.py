"""What torch.autocast makes of the types a forward passes, where its source takes them from a tensor.

A float32 program exported from `attn.softmax(dim=-1, dtype=torch.float32).to(query.dtype)` holds `to(float32)`:
the graph keeps the type `query` had when it was traced, not where it came from. Under autocast, `query` comes out
of a linear in bfloat16, and the eager code casts to bfloat16; the program, run as it is, keeps float32 and holds
twice the bytes. Nothing in the graph tells the two apart (`.to(torch.float32)` looks the same), and the source line
alone does not say what `query`, `q_type` or `value` hold.

So memledger.export asks PyTorch: it runs the forward three times under FakeTensorMode (shapes only, nothing
computed), once as it is, once under CPU autocast and once under CUDA autocast (fake CUDA tensors, no GPU needed),
each in bfloat16, and notes every call that passes a torch.dtype (`x.to(t)`, `x.float()`, `torch.zeros(...,
dtype=t)`, `softmax(..., dtype=t)`), by the source line that made it. A call whose type differs under autocast is
one that follows a tensor's type. The record, saved in the program's archive:

    {"version": 1, "lower": "bfloat16",               the autocast type of the runs
     "policies": {"cpu" | "cuda": {                   the autocast whose rules the run followed
        "FILE:LINE": {"calls": N,                     the calls that pass a type on that line, in the whole forward
                      "changed": {"K": [FROM, TO]}}}}}  the K-th of them (from 0) passes TO under autocast where it
                                                        passes FROM without; TO is "lower" for the autocast type
memledger runs the program's k-th node passing a type on that line with TO, under --autocast in that device's rules,
where the program has as many such nodes on that line as the forward made calls (else the line is left as traced).
A policy whose run failed (a forward that reads a tensor's values) is left out.
"""

import contextlib
import json
import sys

RECORD = "memledger_autocast.json"

# Tensor methods that name their type, and the type: in the program, each is a cast that passes it.
_METHOD_TYPES = {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16", "int": "int32",
                 "long": "int64", "short": "int16", "bool": "bool", "byte": "uint8", "char": "int8"}


def _type_name(dtype):
    return str(dtype).replace("torch.", "")


def _calls_recorder(torch, files):
    """A TorchFunctionMode that appends (FILE:LINE, dtype) for each call that passes a type, the line being the
    innermost frame of `files` (the frames the program's stack traces name)."""
    from torch.overrides import TorchFunctionMode

    methods = {getattr(torch.Tensor, m): getattr(torch, t) for m, t in _METHOD_TYPES.items() if hasattr(torch.Tensor, m)}

    class Calls(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            dtype = methods.get(func)
            if dtype is None:
                for a in list(args) + list(kwargs.values()):
                    if isinstance(a, torch.dtype):
                        dtype = a
                        break
            if dtype is not None:
                frame = sys._getframe(1)
                while frame is not None and frame.f_code.co_filename not in files:
                    frame = frame.f_back
                if frame is not None:
                    self.calls.append(("%s:%d" % (frame.f_code.co_filename, frame.f_lineno), dtype))
            return func(*args, **kwargs)

    return Calls()


@contextlib.contextmanager
def _autocast_on(torch, device, dtype):
    """torch.autocast(device, dtype) set by hand: torch.autocast("cuda") turns itself off where no GPU is; the fake
    CUDA tensors need none."""
    if device is None:
        yield
        return
    enabled, previous = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    torch.set_autocast_enabled(device, True)
    torch.set_autocast_dtype(device, dtype)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled(device, enabled)
        torch.set_autocast_dtype(device, previous)


def _fake_calls(torch, model, call, examples, files, device, autocast):
    """The calls that pass a type in one run of the forward on fake tensors of `device` (weights and inputs made
    from their shapes), under autocast in `autocast` (None: without)."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.nn.utils.stateless import _reparametrize_module

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    target = torch.device(device)

    def fake(t):
        return FakeTensor(mode, torch.empty(t.shape, dtype=t.dtype, device="meta"), target)

    made = {}  # one fake per tensor: tied weights stay tied
    state = {}
    for name, t in list(model.named_parameters(remove_duplicate=False)) + list(
            model.named_buffers(remove_duplicate=False)):
        if id(t) not in made:
            made[id(t)] = fake(t)
            if isinstance(t, torch.nn.Parameter):
                made[id(t)].requires_grad_(t.requires_grad)
        state[name] = made[id(t)]
    inputs = [fake(e) if isinstance(e, torch.Tensor) else e for e in examples]
    recorder = _calls_recorder(torch, files)
    with mode, torch.no_grad(), _reparametrize_module(model, state), _autocast_on(torch, autocast, torch.bfloat16):
        with recorder:
            call(model, inputs, {})
    return recorder.calls


def record(torch, model, call, examples, files):
    """The record described above, as JSON text; None where the forward does not run on fake tensors."""
    import io
    import warnings

    def calls(device, autocast):
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return _fake_calls(torch, model, call, examples, files, device, autocast)
            except Exception:  # noqa: BLE001 (a forward that reads values, a device it refuses: no record)
                return None

    if not files:
        return None
    plain = calls("cpu", None)
    if plain is None:
        return None
    totals = {}
    for line, _ in plain:
        totals[line] = totals.get(line, 0) + 1
    policies = {}
    for policy in ("cpu", "cuda"):
        under = calls(policy, policy)
        if under is None or [line for line, _ in under] != [line for line, _ in plain]:
            continue  # failed, or took another path
        lines, seen = {}, {}
        for (line, before), (_, after) in zip(plain, under):
            k = seen.get(line, 0)
            seen[line] = k + 1
            if before == after:
                continue
            entry = lines.setdefault(line, {"calls": totals[line], "changed": {}})
            entry["changed"][str(k)] = [_type_name(before), "lower" if after == torch.bfloat16 else _type_name(after)]
        policies[policy] = lines
    if not policies:
        return None
    return json.dumps({"version": 1, "lower": "bfloat16", "policies": policies}, sort_keys=True)

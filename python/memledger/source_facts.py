"""What the Python source says about the lines a torch.export program was traced from.

memledger's eager lifetimes (core/recording/pt2_lifetimes.h) keep each value as long as the eager Python holds it,
told from the stack_trace of each node: its frames and the first line of each frame's statement. What a node's trace
does not show is what a function returns, and to which names its caller binds it: `hidden, _ = self.attn(x)` holds
the attention weights in `_` until the layer returns, though nothing reads them. This module reads the source files
the frames name (at export time, where they exist) and writes, for the program's archive:

    {"version": 1,
     "functions": {"FILE:FIRST_LINE": {"returns": R,
                                       "rebinds": {NAME: [LINE, ...]}}},  lines that bind NAME to something other
                                                         than a call on its own value (`x = None`, `x = out[0]`),
                                                         those a run of the forward executed (none where no
                                                         run was possible)
                                                         R: null (the return statements differ, or none), "call" (the
                                                         function returns a call's value as it is:
                                                         `return self.attention(...)`), or a list, one entry per
                                                         returned element: a local name, or null for an expression
     "lines": {"FILE:LINE": {"function": "FILE:FIRST_LINE", "first": N,  the statement's first line
                             "targets": [...] | null,   the local names the statement binds, [] for none, null when it
                                                        binds something else (an attribute, an item)
                             "call": bool,              its value is a call, bound as the call returns it
                             "container": true,         (only where true) its value is a dict, list, tuple or set
                                                        literal: the name holds every element, also those nothing
                                                        reads (`masks = {"full": f(x), "sliding": g(x)}`)
                             "once": true,              (only where true) it is in no loop of its function: it runs
                                                        at most once per call, so the traced lines of a statement
                                                        over several lines, one after another, are one run of it
                             "return": bool}}}          it is a return statement

A file that cannot be read or parsed is left out: memledger then keeps what the stack traces alone tell.
"""

import ast
import contextlib
import json
import re
import sys

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ')

# The archive's extra file memledger reads them from (torch.export.save writes it as extra/RECORD).
RECORD = "memledger_sources.json"


def _names(target):
    """The local names an assignment target binds, or None when it binds something else."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        out = []
        for element in target.elts:
            if isinstance(element, ast.Starred):
                element = element.value
            inner = _names(element)
            if inner is None or len(inner) != 1:
                return None
            out.extend(inner)
        return out
    return None


def _is_call(value):
    if isinstance(value, ast.Await):
        value = value.value
    return isinstance(value, ast.Call)


def _calls_on(value, name):
    """Whether `value` is a call on `name`'s own value (`x.to(t)`, `dropout(x, p)`): in eval mode or for a no-op
    cast it returns that value, and the line makes no node."""
    if isinstance(value, ast.Await):
        value = value.value
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == name:
        return True
    arguments = list(value.args) + [k.value for k in value.keywords]
    return any(isinstance(a, ast.Name) and a.id == name for a in arguments)


def _base_name(value):
    """The local name an expression reads its value from (`out`, `out.last_hidden_state`, `out[0]`), else None."""
    while isinstance(value, (ast.Attribute, ast.Subscript)):
        value = value.value
    return value.id if isinstance(value, ast.Name) else None


def _constructs(value):
    """Whether `value` calls a class by its name (`BaseModelOutput(last_hidden_state=h, ...)`): an object that holds
    its arguments, which no node of the trace makes."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name[:1].isupper()


def _returned(value):
    """What one return statement hands back: a list of names (None for an expression), or "call". An object made by
    its class's name (a transformers ModelOutput) hands back the locals its arguments read, whole: the caller's name
    holds what `encoder_outputs.last_hidden_state` reads as long as it holds the object."""
    if value is None:
        return []
    if isinstance(value, ast.Name):
        return [value.id]
    if isinstance(value, ast.Tuple):
        return [e.id if isinstance(e, ast.Name) else None for e in value.elts]
    if _constructs(value):
        return [_base_name(a) for a in list(value.args) + [k.value for k in value.keywords]] or [None]
    if _is_call(value):
        return "call"
    return [None]


def _statements(body, looped=False):
    """(statement, in a loop) for the statements of a block and of the blocks inside it, not those of functions or
    classes defined there. `looped`: the block is inside a for or while loop (its else block counted in)."""
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield statement, looped
        inner_looped = looped or isinstance(statement, (ast.For, ast.AsyncFor, ast.While))
        for field in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(statement, field, None) or [], inner_looped)
        for inner in (getattr(statement, "handlers", None) or []) + (getattr(statement, "cases", None) or []):
            yield from _statements(inner.body, inner_looped)


class _Function:
    """One function's statements, without those of the functions and classes defined inside it."""

    def __init__(self, node):
        self.first = node.lineno
        self.last = node.end_lineno
        walked = list(_statements(node.body))
        self.statements = [s for s, _ in walked]
        self.looped = {id(s) for s, looped in walked if looped}
        returns = [_returned(s.value) for s in self.statements if isinstance(s, ast.Return)]
        shapes = {json.dumps(r) for r in returns}
        self.returns = returns[0] if len(shapes) == 1 else None
        # The lines that bind a name to something other than a call on its own value: `x = None`, `x = out[0]`,
        # `for x in ...`. Such a line makes no node when it binds no new tensor, so the trace does not show it.
        self.rebinds = {}  # name -> [(first line, last line)]
        for statement in self.statements:
            if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                for target in targets:
                    for name in _names(target) or []:
                        if not _calls_on(statement.value, name):
                            self.rebinds.setdefault(name, []).append((statement.lineno, statement.end_lineno))
            elif isinstance(statement, (ast.For, ast.AsyncFor)):
                for name in _names(statement.target) or []:
                    self.rebinds.setdefault(name, []).append((statement.lineno, statement.lineno))

    def rebinds_run(self, path, executed):
        """The rebinding lines that a run executed (`executed`: {(file, line)}); none where no run told which ran:
        a line that did not run, taken as run, would drop a value the eager code still holds (an under-count), while
        one that ran, left out, holds a value longer than it lives (an over-count, the safe side)."""
        out = {}
        if executed is None:
            return out
        for name, spans in self.rebinds.items():
            lines = [first for first, last in spans
                     if any((path, line) in executed for line in range(first, last + 1))]
            if lines:
                out[name] = lines
        return out

    def statement_at(self, line):
        """The innermost simple statement spanning `line` (a compound one's header when none is)."""
        best = None
        for s in self.statements:
            if s.lineno <= line <= (s.end_lineno or s.lineno):
                if best is None or (s.end_lineno - s.lineno) < (best.end_lineno - best.lineno):
                    best = s
        return best


def _functions_of(path, cache):
    if path not in cache:
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=path)
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
            cache[path] = None
            return None
        cache[path] = [_Function(n) for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return cache[path]


_CONTAINERS = (ast.Dict, ast.List, ast.Tuple, ast.Set)


def _describe(statement, looped):
    targets, call = [], False
    container = isinstance(statement, (ast.Assign, ast.AnnAssign)) and isinstance(statement.value, _CONTAINERS)
    if isinstance(statement, ast.Assign):
        bound = [_names(t) for t in statement.targets]
        targets = None if any(b is None for b in bound) or len(bound) != 1 else bound[0]
        call = _is_call(statement.value)
    elif isinstance(statement, ast.AnnAssign):
        targets = _names(statement.target) if statement.value is not None else []
        call = statement.value is not None and _is_call(statement.value)
    elif isinstance(statement, ast.AugAssign):
        targets = _names(statement.target)
    elif isinstance(statement, ast.Return):
        call = statement.value is not None and _is_call(statement.value)
    facts = {"first": statement.lineno, "targets": targets, "call": bool(call),
             "return": isinstance(statement, ast.Return)}
    if container:
        facts["container"] = True
    if not looped:
        facts["once"] = True
    return facts


def files_of(traces):
    """The source files the stack traces name."""
    return {path for trace in traces for path, _ in _FRAME.findall(trace or "")}


def traces_of(ep):
    return [n.meta.get("stack_trace") for n in ep.graph_module.graph.nodes]


@contextlib.contextmanager
def lines_run(files, executed):
    """Adds to `executed` each (file, line) of `files` that runs inside the block (sys.settrace; the frames of other
    files are not traced line by line)."""
    def local(frame, event, arg):
        if event == "line":
            executed.add((frame.f_code.co_filename, frame.f_lineno))
        return local

    def call(frame, event, arg):
        return local if frame.f_code.co_filename in files else None

    previous = sys.gettrace()
    sys.settrace(call)
    try:
        yield executed
    finally:
        sys.settrace(previous)


def of_traces(traces, executed=None):
    """The facts of the lines the stack traces name, as the JSON text described above. `executed` ({(file, line)},
    from lines_run around a run of the forward) keeps, of the lines that rebind a name to something the trace does
    not show (`attn_weights = None` under `if not output_attentions:`), those that ran; without it, none of them
    (rebinds_run)."""
    cache, functions, lines = {}, {}, {}
    for trace in traces:
        for path, line in _FRAME.findall(trace or ""):
            key = "%s:%s" % (path, line)
            if key in lines:
                continue
            candidates = _functions_of(path, cache)
            if not candidates:
                continue
            line = int(line)
            inside = [f for f in candidates if f.first <= line <= f.last]
            if not inside:
                continue
            function = min(inside, key=lambda f: f.last - f.first)
            statement = function.statement_at(line)
            if statement is None:
                continue
            name = "%s:%d" % (path, function.first)
            if name not in functions:
                functions[name] = {"returns": function.returns, "rebinds": function.rebinds_run(path, executed)}
            lines[key] = dict(_describe(statement, id(statement) in function.looped), function=name)
    return json.dumps({"version": 1, "functions": functions, "lines": lines}, sort_keys=True)


def of_program(ep, executed=None):
    """The facts of an ExportedProgram's stack traces."""
    return of_traces(traces_of(ep), executed)


def extra_files(ep, executed=None):
    """torch.export.save's extra_files holding the facts of `ep`, where memledger looks for them."""
    return {RECORD: of_program(ep, executed)}

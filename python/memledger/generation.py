"""The programs greedy generation runs, as transformers' `generate` runs them: memledger.export(..., generate=True).

A transformers causal LM generates in two kinds of forward call (transformers.generation.utils, `_sample`):
- the prefill: the prompt's forward with an empty dynamic cache, computing the logits of the last position only
  (`logits_to_keep=1`), which fills the cache with every layer's keys and values (DynamicLayer.update: a
  `torch.cat` of the empty cache and the prompt's states, a copy);
- a decode step per further token: one token's forward against the cache, each layer's `torch.cat` making its keys
  and values one token longer and dropping the old ones.

The file memledger.export writes then holds, beside the program called "model" (the forward the user called), two
programs in the same archive (torch.export's multi-program layout: models/prefill.json, models/decode.json):
- "prefill" (input_ids and positions: batch x prompt) -> (logits of the last position, keys 0, values 0, keys 1, ...);
- "decode" (input_ids and positions: batch x 1, keys 0, values 0, ...: batch x KV heads x past x head dim) -> the
  same, one token longer. The past length is a dynamic dimension.
`positions` are the position_ids generate passes (from the all-ones attention mask: one row per row of the batch,
which a rotary or learned position table then computes per row); a model whose forward takes none gets none.
Their weights are the model's: they are saved as shapes (meta tensors) and memledger binds them by name to the
model program's. Their own records (source facts, ranges, the mask) are saved under "prefill/" and "decode/"; the
record GENERATE_RECORD says what the cache is (layers, KV heads, head dim, grouped-query or not).

Both programs are exported for an unpadded batch (causal_mask="skipped", hf_masks.py): `generate` from a prompt
without padding passes an all-ones attention_mask, with which eager transformers builds no mask either.
"""

import json

RECORD = "memledger_generate.json"
PROGRAMS = ("prefill", "decode")
CACHE_ARGUMENTS = ("cache", "past_key_values")  # forward's name for the cache: transformers 5's, then 4's


class NotGenerative(ValueError):
    """Why the model cannot be exported for generation."""


def _transformers():
    try:
        import transformers  # noqa: F401
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer
    except ImportError as e:
        raise NotGenerative("generate=True needs transformers (%s)" % e) from e
    return DynamicCache, DynamicLayer


def check(model, torch):
    """Raises NotGenerative where generate=True cannot export `model`."""
    forward = type(model).forward
    import inspect

    parameters = inspect.signature(forward).parameters
    missing = [p for p in ("input_ids", "use_cache", "logits_to_keep") if p not in parameters]
    if not any(p in parameters for p in CACHE_ARGUMENTS):
        missing.append("past_key_values")
    if missing:
        raise NotGenerative("%s.forward takes no %s: generate=True exports a transformers causal LM (one whose forward "
                            "takes input_ids, past_key_values (transformers 5: cache), use_cache and logits_to_keep)"
                            % (type(model).__name__, ", ".join(missing)))
    _transformers()
    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False):
        raise NotGenerative("%s is an encoder-decoder model: generate=True exports a decoder-only causal LM"
                            % type(model).__name__)


def _cache_argument(model):
    import inspect

    parameters = inspect.signature(type(model).forward).parameters
    return next(p for p in CACHE_ARGUMENTS if p in parameters)


def _flat(out):
    cache = getattr(out, "past_key_values", None)
    if cache is None:
        cache = getattr(out, "cache", None)
    if cache is None or not hasattr(cache, "layers"):
        raise NotGenerative("the forward returned no cache with layers (transformers' DynamicCache)")
    return tuple(t for layer in cache.layers for t in (layer.keys, layer.values))


def _takes_positions(model):
    """Whether forward takes position_ids, which generate then passes (from the attention mask: one row per row)."""
    import inspect

    return "position_ids" in inspect.signature(type(model).forward).parameters


def _prefill_forward(model):
    original = type(model).forward  # the class's own: memledger.export swaps the class while it traces

    # Not named "forward": memledger reads each frame named so as a module's call (pt2_lifetimes.cpp). `positions`:
    # generate's position_ids (a name memledger.export's causal_mask="skipped" does not take for the user's own).
    def generation_prefill(self, input_ids, positions):
        out = original(self, input_ids=input_ids, position_ids=positions, use_cache=True, logits_to_keep=1)
        return (out.logits,) + _flat(out)

    def generation_prefill_unpositioned(self, input_ids):
        out = original(self, input_ids=input_ids, use_cache=True, logits_to_keep=1)
        return (out.logits,) + _flat(out)
    return generation_prefill if _takes_positions(model) else generation_prefill_unpositioned


def _decode_forward(model):
    DynamicCache, DynamicLayer = _transformers()
    argument = _cache_argument(model)
    original = type(model).forward

    def cache_of(kv):
        cache = DynamicCache()
        for i in range(len(kv) // 2):
            layer = DynamicLayer()
            # the cache as generate holds it between steps: these tensors, not a copy (update() would cat a copy)
            layer.lazy_initialization(kv[2 * i], kv[2 * i + 1])
            layer.keys, layer.values = kv[2 * i], kv[2 * i + 1]
            cache.layers.append(layer)
        return cache

    def generation_decode(self, input_ids, positions, *kv):
        out = original(self, input_ids=input_ids, position_ids=positions, use_cache=True, logits_to_keep=1,
                       **{argument: cache_of(kv)})
        return (out.logits,) + _flat(out)

    def generation_decode_unpositioned(self, input_ids, *kv):
        out = original(self, input_ids=input_ids, use_cache=True, logits_to_keep=1, **{argument: cache_of(kv)})
        return (out.logits,) + _flat(out)
    return generation_decode if _takes_positions(model) else generation_decode_unpositioned


class _Forward:
    """The model's class swapped, for the block, for a subclass of the same name whose forward is `forward`: an
    instance-level forward would make torch.export name the modules through its closure, not by their paths."""

    def __init__(self, model, forward):
        self.model, self.forward = model, forward

    def __enter__(self):
        self.original = type(self.model)
        subclass = type(self.original.__name__, (self.original,), {"forward": self.forward})
        subclass.__qualname__ = self.original.__qualname__
        subclass.__module__ = self.original.__module__
        self.model.__class__ = subclass

    def __exit__(self, *exc):
        self.model.__class__ = self.original


def export_programs(model, ids, torch, export_one):
    """The prefill and decode programs of `model` from the token ids `ids` (batch x prompt), each exported by
    `export_one(model, args, dynamic)` (memledger.export's own path, which returns (ExportedProgram, extra files)).
    Returns ({"prefill": ep, "decode": ep}, {name: extra files}, the GENERATE_RECORD text)."""
    check(model, torch)
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
        raise NotGenerative("generate=True takes the prompt as token ids, one batch x prompt int64 tensor (input_ids)")
    # torch.export fixes a size of 1: trace batch and prompt at 2 or more, their ranges starting at 1
    example = ids.repeat(2 if ids.shape[0] == 1 else 1, 2 if ids.shape[1] == 1 else 1)
    positioned = _takes_positions(model)
    # named, so that memledger.export bounds the sequences by the model's own position table (its config)
    batch, prompt = "batch", "prompt"
    positions = torch.arange(example.shape[1], device=example.device).expand(example.shape[0], -1).contiguous()
    programs, extras = {}, {}
    with _Forward(model, _prefill_forward(model)):
        args = (example, positions) if positioned else (example,)
        dynamic = {"input_ids": {0: batch, 1: prompt}}
        if positioned:
            dynamic["positions"] = {0: batch, 1: prompt}
        programs["prefill"], extras["prefill"] = export_one(model, args, dynamic)
        device = next((t.device for t in model.parameters()), example.device)
        with torch.no_grad():  # the cache the decode step is traced with, where the model is (meta: shapes)
            out = model(*(a.to(device) for a in args))
    kv = tuple(out[1:])
    if not kv or len(kv) % 2:
        raise NotGenerative("the prefill returned no cache")
    step = example[:, -1:].contiguous()
    kv = tuple(t.to(example.device) if t.device.type != "meta" else t for t in kv)
    dynamic = {"input_ids": {0: batch}}
    if positioned:
        dynamic["positions"] = {0: batch}
    for i in range(len(kv)):
        dynamic["kv_%d" % i] = {0: batch, 2: "past_len"}
    with _Forward(model, _decode_forward(model)):
        args = ((step, positions[:, -1:] + 1) if positioned else (step,)) + kv
        programs["decode"], extras["decode"] = export_one(model, args, dynamic)
    keys = kv[0]
    config = getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    record = {"version": 1, "cache": "dynamic", "programs": list(PROGRAMS), "layers": len(kv) // 2,
              "position_ids": positioned,
              "kv_heads": int(keys.shape[1]), "head_dim": int(keys.shape[3]),
              "attention_heads": int(heads) if isinstance(heads, int) else None,
              "grouped_query": isinstance(heads, int) and heads > int(keys.shape[1]),
              "vocab": int(out[0].shape[-1]),
              "inputs": "input_ids (batch x tokens), with position_ids (batch x tokens) where position_ids is true; "
                        "decode: then each layer's keys and values",
              "outputs": "logits of the last position, then each layer's keys and values (batch x KV heads x tokens x "
                         "head dim)"}
    return programs, extras, json.dumps(record, sort_keys=True)


def weights_as_shapes(ep, torch):
    """The program's weights replaced by meta tensors (shapes only): memledger binds them to the model program's."""
    for name, value in list(ep.state_dict.items()):
        meta = torch.empty_like(value, device="meta")
        ep.state_dict[name] = torch.nn.Parameter(meta, requires_grad=value.requires_grad) \
            if isinstance(value, torch.nn.Parameter) else meta

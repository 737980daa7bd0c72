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

Where transformers has a static cache (StaticLayer: generate(..., cache_implementation="static")), two more programs
hold it (models/static_prefill.json, models/static_decode.json):
- "static_prefill" (input_ids and positions: batch x prompt, cache_slots: 0 x cache length, an empty tensor that
  carries the length) -> (logits of the last position, keys 0, values 0, ...: batch x KV heads x cache length x head
  dim). Each layer allocates its zero-filled keys and values at its first update and writes the prompt's states into
  them in place (index_copy_), as StaticLayer does;
- "static_decode" (input_ids and positions: batch x 1, past: the tokens cached so far, a 0-d int64 tensor, then the
  cache) -> (logits of the last position): each layer writes its token in place, and attends over the whole cache
  under a mask of the cache's length.

Every program is exported for an unpadded batch (causal_mask="skipped", hf_masks.py): `generate` from a prompt
without padding passes an all-ones attention_mask, with which eager transformers builds no mask either.
"""

import json

RECORD = "memledger_generate.json"
PROGRAMS = ("prefill", "decode")
STATIC_PROGRAMS = ("static_prefill", "static_decode")
CACHE_ARGUMENTS = ("cache", "past_key_values")  # forward's name for the cache: transformers 5's, then 4's


class NotGenerative(ValueError):
    """Why the model cannot be exported for generation."""


def _static_layer():
    """transformers' StaticLayer and Cache, else None (a transformers without them)."""
    try:
        from transformers.cache_utils import Cache, StaticLayer
    except ImportError:
        return None
    return StaticLayer, Cache


def _static_forwards(model):
    """(static prefill, static decode) forwards of `model`, else None where transformers has no static cache."""
    found = _static_layer()
    if found is None:
        return None
    StaticLayer, Cache = found
    argument = _cache_argument(model)
    original = type(model).forward
    positioned = _takes_positions(model)

    class Layer(StaticLayer):
        """A StaticLayer whose filled length is `past` (a program input, or 0 in the prefill), not a count it
        increments in place: the program is one step, and the caller passes the next step its length."""

        def __init__(self, length, past, keys=None, values=None):
            super().__init__(length)
            self.past = past
            if keys is not None:  # the cache as generate holds it between steps: these tensors, written in place
                self.batch_size, self.num_heads = keys.shape[:2]
                self.k_head_dim, self.v_head_dim = keys.shape[-1], values.shape[-1]
                self.device = keys.device
                self.keys, self.values = keys, values
                self.is_initialized = True

        def lazy_initialization(self, key_states, value_states):  # StaticLayer's, but for mark_static_address
            self.device = key_states.device
            self.batch_size, self.num_heads = key_states.shape[:2]
            self.k_head_dim, self.v_head_dim = key_states.shape[-1], value_states.shape[-1]
            self.keys = key_states.new_zeros((self.batch_size, self.num_heads, self.max_cache_len, self.k_head_dim))
            self.values = value_states.new_zeros((self.batch_size, self.num_heads, self.max_cache_len,
                                                  self.v_head_dim))
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            import torch

            where = torch.arange(key_states.shape[-2], device=key_states.device) + self.past
            self.keys.index_copy_(2, where, key_states)
            self.values.index_copy_(2, where, value_states)
            if isinstance(self.past, int):  # the prefill: the prompt's own slots, as eager's sdpa slices them
                tokens = key_states.shape[-2]
                return self.keys[:, :, :tokens], self.values[:, :, :tokens]
            return self.keys, self.values

        def get_seq_length(self):
            return self.past

        def get_mask_sizes(self, query_length):
            # The prefill of an empty cache: eager transformers builds no mask (is_causal) and its sdpa attends over
            # the prompt's slots only; said so here, the cache's length is not compared with the prompt's.
            if isinstance(self.past, int):
                return query_length, 0
            return super().get_mask_sizes(query_length)

    def layers(model):
        config = getattr(model, "config", None)
        count = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
        if not isinstance(count, int):
            raise NotGenerative("the model's config says no num_hidden_layers: the static cache needs its layer count")
        return count

    def prefill(self, input_ids, positions, slots):
        # nothing cached yet: the length 0 as a number, as an empty StaticLayer says it, so that the mask code takes
        # eager's branch (no mask: sdpa's is_causal over the prompt's own keys, the cache's empty slots sliced off)
        cache = Cache(layers=[Layer(slots.shape[1], 0) for _ in range(layers(self))])
        extra = {"position_ids": positions} if positions is not None else {}
        out = original(self, input_ids=input_ids, use_cache=True, logits_to_keep=1, **extra, **{argument: cache})
        return (out.logits,) + tuple(t for layer in cache.layers for t in (layer.keys, layer.values))

    def decode(self, input_ids, positions, past, kv):
        cache = Cache(layers=[Layer(kv[0].shape[2], past, kv[2 * i], kv[2 * i + 1]) for i in range(len(kv) // 2)])
        extra = {"position_ids": positions} if positions is not None else {}
        out = original(self, input_ids=input_ids, use_cache=True, logits_to_keep=1, **extra, **{argument: cache})
        return (out.logits,)

    # Not named "forward" (see _prefill_forward); one signature per kind, so that the program's inputs are named.
    def generation_static_prefill(self, input_ids, positions, cache_slots):
        return prefill(self, input_ids, positions, cache_slots)

    def generation_static_prefill_unpositioned(self, input_ids, cache_slots):
        return prefill(self, input_ids, None, cache_slots)

    def generation_static_decode(self, input_ids, positions, past, *kv):
        return decode(self, input_ids, positions, past, kv)

    def generation_static_decode_unpositioned(self, input_ids, past, *kv):
        return decode(self, input_ids, None, past, kv)

    if positioned:
        return generation_static_prefill, generation_static_decode
    return generation_static_prefill_unpositioned, generation_static_decode_unpositioned


class _EagerSdpa:
    """For the block, transformers' sdpa attention takes the branch it takes outside torch.compile: a single query
    token's heads packed onto the key/value heads (pack_gqa), not the keys and values repeated (repeat_kv), where a
    grouped-query model attends under a mask (the static cache's decode step). Nothing where transformers has no
    such branch."""

    def __enter__(self):
        try:
            from transformers.integrations import sdpa_attention
        except ImportError:
            sdpa_attention = None
        self.module = sdpa_attention if hasattr(sdpa_attention, "is_torchdynamo_compiling") else None
        if self.module is not None:
            self.saved = self.module.is_torchdynamo_compiling
            self.module.is_torchdynamo_compiling = lambda: False
        return self

    def __exit__(self, *exc):
        if self.module is not None:
            self.module.is_torchdynamo_compiling = self.saved


def _transformers():
    try:
        import transformers  # noqa: F401
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer
    except ImportError as e:
        raise NotGenerative("generate=True needs transformers (%s)" % e) from e
    return DynamicCache, DynamicLayer


def _forward_parameters(model):
    """The parameter names of the class's own forward (memledger.export swaps the class while it traces)."""
    import inspect

    return inspect.signature(type(model).forward).parameters


def check(model, torch):
    """Raises NotGenerative where generate=True cannot export `model`."""
    parameters = _forward_parameters(model)
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
    parameters = _forward_parameters(model)
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
    return "position_ids" in _forward_parameters(model)


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
    caches, static_reason = ["dynamic"], None
    forwards = _static_forwards(model)
    if forwards is None:
        static_reason = "this transformers has no StaticLayer (transformers.cache_utils)"
    else:
        try:
            length = example.shape[1] + 2  # the cache longer than the prompt, as generate sizes it
            slots = torch.empty((0, length), dtype=torch.int64, device=example.device)
            with _Forward(model, forwards[0]):
                args = (example, positions, slots) if positioned else (example, slots)
                dynamic = {"input_ids": {0: batch, 1: prompt}, "cache_slots": {1: "cache_len"}}
                if positioned:
                    dynamic["positions"] = {0: batch, 1: prompt}
                programs["static_prefill"], extras["static_prefill"] = export_one(model, args, dynamic)
                with torch.no_grad():
                    static_kv = tuple(model(*(a.to(device) for a in args))[1:])
            static_kv = tuple(t.to(example.device) if t.device.type != "meta" else t for t in static_kv)
            past = torch.tensor(example.shape[1], dtype=torch.int64, device=example.device)
            dynamic = {"input_ids": {0: batch}}
            if positioned:
                dynamic["positions"] = {0: batch}
            for i in range(len(static_kv)):
                dynamic["kv_%d" % i] = {0: batch, 2: "cache_len"}
            with _Forward(model, forwards[1]), _EagerSdpa():
                args = ((step, positions[:, -1:] + 1) if positioned else (step,)) + (past,) + static_kv
                programs["static_decode"], extras["static_decode"] = export_one(model, args, dynamic)
            caches.append("static")
        except Exception as e:  # the dynamic programs stand: the record says why the static ones are not there
            for name in STATIC_PROGRAMS:
                programs.pop(name, None)
                extras.pop(name, None)
            static_reason = "the static cache's programs did not export: %s" % (str(e).splitlines() or [""])[0][:300]
    keys = kv[0]
    config = getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    record = {"version": 1, "cache": "dynamic", "caches": caches, "static_reason": static_reason,
              "programs": list(programs), "layers": len(kv) // 2,
              "position_ids": positioned,
              "kv_heads": int(keys.shape[1]), "head_dim": int(keys.shape[3]),
              "attention_heads": int(heads) if isinstance(heads, int) else None,
              "grouped_query": isinstance(heads, int) and heads > int(keys.shape[1]),
              "vocab": int(out[0].shape[-1]),
              "inputs": "input_ids (batch x tokens), with position_ids (batch x tokens) where position_ids is true; "
                        "decode: then each layer's keys and values; static_prefill: then cache_slots (0 x cache "
                        "length); static_decode: then past (0-d int64, the tokens cached) and the cache",
              "outputs": "logits of the last position, then each layer's keys and values (batch x KV heads x tokens x "
                         "head dim)"}
    return programs, extras, json.dumps(record, sort_keys=True)


def weights_as_shapes(ep, torch):
    """The program's weights replaced by meta tensors (shapes only): memledger binds them to the model program's."""
    for name, value in list(ep.state_dict.items()):
        meta = torch.empty_like(value, device="meta")
        ep.state_dict[name] = torch.nn.Parameter(meta, requires_grad=value.requires_grad) \
            if isinstance(value, torch.nn.Parameter) else meta

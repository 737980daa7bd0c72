"""The causal mask of a Hugging Face transformers model, as an unpadded batch runs it.

Eager transformers (4.53 and later: transformers.masking_utils) looks at its inputs before it builds the attention
mask. With no attention_mask (or one of all ones) and no packed position ids, an sdpa model builds no mask at all: it
passes is_causal=True to scaled_dot_product_attention, and a grouped-query model lets sdpa repeat the key/value heads
(enable_gqa) instead of copying them (repeat_kv). Under torch.export, and under FakeTensorMode (FSDPMemTracker), it
cannot look at values, so it builds the mask: a batch x 1 x seq x seq tensor, a float copy of it that each sdpa call
keeps for the backward, and the repeated key/value heads. That is what a padded batch costs, and it is the program
memledger.export writes by default for token inputs (causal_mask="built"): its figures are then an upper bound for an
unpadded batch. For inputs that hold no token ids (an image model's pixels, an audio model's features called without
an attention_mask) eager transformers builds no mask, and neither does FakeTensorMode: for them the default is
"skipped".

causal_mask="skipped" exports the unpadded batch instead: for the duration of the export the mask functions of
transformers.masking_utils take the branch eager takes for inputs without an attention_mask (no packed sequences, the
mask left to is_causal). It applies to a transformers model (or a module holding one) called without attention_mask and
position_ids, since only then is that branch known without the values.
"""

import contextlib
import json
import sys

# Inputs whose values decide, in eager transformers, whether the mask is built.
VALUE_INPUTS = ("attention_mask", "position_ids", "cache_position", "past_key_values", "inputs_embeds")

CHOICES = ("built", "skipped")

# The archive's extra file that says how the mask was exported, which memledger reads to note that a program with the
# mask built errs high for an unpadded batch (torch.export.save writes it as extra/RECORD).
RECORD = "memledger_export.json"


def transformers_model(model):
    """The outermost transformers module of `model` (the model itself, or the one a user's wrapper holds), else None."""
    modules = model.modules() if hasattr(model, "modules") else (model,)
    return next((m for m in modules if type(m).__module__.split(".")[0] == "transformers"), None)


def _masking_utils():
    """transformers.masking_utils where it has the mask code this module changes (transformers 4.53 and later), else
    None."""
    if "transformers" not in sys.modules:
        return None
    try:
        from transformers import masking_utils
    except ImportError:
        return None
    return masking_utils if hasattr(masking_utils, "find_packed_sequence_indices") else None


def why_not_skipped(model, input_names):
    """Why causal_mask="skipped" cannot apply to `model` called with `input_names`, or None."""
    if transformers_model(model) is None:
        return ("%s is not a transformers model and holds none (causal_mask='skipped' changes the mask functions of "
                "transformers.masking_utils)" % type(model).__name__)
    if _masking_utils() is None:
        return "this transformers has no masking_utils.find_packed_sequence_indices (transformers 4.53 or later has it)"
    given = [n for n in input_names if n in VALUE_INPUTS]
    if given:
        return ("the program takes %s, whose values decide whether eager transformers builds the mask: export "
                "without %s for an unpadded batch" % (", ".join(given), "it" if len(given) == 1 else "them"))
    return None


def never_padded(values):
    """Whether none of these inputs (a call's argument values) is token ids (an integer or bool tensor) that a batch
    pads: an image model's pixels, an audio model's features. Called so (without an attention_mask, which
    why_not_skipped asks), eager transformers builds no mask, and neither does FakeTensorMode (FSDPMemTracker), so
    the unpadded branch is what every run of such a call takes."""
    return not any(hasattr(v, "is_floating_point") and not v.is_floating_point() for v in values)


@contextlib.contextmanager
def unpadded():
    """The branch eager transformers takes for an unpadded batch, for the duration of the block: no packed sequences
    (the model's own position ids are one sequence per row), and "not exporting", so that the sdpa mask functions
    skip the mask where no padding mask is given (they still keep it where a sliding window needs it)."""
    utils = _masking_utils()
    replaced = {"find_packed_sequence_indices": lambda position_ids, *args, **kwargs: None}
    for name in ("is_torchdynamo_exporting", "is_torchdynamo_compiling"):
        if hasattr(utils, name):
            replaced[name] = lambda *args, **kwargs: False
    saved = {name: getattr(utils, name) for name in replaced}
    try:
        for name, value in replaced.items():
            setattr(utils, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(utils, name, value)


def sliding_window(model):
    """The sliding window a transformers model's attention uses (tokens), else None. Eager transformers builds the
    mask of such a model once the sequence reaches the window, unpadded or not, so its unpadded branch holds for
    shorter sequences only."""
    config = getattr(transformers_model(model), "config", None)
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return window if "sliding_attention" in layer_types else None
    return None if getattr(config, "use_sliding_window", True) is False else window


def masked_attention_calls(ep):
    """(calls of scaled_dot_product_attention that are given a mask, all calls) in an ExportedProgram."""
    masked = total = 0
    for node in ep.graph_module.graph.nodes:
        if node.op != "call_function" or "scaled_dot_product" not in str(node.target):
            continue
        total += 1
        mask = node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None)
        if mask is not None:
            masked += 1
    return masked, total


def built_masks(ep):
    """The attention masks an ExportedProgram builds: values made in transformers.masking_utils that the model's own
    code reads."""
    def in_mask_code(node):
        return "masking_utils.py" in (node.meta.get("stack_trace") or "")

    return sum(1 for node in ep.graph_module.graph.nodes
               if node.op == "call_function" and in_mask_code(node)
               and any(not in_mask_code(user) for user in node.users))


def record(model, masked, total, skippable, skipped, unpadded_skips=0):
    """The RECORD text for a transformers model whose program has `total` attention calls (`masked` of them given a
    mask), else None: {"version": 1, "causal_mask": "built" | "skipped", "masked_attention_calls": N,
    "attention_calls": M, "skippable": whether causal_mask="skipped" exports the model called with its inputs,
    "sliding_window": the window in tokens (see sliding_window) or null, "unpadded_skips": of the masks the program
    builds, those the unpadded branch does not (counted where no attention call is scaled_dot_product_attention's:
    eager attention)}."""
    if transformers_model(model) is None or _masking_utils() is None or (total == 0 and unpadded_skips == 0):
        return None  # not a transformers model, one whose mask code this module does not know, or no mask to say
    return json.dumps({"version": 1, "causal_mask": "skipped" if skipped else "built", "masked_attention_calls": masked,
                       "attention_calls": total, "skippable": skippable, "sliding_window": sliding_window(model),
                       "unpadded_skips": unpadded_skips}, sort_keys=True)

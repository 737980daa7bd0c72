"""Activation checkpointing a model is set up with, which torch.export does not keep.

transformers' activation_checkpointing_enable() (gradient_checkpointing_enable() before it) marks each decoder layer
(a GradientCheckpointingLayer) to run under torch.utils.checkpoint in training; torch.export traces the layers as plain
calls, so the program alone would be analysed without it. memledger.export records which modules are checkpointed and
how (RECORD, an extra file of the .pt2), and memledger analyzes a training step of the program with the same plan
unless --checkpoint says otherwise. During the export itself the layers are traced without checkpointing: the program
is the plain model's.
"""

import contextlib
import json

# The archive's extra file (torch.export.save writes it as extra/RECORD); memledger reads it (exported_program.cpp).
RECORD = "memledger_checkpoint.json"


def _transformers_layers(model):
    """(path, module) of the transformers layers that activation_checkpointing_enable() turned on, in model order."""
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:
        return []
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, GradientCheckpointingLayer) and getattr(m, "gradient_checkpointing", False) is True]


def _how(func):
    """What a transformers layer's _gradient_checkpointing_func does: (implementation, offload, context_fn)."""
    keywords = dict(getattr(func, "keywords", None) or {})
    inner = getattr(func, "func", func)
    # transformers' offload=True wraps checkpoint in save_on_cpu: the saved inputs go to pinned host memory
    offload = getattr(inner, "__name__", "") == "checkpoint_func"
    reentrant = keywords.get("use_reentrant")
    implementation = "reentrant" if reentrant is True else "non-reentrant"
    return implementation, offload, "context_fn" in keywords


def find(model):
    """The record of `model`'s checkpointing (a dict, RECORD's content), or None where none is set up."""
    layers = _transformers_layers(model)
    if not layers:
        return None
    implementation, offload, context_fn = _how(getattr(layers[0][1], "_gradient_checkpointing_func", None))
    return {"version": 1, "modules": [name for name, _ in layers], "implementation": implementation,
            "source": "transformers activation_checkpointing_enable()", "offload": offload,
            "context_fn": context_fn}


@contextlib.contextmanager
def traced_plain(model):
    """The checkpointed layers traced as plain calls (torch.export keeps no checkpoint), restored afterwards."""
    layers = _transformers_layers(model)
    for _, m in layers:
        m.gradient_checkpointing = False
    try:
        yield
    finally:
        for _, m in layers:
            m.gradient_checkpointing = True


def record(model):
    """RECORD's bytes for `model`, or None."""
    found = find(model)
    return None if found is None else json.dumps(found, indent=1)

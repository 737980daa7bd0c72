"""A model that is not memledger's: Hugging Face transformers' LlamaForCausalLM at Llama-2-7B's configuration
(hidden 4096, 32 layers, 32 heads, intermediate 11008, vocab 32000: 6,738,415,616 parameters), built on the meta
device and exported with torch.export (batch dynamic, example 2x512), and PyTorch's own estimate of one AdamW step at
1x512 by MemTracker under FakeTensorMode, in float32 and after model.to(bfloat16). Not a test: transformers is not a
dependency of memledger. To run it (docs/meta.md, "A model from outside"):

    .venv-torch/bin/pip install --target /tmp/tfpkgs transformers
    PYTHONPATH=/tmp/tfpkgs .venv-torch/bin/python bench/hf_llama_check.py OUT_DIR
    build/app/memledger analyze OUT_DIR/hf_llama7b.pt2 --input 1x512:int64 --mode train --optimizer adamw \\
        [--dtype bfloat16] --json step.json

It writes OUT_DIR/hf_llama7b.pt2 and prints MemTracker's figures per category as JSON (after the step and at the
peak, and the bytes of AdamW's host `step` tensors), for the step memledger records: forward, cross-entropy of the
[1, 512, vocab] logits against token 0, backward, AdamW (foreach=False).
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
from meta_weights import mem_tracker_step  # noqa: E402

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

CONFIG = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
              num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5,
              use_cache=False, attn_implementation="sdpa")
SHAPE = (1, 512)


class Logits(torch.nn.Module):
    """The causal LM's logits only (export takes tensors out, not ModelOutput with a cache)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def export(path):
    start = time.time()
    with torch.device("meta"):
        model = Logits(LlamaForCausalLM(LlamaConfig(**CONFIG))).eval()
    tokens = torch.zeros(2, SHAPE[1], dtype=torch.long, device="meta")  # batch 1 would be specialised
    ep = torch.export.export(model, (tokens,), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},))
    torch.export.save(ep, path)
    return time.time() - start


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    import transformers

    result = {"transformers": transformers.__version__, "torch": torch.__version__,
              "export_seconds": round(export(os.path.join(out, "hf_llama7b.pt2")), 1)}
    for dtype in ("float32", "bfloat16"):
        result[dtype] = mem_tracker_step(lambda: Logits(LlamaForCausalLM(LlamaConfig(**CONFIG))), SHAPE,
                                         getattr(torch, dtype))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

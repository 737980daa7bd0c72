"""A small GPT-style decoder and a small padded-batch encoder, memledger's language-model demo and test models.

GPT: token embedding + learned position embedding, n_layer pre-LayerNorm blocks (causal self-attention, then a
4x GELU MLP), a final LayerNorm and an LM head whose weight is tied to the token embedding (one tensor, two
names). attn="sdpa" computes q, k, v with one Linear and calls F.scaled_dot_product_attention(is_causal=True);
attn="mha" uses nn.MultiheadAttention(batch_first=True) with a causal bool mask. No dropout.
forward(idx: int64 [B, T]) -> logits [B, T, vocab], T <= max_seq.

Encoder: an embedding and two nn.TransformerEncoderLayer (batch_first, no dropout, an odd head count so that
PyTorch's fused fast path stays off and every sub-module runs), with a key padding mask.
forward(idx: int64 [B, T], pad: bool [B, T], True = padding) -> [B, T, d_model].

All of them can be saved with torch.jit.script and with torch.export.export (dynamic batch and sequence).
python3 gpt.py OUT.pt writes the default GPT (attn="sdpa") as TorchScript; OUT.pt2 as a torch.export program
(PyTorch 2; batch 1..64 and sequence 2..256 dynamic): demo_gpt.pt2, the built-in demo, is made so with the
PyTorch 2 of .venv-torch (.venv-torch/bin/python resources/gpt.py resources/demo_gpt.pt2).
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class SdpaAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, C = x.size()
        hd = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MhaAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_head, batch_first=True)

    def forward(self, x):
        T = x.size(1)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)  # True: may not attend
        return self.mha(x, x, x, attn_mask=mask, need_weights=False)[0]


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, attn: str):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        if attn == "sdpa":
            self.attn = SdpaAttention(d_model, n_head)
        elif attn == "mha":
            self.attn = MhaAttention(d_model, n_head)
        else:
            raise ValueError("attn must be 'sdpa' or 'mha', not " + repr(attn))
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab=512, d_model=128, n_layer=4, n_head=4, max_seq=256, attn="sdpa"):
        super().__init__()
        self.max_seq = max_seq
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_seq, d_model)
        self.blocks = nn.ModuleList([Block(d_model, n_head, attn) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied: one tensor

    def forward(self, idx):
        T = idx.size(1)
        pos = torch.arange(T, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class Encoder(nn.Module):
    def __init__(self, vocab=512, d_model=96, n_head=3, n_layer=2, dim_feedforward=192):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, n_head, dim_feedforward=dim_feedforward, dropout=0.0,
                                       batch_first=True)
            for _ in range(n_layer)])

    def forward(self, idx, pad):
        x = self.tok(idx)
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=pad)
        return x


if __name__ == "__main__":
    torch.manual_seed(5)
    out = sys.argv[1] if len(sys.argv) > 1 else "demo_gpt.pt"
    model = GPT().eval()
    if out.endswith(".pt2"):
        batch = torch.export.Dim("batch", min=1, max=64)
        seq = torch.export.Dim("seq", min=2, max=model.max_seq)
        example = (torch.zeros(2, 128, dtype=torch.long),)  # batch 1 would be specialised by export
        program = torch.export.export(model, example, dynamic_shapes=({0: batch, 1: seq},))
        torch.export.save(program, out)
    else:
        torch.jit.save(torch.jit.script(model), out)

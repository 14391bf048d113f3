"""headlab's GPT (crates/model) written again in PyTorch, as the bench's speed reference.

The module tree and the parameter names follow crates/model and crates/attention, so the
two models can be read side by side:

    wte, wpe                                  token and position tables, std 0.02
    blocks[i].ln_1, blocks[i].ln_2, ln_f      LayerNorm, eps 1e-5, shift only with biases
    blocks[i].attn.{q,k,v}_proj               separate projections, std 0.02
    blocks[i].attn.o_proj, blocks[i].mlp.c_proj   std 0.02 / sqrt(2 n_layers)
    blocks[i].mlp.c_fc                        d_model -> 4 d_model, exact (erf) GELU
    logits = ln_f(x) @ wte^T                  the head is the token table (tied)

Pre-norm blocks, no dropout. AdamW decays matrices only, as crates/train/src/optim.rs does.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class GptConfig:
    """The `[model]` keys the bench sets; defaults are nanoGPT's CPU recipe."""

    vocab_size: int = 65
    block_size: int = 64
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    bias: bool = False

    @property
    def d_k(self):
        return self.d_model // self.n_heads

    @property
    def residual_init_std(self):
        return 0.02 / math.sqrt(2 * self.n_layers)


def projection(d_in, d_out, bias, std):
    """A linear layer with normal weights and zero bias (crates/model's `gpt2_linear`)."""
    layer = nn.Linear(d_in, d_out, bias=bias)
    nn.init.normal_(layer.weight, 0.0, std)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


class MultiHeadAttention(nn.Module):
    """Causal self-attention: h heads of d_k = d_model / h, one softmax per head."""

    def __init__(self, c: GptConfig):
        super().__init__()
        self.n_heads, self.d_k = c.n_heads, c.d_k
        self.q_proj = projection(c.d_model, c.d_model, c.bias, 0.02)
        self.k_proj = projection(c.d_model, c.d_model, c.bias, 0.02)
        self.v_proj = projection(c.d_model, c.d_model, c.bias, 0.02)
        self.o_proj = projection(c.d_model, c.d_model, c.bias, c.residual_init_std)

    def heads(self, x):
        b, t, _ = x.shape
        # [b, t, d_model] -> [b, t, h, d_k] -> [b, h, t, d_k]
        return x.view(b, t, self.n_heads, self.d_k).transpose(1, 2)

    def forward(self, x):
        b, t, d_model = x.shape
        q, k, v = self.heads(self.q_proj(x)), self.heads(self.k_proj(x)), self.heads(self.v_proj(x))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # [b, h, t, d_k] -> [b, t, h, d_k] -> [b, t, d_model]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, d_model))


class Mlp(nn.Module):
    def __init__(self, c: GptConfig):
        super().__init__()
        self.c_fc = projection(c.d_model, 4 * c.d_model, c.bias, 0.02)
        self.c_proj = projection(4 * c.d_model, c.d_model, c.bias, c.residual_init_std)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c: GptConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.d_model, eps=1e-5, bias=c.bias)
        self.attn = MultiHeadAttention(c)
        self.ln_2 = nn.LayerNorm(c.d_model, eps=1e-5, bias=c.bias)
        self.mlp = Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, c: GptConfig):
        super().__init__()
        self.config = c
        self.wte = nn.Embedding(c.vocab_size, c.d_model)
        self.wpe = nn.Embedding(c.block_size, c.d_model)
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layers))
        self.ln_f = nn.LayerNorm(c.d_model, eps=1e-5, bias=c.bias)

    def forward(self, ids):
        """`[b, t]` token ids -> `[b, t, vocab_size]` logits."""
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(t, device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T

    def loss(self, ids, targets):
        logits = self(ids)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def adamw(model, lr, betas, weight_decay, fused=False):
    """AdamW with decoupled decay on parameters of rank >= 2 only (not LayerNorm, biases)."""
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": matrices, "weight_decay": weight_decay},
        {"params": vectors, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=1e-8, fused=fused or None)

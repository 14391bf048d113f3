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

The speedrun switches (GptConfig; each off by default, so the model above is unchanged):

    positional = "rope"     no wpe; Q and K of every head rotated ("rotate half", base 10000)
    tie_embeddings = False  a separate lm_head [vocab, d_model], std 0.02
    activation = "relu2"    mlp = c_proj(relu(c_fc(x))^2)
    qk_norm                 q, k scaled to unit RMS per head (no gain), before RoPE
    zero_init_proj          o_proj and c_proj weights start at 0
    zero_init_head          lm_head starts at 0 (untied only)
    bigram                  a table bigram [vocab, d_model] indexed by the previous token
    logit_softcap = c       logits = c tanh(logits / c)

and `optimizers` pairs Muon (the blocks' matrices) with AdamW (everything else).
"""

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class GptConfig:
    """The `[model]` keys the bench sets; defaults are nanoGPT's CPU recipe, and every
    speedrun switch is off."""

    vocab_size: int = 65
    block_size: int = 64
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    bias: bool = False
    positional: str = "learned"
    tie_embeddings: bool = True
    activation: str = "gelu"
    qk_norm: bool = False
    zero_init_proj: bool = False
    zero_init_head: bool = False
    bigram: bool = False
    logit_softcap: Optional[float] = None

    def __post_init__(self):
        """The combinations headlab refuses are refused here too, with the key to change."""
        if self.positional not in ("learned", "rope"):
            raise ValueError(f"model.positional = {self.positional!r}: expected learned or rope")
        if self.activation not in ("gelu", "relu2"):
            raise ValueError(f"model.activation = {self.activation!r}: expected gelu or relu2")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model = {self.d_model} is not a multiple of n_heads = {self.n_heads}")
        if self.positional == "rope" and self.d_k % 2:
            raise ValueError(
                f"model.positional = rope rotates pairs: d_k = {self.d_k} must be even")
        if self.zero_init_head and self.tie_embeddings:
            raise ValueError("model.zero_init_head needs model.tie_embeddings = false "
                             "(a zero token table would embed every token as zeros)")
        if self.logit_softcap is not None and not 0 < self.logit_softcap < math.inf:
            raise ValueError(f"model.logit_softcap = {self.logit_softcap} must be a positive "
                             "number (leave it out for none)")

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


def rope_tables(t, d_k, base=10000.0):
    """`cos` and `sin` of the angle p * base^(-2i/d_k) for positions p < t, each half of the
    last axis repeated (crates/attention/src/rope.rs). Angles in f64, rounded once to f32,
    as headlab computes them.

    `-> ([t, d_k], [t, d_k])`
    """
    half = d_k // 2
    inv_freq = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / d_k)  # [half]
    angle = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq  # [t, half]
    angle = torch.cat([angle, angle], dim=-1)  # [t, d_k]
    return angle.cos().float(), angle.sin().float()


def apply_rope(x, cos, sin):
    """Rotates dimension pairs (i, i + d_k/2): x cos + rotate_half(x) sin, where
    rotate_half(x) = [-x2, x1]. `x [b, h, t, d_k]`, `cos, sin [t, d_k]` -> `[b, h, t, d_k]`."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def rms_unit(x, eps=1e-6):
    """QK-norm without a gain: each head's vector divided by its root mean square, so the
    attention logits stay bounded whatever the projections grow to."""
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def residual_projection(d_in, d_out, c: GptConfig):
    """o_proj and c_proj, which write into the residual stream: std 0.02 / sqrt(2 n_layers),
    or exactly 0 with zero_init_proj, so every block starts as the identity. The normal draw
    happens either way, so the switch leaves every other weight of a seed as it was."""
    layer = projection(d_in, d_out, c.bias, c.residual_init_std)
    if c.zero_init_proj:
        nn.init.zeros_(layer.weight)
    return layer


class MultiHeadAttention(nn.Module):
    """Causal self-attention: h heads of d_k = d_model / h, one softmax per head."""

    def __init__(self, c: GptConfig):
        super().__init__()
        self.n_heads, self.d_k, self.qk_norm = c.n_heads, c.d_k, c.qk_norm
        self.q_proj = projection(c.d_model, c.d_model, c.bias, 0.02)
        self.k_proj = projection(c.d_model, c.d_model, c.bias, 0.02)
        self.v_proj = projection(c.d_model, c.d_model, c.bias, 0.02)
        self.o_proj = residual_projection(c.d_model, c.d_model, c)

    def heads(self, x):
        b, t, _ = x.shape
        # [b, t, d_model] -> [b, t, h, d_k] -> [b, h, t, d_k]
        return x.view(b, t, self.n_heads, self.d_k).transpose(1, 2)

    def forward(self, x, rope=None):
        """`rope`: the `(cos, sin)` tables of positions 0..t, or None for learned positions."""
        b, t, d_model = x.shape
        q, k, v = self.heads(self.q_proj(x)), self.heads(self.k_proj(x)), self.heads(self.v_proj(x))
        if self.qk_norm:
            q, k = rms_unit(q), rms_unit(k)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        # the scale stays 1/sqrt(d_k), with or without QK-norm
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # [b, h, t, d_k] -> [b, t, h, d_k] -> [b, t, d_model]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, d_model))


class Mlp(nn.Module):
    def __init__(self, c: GptConfig):
        super().__init__()
        self.activation = c.activation
        self.c_fc = projection(c.d_model, 4 * c.d_model, c.bias, 0.02)
        self.c_proj = residual_projection(4 * c.d_model, c.d_model, c)

    def forward(self, x):
        h = self.c_fc(x)
        h = F.relu(h).square() if self.activation == "relu2" else F.gelu(h)
        return self.c_proj(h)


class Block(nn.Module):
    def __init__(self, c: GptConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.d_model, eps=1e-5, bias=c.bias)
        self.attn = MultiHeadAttention(c)
        self.ln_2 = nn.LayerNorm(c.d_model, eps=1e-5, bias=c.bias)
        self.mlp = Mlp(c)

    def forward(self, x, rope=None):
        x = x + self.attn(self.ln_1(x), rope)
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    """With every switch off, parameters are created (and draw from the RNG) in the same
    order as before the switches existed, so a seed gives the same model as it always did."""

    def __init__(self, c: GptConfig):
        super().__init__()
        self.config = c
        # Every table is made before any is drawn, as always: the RNG stream of the default
        # model does not move.
        self.wte = nn.Embedding(c.vocab_size, c.d_model)
        if c.positional == "learned":
            self.wpe = nn.Embedding(c.block_size, c.d_model)
        else:
            cos, sin = rope_tables(c.block_size, c.d_k)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        if c.bigram:
            self.bigram = nn.Embedding(c.vocab_size, c.d_model)
        for name in ("wte", "wpe", "bigram"):
            if hasattr(self, name):
                nn.init.normal_(getattr(self, name).weight, 0.0, 0.02)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layers))
        self.ln_f = nn.LayerNorm(c.d_model, eps=1e-5, bias=c.bias)
        if not c.tie_embeddings:
            self.lm_head = projection(c.d_model, c.vocab_size, False, 0.02)
            if c.zero_init_head:
                nn.init.zeros_(self.lm_head.weight)

    def forward(self, ids):
        """`[b, t]` token ids -> `[b, t, vocab_size]` logits."""
        c, t = self.config, ids.shape[1]
        x = self.wte(ids)
        if c.bigram:
            # [b, t-1, d_model] from tokens 0..t-2, shifted to positions 1..t-1: position 0,
            # the window's first token, has no previous token and gets nothing.
            x = x + F.pad(self.bigram(ids[:, :-1]), (0, 0, 1, 0))
        rope = None
        if c.positional == "learned":
            x = x + self.wpe(torch.arange(t, device=ids.device))
        else:
            rope = (self.rope_cos[:t], self.rope_sin[:t])
        for block in self.blocks:
            x = block(x, rope)
        x = self.ln_f(x)
        logits = x @ self.wte.weight.T if c.tie_embeddings else self.lm_head(x)
        if c.logit_softcap is not None:
            logits = c.logit_softcap * torch.tanh(logits / c.logit_softcap)
        return logits

    def loss(self, ids, targets):
        logits = self(ids)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def adamw(model, lr, betas, weight_decay, fused=False, params=None):
    """AdamW with decoupled decay on parameters of rank >= 2 only (not LayerNorm, biases).
    `params` narrows it to some of the model's parameters (those Muon leaves to it)."""
    params = list(model.parameters()) if params is None else params
    matrices = [p for p in params if p.dim() >= 2]
    vectors = [p for p in params if p.dim() < 2]
    groups = [
        {"params": matrices, "weight_decay": weight_decay},
        {"params": vectors, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=1e-8, fused=fused or None)


# The quintic's coefficients: chosen to lift small singular values fast rather than to
# converge, so 5 steps leave every singular value near 1 (roughly 0.7 to 1.2), not at 1.
NEWTON_SCHULZ = (3.4445, -4.7750, 2.0315)


def orthogonalize(g, steps=5):
    """About U V^T for g = U S V^T, by a Newton-Schulz iteration in f32: the update Muon
    applies, every direction of the gradient at about the same size.

    `g [rows, cols] -> [rows, cols]`
    """
    a, b, c = NEWTON_SCHULZ
    wide = g.shape[0] <= g.shape[1]
    x = g if wide else g.T  # [r, k] with r <= k, so X X^T is the smaller Gram matrix
    x = x / (torch.linalg.matrix_norm(x) + 1e-7)  # Frobenius norm >= spectral: sigma <= 1
    for _ in range(steps):
        gram = x @ x.T  # [r, r]
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x if wide else x.T


class Muon(torch.optim.Optimizer):
    """Nesterov momentum, orthogonalized (Muon), for matrices in PyTorch's [out, in] layout:

        buf = momentum buf + g;  u = g + momentum buf
        W  *= 1 - lr weight_decay
        W  -= lr sqrt(max(1, out / in)) orthogonalize(u)

    The factor keeps the update's RMS per output row comparable for tall matrices (c_fc).
    Weight decay (train.muon_weight_decay) is decoupled and off by default; f32 throughout.
    """

    def __init__(self, params, lr, momentum=0.95, weight_decay=0.0):
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        assert closure is None, "Muon takes no closure"
        for group in self.param_groups:
            lr, momentum, decay = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                buf = state["momentum_buffer"]
                buf.mul_(momentum).add_(p.grad)
                update = orthogonalize(p.grad.add(buf, alpha=momentum))
                rows, cols = p.shape
                if decay > 0:
                    p.mul_(1.0 - lr * decay)
                p.add_(update, alpha=-lr * math.sqrt(max(1.0, rows / cols)))


def muon_params(model):
    """The matrices Muon takes: every 2-D weight inside the blocks (q, k, v, o projections,
    c_fc, c_proj). Embeddings and the head stay with AdamW: a row of wte is a lookup, not a
    linear map whose singular directions mean anything."""
    return [p for p in model.blocks.parameters() if p.dim() == 2]


def optimizers(model, kind, lr, betas, weight_decay, muon_lr=0.02, muon_momentum=0.95,
               muon_weight_decay=0.0):
    """`kind` "adamw": one AdamW over everything (as `adamw`). "muon": Muon for
    `muon_params`, AdamW (lr, betas, weight_decay as given) for the rest. A list either way;
    the caller clips the global norm over all parameters, then steps each."""
    if kind == "adamw":
        return [adamw(model, lr, betas, weight_decay)]
    if kind != "muon":
        raise ValueError(f"train.optimizer = {kind!r}: expected adamw or muon")
    matrices = {id(p) for p in muon_params(model)}
    rest = [p for p in model.parameters() if id(p) not in matrices]
    return [
        Muon(muon_params(model), muon_lr, muon_momentum, muon_weight_decay),
        adamw(model, lr, betas, weight_decay, params=rest),
    ]

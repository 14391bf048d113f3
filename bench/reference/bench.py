"""PyTorch reference for `cargo xtask bench --with-torch`: the same shapes as headlab's bench.

Two uses:

    python bench/reference/bench.py [--quick] [--threads N] [--out FILE]
        [--recipe-data FILE] [--recipe-iters N] [--recipe-seed N] [--only SECTIONS]

writes the matmul peak, the attention op (causal `scaled_dot_product_attention`) forward
and forward+backward, and with --recipe-data the nanoGPT CPU recipe end to end;

    python bench/reference/bench.py step --shape SHAPE [--threads N] [--device cpu|cuda]
        [--modes eager,fused,compile,fused-bf16,compile-bf16] [--quick] --out FILE

times one training step of gpt.py's model in each PyTorch mode, one after the other (the
`-bf16` modes under bf16 autocast). The
headlab bench calls it once per round, between rounds of its own columns, so the two sides
alternate;

    python bench/reference/bench.py speedrun --config FILE [--seed N] [--max-seconds S]
        [--compile] [--threads N] --out FILE

trains a run config with headlab's speedrun switches (speedrun.py) and writes its losses,
training seconds and sample. Every output records torch's version, CPU capability, build and
threading configuration.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback

import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import Gpt, GptConfig, adamw  # noqa: E402
from speedrun import speedrun  # noqa: E402

# The shapes of crates/bench/src/step.rs: (config, batch). GptConfig(vocab_size, block_size,
# d_model, n_layers, n_heads).
SHAPES = {
    "recipe": (GptConfig(65, 64, 128, 4, 4), 12),
    "nanogpt-gpu": (GptConfig(65, 256, 384, 6, 6), 8),
    "nanogpt-gpu-b64": (GptConfig(65, 256, 384, 6, 6), 64),
    "gpt2-small": (GptConfig(50304, 1024, 768, 12, 12), 8),
    "tiny": (GptConfig(65, 16, 32, 1, 2), 2),
}


def environment(device="cpu"):
    """What decides PyTorch's speed on this machine, for the result files."""
    gpu = {}
    if device == "cuda":
        gpu = {
            "device": torch.cuda.get_device_name(0),
            "cuda": torch.version.cuda,
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        }
    return {
        **gpu,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "config": torch.__config__.show(),
        "parallel_info": torch.__config__.parallel_info(),
    }


def rss_reset():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return status_mib("VmRSS:")
    except OSError:
        return None


def status_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024.0
    return None


def measure(fn, warm_s, measure_s, min_samples, first=None):
    """Per-call milliseconds, by the rule headlab's step worker uses: one untimed call
    (compilation happens there; its milliseconds go into `first["ms"]` when given), warm-up
    for `warm_s` and at least two calls, then samples until both `measure_s` and
    `min_samples` are reached."""
    t0 = time.perf_counter()
    fn()
    if first is not None:
        first["ms"] = (time.perf_counter() - t0) * 1e3
    start, calls = time.perf_counter(), 0
    while calls < 2 or time.perf_counter() - start < warm_s:
        fn()
        calls += 1
    samples = []
    start = time.perf_counter()
    while len(samples) < min_samples or time.perf_counter() - start < measure_s:
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def timing(ms):
    return {
        "median_ms": statistics.median(ms),
        "min_ms": min(ms),
        "max_ms": max(ms),
        "samples": len(ms),
    }


def matmul(n, warm, meas):
    a, b = torch.randn(n, n), torch.randn(n, n)
    ms = measure(lambda: a @ b, warm, meas, 10)
    med = statistics.median(ms)
    return {"n": n, "timing": timing(ms), "gflops": 2 * n**3 / (med * 1e-3) / 1e9}


def attention(b, h, d_k, t, backward, warm, meas):
    q, k, v = (torch.randn(b, h, t, d_k, requires_grad=backward) for _ in range(3))

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        q.grad = k.grad = v.grad = None

    before = rss_reset()
    ms = measure(fwd_bwd if backward else fwd, warm, meas, 10)
    peak = status_mib("VmHWM:")
    med = statistics.median(ms)
    flops = 4.0 * b * h * t * t * d_k * (3 if backward else 1)
    return {
        "pass": "forward_backward" if backward else "forward",
        "b": b, "h": h, "d_k": d_k, "t": t,
        "timing": timing(ms),
        "tokens_per_s": b * t / (med * 1e-3),
        "gflops": flops / (med * 1e-3) / 1e9,
        "peak_mib": None if before is None or peak is None else max(0.0, peak - before),
    }


def step_fn(config, batch, mode, device="cpu"):
    """One training step as nanoGPT's loop takes it: loss, backward, clip at 1, AdamW. On
    CUDA the step ends with a synchronize, as headlab's ends with the device's sync, so the
    timer sees the work and not only its launch. A mode ending in `-bf16` runs the loss under
    `torch.autocast(device, torch.bfloat16)`, as a PyTorch user turns bf16 on (weights,
    gradients and AdamW stay f32; the backward follows the forward's casts); the others are
    f32 throughout (TF32 stays as torch defaults it: off for matmul)."""
    base, bf16 = mode.removesuffix("-bf16"), mode.endswith("-bf16")
    if base not in ("eager", "fused", "compile"):
        raise ValueError(f"unknown mode {mode!r}")
    torch.manual_seed(1337)
    model = Gpt(config).to(device)
    ids = torch.randint(0, config.vocab_size, (batch, config.block_size), device=device)
    targets = torch.randint(0, config.vocab_size, (batch, config.block_size), device=device)
    opt = adamw(model, 1e-3, (0.9, 0.99), 0.1, fused=base in ("fused", "compile"))
    loss_of = torch.compile(model.loss) if base == "compile" else model.loss

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()

    return step


def steps(shape, modes, quick, device="cpu"):
    """Each mode's step timings; a mode that fails records its error instead."""
    config, batch = SHAPES[shape]
    warm, meas = (0.1, 0.3) if quick else (1.0, 3.0)
    min_samples = 3 if quick else (10 if shape == "recipe" else 5)
    out = {}
    for mode in modes:
        try:
            first = {}
            ms = measure(step_fn(config, batch, mode, device), warm, meas, min_samples, first)
            out[mode] = {"timing": timing(ms), "ms": ms, "first_ms": first["ms"]}
        except Exception as e:  # noqa: BLE001 - the report shows why a column is empty
            out[mode] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:500],
                         "traceback": traceback.format_exc()[-4000:]}
            print(f"bench.py: {mode} failed: {out[mode]['error']}", file=sys.stderr)
    return out


def recipe(path, iters, seed=1337):
    """configs/shakespeare-char-cpu.toml in PyTorch: nanoGPT's train.py loop."""
    text = open(path, encoding="utf-8").read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    splits = {"train": data[:n], "val": data[n:]}
    b, t = 12, 64
    torch.manual_seed(seed)
    model = Gpt(GptConfig(vocab_size=len(chars)))
    opt = adamw(model, 1e-3, (0.9, 0.99), 0.1)

    def batch(split):
        d = splits[split]
        ix = torch.randint(len(d) - t, (b,))
        return torch.stack([d[i : i + t] for i in ix]), torch.stack([d[i + 1 : i + 1 + t] for i in ix])

    @torch.no_grad()
    def estimate():
        model.eval()
        out = {}
        for split in ("train", "val"):
            out[split] = sum(model.loss(*batch(split)).item() for _ in range(200)) / 200
        model.train()
        return out

    def lr_at(it, lr=1e-3, min_lr=1e-4, warmup=100, decay=iters):
        if it < warmup:
            return lr * (it + 1) / (warmup + 1)
        if it > decay:
            return min_lr
        ratio = (it - warmup) / (decay - warmup)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

    start = time.perf_counter()
    losses = {}
    for it in range(iters + 1):
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        if it % 250 == 0 or it == iters:
            losses = estimate()
        if it == iters:
            break
        loss = model.loss(*batch("train"))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    wall = time.perf_counter() - start
    return {
        "iters": iters,
        "seed": seed,
        "val_loss": losses["val"],
        "train_loss": losses["train"],
        "wall_s": wall,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("task", nargs="?", default="sections", choices=["sections", "step", "speedrun"])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default="torch.json")
    p.add_argument("--shape", choices=sorted(SHAPES), default="recipe")
    p.add_argument("--modes", default="eager,fused,compile,fused-bf16,compile-bf16")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--recipe-data", default=None)
    p.add_argument("--recipe-iters", type=int, default=2000)
    p.add_argument("--recipe-seed", type=int, default=1337, help="the recipe's torch seed")
    p.add_argument("--only", default=None, help="comma-separated: attention, recipe")
    p.add_argument("--config", default=None, help="speedrun: the run config (TOML)")
    p.add_argument("--seed", type=int, default=None, help="speedrun: default train.seed")
    p.add_argument("--max-seconds", type=float, default=None, help="speedrun: stop after")
    p.add_argument("--compile", action="store_true", help="speedrun: torch.compile the loss")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    out = {"environment": environment(a.device), "quick": a.quick}
    if a.task == "step":
        out["shape"] = a.shape
        out["device"] = a.device
        out["steps"] = steps(a.shape, a.modes.split(","), a.quick, a.device)
    elif a.task == "speedrun":
        if not a.config:
            p.error("speedrun needs --config FILE")
        out["speedrun"] = speedrun(a.config, a.seed, a.max_seconds, a.compile)
    else:
        only = set(a.only.split(",")) if a.only else None
        warm, meas = (0.1, 0.3) if a.quick else (1.0, 3.0)
        ts = [64, 128] if a.quick else [64, 128, 256, 512, 1024, 2048]
        long_t = 256 if a.quick else 8192
        out["matmul"] = [matmul(256 if a.quick else 1024, warm, meas)]
        out["attention"] = []
        if only is None or "attention" in only:
            out["attention"] = [
                attention(4, 4, 32, t, bwd, warm, meas) for t in ts for bwd in (False, True)
            ]
            out["attention"].append(attention(1, 4, 32, long_t, False, warm, meas))
        if a.recipe_data:
            out["recipe"] = recipe(a.recipe_data, a.recipe_iters, a.recipe_seed)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

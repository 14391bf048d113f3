"""PyTorch reference for `cargo xtask bench --with-torch`: the same shapes as headlab's bench.

Writes JSON with the sections headlab's bench has where PyTorch has a counterpart: matmul
peak, attention op (F.scaled_dot_product_attention, causal) forward and forward+backward,
one training step at nanoGPT's CPU recipe, and, with --recipe-data, the whole recipe
(2000 iterations with evaluation, as configs/shakespeare-char-cpu.toml).

    python bench/reference/bench.py [--quick] [--threads N] [--out FILE] [--recipe-data FILE]
        [--recipe-seed N]
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import GPT, GPTConfig  # noqa: E402


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


def measure(fn, warmup_s, measure_s, min_samples=10):
    """Per-call milliseconds: warm up, then call until both limits are met."""
    start = time.perf_counter()
    while time.perf_counter() - start < warmup_s:
        fn()
    fn()
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
    ms = measure(lambda: a @ b, warm, meas)
    med = statistics.median(ms)
    return {"n": n, "timing": timing(ms), "gflops": 2 * n**3 / (med * 1e-3) / 1e9}


def attention(b, h, d_k, t, backward, warm, meas):
    F = torch.nn.functional
    q, k, v = (torch.randn(b, h, t, d_k, requires_grad=backward) for _ in range(3))

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        q.grad = k.grad = v.grad = None

    before = rss_reset()
    ms = measure(fwd_bwd if backward else fwd, warm, meas)
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


def train_step(peak_gflops, warm, meas):
    torch.manual_seed(1337)
    config = GPTConfig()
    model = GPT(config)
    b, t = 12, config.block_size
    x = torch.randint(0, config.vocab_size, (b, t))
    y = torch.randint(0, config.vocab_size, (b, t))
    opt = model.configure_optimizer(1e-3, 0.1, (0.9, 0.99))

    def step():
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    ms = measure(step, warm, meas)
    med = statistics.median(ms)
    n = model.num_params_mfu()
    flops_per_token = 6 * n + 12 * config.n_layer * config.n_embd * t
    achieved = flops_per_token * b * t / (med * 1e-3) / 1e9
    return {
        "config": "nanoGPT CPU recipe: 4 layers, 4 heads, d_model 128, T 64, B 12, vocab 65",
        "timing": timing(ms),
        "tokens_per_s": b * t / (med * 1e-3),
        "flops_per_token": flops_per_token,
        "achieved_gflops": achieved,
        "matmul_peak_gflops": peak_gflops,
        "mfu": achieved / peak_gflops,
    }


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
    model = GPT(GPTConfig(vocab_size=len(chars)))
    opt = model.configure_optimizer(1e-3, 0.1, (0.9, 0.99))

    def batch(split):
        d = splits[split]
        ix = torch.randint(len(d) - t, (b,))
        return torch.stack([d[i : i + t] for i in ix]), torch.stack([d[i + 1 : i + 1 + t] for i in ix])

    @torch.no_grad()
    def estimate():
        model.eval()
        out = {}
        for split in ("train", "val"):
            out[split] = sum(model(*batch(split))[1].item() for _ in range(200)) / 200
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
        _, loss = model(*batch("train"))
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
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default="torch.json")
    p.add_argument("--recipe-data", default=None)
    p.add_argument("--recipe-iters", type=int, default=2000)
    p.add_argument("--recipe-seed", type=int, default=1337, help="the recipe's torch seed")
    p.add_argument("--only", default=None, help="comma-separated: attention, train_step")
    a = p.parse_args()
    only = set(a.only.split(",")) if a.only else None

    def runs(section):
        return only is None or section in only

    if a.threads:
        torch.set_num_threads(a.threads)
    warm, meas = (0.1, 0.3) if a.quick else (1.0, 3.0)
    ts = [64, 128] if a.quick else [64, 128, 256, 512, 1024, 2048]
    long_t = 256 if a.quick else 8192
    out = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "quick": a.quick,
    }
    out["matmul"] = [matmul(256 if a.quick else 1024, warm, meas)]
    out["attention"], out["train_step"] = [], []
    if runs("attention"):
        out["attention"] = [
            attention(4, 4, 32, t, bwd, warm, meas) for t in ts for bwd in (False, True)
        ]
        out["attention"].append(attention(1, 4, 32, long_t, False, warm, meas))
    if runs("train_step"):
        out["train_step"] = [train_step(out["matmul"][0]["gflops"], warm, meas)]
    if a.recipe_data:
        out["recipe"] = recipe(a.recipe_data, a.recipe_iters, a.recipe_seed)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

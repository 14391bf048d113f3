"""headlab's speedrun switches trained in PyTorch, to set beside `headlab train` on one config.

    python bench/reference/speedrun.py --config configs/shakespeare-char-speedrun.toml \\
        [--set section.key=value ...] [--seed N] [--max-seconds S] [--compile] [--threads N] \\
        --out FILE
    python bench/reference/speedrun.py --config FILE [--set ...] --check   # can it train that?

reads the run config as headlab does ([model], [train], [data]; a key left out takes
headlab's default), trains gpt.py's model with the optimizer and schedule the config names,
and writes the losses, the training seconds and a sample as JSON. bench.py runs the same
thing as its `speedrun` task.

Only what decides the trained weights is read. Keys that only shape headlab's output
(log_interval, eval_interval, sample_tokens, ...) are ignored; a key this script does not
implement, or a value it cannot honour (dropout > 0, norm = "post", a BPE tokenizer), is an
error rather than a silently different run.
"""

import argparse
import json
import math
import os
import sys
import time
import tomllib

import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import Gpt, GptConfig, optimizers  # noqa: E402

# Keys read, with headlab's defaults (crates/model/src/config.rs, crates/train/src/config.rs,
# crates/data/src/config.rs) for a file that leaves them out. None: no default
# (logit_softcap: uncapped; lr_decay_iters: max_iters; data.path: required).
KEYS = {
    "model": {
        "block_size": 64, "d_model": 128, "n_layers": 2, "n_heads": 4, "bias": True,
        "positional": "learned", "tie_embeddings": True, "activation": "gelu",
        "qk_norm": False, "zero_init_proj": False, "zero_init_head": False, "bigram": False,
        "logit_softcap": None,
    },
    "train": {
        "batch_size": 24, "max_iters": 2200, "lr": 4e-3, "min_lr": 2e-4, "warmup_iters": 50,
        "lr_decay_iters": None, "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.1,
        "grad_clip": 1.0, "eval_iters": 20, "seed": 1337, "optimizer": "adamw",
        "muon_lr": 0.02, "muon_momentum": 0.95, "muon_weight_decay": 0.0, "schedule": "cosine",
        "cooldown_fraction": 0.2,
        "sample_temperature": 1.0,
    },
    "data": {"path": None, "val_fraction": 0.1},
}
# Keys that change nothing here: logging, evaluation cadence, headlab's own outputs, and
# data keys that only built-in corpora or the BPE tokenizer read.
IGNORED = {
    "model": set(),
    "train": {"log_interval", "eval_interval", "sample_tokens", "track_heads_every",
              "backend", "grammar_sentences"},
    "data": {"builtin_chars", "vocab_size", "induction_len"},
}
# Keys accepted only at the one value this script implements.
ONLY = {
    "model": {"dropout": 0.0, "norm": "pre", "gelu": "exact", "attn_only": False},
    "train": {"grad_accum": 1},
    "data": {"tokenizer": "char"},
}
CHOICES = {
    ("model", "positional"): ("learned", "rope"),
    ("model", "activation"): ("gelu", "relu2"),
    ("train", "optimizer"): ("adamw", "muon"),
    ("train", "schedule"): ("cosine", "wsd"),
}
# The types of the keys whose default is None.
OPTIONAL = {("model", "logit_softcap"): 0.0, ("train", "lr_decay_iters"): 0,
            ("data", "path"): ""}


def load_config(path, sets=()):
    """`{section: {key: value}}` with every key of KEYS, the file's values overridden by
    `sets` (`headlab train --set` arguments), or ValueError naming the key."""
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    for assignment in sets:
        apply_set(raw, assignment)
    for section in raw:
        if section not in KEYS:
            raise ValueError(f"{path}: unknown section [{section}]; expected model, train, data")
    if "builtin" in raw.get("data", {}) or "path" not in raw.get("data", {}):
        raise ValueError(f"{path}: speedrun.py reads a text file: set data.path "
                         "(built-in corpora are headlab's only)")
    out = {}
    for section, keys in KEYS.items():
        given = raw.get(section, {})
        for key, value in given.items():
            if key not in keys and key not in IGNORED[section] and key not in ONLY[section]:
                raise ValueError(f"{path}: {section}.{key} is not implemented by speedrun.py "
                                 f"(known: {', '.join(sorted(keys))})")
            # The type first, as headlab checks it: `false` equals 0.0 in Python, not in TOML.
            like = OPTIONAL.get((section, key), keys.get(key, ONLY[section].get(key)))
            if (key in keys or key in ONLY[section]) and not same_type(value, like):
                kind = {bool: "a boolean", int: "an integer", float: "a number",
                        str: "a string"}[type(like)]
                raise ValueError(f"{path}: {section}.{key} = {value!r} should be {kind}")
            if key in ONLY[section] and value != ONLY[section][key]:
                raise ValueError(f"{path}: {section}.{key} = {value!r} is not implemented here "
                                 f"(only {ONLY[section][key]!r})")
            if (section, key) in CHOICES and value not in CHOICES[section, key]:
                raise ValueError(f"{path}: {section}.{key} = {value!r}: expected one of "
                                 f"{', '.join(CHOICES[section, key])}")
        out[section] = {k: given.get(k, default) for k, default in keys.items()}
    return out


def apply_set(raw, assignment):
    """One `section.key=value` into the file's dictionary, the value read as headlab reads it
    (crates/train/src/config.rs, `RunConfig::apply_set`): a TOML value (`3e-4`, `true`,
    `"x"`), else the bare string (`rope`); a key that takes a string keeps the text as
    written (`data.path=2024.txt`). load_config then checks it like a value from the file.
    As in headlab, setting data.path drops data.builtin, and the path is the working
    folder's."""
    key, eq, text = assignment.partition("=")
    section, dot, field = key.strip().partition(".")
    if not eq or not dot or not field:
        raise ValueError(f"--set {assignment!r}: expected section.key=value, e.g. train.lr=3e-4")
    text = text.strip()
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    like = OPTIONAL.get((section, field), KEYS.get(section, {}).get(field))
    if isinstance(like, str) and not isinstance(value, str):
        value = text
    raw.setdefault(section, {})[field] = value
    if (section, field) == ("data", "path"):
        raw["data"].pop("builtin", None)
        if isinstance(value, str):
            # headlab takes a --set path as given, from the working folder, and looks beside
            # the config file only for the file's own path.
            raw["data"]["path"] = os.path.abspath(value)


def same_type(value, default):
    """TOML's types against the default's; an integer is accepted for a float key."""
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def resolve_data_path(path, config_file):
    """headlab's rule (crates/train/src/config.rs): as given if absolute or found from the
    current folder, else beside the config file or in a folder above it."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    folder = os.path.abspath(os.path.dirname(config_file))
    while True:
        candidate = os.path.join(folder, path)
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return path
        folder = parent


def char_data(path, val_fraction):
    """Character tokens as headlab's char tokenizer makes them: the sorted characters of the
    whole text; the first 1 - val_fraction of the tokens train, the rest validate."""
    text = open(path, encoding="utf-8").read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = min(int(len(data) * (1.0 - val_fraction)), len(data))
    return chars, {"train": data[:n], "val": data[n:]}


def lr_multiplier(it, t):
    """The schedule at step `it` as a fraction of the peak `lr`; AdamW's rate is lr times
    it, Muon's muon_lr times it.

    cosine: nanoGPT's get_lr (bench.py's recipe). wsd: warm up, hold, then decay linearly to
    min_lr over the last round(cooldown_fraction * max_iters) steps.
    """
    lr, min_lr, warmup = t["lr"], t["min_lr"], t["warmup_iters"]
    if it < warmup:
        return (it + 1) / (warmup + 1)
    if t["schedule"] == "cosine":
        decay = t["lr_decay_iters"] if t["lr_decay_iters"] is not None else t["max_iters"]
        if it > decay:
            return min_lr / lr
        ratio = (it - warmup) / (decay - warmup)
        return (min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)) / lr
    # Rust's f64::round: halves away from zero (Python's round() goes to even).
    cooldown = math.floor(t["cooldown_fraction"] * t["max_iters"] + 0.5)
    decay_start = t["max_iters"] - cooldown
    if it < decay_start:
        return 1.0
    return (lr + (min_lr - lr) * (it - decay_start) / cooldown) / lr


@torch.no_grad()
def full_val_loss(model, val, t, batch=64):
    """Mean loss over every token of the validation split cut into non-overlapping windows
    at 0, t, 2t, ... and a last, shorter one for the tokens left (headlab's
    `LossSum::of_split`): one number for the whole split, no sampling noise."""
    n = (len(val) - 1) // t
    ids = val[: n * t].view(n, t)  # [n, t]
    targets = val[1 : n * t + 1].view(n, t)  # [n, t], shifted by one
    total, count = 0.0, n * t
    for i in range(0, n, batch):
        logits = model(ids[i : i + batch])  # [b, t, vocab]
        total += F.cross_entropy(logits.flatten(0, 1), targets[i : i + batch].flatten(),
                                 reduction="sum").item()
    rest = len(val) - 1 - n * t
    if rest > 0:
        logits = model(val[n * t : n * t + rest][None])  # [1, rest, vocab]
        total += F.cross_entropy(logits[0], val[n * t + 1 :], reduction="sum").item()
        count += rest
    return total / count


@torch.no_grad()
def sample(model, chars, prompt, n, temperature, seed, block_size):
    """`n` characters after `prompt`, each drawn from softmax(logits / temperature) with its
    own generator, so sampling leaves the training RNG alone. Context: the last block_size."""
    stoi = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([[stoi[c] for c in prompt]], dtype=torch.long)  # [1, len]
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n):
        logits = model(ids[:, -block_size:])[0, -1]  # [vocab]
        probs = F.softmax(logits / temperature, dim=-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=gen)[None]], dim=1)
    return "".join(chars[i] for i in ids[0, len(prompt):].tolist())


def speedrun(config_path, seed=None, max_seconds=None, compile=False, sets=()):
    """Trains the config's model, with `sets` applied, from `seed` (default train.seed) for
    train.max_iters steps, or fewer once the training time passes `max_seconds` (the schedule
    stays that of max_iters). Returns the result dictionary `main` writes."""
    cfg = load_config(config_path, sets)
    m, t, d = cfg["model"], cfg["train"], cfg["data"]
    seed = t["seed"] if seed is None else seed
    chars, splits = char_data(resolve_data_path(d["path"], config_path), d["val_fraction"])
    b, block = t["batch_size"], m["block_size"]
    torch.manual_seed(seed)
    model = Gpt(GptConfig(vocab_size=len(chars), **m))
    opts = optimizers(model, t["optimizer"], t["lr"], (t["beta1"], t["beta2"]),
                      t["weight_decay"], t["muon_lr"], t["muon_momentum"],
                      t["muon_weight_decay"])
    for opt in opts:
        for g in opt.param_groups:
            g["peak_lr"] = g["lr"]
    loss_of = torch.compile(model.loss) if compile else model.loss

    def batch(split):
        """`b` random windows of the split: ids and next-token targets, `[b, block]` each."""
        data = splits[split]
        ix = torch.randint(len(data) - block, (b,))
        return (torch.stack([data[i : i + block] for i in ix]),
                torch.stack([data[i + 1 : i + 1 + block] for i in ix]))

    iters, first_step_s, log_every = 0, None, max(1, t["max_iters"] // 10)
    start = time.perf_counter()
    for it in range(t["max_iters"]):
        scale = lr_multiplier(it, t)
        for opt in opts:
            for g in opt.param_groups:
                g["lr"] = g["peak_lr"] * scale
        loss = loss_of(*batch("train"))
        loss.backward()
        if t["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip"])
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
        iters = it + 1
        elapsed = time.perf_counter() - start
        first_step_s = elapsed if first_step_s is None else first_step_s
        if it % log_every == 0:
            print(f"step {it}: loss {loss.item():.4f}, {elapsed:.1f} s", file=sys.stderr)
        if max_seconds is not None and elapsed >= max_seconds:
            break
    train_s = time.perf_counter() - start

    model.eval()
    with torch.no_grad():  # the recipe's estimator: eval_iters random batches per split
        est = {s: sum(model.loss(*batch(s)).item() for _ in range(t["eval_iters"]))
               / t["eval_iters"] for s in ("train", "val")}
    return {
        "config": config_path,
        "set": list(sets),
        "seed": seed,
        "iters": iters,
        "train_s": train_s,
        "first_step_s": first_step_s,  # with --compile, mostly compilation
        "val_loss": est["val"],
        "train_loss": est["train"],
        "val_full_loss": full_val_loss(model, splits["val"], block),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "mode": "compile" if compile else "eager",
        "settings": cfg,
        "sample": sample(model, chars, "\n", 200, t["sample_temperature"], seed, block),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one key of the config, as `headlab train --set` does")
    p.add_argument("--seed", type=int, default=None, help="default: the config's train.seed")
    p.add_argument("--max-seconds", type=float, default=None)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default="speedrun.json")
    p.add_argument("--check", action="store_true",
                   help="only read the config and the --set's: exit 0, or 2 naming the key")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        if a.check:
            load_config(a.config, a.set)
            return
        out = speedrun(a.config, a.seed, a.max_seconds, a.compile, a.set)
    except ValueError as e:  # a config or --set it cannot train: headlab's exit code 2
        print(f"speedrun.py: {e}", file=sys.stderr)
        sys.exit(2)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {a.out}: val {out['val_loss']:.4f}, full val {out['val_full_loss']:.4f}, "
          f"{out['iters']} steps in {out['train_s']:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()

"""Builds the small checkpoints under tests/fixtures that headlab's import tests read.

    ~/.cache/headlab/torch-venv/bin/python tools/make-fixtures.py [--out tests/fixtures]

Everything is made here, from fixed seeds and the text below; nothing is downloaded.

    hf-gpt2-tiny/     a Hugging Face GPT-2 folder: config.json, model.safetensors (float32),
                      tokenizer.json, vocab.json, merges.txt, and logits.json (ids -> logits
                      by transformers, text -> ids by tokenizers)
    nanogpt-tiny/     a nanoGPT checkpoint: ckpt.pt ('_orig_mod.' keys, AdamW state,
                      model_args, ...), meta.pkl (char vocabulary), logits.json, and
                      evil-meta.pkl, a pickle that would run a shell command if unpickled

Every parameter, biases and LayerNorm ones included, gets seeded noise, so a loader that
drops a bias or swaps q, k and v gives visibly different logits. The script checks its own
output before it returns: the HF folder reloads to the same logits, the nanoGPT module
agrees with transformers' GPT-2 given the same weights, and the tokenizer gives text back.
The test suite reads these files only; it never runs Python.
"""

import argparse
import json
import math
import os
import pickle
import sys
from pathlib import Path

import numpy as np
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from torch import nn
from torch.nn import functional as F
from transformers import GPT2Config, GPT2LMHeadModel

SEED = 1337
NOISE_STD = 0.1

# Training text for the BPE merges and the character vocabulary (written for this script).
CORPUS = """\
The lighthouse keeper climbed the stairs every evening at dusk. There were 112 steps
(the tower was built in 1869), and he counted them aloud, as his mother had done before him. At the
top he trimmed the wick, polished the glass, and watched the boats come home.

Some nights the fog rolled in so thick that the beam seemed to stop a few yards from the
tower. Then he rang the bell instead: three strokes, a pause, and three strokes again.
Fishermen said they could hear it from the far side of the bay, even in a gale!

"Why do you still count the steps?" asked the girl from the village, who brought him
bread on Thursdays. He smiled. "Because the day I forget the number, the sea will know."

Winter came early that year. Ice crusted the railings; the wind pulled at the shutters,
and the keeper wrote in his log by candlelight: calm at noon, rising swell by evening,
no ships in sight. Quiet work, but somebody has to keep the light burning.
"""

# Encoded by the GPT-2 tokenizer into logits.json: newlines, "\n\n", double spaces, a tab,
# contractions, digits, punctuation and a two-byte character, so pre-tokenization matters.
TOKENIZER_TEXT = (
    "Hello,  world! It's 3:15 -- isn't it?\n\n"
    "  The keeper's log:\tcalm;  swell... (no ships)\n"
    "caf\u00e9 at dusk.\n"
)

# Ids the HF model is run on: some single bytes, some merges (256..299).
HF_IDS = [72, 256, 3, 299, 17, 120, 257, 64, 255, 280, 0, 91, 263, 150, 298, 33, 271, 5, 200, 290]

# Text the nanoGPT model is run on (every character is in CORPUS).
NANOGPT_TEXT = "the keeper counts: 112,\nWinter; \"Why?\""


def versions():
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "numpy": np.__version__,
    }


def f32_rows(t):
    """A float32 [n, m] tensor as lists of JSON numbers, each the shortest decimal for its f32."""
    rows = [[float(str(np.float32(x))) for x in row] for row in t.detach().numpy()]
    back = np.array(rows, dtype=np.float64).astype(np.float32)
    assert np.array_equal(back, t.detach().numpy()), "a logit does not survive the JSON round trip"
    return rows


def write_json(path, value):
    """One line per top-level key, and one per row of a list of lists (the logits)."""
    lines = []
    for key, item in value.items():
        if isinstance(item, list) and item and isinstance(item[0], list):
            rows = ",\n  ".join(json.dumps(row) for row in item)
            text = f"[\n  {rows}\n ]"
        else:
            text = json.dumps(item)
        lines.append(f" {json.dumps(key)}: {text}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")
    assert json.loads(Path(path).read_text(encoding="utf-8")) == value


def perturb(model, generator):
    """Adds N(0, NOISE_STD^2) to every parameter (a tied one once) so no weight is 0 or 1."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * NOISE_STD)


# ---------------------------------------------------------------- Hugging Face GPT-2


def train_tokenizer(vocab_size):
    """A byte-level BPE: the 256 byte characters, then merges learnt on CORPUS."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS], trainer=trainer)
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    return tok


def check_tokenizer(tok, folder):
    """The text comes back, and vocab.json + merges.txt encode it as tokenizer.json does."""
    ids = tok.encode(TOKENIZER_TEXT).ids
    assert tok.decode(ids) == TOKENIZER_TEXT, "tokenizer.json does not give the text back"
    reloaded = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert reloaded.encode(TOKENIZER_TEXT).ids == ids
    pair = models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt"))
    from_pair = Tokenizer(pair)
    from_pair.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    from_pair.decoder = decoders.ByteLevel()
    assert from_pair.encode(TOKENIZER_TEXT).ids == ids, "vocab.json/merges.txt disagree"
    return ids


def hf_config(vocab_size, activation):
    return GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=4,
        vocab_size=vocab_size,
        n_positions=64,
        n_inner=None,
        activation_function=activation,
        layer_norm_epsilon=1e-5,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=True,
        bos_token_id=None,  # GPT-2's 50256 is outside this vocabulary
        eos_token_id=None,
    )


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def make_hf(folder):
    folder.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(300)
    tok.save(str(folder / "tokenizer.json"))
    tok.model.save(str(folder))  # vocab.json, merges.txt
    text_ids = check_tokenizer(tok, folder)

    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(hf_config(tok.get_vocab_size(), "gelu_new"))
    assert model.lm_head.weight is model.transformer.wte.weight, "head not tied"
    perturb(model, torch.Generator().manual_seed(SEED + 1))
    model.eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    # headlab's own export writes no generation settings, and nothing here reads them.
    (folder / "generation_config.json").unlink(missing_ok=True)

    logits = hf_logits(model, HF_IDS)
    write_json(
        folder / "logits.json",
        {
            "ids": HF_IDS,
            "logits": f32_rows(logits),
            "text": TOKENIZER_TEXT,
            "text_ids": text_ids,
            "versions": versions(),
        },
    )

    again = GPT2LMHeadModel.from_pretrained(str(folder)).eval()
    assert torch.equal(hf_logits(again, HF_IDS), logits), "the saved folder gives other logits"
    return tok.get_vocab_size()


def make_hf_padded(folder):
    """A GPT-2 whose embedding has more rows (320, a multiple of 64) than its tokenizer has
    tokens (268), as nanoGPT's 50304 rows for GPT-2's 50257 tokens. transformers loads it; the
    logits cover all 320 rows, of which the first 268 are tokens."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(268)
    tok.save(str(folder / "tokenizer.json"))
    text_ids = tok.encode(TOKENIZER_TEXT).ids
    assert tok.decode(text_ids) == TOKENIZER_TEXT
    text_ids = text_ids[:48]  # within n_positions 64
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(hf_config(320, "gelu_new"))
    perturb(model, torch.Generator().manual_seed(SEED + 3))
    model.eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    (folder / "generation_config.json").unlink(missing_ok=True)
    logits = hf_logits(model, text_ids)
    assert logits.shape == (len(text_ids), 320), logits.shape
    write_json(
        folder / "logits.json",
        {"ids": text_ids, "logits": f32_rows(logits), "text": tok.decode(text_ids), "versions": versions()},
    )
    return tok.get_vocab_size()


# ---------------------------------------------------------------- nanoGPT


class SelfAttention(nn.Module):
    """Causal attention; one [3d, d] projection whose output rows are q, then k, then v."""

    def __init__(self, d, n_head, bias):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d, 3 * d, bias=bias)
        self.c_proj = nn.Linear(d, d, bias=bias)

    def forward(self, x):
        b, t, d = x.shape
        d_k = d // self.n_head
        # each of q, k, v: [b, t, d] -> [b, h, t, d_k], head j taking columns j*d_k .. (j+1)*d_k
        q, k, v = (
            part.reshape(b, t, self.n_head, d_k).permute(0, 2, 1, 3)
            for part in self.c_attn(x).chunk(3, dim=-1)
        )
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d_k)
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        mixed = (weights @ v).permute(0, 2, 1, 3).reshape(b, t, d)
        return self.c_proj(mixed)


class FeedForward(nn.Module):
    def __init__(self, d, bias):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d, bias=bias)
        self.c_proj = nn.Linear(4 * d, d, bias=bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="none"))


class Layer(nn.Module):
    """nanoGPT's block; bias=False (train.py's default) drops the biases of every Linear and
    LayerNorm, so a LayerNorm holds only its weight."""

    def __init__(self, d, n_head, bias):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5, bias=bias)
        self.attn = SelfAttention(d, n_head, bias)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5, bias=bias)
        self.mlp = FeedForward(d, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGpt(nn.Module):
    """A pre-LayerNorm GPT whose state_dict keys are the ones nanoGPT's checkpoints hold."""

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, bias=True):
        super().__init__()
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(vocab_size, n_embd),
                "wpe": nn.Embedding(block_size, n_embd),
                "h": nn.ModuleList(Layer(n_embd, n_head, bias) for _ in range(n_layer)),
                "ln_f": nn.LayerNorm(n_embd, eps=1e-5, bias=bias),
            }
        )
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.transformer["wte"].weight
        for module in self.modules():  # nanoGPT's starting point, before the noise
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, 0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, ids):
        parts = self.transformer
        x = parts["wte"](ids) + parts["wpe"](torch.arange(ids.shape[1]))
        for layer in parts["h"]:
            x = layer(x)
        return self.lm_head(parts["ln_f"](x))


class RunsAShellCommand:
    """Pickles to "call os.system('echo pwned')"; pickling it runs nothing."""

    def __reduce__(self):
        return (os.system, ("echo pwned",))


def compiled_state_dict(model):
    """The state dict torch.compile's wrapper gives: an OrderedDict, keys under `_orig_mod.`,
    and its `_metadata` attribute (pickled along with it) naming the modules the same way."""
    wrapper = nn.Module()
    wrapper._orig_mod = model
    state = wrapper.state_dict()
    assert all(k.startswith("_orig_mod.") for k in state) and hasattr(state, "_metadata")
    return state


def one_adamw_step(model, data, block_size, generator):
    """One nanoGPT-style AdamW step (decay on matrices only) on a random batch of data."""
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": matrices, "weight_decay": 0.1}, {"params": vectors, "weight_decay": 0.0}],
        lr=6e-4,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    starts = torch.randint(len(data) - block_size, (2,), generator=generator)
    x = torch.stack([data[s : s + block_size] for s in starts])
    y = torch.stack([data[s + 1 : s + 1 + block_size] for s in starts])
    model.train()
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return optimizer


def check_against_transformers(model_args, state, ids, logits):
    """The same weights in transformers' GPT-2 (Conv1D keeps [in, out]) give the same logits;
    a bias-free model's missing biases are zeros there (GPT-2 always has them)."""
    config = hf_config(model_args["vocab_size"], "gelu")
    config.n_positions = model_args["block_size"]
    reference = GPT2LMHeadModel(config)
    linears = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    converted = {k: (v.t().contiguous() if k.endswith(linears) else v) for k, v in state.items()}
    for key, value in reference.state_dict().items():
        if key.endswith(".bias") and key not in converted and not key.endswith(".attn.bias"):
            assert not model_args["bias"], f"{key} is missing"
            converted[key] = torch.zeros_like(value)
    reference.load_state_dict(converted, strict=False)
    assert not set(converted) - set(reference.state_dict()), "keys transformers lacks"
    missing = set(reference.state_dict()) - set(converted)
    assert all(k.endswith((".attn.bias", ".attn.masked_bias")) for k in missing), missing
    reference.eval()
    theirs = hf_logits(reference, ids)
    gap = (theirs - logits).abs().max().item()
    assert torch.allclose(theirs, logits, rtol=1e-5, atol=1e-5), f"they differ by {gap}"
    return gap


def make_nanogpt(folder, bias=True):
    folder.mkdir(parents=True, exist_ok=True)
    chars = sorted(set(CORPUS))
    vocab_size = len(chars)
    assert 40 <= vocab_size <= 70, vocab_size
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": vocab_size, "itos": itos, "stoi": stoi}, f)
    if bias:
        with open(folder / "evil-meta.pkl", "wb") as f:
            pickle.dump(RunsAShellCommand(), f)

    model_args = dict(
        n_layer=2, n_head=4, n_embd=32, block_size=64, bias=bias, vocab_size=vocab_size, dropout=0.0
    )
    torch.manual_seed(SEED)
    model = NanoGpt(vocab_size, model_args["block_size"], 2, 4, 32, bias)
    generator = torch.Generator().manual_seed(SEED + 2)
    perturb(model, generator)
    data = torch.tensor([stoi[ch] for ch in CORPUS])
    optimizer = one_adamw_step(model, data, model_args["block_size"], generator)
    model.eval()

    ids = [stoi[ch] for ch in NANOGPT_TEXT]
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0]
    state = model.state_dict()
    gap = check_against_transformers(model_args, state, ids, logits)

    checkpoint = {
        "model": compiled_state_dict(model),
        "optimizer": optimizer.state_dict(),
        "model_args": model_args,
        "iter_num": 250,
        "best_val_loss": torch.tensor(2.4817),
        "config": {
            "dataset": "shakespeare_char",
            "batch_size": 2,
            "block_size": 64,
            "learning_rate": 6e-4,
            "max_iters": 250,
            "weight_decay": 0.1,
            "beta2": 0.95,
            "compile": True,
            "dtype": "float32",
            "device": "cpu",
        },
    }
    torch.save(checkpoint, folder / "ckpt.pt")
    write_json(
        folder / "logits.json",
        {"ids": ids, "text": NANOGPT_TEXT, "logits": f32_rows(logits), "versions": versions()},
    )

    plain = folder / "plain-state-dict.pt"
    if bias:
        torch.save(state, plain)
        if plain.stat().st_size >= 100_000:
            plain.unlink()

    back = torch.load(folder / "ckpt.pt", weights_only=True)
    prefix = len("_orig_mod.")
    reloaded = NanoGpt(vocab_size, model_args["block_size"], 2, 4, 32, bias)
    reloaded.load_state_dict({k[prefix:]: v for k, v in back["model"].items()}, strict=True)
    reloaded.eval()
    with torch.no_grad():
        assert torch.equal(reloaded(torch.tensor([ids]))[0], logits), "ckpt.pt gives other logits"
    return vocab_size, gap


# ---------------------------------------------------------------- main


README = """\
# Test fixtures

Small checkpoints for headlab's import tests, made by `tools/make-fixtures.py` from fixed
seeds and a few paragraphs of text written into the script (nothing is downloaded). To make
them again, from the repository root:

    ~/.cache/headlab/torch-venv/bin/python tools/make-fixtures.py --out tests/fixtures

The test suite only reads these files; it never runs Python. Every parameter, biases and
LayerNorm weights included, has seeded random noise added, so a loader that drops a bias,
misses a LayerNorm or mixes up q, k and v gets visibly different logits. Two runs with the
same package versions give the same bytes; the versions used are in each `logits.json`.

## hf-gpt2-tiny/ (a Hugging Face GPT-2 folder)

- `config.json`, `model.safetensors`: transformers' `GPT2LMHeadModel.save_pretrained`
  (safetensors, float32); 2 layers, 4 heads, n_embd 32, n_positions 64, vocab 300,
  `gelu_new`, LayerNorm eps 1e-5, head tied to `transformer.wte.weight`.
  (`generation_config.json`, which save_pretrained may write, is removed.)
- `tokenizer.json`: a byte-level BPE trained with `tokenizers` (ByteLevel pre-tokenizer and
  decoder, add_prefix_space false; ids 0-255 are the 256 byte characters in code point
  order, 256-299 the 44 merges; no normalizer, added tokens or post-processor).
- `vocab.json`, `merges.txt`: the same BPE model in GPT-2's older two-file form.
- `logits.json`: `ids` and the model's float32 `logits` for them (one row per position,
  computed by transformers in eval mode); `text` and `text_ids`, its encoding by the
  tokenizer; `versions` of the Python packages used.

## hf-gpt2-padded/ (a GPT-2 folder with a padded vocabulary)

- `config.json`, `model.safetensors`: as hf-gpt2-tiny/ but `vocab_size` 320 (the embedding's
  rows, padded to a multiple of 64) and other seeded noise.
- `tokenizer.json`: a byte-level BPE of 268 tokens, so rows 268..319 are never a token.
- `logits.json`: `ids` (the first 48 tokens of the tokenizer text, `text` decoded) and
  transformers' float32 `logits` for them over all 320 rows.

## nanogpt-tiny/ (a nanoGPT checkpoint)

- `ckpt.pt`: `torch.save` of a dict shaped like nanoGPT's: `model` (the OrderedDict
  `state_dict()` gives, with its `_metadata` attribute, every key prefixed `_orig_mod.` as
  torch.compile leaves it; `lm_head.weight` shares its storage with
  `transformer.wte.weight`), `optimizer` (AdamW state after one step), `model_args`
  (n_layer 2, n_head 4, n_embd 32, block_size 64, bias true, vocab_size, dropout 0),
  `iter_num`, `best_val_loss` (a 0-d tensor) and `config` (training settings).
- `meta.pkl`: nanoGPT's character vocabulary, `{'vocab_size', 'itos', 'stoi'}`.
- `logits.json`: `ids` (and the `text` they spell), the model's float32 `logits` for them
  in eval mode, and `versions`. The script checks these against transformers' GPT-2 given
  the same weights.
- `evil-meta.pkl`: a pickle that would call `os.system("echo pwned")` if unpickled with
  Python's pickle. headlab must refuse it without running anything. Do not unpickle it.

## exports/ (headlab's own exports, as other tools load them)

Not made by this script. `char/`, `byte/` and `bpe/` are `headlab export hf` folders of three
small runs (2 layers, d_model 32, 300 steps on the built-in grammar corpus, one per
`data.tokenizer`). `routes.json` is what `tools/check-export.py` recorded when it loaded each
one by every usual route (tokenizer_file, AutoTokenizer, pipeline, TransformerLens's
TransformerBridge, and AutoTokenizer without tokenizer_config.json): the prompt's ids and the
greedy continuation. To make them again:

    for t in char byte bpe; do
      headlab train --out run-$t --set model.block_size=32 --set model.d_model=32 \\
        --set model.n_layers=2 --set model.n_heads=2 --set train.max_iters=300 \\
        --set train.eval_interval=300 --set train.eval_iters=2 --set train.batch_size=16 \\
        --set train.lr=3e-3 --set train.track_heads_every=0 --set train.sample_tokens=0 \\
        --set data.builtin_chars=20000 --set data.tokenizer=$t --set data.vocab_size=300
      headlab export hf run-$t --out tests/fixtures/exports/$t
    done
    cd tests/fixtures/exports && ~/.cache/headlab/torch-venv/bin/python \\
      ../../../tools/check-export.py char byte bpe --prompt "the spy " --tokens 24 \\
      --out routes.json

## nanogpt-nobias/ (nanoGPT's default layout, `bias=False`)

`ckpt.pt`, `meta.pkl` and `logits.json` as in nanogpt-tiny/, from the same seeds, for a model built as nanoGPT's
`train.py` builds it by default: `bias=False` drops the bias of every Linear *and* every
LayerNorm (`LayerNorm(ndim, bias=False)`), so the state dict has no `.bias` key but the
causal-mask buffers nanoGPT would keep without flash attention (this model has none).
`model_args` says `bias: False`. The logits are checked against transformers' GPT-2 with
zero biases.
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out", default="tests/fixtures", help="folder to write (default %(default)s)"
    )
    args = parser.parse_args()
    out = Path(args.out)
    torch.use_deterministic_algorithms(True)

    hf_vocab = make_hf(out / "hf-gpt2-tiny")
    padded_vocab = make_hf_padded(out / "hf-gpt2-padded")
    char_vocab, gap = make_nanogpt(out / "nanogpt-tiny")
    _, gap_nobias = make_nanogpt(out / "nanogpt-nobias", bias=False)
    (out / "README.md").write_text(README, encoding="utf-8")

    print(f"hf-gpt2-tiny vocab {hf_vocab}, hf-gpt2-padded tokens {padded_vocab} of 320 rows")
    print(f"nanogpt-tiny vocab {char_vocab}")
    print(f"nanoGPT module vs transformers: max |logit difference| {gap:.3g}")
    print(f"bias-free nanoGPT module vs transformers: max |logit difference| {gap_nobias:.3g}")
    total = 0
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        size = path.stat().st_size
        total += size
        print(f"{size:>9}  {path}")
    print(f"{total:>9}  total")


if __name__ == "__main__":
    main()

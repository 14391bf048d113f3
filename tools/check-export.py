"""Loads `headlab export hf` folders by every route people use and records what each gives.

    ~/.cache/headlab/torch-venv/bin/python tools/check-export.py \
        tests/fixtures/exports/{char,byte,bpe} --prompt "the spy " --tokens 24 \
        --out tests/fixtures/exports/routes.json

For each folder and the prompt it records the prompt's ids and the greedy continuation (ids
and text) from:

    tokenizer_file   PreTrainedTokenizerFast(tokenizer_file=DIR/tokenizer.json) + the model
    auto             AutoTokenizer.from_pretrained(DIR) + AutoModelForCausalLM
    pipeline         pipeline("text-generation", model=DIR), greedy
    transformer_lens TransformerBridge.boot_transformers(DIR, hf_model=...) (transformer-lens
                     4.x removed HookedTransformer.from_pretrained; the bridge takes its place)
    auto_without_tokenizer_config
                     AutoTokenizer on a copy of DIR without tokenizer_config.json, as a folder
                     exported before headlab wrote that file: it falls back to GPT-2's own
                     tokenizer class from config.json's model_type

and fails unless every route but the last agrees with the first. headlab's tests compare the
recorded ids and text with headlab's own encoding and greedy sampling; this script is the only
place Python runs.
"""

import argparse
import importlib.metadata
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
    pipeline,
)


def greedy(model, ids, n):
    """n greedy tokens after ids, one full forward per token (no cache, no sampling)."""
    out = list(ids)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([out])).logits[0, -1]
            out.append(int(torch.argmax(logits)))
    return out[len(ids):]


def route(tokenizer, model, prompt, n):
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    new = greedy(model, ids, n)
    return {"ids": ids, "greedy_ids": new, "greedy_text": tokenizer.decode(new)}


def check(folder, prompt, n):
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    routes = {}
    fast = PreTrainedTokenizerFast(tokenizer_file=str(Path(folder) / "tokenizer.json"))
    fast.clean_up_tokenization_spaces = False
    routes["tokenizer_file"] = route(fast, model, prompt, n)
    auto = AutoTokenizer.from_pretrained(folder)
    routes["auto"] = route(auto, model, prompt, n)
    routes["auto"]["class"] = type(auto).__name__

    generator = pipeline("text-generation", model=folder, device="cpu")
    result = generator(
        prompt,
        max_new_tokens=n,
        do_sample=False,
        return_full_text=False,
        pad_token_id=0,
        clean_up_tokenization_spaces=False,
    )
    routes["pipeline"] = {"greedy_text": result[0]["generated_text"]}

    try:
        from transformer_lens.model_bridge import TransformerBridge

        bridge = TransformerBridge.boot_transformers(
            folder, hf_model=model, tokenizer=auto, device="cpu"
        )
        bridge.cfg.default_prepend_bos = False
        ids = bridge.to_tokens(prompt, prepend_bos=False)[0].tolist()
        out = list(ids)
        with torch.no_grad():
            for _ in range(n):
                out.append(int(torch.argmax(bridge(torch.tensor([out]))[0, -1])))
        new = out[len(ids):]
        routes["transformer_lens"] = {
            "ids": ids,
            "greedy_ids": new,
            "greedy_text": auto.decode(new),
        }
    except ImportError as e:
        print(f"transformer-lens not installed ({e}); route skipped", file=sys.stderr)

    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare"
        shutil.copytree(folder, bare)
        (bare / "tokenizer_config.json").unlink(missing_ok=True)
        old = AutoTokenizer.from_pretrained(str(bare))
        routes["auto_without_tokenizer_config"] = route(old, model, prompt, n)
        routes["auto_without_tokenizer_config"]["class"] = type(old).__name__

    first = routes["tokenizer_file"]
    for name, got in routes.items():
        if name == "auto_without_tokenizer_config":
            continue
        for key in ("ids", "greedy_ids", "greedy_text"):
            if key in got and got[key] != first[key]:
                sys.exit(f"{folder}: route {name} gives {key} {got[key]!r}, not {first[key]!r}")
    return routes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    try:
        versions["transformer_lens"] = importlib.metadata.version("transformer-lens")
    except importlib.metadata.PackageNotFoundError:
        pass
    record = {"prompt": args.prompt, "tokens": args.tokens, "versions": versions, "exports": {}}
    for folder in args.folders:
        record["exports"][Path(folder).name] = check(folder, args.prompt, args.tokens)
    Path(args.out).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

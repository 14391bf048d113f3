"""Records TransformerLens's composition scores of `headlab export hf` folders, for headlab's
composition scores to be checked against.

    ~/.cache/headlab/torch-venv/bin/python tools/tl-composition.py \
        tests/fixtures/exports/char tests/fixtures/exports/bpe \
        --out tests/fixtures/exports/tl-composition.json

Each folder is loaded in transformers (eager attention) and booted into TransformerLens 4.x's
TransformerBridge with its raw Hugging Face weights (no compatibility mode: nothing folded or
centred, which is what headlab scores). `bridge.all_composition_scores(mode)` gives, for modes
Q, K and V, a `[layer, head, layer, head]` array of `||W_A W_B||_F / (||W_A||_F ||W_B||_F)`
(zero where the reader is not in a later layer). The JSON keeps the scores of the pairs in
different layers, the package versions, and each folder's shapes. headlab never runs Python;
this script is the only place TransformerLens does.
"""

import argparse
import importlib.metadata
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
from transformer_lens.model_bridge import TransformerBridge


def scores(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(Path(folder) / "tokenizer.json"))
    bridge = TransformerBridge.boot_transformers(
        str(folder), hf_model=model, tokenizer=tokenizer, device="cpu"
    )
    cfg = model.config
    out = {"n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_embd": cfg.n_embd, "pairs": []}
    with torch.no_grad():
        for mode in ["Q", "K", "V"]:
            s = bridge.all_composition_scores(mode)
            s = getattr(s, "scores", s).double()
            for l1 in range(cfg.n_layer):
                for h1 in range(cfg.n_head):
                    for l2 in range(l1 + 1, cfg.n_layer):
                        for h2 in range(cfg.n_head):
                            out["pairs"].append(
                                {
                                    "mode": mode,
                                    "from": [l1, h1],
                                    "to": [l2, h2],
                                    "score": float(s[l1, h1, l2, h2]),
                                }
                            )
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    record = {
        "versions": {
            p: importlib.metadata.version(p) for p in ["transformer-lens", "transformers", "torch"]
        },
        "folders": {Path(f).name: scores(f) for f in args.folders},
    }
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Records TransformerLens's head detector on `headlab export hf` folders, for headlab's
`heads::detector` to be checked against.

    ~/.cache/headlab/torch-venv/bin/python tools/tl-detector.py \
        tests/fixtures/exports/char tests/fixtures/exports/bpe \
        --out tests/fixtures/exports/tl-detector.json

Each folder is loaded in transformers (eager attention) and booted into TransformerLens 4.x's
TransformerBridge (raw weights), with `default_prepend_bos = False`: headlab's vocabularies
have no BOS token. For each prompt, and for the two prompts as one list (which detect_head
averages), it records `head_detector.detect_head(bridge, prompt, kind, exclude_bos=...,
exclude_current_token=..., error_measure="mul")` for the three kinds and two settings of the
exclusions, with the token ids TransformerLens used. headlab never runs Python.
"""

import argparse
import importlib.metadata
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
from transformer_lens import head_detector
from transformer_lens.model_bridge import TransformerBridge

PROMPTS = ["the spy sees the spy.", "a dog and a cat and a dog"]
KINDS = ["previous_token_head", "duplicate_token_head", "induction_head"]
SETTINGS = [(False, False), (True, True)]


def record(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(Path(folder) / "tokenizer.json"))
    bridge = TransformerBridge.boot_transformers(
        str(folder), hf_model=model, tokenizer=tokenizer, device="cpu"
    )
    bridge.cfg.default_prepend_bos = False
    cases = []
    with torch.no_grad():
        for prompt in PROMPTS + [PROMPTS]:
            texts = prompt if isinstance(prompt, list) else [prompt]
            ids = [bridge.to_tokens(t)[0].tolist() for t in texts]
            for kind in KINDS:
                for exclude_bos, exclude_current in SETTINGS:
                    scores = head_detector.detect_head(
                        bridge,
                        prompt,
                        kind,
                        exclude_bos=exclude_bos,
                        exclude_current_token=exclude_current,
                        error_measure="mul",
                    )
                    cases.append(
                        {
                            "texts": texts,
                            "ids": ids,
                            "kind": kind,
                            "exclude_bos": exclude_bos,
                            "exclude_current_token": exclude_current,
                            "scores": scores.double().tolist(),
                        }
                    )
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = {
        "versions": {
            p: importlib.metadata.version(p) for p in ["transformer-lens", "transformers", "torch"]
        },
        "folders": {Path(f).name: record(f) for f in args.folders},
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

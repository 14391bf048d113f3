"""Records TransformerLens's logit lens on `headlab export hf` folders, for headlab's
`heads::lens` to be checked against.

    ~/.cache/headlab/torch-venv/bin/python tools/tl-lens.py \
        tests/fixtures/exports/char tests/fixtures/exports/bpe \
        --out tests/fixtures/exports/tl-lens.json

Each folder is loaded in transformers (eager attention) and booted into TransformerLens 4.x's
TransformerBridge (raw weights, `default_prepend_bos = False`). For one prompt it runs
`transformer_lens.tools.analysis.logit_lens` over every stage of the residual stream
(`incl_mid=True`: 0_pre, 0_mid, 1_pre, ..., final_post), through the final LayerNorm with
recomputed statistics and the unembedding, at every position: the log-probability of the
actual next token, and the top 3 token ids. headlab never runs Python.
"""

import argparse
import importlib.metadata
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
from transformer_lens.model_bridge import TransformerBridge
from transformer_lens.tools.analysis import logit_lens

PROMPT = "the spy sees the spy."


def record(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(Path(folder) / "tokenizer.json"))
    bridge = TransformerBridge.boot_transformers(
        str(folder), hf_model=model, tokenizer=tokenizer, device="cpu"
    )
    bridge.cfg.default_prepend_bos = False
    tokens = bridge.to_tokens(PROMPT)
    with torch.no_grad():
        targets = logit_lens(
            bridge,
            tokens[:, :-1],
            positions=None,
            targets=tokens[:, 1:],
            incl_mid=True,
            return_type="log_probs",
        )
        top = logit_lens(bridge, tokens[:, :-1], positions=None, incl_mid=True, top_k=3)
    return {
        "text": PROMPT,
        "ids": tokens[0].tolist(),
        "stages": targets.labels,
        # [stage][position]
        "target_log_prob": targets.values[:, 0, :, 0].double().tolist(),
        "top3": top.readout.top_ids[:, 0].tolist(),
    }


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
    Path(args.out).write_text(json.dumps(out) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""What the tl-*.py fixture scripts share: booting an `headlab export hf` folder in
TransformerLens 4.x, and writing a record of every folder with the package versions."""

import argparse
import importlib.metadata
import json
from pathlib import Path

from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
from transformer_lens.model_bridge import TransformerBridge


def boot(folder, prepend_bos=True):
    """The folder in transformers (eager attention, as the bridge forces) and booted into a
    TransformerBridge with its raw weights; `prepend_bos=False` for headlab's vocabularies,
    which have no BOS token."""
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(Path(folder) / "tokenizer.json"))
    bridge = TransformerBridge.boot_transformers(
        str(folder), hf_model=model, tokenizer=tokenizer, device="cpu"
    )
    if not prepend_bos:
        bridge.cfg.default_prepend_bos = False
    return model, bridge


def main(doc, record, indent=None):
    """`SCRIPT FOLDER... --out FILE`: `record(folder)` for each folder, by folder name."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = {
        "versions": {
            p: importlib.metadata.version(p) for p in ["transformer-lens", "transformers", "torch"]
        },
        "folders": {Path(f).name: record(f) for f in args.folders},
    }
    Path(args.out).write_text(json.dumps(out, indent=indent) + "\n")
    print(f"wrote {args.out}")

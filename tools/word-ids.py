"""Records how Hugging Face's own code tokenizes texts with a `headlab export hf` folder of a
word-tokenizer run, so headlab's test can compare its ids with theirs.

    python tools/word-ids.py tests/fixtures/exports/word --out tests/fixtures/exports/word-ids.json

Needs only `transformers` and `tokenizers` (no torch). For each text below it records the ids
and the decoded text from AutoTokenizer.from_pretrained(DIR) and from
PreTrainedTokenizerFast(tokenizer_file=DIR/tokenizer.json), and fails unless the two agree and
decoding gives the text back. The texts use only words of the grammar corpus the export was
trained on, at a line's start and after a space, with "." and newlines, plus one unknown word,
which both must encode as id 0 ("<unk>").
"""

import argparse
import importlib.metadata
import json
import sys

from transformers import AutoTokenizer, PreTrainedTokenizerFast

TEXTS = [
    "the spy",
    "the dogs near the cat run. a child sleeps.\nthe men that the spy sees smile.",
    "every bird that finds the happy cats likes some happy teachers.\n\nthe men wait.",
]
UNKNOWN = "the zebra runs."


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    auto = AutoTokenizer.from_pretrained(args.folder)
    fast = PreTrainedTokenizerFast(tokenizer_file=f"{args.folder}/tokenizer.json")
    records = []
    for text in TEXTS + [UNKNOWN]:
        ids = auto(text, add_special_tokens=False)["input_ids"]
        if fast(text, add_special_tokens=False)["input_ids"] != ids:
            sys.exit(f"word-ids: AutoTokenizer and the tokenizer file disagree on {text!r}")
        decoded = auto.decode(ids, clean_up_tokenization_spaces=False)
        if text != UNKNOWN and decoded != text:
            sys.exit(f"word-ids: decoding does not give {text!r} back: {decoded!r}")
        records.append({"text": text, "ids": ids, "decoded": decoded})
    if 0 not in records[-1]["ids"]:
        sys.exit(f"word-ids: the unknown word did not encode as id 0: {records[-1]}")
    out = {
        "class": type(auto).__name__,
        "texts": records,
        "versions": {
            p: importlib.metadata.version(p) for p in ["transformers", "tokenizers"]
        },
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()

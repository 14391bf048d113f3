"""Reads a `headlab export hf` folder with Hugging Face's own code and measures it.

    python tools/hf_interop.py DIR TEXT_FILE

Loads DIR with transformers' GPT2LMHeadModel and its tokenizer.json with
PreTrainedTokenizerFast (no hub access), checks that the tokenizer gives the text back, and
prints, as JSON, the mean cross-entropy over the windows `headlab eval --file TEXT_FILE`
uses: consecutive, non-overlapping, block_size tokens each, every token predicted from
those before it in its window. `cargo xtask interop --with-torch` compares the two.
"""

import json
import sys

import torch
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast


def main():
    folder, text_file = sys.argv[1], sys.argv[2]
    model = GPT2LMHeadModel.from_pretrained(folder).eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=f"{folder}/tokenizer.json")
    text = open(text_file, encoding="utf-8").read()
    ids = tokenizer.encode(text)
    decoded = tokenizer.decode(ids, clean_up_tokenization_spaces=False)
    if decoded != text:
        sys.exit(f"hf_interop: the tokenizer does not give the text back: {decoded[:80]!r}")
    block = model.config.n_positions
    nats, count, start = 0.0, 0, 0
    with torch.no_grad():
        while start + 1 < len(ids):
            n = min(block, len(ids) - 1 - start)
            x = torch.tensor([ids[start : start + n]])
            y = torch.tensor(ids[start + 1 : start + 1 + n])
            logits = model(x).logits[0]
            nats += torch.nn.functional.cross_entropy(logits.double(), y, reduction="sum").item()
            count += n
            start += n
    print(json.dumps({"tokens": count, "loss": nats / count, "vocab": model.config.vocab_size}))


if __name__ == "__main__":
    main()

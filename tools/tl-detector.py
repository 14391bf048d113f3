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


import torch

from tl_common import boot, main
from transformer_lens import head_detector

PROMPTS = ["the spy sees the spy.", "a dog and a cat and a dog"]
KINDS = ["previous_token_head", "duplicate_token_head", "induction_head"]
SETTINGS = [(False, False), (True, True)]


def record(folder):
    model, bridge = boot(folder, prepend_bos=False)
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


if __name__ == "__main__":
    main(__doc__, record, indent=1)

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


import torch

from tl_common import boot, main


def scores(folder):
    model, bridge = boot(folder)
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


if __name__ == "__main__":
    main(__doc__, scores, indent=1)

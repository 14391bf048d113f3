"""Records TransformerLens's direct path patching on `headlab export hf` folders, for headlab's
`heads::patching::path_sweep` to be checked against.

    ~/.cache/headlab/torch-venv/bin/python tools/tl-path.py \
        tests/fixtures/exports/char tests/fixtures/exports/bpe \
        --out tests/fixtures/exports/tl-path.json

Each folder is booted into TransformerLens 4.x's TransformerBridge (raw weights,
`default_prepend_bos = False`) with the prompts of tools/tl-patching.py. Both runs are cached
and `patching.get_act_patch_direct_path_all_sources` is run for components q, k and v: the
sender head's clean-minus-corrupted write (`z @ W_O`) is added, at every position, to one
later head's own copy of the residual stream before its `ln_1` and its Q, K or V projection,
and nothing else. The JSON keeps, per component, the metric `logit(answer) - logit(versus)`
after the last token for every (sender, receiver) pair with the receiver in a later layer.
headlab never runs Python.
"""

from pathlib import Path

import torch

from tl_common import boot, main
from transformer_lens import patching

# The same prompts as tools/tl-patching.py.
CASES = {
    "char": ("the spy sees the sp", "the dog sees the sp", "y", "e"),
    "bpe": ("the dog sees the", "the cat sees the", " dog", " cat"),
}


def record(folder):
    clean_text, corrupted_text, answer, versus = CASES[Path(folder).name]
    _, bridge = boot(folder, prepend_bos=False)
    clean, corrupted = bridge.to_tokens(clean_text), bridge.to_tokens(corrupted_text)
    assert clean.shape == corrupted.shape, (clean, corrupted)
    a, b = bridge.to_single_token(answer), bridge.to_single_token(versus)

    def metric(logits):
        return logits[0, -1, a] - logits[0, -1, b]

    with torch.no_grad():
        clean_logits, clean_cache = bridge.run_with_cache(clean)
        corrupted_logits, corrupted_cache = bridge.run_with_cache(corrupted)
        n_layers, n_heads = bridge.cfg.n_layers, bridge.cfg.n_heads
        paths = []
        for component in ["q", "k", "v"]:
            r = patching.get_act_patch_direct_path_all_sources(
                bridge, corrupted, clean_cache, corrupted_cache, metric, component, verbose=False
            )
            for sl in range(n_layers):
                for sh in range(n_heads):
                    for dl in range(sl + 1, n_layers):
                        for dh in range(n_heads):
                            paths.append(
                                {
                                    "sender": [sl, sh],
                                    "receiver": [dl, dh],
                                    "input": component.upper(),
                                    "metric": r[sl, sh, dl, dh].item(),
                                }
                            )
    return {
        "clean_ids": clean[0].tolist(),
        "corrupted_ids": corrupted[0].tolist(),
        "answer": a,
        "versus": b,
        "clean": float(metric(clean_logits)),
        "corrupted": float(metric(corrupted_logits)),
        "paths": paths,
    }


if __name__ == "__main__":
    main(__doc__, record, indent=1)

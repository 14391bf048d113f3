"""Records TransformerLens's activation patching on `headlab export hf` folders, for headlab's
`heads::patching` to be checked against.

    ~/.cache/headlab/torch-venv/bin/python tools/tl-patching.py \
        tests/fixtures/exports/char tests/fixtures/exports/bpe \
        --out tests/fixtures/exports/tl-patching.json

Each folder is loaded in transformers (eager attention) and booted into TransformerLens 4.x's
TransformerBridge (raw weights, `default_prepend_bos = False`). The clean prompt's run is
cached and patched into the corrupted prompt's by `transformer_lens.patching`:
`get_act_patch_resid_pre`, `get_act_patch_attn_out`, `get_act_patch_mlp_out` ([layer, pos])
and `get_act_patch_attn_head_out_all_pos` ([layer, head]), with the metric `logit(answer) -
logit(versus)` after the last token. The JSON keeps the prompts, their ids, both runs' metric
and every patched run's metric. headlab never runs Python.
"""

from pathlib import Path

import torch

from tl_common import boot, main
from transformer_lens import patching

# (clean, corrupted, answer, versus) per folder: same length in tokens, one-token answers.
CASES = {
    "char": ("the spy sees the sp", "the dog sees the sp", "y", "e"),
    "bpe": ("the dog sees the", "the cat sees the", " dog", " cat"),
}


def record(folder):
    clean_text, corrupted_text, answer, versus = CASES[Path(folder).name]
    model, bridge = boot(folder, prepend_bos=False)
    clean, corrupted = bridge.to_tokens(clean_text), bridge.to_tokens(corrupted_text)
    assert clean.shape == corrupted.shape, (clean, corrupted)
    a, b = bridge.to_single_token(answer), bridge.to_single_token(versus)

    def metric(logits):
        return logits[0, -1, a] - logits[0, -1, b]

    with torch.no_grad():
        clean_logits, cache = bridge.run_with_cache(clean)
        sweeps = {
            "resid_pre": patching.get_act_patch_resid_pre(bridge, corrupted, cache, metric),
            "attn_out": patching.get_act_patch_attn_out(bridge, corrupted, cache, metric),
            "mlp_out": patching.get_act_patch_mlp_out(bridge, corrupted, cache, metric),
            "head": patching.get_act_patch_attn_head_out_all_pos(
                bridge, corrupted, cache, metric
            ),
        }
        return {
            "clean_text": clean_text,
            "corrupted_text": corrupted_text,
            "clean_ids": clean[0].tolist(),
            "corrupted_ids": corrupted[0].tolist(),
            "answer": a,
            "versus": b,
            "clean": float(metric(clean_logits)),
            "corrupted": float(metric(bridge(corrupted))),
            "sweeps": {k: v.double().tolist() for k, v in sweeps.items()},
        }


if __name__ == "__main__":
    main(__doc__, record)

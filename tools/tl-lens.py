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


import torch

from tl_common import boot, main
from transformer_lens.tools.analysis import logit_lens

PROMPT = "the spy sees the spy."


def record(folder):
    model, bridge = boot(folder, prepend_bos=False)
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


if __name__ == "__main__":
    main(__doc__, record)

"""Records TransformerLens's full OV circuits of `headlab export hf` folders, for headlab's
copying scores (`heads::circuits`) to be checked against.

    ~/.cache/headlab/torch-venv/bin/python tools/tl-ov.py \
        tests/fixtures/exports/char tests/fixtures/exports/bpe \
        --out tests/fixtures/exports/tl-ov.json

Each folder is booted into TransformerLens 4.x's TransformerBridge twice: with its raw Hugging
Face weights, then after `enable_compatibility_mode()` (HookedTransformer's processing:
LayerNorm weights folded into the next linear maps, writing weights and the unembedding
centred). Each time the full OV circuit `W_E @ OV @ W_U` is a `FactoredMatrix` of shape
`[layer, head, vocab, vocab]`; the record keeps, per head, its `eigenvalues` (TransformerLens
takes them from the `d_k x d_k` product of the two factors), the copying score
`Re(sum(lambda)) / sum(|lambda|)` (Elhage et al. 2021) and the share of tokens whose own
logit is the largest in their row of the full matrix (ARENA's diagonal top-1 accuracy).
headlab never runs Python.
"""

import torch

from tl_common import boot, main


def circuits(bridge):
    with torch.no_grad():
        full = bridge.W_E @ bridge.OV @ bridge.W_U
        eig = full.eigenvalues.to(torch.complex128)
        copying = (eig.sum(-1) / eig.abs().sum(-1)).real
        ab = full.AB
        n_vocab = ab.shape[-1]
        top1 = (ab.argmax(-1) == torch.arange(n_vocab)).double().mean(-1)
    n_layer, n_head = copying.shape
    return [
        {
            "layer": layer,
            "head": head,
            "copying": copying[layer, head].item(),
            "top1": top1[layer, head].item(),
            # Sorted by (real, imaginary) part so that the order does not depend on LAPACK's.
            "eigenvalues": sorted(
                [z.real, z.imag] for z in eig[layer, head].tolist()
            ),
        }
        for layer in range(n_layer)
        for head in range(n_head)
    ]


def record(folder):
    _, bridge = boot(folder, prepend_bos=False)
    raw = circuits(bridge)
    bridge.enable_compatibility_mode(disable_warnings=True)
    return {"raw": raw, "folded": circuits(bridge)}


if __name__ == "__main__":
    main(__doc__, record, indent=1)

//! What a head writes, from its weights alone: the full OV circuit (Elhage et al. 2021).
//!
//! With residual vectors as rows, a head that attends to token `i` adds `W_E[i] W_V W_O W_U`
//! to the logits: row `i` of the `[vocab, vocab]` full OV circuit `W_E W_V W_O W_U`. A
//! copying head (an induction head's second half) raises the logit of the token it attends
//! to, so the circuit's diagonal dominates and its eigenvalues are mostly positive; a
//! suppressor's are mostly negative. Two numbers say which a head is:
//!
//! - the **copying score** `Re(sum(lambda)) / sum(|lambda|)`, in `[-1, 1]`, over the
//!   circuit's eigenvalues. `W_E W_V . W_O W_U` has the same nonzero eigenvalues as the
//!   `d_k x d_k` product `W_O W_U . W_E W_V` (`eig(AB) = eig(BA)` beyond zeros), which is
//!   what is solved, as TransformerLens's `FactoredMatrix.eigenvalues` does: no `V x V`
//!   matrix is formed;
//! - the **diagonal top-1 accuracy**: the share of tokens whose own logit is the largest in
//!   their row (ARENA's check of an induction head's OV circuit), computed in row blocks.
//!
//! `W_E` is the token embedding (a padded vocabulary's extra rows left out) and `W_U` the
//! LM head the model uses: the embedding transposed when tied, `lm_head` when not. Positions,
//! biases, the MLPs and the logit softcap are left out, as in the papers.

use burn::tensor::Tensor;
use headlab_kernels::to_host;
use headlab_model::{Gpt, Norm};
use nalgebra::DMatrix;
use serde::Serialize;

use crate::composition::head_weights;

/// Which weights the circuit is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Weights {
    /// The model's own matrices, as TransformerLens's bridge has them by default.
    Raw,
    /// TransformerLens's `enable_compatibility_mode()` (HookedTransformer's processing): each
    /// LayerNorm's weight folded into the matrix that reads its output (`ln_1` into `W_V`,
    /// `ln_f` into `W_U`), `W_E`, `W_O` and the reading matrices centred over `d_model` (a
    /// LayerNorm removes that mean anyway), `W_U` centred over the vocabulary (a constant
    /// shift of every logit). This is the circuit as the LayerNorms let it act, up to their
    /// per-position scale, and what headlab reports. Post-norm models have no such folding
    /// (their LayerNorms sit after the sums); for them it is [`Weights::Raw`].
    Folded,
}

/// One head's full OV circuit, summarised.
#[derive(Debug, Clone, Serialize)]
pub struct OvCircuit {
    /// Block index.
    pub layer: usize,
    /// Head index within the block.
    pub head: usize,
    /// The `d_k` eigenvalues of `W_O W_U W_E W_V` as `(re, im)`: the full circuit's nonzero
    /// spectrum (the rest of its `V` eigenvalues are zero).
    pub eigenvalues: Vec<(f64, f64)>,
    /// `Re(sum(lambda)) / sum(|lambda|)`, in `[-1, 1]`; NaN for a head that writes nothing.
    pub copying: f64,
    /// Share of the rows checked whose largest entry is on the diagonal (the first largest,
    /// as `argmax` takes it).
    pub top1: f64,
}

/// Rows of the full circuit checked for the top-1 accuracy: all up to this many tokens,
/// else this many spread evenly over the vocabulary (GPT-2's 50,257 rows would cost seconds
/// per head).
pub const TOP1_ROWS: usize = 4096;

/// Rows of the full circuit held at once while the top-1 accuracy is counted.
const ROW_BLOCK: usize = 512;

/// A `[rows, cols]` row-major f64 host copy of a 2-D tensor's block `rows x cols`.
fn host(t: Tensor<2>, rows: usize, cols: usize) -> DMatrix<f64> {
    let [r, c] = t.dims();
    let t = if (r, c) == (rows, cols) {
        t
    } else {
        t.slice([0..rows, 0..cols])
    };
    let v: Vec<f64> = to_host::<f32, _>(t).into_iter().map(f64::from).collect();
    DMatrix::from_row_slice(rows, cols, &v)
}

/// Each column minus its mean (over the rows).
fn centre_columns(m: &mut DMatrix<f64>) {
    for mut c in m.column_iter_mut() {
        let mean = c.mean();
        c.add_scalar_mut(-mean);
    }
}

/// Each row minus its mean (over the columns).
fn centre_rows(m: &mut DMatrix<f64>) {
    for mut r in m.row_iter_mut() {
        let mean = r.mean();
        r.add_scalar_mut(-mean);
    }
}

/// `diag(gamma) m`: row `r` scaled by `gamma[r]`.
fn scale_rows(m: &mut DMatrix<f64>, gamma: &[f64]) {
    for (mut r, g) in m.row_iter_mut().zip(gamma) {
        r *= *g;
    }
}

/// One head's `W_V [d, d_k]` and `W_O [d_k, d]`.
struct HeadOv {
    layer: usize,
    head: usize,
    w_v: DMatrix<f64>,
    w_o: DMatrix<f64>,
}

/// `W_E [V, d]`, `W_U [d, V]` and every head's OV factors, in the convention asked for.
struct Matrices {
    w_e: DMatrix<f64>,
    w_u: DMatrix<f64>,
    heads: Vec<HeadOv>,
}

fn matrices(model: &Gpt, weights: Weights) -> Matrices {
    let (d, v, d_k) = (
        model.config.d_model,
        model.config.vocab_size,
        model.config.d_k(),
    );
    let mut w_e = host(model.wte.weight.val(), v, d);
    let mut w_u = match &model.lm_head {
        // [d, rows] -> [d, v]
        Some(head) => host(head.weight.val(), d, v),
        // Tied: W_U = W_E^T.
        None => w_e.transpose(),
    };
    let fold = weights == Weights::Folded && model.config.norm == Norm::Pre;
    let gamma =
        |g: Tensor<1>| -> Vec<f64> { to_host::<f32, _>(g).into_iter().map(f64::from).collect() };
    if fold {
        centre_rows(&mut w_e);
        if let Some(ln_f) = &model.ln_f {
            scale_rows(&mut w_u, &gamma(ln_f.gamma.val()));
        }
        centre_columns(&mut w_u);
        centre_rows(&mut w_u);
    }
    let heads = head_weights(model)
        .into_iter()
        .map(|h| {
            let mut w_v = DMatrix::from_row_slice(d, d_k, &h.w_v);
            let mut w_o = DMatrix::from_row_slice(d_k, d, &h.w_o);
            if fold {
                let ln_1 = gamma(model.blocks[h.layer].ln_1.gamma.val());
                scale_rows(&mut w_v, &ln_1);
                centre_columns(&mut w_v);
                centre_rows(&mut w_o);
            }
            HeadOv {
                layer: h.layer,
                head: h.head,
                w_v,
                w_o,
            }
        })
        .collect();
    Matrices { w_e, w_u, heads }
}

/// The copying score of a spectrum: `Re(sum) / sum(|lambda|)`, NaN when all are zero.
fn copying_of(eigenvalues: &[(f64, f64)]) -> f64 {
    let re: f64 = eigenvalues.iter().map(|z| z.0).sum();
    let abs: f64 = eigenvalues.iter().map(|z| z.0.hypot(z.1)).sum();
    if abs == 0.0 { f64::NAN } else { re / abs }
}

/// Eigenvalues of `W_O (W_U W_E) W_V`, `[d_k, d_k]`, with `unembed_embed = W_U W_E [d, d]`.
fn spectrum(h: &HeadOv, unembed_embed: &DMatrix<f64>) -> Vec<(f64, f64)> {
    let m = &h.w_o * (unembed_embed * &h.w_v);
    m.complex_eigenvalues()
        .iter()
        .map(|z| (z.re, z.im))
        .collect()
}

/// Which rows the top-1 accuracy checks (see [`TOP1_ROWS`]).
fn top1_rows(v: usize) -> Vec<usize> {
    if v <= TOP1_ROWS {
        (0..v).collect()
    } else {
        (0..TOP1_ROWS).map(|i| i * v / TOP1_ROWS).collect()
    }
}

/// Share of `rows` whose largest entry of `W_E[i] W_V . W_O W_U` is the diagonal one.
fn top1(h: &HeadOv, w_e: &DMatrix<f64>, w_u: &DMatrix<f64>, rows: &[usize]) -> f64 {
    // [V, d] . [d, d_k] -> [V, d_k]; [d_k, d] . [d, V] -> [d_k, V]
    let (left, right) = (w_e * &h.w_v, &h.w_o * w_u);
    let mut hits = 0usize;
    for chunk in rows.chunks(ROW_BLOCK) {
        let block = left.select_rows(chunk) * &right; // [chunk, V]
        for (r, &token) in chunk.iter().enumerate() {
            let row = block.row(r);
            // The first largest, as argmax takes it.
            let mut best = 0;
            for j in 1..row.len() {
                if row[j] > row[best] {
                    best = j;
                }
            }
            hits += usize::from(best == token);
        }
    }
    hits as f64 / rows.len() as f64
}

/// Every head's full OV circuit in `weights`' convention, heads in (layer, head) order.
pub fn ov_circuits(model: &Gpt, weights: Weights) -> Vec<OvCircuit> {
    let m = matrices(model, weights);
    let unembed_embed = &m.w_u * &m.w_e;
    let rows = top1_rows(m.w_e.nrows());
    m.heads
        .iter()
        .map(|h| {
            let eigenvalues = spectrum(h, &unembed_embed);
            OvCircuit {
                layer: h.layer,
                head: h.head,
                copying: copying_of(&eigenvalues),
                top1: top1(h, &m.w_e, &m.w_u, &rows),
                eigenvalues,
            }
        })
        .collect()
}

/// Every head's copying score alone ([`Weights::Folded`]), cheap enough for every tracked
/// step: one `[d, V] x [V, d]` product, then `d_k x d_k` eigenproblems.
pub fn copying_scores(model: &Gpt) -> Vec<f64> {
    let m = matrices(model, Weights::Folded);
    let unembed_embed = &m.w_u * &m.w_e;
    m.heads
        .iter()
        .map(|h| copying_of(&spectrum(h, &unembed_embed)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;
    use headlab_model::GptConfig;

    /// `[rows, cols]` of a tensor as plain nested vectors.
    fn plain(t: Tensor<2>) -> Vec<Vec<f64>> {
        let [_, cols] = t.dims();
        let v: Vec<f64> = to_host::<f32, _>(t).into_iter().map(f64::from).collect();
        v.chunks(cols).map(<[f64]>::to_vec).collect()
    }

    /// The whole `[V, V]` circuit `W_E W_V W_O W_U` of one head, multiplied out in loops from
    /// the model's raw tensors.
    fn full_circuit(model: &Gpt, layer: usize, head: usize) -> Vec<Vec<f64>> {
        let (d, v, d_k) = (
            model.config.d_model,
            model.config.vocab_size,
            model.config.d_k(),
        );
        let wte = plain(model.wte.weight.val());
        // W_U[r][j]: the logit of token j per unit of residual direction r.
        let w_u: Vec<Vec<f64>> = match &model.lm_head {
            Some(h) => plain(h.weight.val()),
            None => (0..d)
                .map(|r| (0..v).map(|j| wte[j][r]).collect())
                .collect(),
        };
        let attn = &model.blocks[layer].attn;
        let w_v = plain(attn.v_proj.weight.val()); // [d, n_kv * d_k]
        let w_o = plain(attn.o_proj.weight.val()); // [n_heads * d_k, d]
        let kv = head / (attn.n_heads / attn.n_kv_heads);
        let mut out = vec![vec![0.0; v]; v];
        for (i, row) in out.iter_mut().enumerate() {
            // x W_V: [d_k]
            let z: Vec<f64> = (0..d_k)
                .map(|c| (0..d).map(|r| wte[i][r] * w_v[r][kv * d_k + c]).sum())
                .collect();
            // z W_O: [d]
            let y: Vec<f64> = (0..d)
                .map(|r| (0..d_k).map(|c| z[c] * w_o[head * d_k + c][r]).sum())
                .collect();
            for (j, x) in row.iter_mut().enumerate() {
                *x = (0..d).map(|r| y[r] * w_u[r][j]).sum();
            }
        }
        out
    }

    fn small(vocab_size: usize, tied: bool, padded: bool) -> Gpt {
        let device = Device::flex();
        device.seed(5);
        let config = GptConfig {
            vocab_size,
            block_size: 8,
            d_model: 12,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: Some(2),
            tie_embeddings: tied,
            padded_vocab_size: padded.then_some(16),
            ..GptConfig::default()
        };
        Gpt::new(&config, &device).unwrap()
    }

    /// Copying score and top-1 accuracy of every head against its whole `V x V` circuit
    /// multiplied out in f64 and solved as it is (`V` eigenvalues, `V - d_k` of them zero), on
    /// a tied model, an untied one and one whose vocabulary is padded.
    #[test]
    fn raw_circuits_match_the_whole_product() {
        for (tied, padded) in [(true, false), (false, false), (false, true)] {
            let model = small(11, tied, padded);
            let ours = ov_circuits(&model, Weights::Raw);
            assert_eq!(ours.len(), 8);
            for c in &ours {
                let full = full_circuit(&model, c.layer, c.head);
                let v = full.len();
                let flat: Vec<f64> = full.iter().flatten().copied().collect();
                let eig = DMatrix::from_row_slice(v, v, &flat).complex_eigenvalues();
                let re: f64 = eig.iter().map(|z| z.re).sum();
                let abs: f64 = eig.iter().map(|z| z.norm()).sum();
                let want = re / abs;
                assert!(
                    (c.copying - want).abs() < 1e-9,
                    "tied {tied} padded {padded} {}.{}: {} vs {want}",
                    c.layer,
                    c.head,
                    c.copying
                );
                let hits = full
                    .iter()
                    .enumerate()
                    .filter(|(i, row)| row.iter().all(|x| *x <= row[*i]))
                    .count();
                assert_eq!(c.top1, hits as f64 / v as f64, "{}.{}", c.layer, c.head);
                assert_eq!(c.eigenvalues.len(), 3);
            }
        }
    }

    /// A head whose OV circuit is `W_E W_E^T` (it writes back the token it reads, through a
    /// tied unembedding) copies: score 1 and every token its own top logit when the embeddings
    /// are orthogonal; the same head with `W_O` negated suppresses: score -1, no token on top.
    #[test]
    fn a_copying_head_scores_one_and_a_suppressor_minus_one() {
        let d = 4;
        let e = DMatrix::<f64>::identity(d, d);
        let m = Matrices {
            w_e: e.clone(),
            w_u: e.clone(),
            heads: vec![
                HeadOv {
                    layer: 0,
                    head: 0,
                    w_v: e.clone(),
                    w_o: e.clone(),
                },
                HeadOv {
                    layer: 0,
                    head: 1,
                    w_v: e.clone(),
                    w_o: -e.clone(),
                },
            ],
        };
        let unembed_embed = &m.w_u * &m.w_e;
        let rows = top1_rows(d);
        let [copier, suppressor] = [&m.heads[0], &m.heads[1]].map(|h| {
            (
                copying_of(&spectrum(h, &unembed_embed)),
                top1(h, &m.w_e, &m.w_u, &rows),
            )
        });
        assert_eq!(copier, (1.0, 1.0));
        assert_eq!(suppressor, (-1.0, 0.0));
        // A head that writes nothing has no copying score.
        assert!(copying_of(&[(0.0, 0.0); 3]).is_nan());
    }

    /// Every head's eigenvalues, copying score and top-1 accuracy against TransformerLens
    /// 4.3's `(W_E @ OV @ W_U).eigenvalues` on two exported models, with the raw weights and
    /// after `enable_compatibility_mode()` (tests/fixtures/exports/tl-ov.json, made by
    /// tools/tl-ov.py). TransformerLens solves in f32: 1e-4 is far below the gaps between
    /// heads' scores.
    #[test]
    fn circuits_match_transformer_lens_raw_and_folded() {
        for (name, _, model, tl) in crate::tl_fixtures::each("tl-ov.json") {
            for (key, weights) in [("raw", Weights::Raw), ("folded", Weights::Folded)] {
                let ours = ov_circuits(&model, weights);
                let theirs = tl[key].as_array().unwrap();
                assert_eq!(ours.len(), theirs.len(), "{name}");
                for (c, t) in ours.iter().zip(theirs) {
                    let at = format!("{name} {key} {}.{}", c.layer, c.head);
                    assert_eq!(t["layer"].as_u64().unwrap() as usize, c.layer);
                    assert_eq!(t["head"].as_u64().unwrap() as usize, c.head);
                    let copying = t["copying"].as_f64().unwrap();
                    assert!(
                        (c.copying - copying).abs() < 1e-4,
                        "{at}: copying {} vs TransformerLens {copying}",
                        c.copying
                    );
                    assert_eq!(c.top1, t["top1"].as_f64().unwrap(), "{at}");
                    let mut ours: Vec<(f64, f64)> = c.eigenvalues.clone();
                    ours.sort_by(|a, b| a.partial_cmp(b).unwrap());
                    let theirs = t["eigenvalues"].as_array().unwrap();
                    let scale = ours.iter().map(|z| z.0.hypot(z.1)).fold(0.0, f64::max);
                    for (z, w) in ours.iter().zip(theirs) {
                        let w = (w[0].as_f64().unwrap(), w[1].as_f64().unwrap());
                        assert!(
                            (z.0 - w.0).hypot(z.1 - w.1) < 1e-4 * scale,
                            "{at}: eigenvalue {z:?} vs TransformerLens {w:?}"
                        );
                    }
                }
            }
        }
    }

    /// Only the folding differs between the two conventions: on a freshly made model, whose
    /// LayerNorm weights are all 1, folding is centring alone, and the circuit's diagonal
    /// top-1 accuracy does not move under a per-row shift of the logits.
    #[test]
    fn the_cheap_scores_are_the_folded_ones() {
        let model = small(13, false, false);
        let full: Vec<f64> = ov_circuits(&model, Weights::Folded)
            .iter()
            .map(|c| c.copying)
            .collect();
        assert_eq!(copying_scores(&model), full);
    }
}

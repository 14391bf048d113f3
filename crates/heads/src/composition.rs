//! Composition scores (Elhage et al. 2021, "A Mathematical Framework for Transformer
//! Circuits"): how much a later head's query (Q), key (K) or value (V) side reads what an
//! earlier head writes, from the weights alone.
//!
//! With residual vectors as rows, head A writes `x W_V^A W_O^A` (its OV matrix, `d x d`) and
//! head B compares `x_q W_Q^B (x_k W_K^B)^T` (its QK matrix `W_Q^B W_K^B^T`). The score of a
//! pair is `||W_A W_B||_F / (||W_A||_F ||W_B||_F)` with `W_A = OV^A` and `W_B` = `QK^B`
//! (Q-composition), `QK^B^T` (K-composition) or `OV^B` (V-composition), as TransformerLens's
//! `all_composition_scores` computes it: raw weights, biases and LayerNorms left out. Induction
//! heads are the textbook case: their keys read the previous-token head's output
//! (K-composition).
//!
//! The products are never formed: each matrix is a product of two thin factors (`d x d_k`
//! and `d_k x d`), so every norm is a trace of small Gram matrices, `O(d d_k^2)` a pair.

use burn::tensor::Tensor;
use headlab_kernels::to_host;
use headlab_model::Gpt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Which side of the later head reads the earlier head's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Mode {
    /// Its queries.
    Q,
    /// Its keys.
    K,
    /// Its values.
    V,
}

impl Mode {
    /// Q, K, V.
    pub const ALL: [Mode; 3] = [Mode::Q, Mode::K, Mode::V];

    /// `Q`, `K` or `V`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Q => "Q",
            Mode::K => "K",
            Mode::V => "V",
        }
    }
}

/// One head's four weight matrices in f64, row-major: `w_q`, `w_k`, `w_v` are `[d, d_k]`,
/// `w_o` is `[d_k, d]`.
#[derive(Debug, Clone)]
pub struct HeadWeights {
    /// Block index.
    pub layer: usize,
    /// Head index within the block.
    pub head: usize,
    pub w_q: Vec<f64>,
    pub w_k: Vec<f64>,
    pub w_v: Vec<f64>,
    pub w_o: Vec<f64>,
}

/// One pair's score.
#[derive(Debug, Clone, Serialize)]
pub struct Composition {
    /// Which side of the later head.
    pub mode: Mode,
    /// The earlier head (layer, head), which writes.
    pub from: (usize, usize),
    /// The later head (layer, head), which reads.
    pub to: (usize, usize),
    /// `||W_A W_B||_F / (||W_A||_F ||W_B||_F)`, in [0, 1].
    pub score: f64,
}

/// Every head's weights (a key/value head shared by several query heads, as with
/// `n_kv_heads`, is given to each of them).
pub fn head_weights(model: &Gpt) -> Vec<HeadWeights> {
    let d = model.config.d_model;
    let d_k = model.config.d_k();
    let mut out = Vec::new();
    for (layer, block) in model.blocks.iter().enumerate() {
        let attn = &block.attn;
        let host = |t: Tensor<2>| -> Vec<f64> {
            to_host::<f32, _>(t).into_iter().map(f64::from).collect()
        };
        let (q, k, v, o) = (
            host(attn.q_proj.weight.val()),
            host(attn.k_proj.weight.val()),
            host(attn.v_proj.weight.val()),
            host(attn.o_proj.weight.val()),
        );
        let (q_cols, kv_cols) = (attn.n_heads * d_k, attn.n_kv_heads * d_k);
        // Columns `c..c + d_k` of a `[d, cols]` matrix.
        let columns = |m: &[f64], cols: usize, c: usize| -> Vec<f64> {
            (0..d)
                .flat_map(|r| m[r * cols + c..r * cols + c + d_k].iter().copied())
                .collect()
        };
        let group = attn.n_heads / attn.n_kv_heads;
        for head in 0..attn.n_heads {
            let kv = head / group;
            out.push(HeadWeights {
                layer,
                head,
                w_q: columns(&q, q_cols, head * d_k),
                w_k: columns(&k, kv_cols, kv * d_k),
                w_v: columns(&v, kv_cols, kv * d_k),
                // Rows `head * d_k..` of W_O `[n_heads * d_k, d]`.
                w_o: o[head * d_k * d..(head + 1) * d_k * d].to_vec(),
            });
        }
    }
    out
}

/// `a^T b` for `a [n, p]`, `b [n, q]`, row-major: `[p, q]`.
fn at_b(a: &[f64], b: &[f64], n: usize, p: usize, q: usize) -> Vec<f64> {
    let mut out = vec![0.0; p * q];
    for r in 0..n {
        for i in 0..p {
            let x = a[r * p + i];
            for j in 0..q {
                out[i * q + j] += x * b[r * q + j];
            }
        }
    }
    out
}

/// `a b` for `a [n, m]`, `b [m, q]`.
fn ab(a: &[f64], b: &[f64], n: usize, m: usize, q: usize) -> Vec<f64> {
    let mut out = vec![0.0; n * q];
    for i in 0..n {
        for k in 0..m {
            let x = a[i * m + k];
            for j in 0..q {
                out[i * q + j] += x * b[k * q + j];
            }
        }
    }
    out
}

/// `trace(a m b m^T)` for square `a`, `b` and `m` of side `k`.
fn trace_amb_mt(a: &[f64], m: &[f64], b: &[f64], k: usize) -> f64 {
    let am = ab(a, m, k, k, k);
    let amb = ab(&am, b, k, k, k);
    // trace(X m^T) = sum_ij X_ij m_ij
    amb.iter().zip(m).map(|(x, y)| x * y).sum()
}

/// A `d x d` matrix as two factors, `left [d, k] . right^T` with `right [d, k]`: OV is
/// `W_V . (W_O^T)^T`, QK is `W_Q . W_K^T`.
struct Factored<'a> {
    left: &'a [f64],
    right: &'a [f64],
}

impl Factored<'_> {
    /// Gram matrices `left^T left` and `right^T right`, `[k, k]`.
    fn grams(&self, d: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
        (
            at_b(self.left, self.left, d, k, k),
            at_b(self.right, self.right, d, k, k),
        )
    }
}

/// `||A B||_F / (||A||_F ||B||_F)` for `A = a.left a.right^T`, `B = b.left b.right^T`: with
/// `M = a.right^T b.left` (`[k, k]`), `||A B||^2 = trace(Ga_l M Gb_r M^T)`.
fn score(a: &Factored<'_>, b: &Factored<'_>, d: usize, k: usize) -> f64 {
    let (ga_l, ga_r) = a.grams(d, k);
    let (gb_l, gb_r) = b.grams(d, k);
    let identity: Vec<f64> = (0..k * k)
        .map(|i| if i / k == i % k { 1.0 } else { 0.0 })
        .collect();
    let norm2 = |g_l: &[f64], g_r: &[f64]| trace_amb_mt(g_l, &identity, g_r, k);
    let m = at_b(a.right, b.left, d, k, k);
    let product = trace_amb_mt(&ga_l, &m, &gb_r, k).max(0.0).sqrt();
    let (na, nb) = (norm2(&ga_l, &ga_r).sqrt(), norm2(&gb_l, &gb_r).sqrt());
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        product / (na * nb)
    }
}

/// `[k, d]` row-major as `[d, k]`.
fn transposed(m: &[f64], k: usize, d: usize) -> Vec<f64> {
    let mut out = vec![0.0; m.len()];
    for i in 0..k {
        for j in 0..d {
            out[j * k + i] = m[i * d + j];
        }
    }
    out
}

/// The score of `from` writing into `to`'s `mode` side (`d` the model width, `k` = d_k).
pub fn pair_score(from: &HeadWeights, to: &HeadWeights, mode: Mode, d: usize, k: usize) -> f64 {
    let o_from = transposed(&from.w_o, k, d);
    let ov = Factored {
        left: &from.w_v,
        right: &o_from,
    };
    let o_to = transposed(&to.w_o, k, d);
    let right = match mode {
        Mode::Q => Factored {
            left: &to.w_q,
            right: &to.w_k,
        },
        Mode::K => Factored {
            left: &to.w_k,
            right: &to.w_q,
        },
        Mode::V => Factored {
            left: &to.w_v,
            right: &o_to,
        },
    };
    score(&ov, &right, d, k)
}

/// Every pair of heads in different layers (earlier writes, later reads), in every mode:
/// modes Q, K, V in turn, then writer and reader in layer and head order.
pub fn composition_scores(model: &Gpt) -> Vec<Composition> {
    let (d, k) = (model.config.d_model, model.config.d_k());
    let heads = head_weights(model);
    let mut out = Vec::new();
    for mode in Mode::ALL {
        for a in &heads {
            for b in heads.iter().filter(|b| b.layer > a.layer) {
                out.push(Composition {
                    mode,
                    from: (a.layer, a.head),
                    to: (b.layer, b.head),
                    score: pair_score(a, b, mode, d, k),
                });
            }
        }
    }
    out
}

/// What a pair of random heads of the same shapes scores, per mode (Q, K, V): the mean over
/// `draws` pairs whose entries are independent standard normals. A score well above it is a
/// pair whose weights line up; the score of random matrices does not depend on their scale.
pub fn random_baseline(d: usize, k: usize, draws: usize, seed: u64) -> [f64; 3] {
    let mut rng = StdRng::seed_from_u64(seed);
    // Box-Muller: standard normals from uniform pairs.
    let mut normal = |n: usize| -> Vec<f64> {
        (0..n)
            .map(|_| {
                let (u, v): (f64, f64) = (rng.random::<f64>().max(1e-300), rng.random());
                (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
            })
            .collect()
    };
    let mut head = |layer| HeadWeights {
        layer,
        head: 0,
        w_q: normal(d * k),
        w_k: normal(d * k),
        w_v: normal(d * k),
        w_o: normal(k * d),
    };
    let mut sums = [0.0; 3];
    for _ in 0..draws.max(1) {
        let (a, b) = (head(0), head(1));
        for (i, mode) in Mode::ALL.into_iter().enumerate() {
            sums[i] += pair_score(&a, &b, mode, d, k);
        }
    }
    sums.map(|s| s / draws.max(1) as f64)
}

/// Draws of random head pairs behind [`CompositionTable::baseline`].
pub const BASELINE_DRAWS: usize = 20;

/// A model's composition scores with the random baseline of its shapes.
#[derive(Debug, Clone, Serialize)]
pub struct CompositionTable {
    /// Every pair in every mode ([`composition_scores`]).
    pub scores: Vec<Composition>,
    /// What random heads of the same shapes score, per mode Q, K, V ([`random_baseline`],
    /// [`BASELINE_DRAWS`] draws, seed 0).
    pub baseline: [f64; 3],
}

/// [`composition_scores`] and [`random_baseline`] of `model`.
pub fn composition_table(model: &Gpt) -> CompositionTable {
    let (d, k) = (model.config.d_model, model.config.d_k());
    CompositionTable {
        scores: composition_scores(model),
        baseline: random_baseline(d, k, BASELINE_DRAWS, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;
    use headlab_model::GptConfig;

    /// `[d, d]` products and Frobenius norms written out the plain way.
    fn full(a: &[f64], b: &[f64], d: usize, m: usize) -> Vec<f64> {
        let mut out = vec![0.0; d * d];
        for i in 0..d {
            for j in 0..d {
                out[i * d + j] = (0..m).map(|r| a[i * m + r] * b[r * d + j]).sum();
            }
        }
        out
    }

    fn frobenius(m: &[f64]) -> f64 {
        m.iter().map(|x| x * x).sum::<f64>().sqrt()
    }

    fn transpose(m: &[f64], rows: usize, cols: usize) -> Vec<f64> {
        (0..cols)
            .flat_map(|c| (0..rows).map(move |r| m[r * cols + c]))
            .collect()
    }

    /// Every score against the full `d x d` matrices multiplied and normed in f64, on a model
    /// with grouped key/value heads (each shared by two query heads).
    #[test]
    fn scores_match_full_matrix_products_and_norms() {
        let device = Device::flex();
        device.seed(11);
        let config = GptConfig {
            vocab_size: 9,
            block_size: 8,
            d_model: 12,
            n_layers: 3,
            n_heads: 4,
            n_kv_heads: Some(2),
            ..GptConfig::default()
        };
        let model = Gpt::new(&config, &device).unwrap();
        let (d, k) = (12, 3);
        let heads = head_weights(&model);
        assert_eq!(heads.len(), 12);
        // The key/value head of query heads 0 and 1 is the same.
        assert_eq!(heads[0].w_k, heads[1].w_k);
        assert_ne!(heads[0].w_k, heads[2].w_k);
        let scores = composition_scores(&model);
        // 3 modes x (4 x 8 + 4 x 4) pairs.
        assert_eq!(scores.len(), 3 * (4 * 8 + 4 * 4));
        for c in &scores {
            let a = &heads[c.from.0 * 4 + c.from.1];
            let b = &heads[c.to.0 * 4 + c.to.1];
            let ov_a = full(&a.w_v, &a.w_o, d, k);
            let w_b = match c.mode {
                Mode::Q => full(&b.w_q, &transpose(&b.w_k, d, k), d, k),
                Mode::K => full(&b.w_k, &transpose(&b.w_q, d, k), d, k),
                Mode::V => full(&b.w_v, &b.w_o, d, k),
            };
            let want = frobenius(&full(&ov_a, &w_b, d, d)) / (frobenius(&ov_a) * frobenius(&w_b));
            assert!(
                (c.score - want).abs() < 1e-12 * want.max(1.0),
                "{:?} {:?} -> {:?}: {} vs {want}",
                c.mode,
                c.from,
                c.to,
                c.score
            );
        }
    }

    /// A head that reads exactly what another writes scores 1 when both matrices have rank one
    /// along the same direction, and 0 when the writer's output is orthogonal to what the
    /// reader reads.
    #[test]
    fn aligned_heads_score_one_and_orthogonal_heads_zero() {
        let (d, k) = (4, 1);
        let e = |i: usize| -> Vec<f64> { (0..d).map(|j| f64::from(u8::from(i == j))).collect() };
        // A writes along e1 (W_O = e1^T); B's values read e1 or e2.
        let a = HeadWeights {
            layer: 0,
            head: 0,
            w_q: e(0),
            w_k: e(0),
            w_v: e(0),
            w_o: e(1),
        };
        let reads = |i| HeadWeights {
            layer: 1,
            head: 0,
            w_q: e(i),
            w_k: e(i),
            w_v: e(i),
            w_o: e(3),
        };
        for mode in Mode::ALL {
            assert!((pair_score(&a, &reads(1), mode, d, k) - 1.0).abs() < 1e-12);
            assert_eq!(pair_score(&a, &reads(2), mode, d, k), 0.0);
        }
    }

    /// Random heads score far below 1 (about 1/sqrt(d) for these shapes), whatever their
    /// scale, and Q and K alike (one is the other's transpose in distribution).
    #[test]
    fn the_random_baseline_is_scale_free_and_far_below_one() {
        let [q, k, v] = random_baseline(32, 16, 50, 1);
        for s in [q, k, v] {
            assert!(s > 0.05 && s < 0.5, "{s}");
        }
        // Q and K are the same distribution (a transpose of the reader's matrix).
        assert!((q - k).abs() < 0.05, "{q} {k}");
    }

    /// The scores of two exported models against TransformerLens 4.3's
    /// `all_composition_scores` on the same folders (tests/fixtures/exports/
    /// tl-composition.json, made by tools/tl-composition.py). TransformerLens works in f32 from
    /// an SVD of the factors; headlab in f64 from Gram matrices: 1e-5 is a few hundred f32
    /// roundings on scores of order 0.1, and far below the gaps between pairs' scores.
    #[test]
    fn scores_match_transformer_lens_on_exported_models() {
        for (name, _, model, tl) in crate::tl_fixtures::each("tl-composition.json") {
            let ours = composition_scores(&model);
            let theirs = tl["pairs"].as_array().unwrap();
            assert_eq!(ours.len(), theirs.len(), "{name}");
            for (c, t) in ours.iter().zip(theirs) {
                let at = |k: &str| -> (usize, usize) {
                    let v = t[k].as_array().unwrap();
                    (
                        v[0].as_u64().unwrap() as usize,
                        v[1].as_u64().unwrap() as usize,
                    )
                };
                assert_eq!(c.mode.name(), t["mode"].as_str().unwrap());
                assert_eq!((c.from, c.to), (at("from"), at("to")));
                let want = t["score"].as_f64().unwrap();
                assert!(
                    (c.score - want).abs() < 1e-5,
                    "{name} {:?} {:?} -> {:?}: {} vs TransformerLens {want}",
                    c.mode,
                    c.from,
                    c.to,
                    c.score
                );
            }
        }
    }
}

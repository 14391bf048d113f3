//! Flash attention on host memory: `softmax(scale * q k^T + causal mask) v` per head, blocked
//! over queries so no `[t_q, t_k]` matrix exists, only `[BLOCK_Q, t_k]` per thread.
//!
//! The forward keeps each row's log-sum-exp; the backward recomputes the probabilities from it
//! instead of storing them (FlashAttention, Dao et al. 2022, algorithm 2, one query block at a
//! time). Heads run in parallel on rayon's pool; each product is one single-threaded `gemm`.

use rayon::prelude::*;

use crate::gemm::{View, matmul};
use crate::simd::{self, Seen};

/// Query rows per block: `[BLOCK_Q, t_k]` floats of scratch per thread (2 MiB at t_k = 8192).
pub const BLOCK_Q: usize = 64;

/// Shapes of one call: `q [heads, t_q, d_k]`, `k, v [heads, t_k, d_k]`, contiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub heads: usize,
    pub t_q: usize,
    pub t_k: usize,
    pub d_k: usize,
}

impl Dims {
    /// Keys query `i` sees: with `causal`, the queries are the last `t_q` of `t_k` positions
    /// (a KV cache passes fewer queries than keys), so query `i` sees keys `0..=i + t_k - t_q`.
    fn visible(&self, i: usize, causal: bool) -> usize {
        if causal {
            (i + 1 + self.t_k - self.t_q).min(self.t_k)
        } else {
            self.t_k
        }
    }
}

impl Dims {
    /// The mask of the query block starting at `i0`, for [`simd`]'s row passes.
    fn seen(&self, i0: usize, causal: bool) -> Seen {
        Seen {
            first: self.visible(i0, causal),
            step: usize::from(causal),
        }
    }
}

/// Output `[heads, t_q, d_k]` and the log-sum-exp of each row's scaled scores `[heads, t_q]`.
///
/// # Panics
/// If a slice does not match `dims`, or `causal` with `t_q > t_k` (a query with no key).
pub fn forward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: Dims,
    scale: f32,
    causal: bool,
) -> (Vec<f32>, Vec<f32>) {
    check(q, k, v, dims, causal);
    let Dims {
        heads,
        t_q,
        t_k,
        d_k,
    } = dims;
    let mut out = vec![0.0f32; heads * t_q * d_k];
    let mut lse = vec![0.0f32; heads * t_q];
    if heads * t_q * d_k == 0 {
        return (out, lse);
    }
    out.par_chunks_mut(t_q * d_k)
        .zip(lse.par_chunks_mut(t_q))
        .enumerate()
        .for_each(|(h, (o_h, lse_h))| {
            let q_h = &q[h * t_q * d_k..][..t_q * d_k];
            let k_h = &k[h * t_k * d_k..][..t_k * d_k];
            let v_h = &v[h * t_k * d_k..][..t_k * d_k];
            let mut p = vec![0.0f32; BLOCK_Q.min(t_q) * t_k];
            for i0 in (0..t_q).step_by(BLOCK_Q) {
                let m = BLOCK_Q.min(t_q - i0);
                let n = dims.visible(i0 + m - 1, causal);
                let p = &mut p[..m * n];
                // [m, d_k] x [d_k, n] -> [m, n]
                let q_blk = View::rows(&q_h[i0 * d_k..], m, d_k);
                matmul(p, q_blk, View::rows_t(k_h, n, d_k), scale, false);
                let seen = dims.seen(i0, causal);
                simd::softmax_rows(p, n, seen, &mut lse_h[i0..i0 + m]);
                // [m, n] x [n, d_k] -> [m, d_k]
                let o_blk = &mut o_h[i0 * d_k..][..m * d_k];
                matmul(
                    o_blk,
                    View::rows(p, m, n),
                    View::rows(v_h, n, d_k),
                    1.0,
                    false,
                );
            }
        });
    (out, lse)
}

/// Gradients `(dq, dk, dv)` of `sum(d_out * forward(q, k, v))`, from the forward's `out` and
/// `lse`.
///
/// # Panics
/// As [`forward`], or if `out`, `lse` or `d_out` do not match `dims`.
pub fn backward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &[f32],
    lse: &[f32],
    d_out: &[f32],
    dims: Dims,
    scale: f32,
    causal: bool,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    check(q, k, v, dims, causal);
    let Dims {
        heads,
        t_q,
        t_k,
        d_k,
    } = dims;
    assert_eq!(out.len(), q.len(), "backward: out does not match q");
    assert_eq!(d_out.len(), q.len(), "backward: d_out does not match q");
    assert_eq!(lse.len(), heads * t_q, "backward: lse is not [heads, t_q]");
    let mut dq = vec![0.0f32; q.len()];
    let mut dk = vec![0.0f32; k.len()];
    let mut dv = vec![0.0f32; v.len()];
    if heads * t_q * d_k == 0 {
        return (dq, dk, dv);
    }
    dq.par_chunks_mut(t_q * d_k)
        .zip(dk.par_chunks_mut(t_k * d_k))
        .zip(dv.par_chunks_mut(t_k * d_k))
        .enumerate()
        .for_each(|(h, ((dq_h, dk_h), dv_h))| {
            let q_h = &q[h * t_q * d_k..][..t_q * d_k];
            let o_h = &out[h * t_q * d_k..][..t_q * d_k];
            let do_h = &d_out[h * t_q * d_k..][..t_q * d_k];
            let lse_h = &lse[h * t_q..][..t_q];
            let k_h = &k[h * t_k * d_k..][..t_k * d_k];
            let v_h = &v[h * t_k * d_k..][..t_k * d_k];
            let mut p = vec![0.0f32; BLOCK_Q.min(t_q) * t_k];
            let mut dp = vec![0.0f32; BLOCK_Q.min(t_q) * t_k];
            for i0 in (0..t_q).step_by(BLOCK_Q) {
                let m = BLOCK_Q.min(t_q - i0);
                let n = dims.visible(i0 + m - 1, causal);
                let (p, dp) = (&mut p[..m * n], &mut dp[..m * n]);
                let q_blk = View::rows(&q_h[i0 * d_k..], m, d_k);
                let do_blk = View::rows(&do_h[i0 * d_k..], m, d_k);
                // Recompute P = exp(scale * q k^T - lse): [m, d_k] x [d_k, n] -> [m, n]
                matmul(p, q_blk, View::rows_t(k_h, n, d_k), scale, false);
                simd::exp_rows(p, n, dims.seen(i0, causal), &lse_h[i0..i0 + m]);
                // dV[..n] += P^T dO: [n, m] x [m, d_k]
                matmul(
                    &mut dv_h[..n * d_k],
                    View::rows_t(p, m, n),
                    do_blk,
                    1.0,
                    true,
                );
                // dP = dO V^T: [m, d_k] x [d_k, n] -> [m, n]
                matmul(dp, do_blk, View::rows_t(v_h, n, d_k), 1.0, false);
                // dS = P * (dP - rowsum(dO * O)) * scale, written over P
                let (do_rows, o_rows) = (&do_h[i0 * d_k..][..m * d_k], &o_h[i0 * d_k..][..m * d_k]);
                simd::softmax_backward_rows(p, dp, n, do_rows, o_rows, d_k, scale);
                // dQ[blk] = dS K: [m, n] x [n, d_k]
                let dq_blk = &mut dq_h[i0 * d_k..][..m * d_k];
                matmul(
                    dq_blk,
                    View::rows(p, m, n),
                    View::rows(k_h, n, d_k),
                    1.0,
                    false,
                );
                // dK[..n] += dS^T Q[blk]: [n, m] x [m, d_k]
                matmul(
                    &mut dk_h[..n * d_k],
                    View::rows_t(p, m, n),
                    q_blk,
                    1.0,
                    true,
                );
            }
        });
    (dq, dk, dv)
}

fn check(q: &[f32], k: &[f32], v: &[f32], dims: Dims, causal: bool) {
    let Dims {
        heads,
        t_q,
        t_k,
        d_k,
    } = dims;
    assert_eq!(q.len(), heads * t_q * d_k, "q is not [heads, t_q, d_k]");
    assert_eq!(k.len(), heads * t_k * d_k, "k is not [heads, t_k, d_k]");
    assert_eq!(v.len(), heads * t_k * d_k, "v is not [heads, t_k, d_k]");
    assert!(
        !causal || t_q <= t_k,
        "causal attention needs t_q <= t_k, got t_q {t_q}, t_k {t_k}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn random(n: usize, rng: &mut StdRng) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.5f32..1.5)).collect()
    }

    /// Per head, per query: scores, softmax and the weighted sum in f64, one element at a time.
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        dims: Dims,
        scale: f64,
        causal: bool,
    ) -> Vec<f64> {
        let Dims {
            heads,
            t_q,
            t_k,
            d_k,
        } = dims;
        let mut out = vec![0.0f64; heads * t_q * d_k];
        for h in 0..heads {
            for i in 0..t_q {
                let seen = if causal { i + 1 + t_k - t_q } else { t_k };
                let scores: Vec<f64> = (0..seen)
                    .map(|j| {
                        (0..d_k)
                            .map(|c| {
                                q[(h * t_q + i) * d_k + c] as f64
                                    * k[(h * t_k + j) * d_k + c] as f64
                            })
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|s| (s - max).exp()).sum();
                for (j, s) in scores.iter().enumerate() {
                    let w = (s - max).exp() / z;
                    for c in 0..d_k {
                        out[(h * t_q + i) * d_k + c] += w * v[(h * t_k + j) * d_k + c] as f64;
                    }
                }
            }
        }
        out
    }

    fn loss(out: &[f64], d_out: &[f32]) -> f64 {
        out.iter().zip(d_out).map(|(o, g)| o * *g as f64).sum()
    }

    /// Forward against f64 across block edges: t below, at and above BLOCK_Q, t not a
    /// multiple of it, fewer queries than keys, causal and not.
    #[test]
    fn forward_matches_f64_reference() {
        let mut rng = StdRng::seed_from_u64(7);
        for (t_q, t_k, d_k, causal) in [
            (1, 1, 4, true),
            (5, 5, 3, true),
            (64, 64, 8, true),
            (65, 65, 8, true),
            (130, 130, 16, true),
            (3, 70, 8, true),
            (70, 90, 8, false),
        ] {
            let dims = Dims {
                heads: 3,
                t_q,
                t_k,
                d_k,
            };
            let q = random(3 * t_q * d_k, &mut rng);
            let k = random(3 * t_k * d_k, &mut rng);
            let v = random(3 * t_k * d_k, &mut rng);
            let scale = 1.0 / (d_k as f32).sqrt();
            let (out, lse) = forward(&q, &k, &v, dims, scale, causal);
            let want = reference(&q, &k, &v, dims, scale as f64, causal);
            for (o, w) in out.iter().zip(&want) {
                assert!(
                    (*o as f64 - w).abs() < 2e-5,
                    "{dims:?} causal {causal}: {o} vs {w}"
                );
            }
            assert!(lse.iter().all(|l| l.is_finite()));
        }
    }

    /// Backward against central finite differences of the f64 reference, for every input
    /// element of a small problem that spans two query blocks.
    #[test]
    fn backward_matches_finite_differences() {
        let mut rng = StdRng::seed_from_u64(11);
        for (t_q, t_k, causal) in [(67, 67, true), (5, 9, true), (6, 7, false)] {
            let d_k = 3;
            let dims = Dims {
                heads: 2,
                t_q,
                t_k,
                d_k,
            };
            let q = random(2 * t_q * d_k, &mut rng);
            let k = random(2 * t_k * d_k, &mut rng);
            let v = random(2 * t_k * d_k, &mut rng);
            let d_out = random(2 * t_q * d_k, &mut rng);
            let scale = 0.7f32;
            let (out, lse) = forward(&q, &k, &v, dims, scale, causal);
            let (dq, dk, dv) = backward(&q, &k, &v, &out, &lse, &d_out, dims, scale, causal);
            let eps = 1e-3f32;
            let numeric = |which: usize, idx: usize| {
                let mut inputs = [q.clone(), k.clone(), v.clone()];
                inputs[which][idx] += eps;
                let up = loss(
                    &reference(
                        &inputs[0],
                        &inputs[1],
                        &inputs[2],
                        dims,
                        scale as f64,
                        causal,
                    ),
                    &d_out,
                );
                inputs[which][idx] -= 2.0 * eps;
                let down = loss(
                    &reference(
                        &inputs[0],
                        &inputs[1],
                        &inputs[2],
                        dims,
                        scale as f64,
                        causal,
                    ),
                    &d_out,
                );
                (up - down) / (2.0 * eps as f64)
            };
            // Every element for the small cases, a stride through the large one.
            let step = if t_q > 60 { 7 } else { 1 };
            for (which, grad) in [&dq, &dk, &dv].into_iter().enumerate() {
                for idx in (0..grad.len()).step_by(step) {
                    let want = numeric(which, idx);
                    assert!(
                        (grad[idx] as f64 - want).abs() < 2e-3 * (1.0 + want.abs()),
                        "{dims:?} input {which} element {idx}: {} vs {want}",
                        grad[idx]
                    );
                }
            }
        }
    }

    #[test]
    fn causal_with_more_queries_than_keys_is_refused() {
        let dims = Dims {
            heads: 1,
            t_q: 3,
            t_k: 2,
            d_k: 1,
        };
        let r =
            std::panic::catch_unwind(|| forward(&[0.0; 3], &[0.0; 2], &[0.0; 2], dims, 1.0, true));
        assert!(r.is_err());
    }
}

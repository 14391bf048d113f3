//! Flash attention on host memory: `softmax(scale * q k^T + causal mask) v` per head, blocked
//! over queries so no `[t_q, t_k]` matrix exists, only `[BLOCK_Q, t_k]` per thread.
//!
//! The forward keeps each row's log-sum-exp; the backward recomputes the probabilities from it
//! instead of storing them (FlashAttention, Dao et al. 2022, algorithm 2, one query block at a
//! time). Each product is one single-threaded `gemm` on strided views, so the heads can be
//! read where they are: `[b, h, t, d_k]` ([`HeadLayout::HeadsFirst`]) or the projection's own
//! `[b, t, h, d_k]` ([`HeadLayout::HeadsLast`], no transposes). Work runs on rayon's pool:
//! per head with heads first; with heads last, per query block in the forward and per
//! sequence in the backward (whose key gradients add up over the blocks).
//!
//! With a dropout [`Mask`] the probabilities are masked after the softmax (the log-sum-exp is
//! the unmasked one), element `(b, h, i, j)` by index `((b h_n + h) t_q + i) t_k + j` whatever
//! the layout; the backward draws the same mask again, so dropout keeps this path too. The
//! row sums `D = rowsum(dO * O)` stay as they are: `O` is the masked output.

use rayon::prelude::*;

use crate::dropout::Mask;
use crate::gemm::{View, matmul};
use crate::simd::{self, Seen};
use crate::uninit::zeroed;

/// Query rows per block: `[BLOCK_Q, t_k]` floats of scratch per thread (2 MiB at t_k = 8192).
pub const BLOCK_Q: usize = 64;

/// Where each head's rows are in `q`, `k`, `v` and the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadLayout {
    /// `[b, h, t, d_k]`: each head's rows contiguous.
    HeadsFirst,
    /// `[b, t, h, d_k]`: a position's heads side by side, as the Q/K/V projections make them.
    HeadsLast,
}

/// Shapes of one call: `q [b, h, t_q, d_k]` and `k, v [b, h, t_k, d_k]` (or heads last).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub batch: usize,
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

    /// The mask of the query block starting at `i0`, for [`simd`]'s row passes.
    fn seen(&self, i0: usize, causal: bool) -> Seen {
        Seen {
            first: self.visible(i0, causal),
            step: usize::from(causal),
        }
    }

    /// The dropout index of head `h` of sequence `b`'s query `i`, key 0 (module docs).
    fn mask_row(&self, b: usize, h: usize, i: usize) -> usize {
        ((b * self.heads + h) * self.t_q + i) * self.t_k
    }

    /// Distance between consecutive rows of one head.
    fn row_stride(&self, layout: HeadLayout) -> usize {
        match layout {
            HeadLayout::HeadsFirst => self.d_k,
            HeadLayout::HeadsLast => self.heads * self.d_k,
        }
    }

    /// Where head `h`'s first row is within one sequence's `t` rows of all heads.
    fn head_offset(&self, layout: HeadLayout, h: usize, t: usize) -> usize {
        match layout {
            HeadLayout::HeadsFirst => h * t * self.d_k,
            HeadLayout::HeadsLast => h * self.d_k,
        }
    }

    /// Head `h` of sequence `b` in `x`, which holds `t` rows per head.
    fn head<'a>(&self, x: &'a [f32], layout: HeadLayout, b: usize, h: usize, t: usize) -> Head<'a> {
        Head {
            data: &x[b * self.heads * t * self.d_k + self.head_offset(layout, h, t)..],
            rs: self.row_stride(layout),
            d_k: self.d_k,
        }
    }
}

/// One head of one sequence: rows `i` at `data[off + i * rs .. + d_k]`.
#[derive(Clone, Copy)]
struct Head<'a> {
    data: &'a [f32],
    rs: usize,
    d_k: usize,
}

impl<'a> Head<'a> {
    /// Rows `i0 .. i0 + m` as a matrix.
    fn rows(self, i0: usize, m: usize) -> View<'a> {
        View {
            data: &self.data[i0 * self.rs..],
            rows: m,
            cols: self.d_k,
            rs: self.rs,
            cs: 1,
        }
    }

    /// Rows `0 .. n`, transposed: `[d_k, n]`.
    fn rows_t(self, n: usize) -> View<'a> {
        View {
            data: self.data,
            rows: self.d_k,
            cols: n,
            rs: 1,
            cs: self.rs,
        }
    }

    fn row(self, i: usize) -> &'a [f32] {
        &self.data[i * self.rs..][..self.d_k]
    }
}

/// Output (in `layout`) and the log-sum-exp of each row's scaled scores (`[b, h, t_q]` heads
/// first, `[b, t_q, h]` heads last).
///
/// One function on purpose: the blocked forward in the algorithm's order (module docs), so it
/// reads against the paper step by step.
///
/// # Panics
/// If a slice does not match `dims`, or `causal` with `t_q > t_k` (a query with no key).
// Over 80 lines on purpose: one blocked loop nest, the forward of `backward` below; kept whole for the same reason.
pub fn forward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: Dims,
    layout: HeadLayout,
    scale: f32,
    causal: bool,
    drop: Option<Mask>,
) -> (Vec<f32>, Vec<f32>) {
    check(q, k, v, dims, causal);
    let Dims {
        batch,
        heads,
        t_q,
        t_k,
        d_k,
    } = dims;
    let mut out = vec![0.0f32; batch * heads * t_q * d_k];
    let mut lse = vec![0.0f32; batch * heads * t_q];
    if out.is_empty() {
        return (out, lse);
    }
    let rs = dims.row_stride(layout);
    let seq_q = heads * t_q * d_k;
    // Rows i0 .. i0 + m of head h of sequence b, written to `o` (head h's row i0 first, stride
    // rs) and `lse` (stride lse_rs).
    let block = |b: usize,
                 h: usize,
                 i0: usize,
                 m: usize,
                 o: &mut [f32],
                 lse: &mut [f32],
                 lse_rs: usize,
                 p: &mut Vec<f32>| {
        let (q_h, k_h, v_h) = (
            dims.head(q, layout, b, h, t_q),
            dims.head(k, layout, b, h, t_k),
            dims.head(v, layout, b, h, t_k),
        );
        let n = dims.visible(i0 + m - 1, causal);
        p.resize(m * n, 0.0);
        // [m, d_k] x [d_k, n] -> [m, n]
        matmul(p, n, q_h.rows(i0, m), k_h.rows_t(n), scale, false);
        let mut row_lse = [0.0f32; BLOCK_Q];
        simd::softmax_rows(p, n, dims.seen(i0, causal), &mut row_lse[..m]);
        for (r, l) in row_lse[..m].iter().enumerate() {
            lse[r * lse_rs] = *l;
        }
        if let Some(mask) = drop {
            for (r, row) in p.chunks_mut(n).enumerate() {
                let at = dims.mask_row(b, h, i0 + r);
                row.iter_mut()
                    .enumerate()
                    .for_each(|(j, p)| *p *= mask.factor(at + j));
            }
        }
        // [m, n] x [n, d_k] -> [m, d_k]
        matmul(o, rs, View::rows(p, m, n), v_h.rows(0, n), 1.0, false);
    };
    let one_head = |bh: usize, o_h: &mut [f32], lse_h: &mut [f32]| {
        let mut p = Vec::new();
        for i0 in (0..t_q).step_by(BLOCK_Q) {
            let m = BLOCK_Q.min(t_q - i0);
            let (o, lse) = (&mut o_h[i0 * d_k..], &mut lse_h[i0..]);
            block(bh / heads, bh % heads, i0, m, o, lse, 1, &mut p);
        }
    };
    // Scores to compute: below this, waking rayon's pool costs more than the work (decoding
    // one token with a KV cache is b * h * t_k * d_k).
    let small = batch * heads * t_q * t_k * d_k < 1 << 17;
    match layout {
        HeadLayout::HeadsFirst if small => out
            .chunks_mut(t_q * d_k)
            .zip(lse.chunks_mut(t_q))
            .enumerate()
            .for_each(|(bh, (o_h, lse_h))| one_head(bh, o_h, lse_h)),
        HeadLayout::HeadsFirst => {
            // One task per head: its rows and log-sum-exps are contiguous.
            out.par_chunks_mut(t_q * d_k)
                .zip(lse.par_chunks_mut(t_q))
                .enumerate()
                .for_each(|(bh, (o_h, lse_h))| one_head(bh, o_h, lse_h));
        }
        HeadLayout::HeadsLast => {
            // One task per query block of a sequence: its rows of every head are contiguous.
            out.par_chunks_mut(seq_q)
                .zip(lse.par_chunks_mut(heads * t_q))
                .enumerate()
                .for_each(|(b, (o_b, lse_b))| {
                    o_b.par_chunks_mut(BLOCK_Q * heads * d_k)
                        .zip(lse_b.par_chunks_mut(BLOCK_Q * heads))
                        .enumerate()
                        .for_each(|(blk, (o_blk, lse_blk))| {
                            let (i0, mut p) = (blk * BLOCK_Q, Vec::new());
                            let m = BLOCK_Q.min(t_q - i0);
                            for h in 0..heads {
                                let o = &mut o_blk[h * d_k..];
                                block(b, h, i0, m, o, &mut lse_blk[h..], heads, &mut p);
                            }
                        });
                });
        }
    }
    (out, lse)
}

/// Gradients `(dq, dk, dv)` of `sum(d_out * forward(q, k, v))`, from the forward's `out` and
/// `lse`, all in `layout`.
///
/// One function on purpose, like [`forward`]: the recomputing backward in the algorithm's
/// order.
///
/// # Panics
/// As [`forward`], or if `out`, `lse` or `d_out` do not match `dims`.
// Over 80 lines on purpose: one blocked loop nest; split, the tiles' data flow between its loops would be harder to follow.
pub fn backward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &[f32],
    lse: &[f32],
    d_out: &[f32],
    dims: Dims,
    layout: HeadLayout,
    scale: f32,
    causal: bool,
    drop: Option<Mask>,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    check(q, k, v, dims, causal);
    let Dims {
        batch,
        heads,
        t_q,
        t_k,
        d_k,
    } = dims;
    assert_eq!(out.len(), q.len(), "backward: out does not match q");
    assert_eq!(d_out.len(), q.len(), "backward: d_out does not match q");
    assert_eq!(
        lse.len(),
        batch * heads * t_q,
        "backward: lse is not one per query row"
    );
    if q.is_empty() {
        return (Vec::new(), vec![0.0; k.len()], vec![0.0; v.len()]);
    }
    let rs = dims.row_stride(layout);
    let (seq_q, seq_k) = (heads * t_q * d_k, heads * t_k * d_k);
    let lse_at = |b: usize, h: usize, i: usize| match layout {
        HeadLayout::HeadsFirst => lse[(b * heads + h) * t_q + i],
        HeadLayout::HeadsLast => lse[(b * t_q + i) * heads + h],
    };
    // All query blocks of head h of sequence b; `dq`, `dk`, `dv` start at the head's first row.
    let one_head = |b: usize, h: usize, dq: &mut [f32], dk: &mut [f32], dv: &mut [f32]| {
        let (q_h, o_h, do_h) = (
            dims.head(q, layout, b, h, t_q),
            dims.head(out, layout, b, h, t_q),
            dims.head(d_out, layout, b, h, t_q),
        );
        let (k_h, v_h) = (
            dims.head(k, layout, b, h, t_k),
            dims.head(v, layout, b, h, t_k),
        );
        let (mut p, mut dp, mut z) = (Vec::new(), Vec::new(), Vec::new());
        let (mut row_lse, mut row_d) = ([0.0f32; BLOCK_Q], [0.0f32; BLOCK_Q]);
        for i0 in (0..t_q).step_by(BLOCK_Q) {
            let m = BLOCK_Q.min(t_q - i0);
            let n = dims.visible(i0 + m - 1, causal);
            p.resize(m * n, 0.0);
            dp.resize(m * n, 0.0);
            let (q_blk, do_blk) = (q_h.rows(i0, m), do_h.rows(i0, m));
            for r in 0..m {
                row_lse[r] = lse_at(b, h, i0 + r);
                // D_i = rowsum(dO * O)
                row_d[r] = simd::dot(do_h.row(i0 + r), o_h.row(i0 + r));
            }
            // Recompute P = exp(scale * q k^T - lse): [m, d_k] x [d_k, n] -> [m, n]
            matmul(&mut p, n, q_blk, k_h.rows_t(n), scale, false);
            simd::exp_rows(&mut p, n, dims.seen(i0, causal), &row_lse[..m]);
            // dP = dO V^T: [m, d_k] x [d_k, n] -> [m, n]
            matmul(&mut dp, n, do_blk, v_h.rows_t(n), 1.0, false);
            if let Some(mask) = drop {
                // With dropout the output read Z = P * M: dV from Z, and dP through M; one
                // draw of M per element serves both.
                z.resize(m * n, 0.0);
                for r in 0..m {
                    let at = dims.mask_row(b, h, i0 + r);
                    for j in r * n..(r + 1) * n {
                        let f = mask.factor(at + j - r * n);
                        z[j] = p[j] * f;
                        dp[j] *= f;
                    }
                }
            }
            let read = if drop.is_some() { &z } else { &p };
            // dV[..n] += Z^T dO: [n, m] x [m, d_k]
            matmul(dv, rs, View::rows_t(read, m, n), do_blk, 1.0, true);
            // dS = P * (dP - D) * scale, written over P
            simd::softmax_backward_rows(&mut p, &dp, n, &row_d[..m], scale);
            // dQ[blk] = dS K: [m, n] x [n, d_k]
            matmul(
                &mut dq[i0 * rs..],
                rs,
                View::rows(&p, m, n),
                k_h.rows(0, n),
                1.0,
                false,
            );
            // dK[..n] += dS^T Q[blk]: [n, m] x [m, d_k]
            matmul(dk, rs, View::rows_t(&p, m, n), q_blk, 1.0, true);
        }
    };
    // dK and dV add up over query blocks, so they start at zero: each task zeroes its own
    // chunks of the three (uninit::zeroed), not one thread all of them before the tasks start.
    let ([dq, dk, dv], _) = match layout {
        HeadLayout::HeadsFirst => {
            let (head_q, head_k) = (t_q * d_k, t_k * d_k);
            let shapes = [(q.len(), head_q), (k.len(), head_k), (v.len(), head_k)];
            zeroed(shapes, |bh, [dq_h, dk_h, dv_h]| {
                one_head(bh / heads, bh % heads, dq_h, dk_h, dv_h)
            })
        }
        HeadLayout::HeadsLast => {
            // Per sequence: the heads' rows interleave.
            let shapes = [(q.len(), seq_q), (k.len(), seq_k), (v.len(), seq_k)];
            zeroed(shapes, |b, [dq_b, dk_b, dv_b]| {
                for h in 0..heads {
                    let o = h * d_k;
                    one_head(b, h, &mut dq_b[o..], &mut dk_b[o..], &mut dv_b[o..]);
                }
            })
        }
    };
    (dq, dk, dv)
}

fn check(q: &[f32], k: &[f32], v: &[f32], dims: Dims, causal: bool) {
    let Dims {
        batch,
        heads,
        t_q,
        t_k,
        d_k,
    } = dims;
    assert_eq!(
        q.len(),
        batch * heads * t_q * d_k,
        "q does not hold [b, h, t_q, d_k]"
    );
    assert_eq!(
        k.len(),
        batch * heads * t_k * d_k,
        "k does not hold [b, h, t_k, d_k]"
    );
    assert_eq!(
        v.len(),
        batch * heads * t_k * d_k,
        "v does not hold [b, h, t_k, d_k]"
    );
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

    /// `[b, h, t, d]` -> `[b, t, h, d]` (or back, with `back`).
    fn permute(x: &[f32], [b, h, t, d]: [usize; 4], back: bool) -> Vec<f32> {
        let mut out = vec![0.0; x.len()];
        for (bi, hi, ti, di) in (0..b).flat_map(|bi| {
            (0..h).flat_map(move |hi| {
                (0..t).flat_map(move |ti| (0..d).map(move |di| (bi, hi, ti, di)))
            })
        }) {
            let first = ((bi * h + hi) * t + ti) * d + di;
            let last = ((bi * t + ti) * h + hi) * d + di;
            if back {
                out[first] = x[last];
            } else {
                out[last] = x[first];
            }
        }
        out
    }

    /// Per head, per query: scores, softmax and the weighted sum in f64, one element at a time,
    /// heads first.
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        dims: Dims,
        scale: f64,
        causal: bool,
    ) -> Vec<f64> {
        let Dims {
            batch,
            heads,
            t_q,
            t_k,
            d_k,
        } = dims;
        let mut out = vec![0.0f64; batch * heads * t_q * d_k];
        for h in 0..batch * heads {
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

    /// Runs the kernel on heads-first data in either layout, results back in heads first.
    struct Case {
        dims: Dims,
        layout: HeadLayout,
    }

    impl Case {
        fn to(&self, x: &[f32], t: usize) -> Vec<f32> {
            let Dims {
                batch, heads, d_k, ..
            } = self.dims;
            match self.layout {
                HeadLayout::HeadsFirst => x.to_vec(),
                HeadLayout::HeadsLast => permute(x, [batch, heads, t, d_k], false),
            }
        }

        fn back(&self, x: &[f32], t: usize) -> Vec<f32> {
            let Dims {
                batch, heads, d_k, ..
            } = self.dims;
            match self.layout {
                HeadLayout::HeadsFirst => x.to_vec(),
                HeadLayout::HeadsLast => permute(x, [batch, heads, t, d_k], true),
            }
        }

        fn forward(
            &self,
            q: &[f32],
            k: &[f32],
            v: &[f32],
            scale: f32,
            causal: bool,
        ) -> (Vec<f32>, Vec<f32>) {
            let (t_q, t_k) = (self.dims.t_q, self.dims.t_k);
            let (out, lse) = forward(
                &self.to(q, t_q),
                &self.to(k, t_k),
                &self.to(v, t_k),
                self.dims,
                self.layout,
                scale,
                causal,
                None,
            );
            (self.back(&out, t_q), lse)
        }

        fn backward(
            &self,
            q: &[f32],
            k: &[f32],
            v: &[f32],
            d_out: &[f32],
            scale: f32,
            causal: bool,
        ) -> [Vec<f32>; 3] {
            let (t_q, t_k) = (self.dims.t_q, self.dims.t_k);
            let (q, k, v, d_out) = (
                self.to(q, t_q),
                self.to(k, t_k),
                self.to(v, t_k),
                self.to(d_out, t_q),
            );
            let (out, lse) = forward(&q, &k, &v, self.dims, self.layout, scale, causal, None);
            let (dq, dk, dv) = backward(
                &q,
                &k,
                &v,
                &out,
                &lse,
                &d_out,
                self.dims,
                self.layout,
                scale,
                causal,
                None,
            );
            [
                self.back(&dq, t_q),
                self.back(&dk, t_k),
                self.back(&dv, t_k),
            ]
        }
    }

    const LAYOUTS: [HeadLayout; 2] = [HeadLayout::HeadsFirst, HeadLayout::HeadsLast];

    /// Forward against f64 in both layouts, across block edges: t below, at and above BLOCK_Q,
    /// t not a multiple of it, fewer queries than keys, causal and not.
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
            for layout in LAYOUTS {
                let dims = Dims {
                    batch: 2,
                    heads: 3,
                    t_q,
                    t_k,
                    d_k,
                };
                let q = random(6 * t_q * d_k, &mut rng);
                let k = random(6 * t_k * d_k, &mut rng);
                let v = random(6 * t_k * d_k, &mut rng);
                let scale = 1.0 / (d_k as f32).sqrt();
                let (out, lse) = Case { dims, layout }.forward(&q, &k, &v, scale, causal);
                let want = reference(&q, &k, &v, dims, scale as f64, causal);
                for (o, w) in out.iter().zip(&want) {
                    assert!(
                        (*o as f64 - w).abs() < 2e-5,
                        "{dims:?} {layout:?} causal {causal}: {o} vs {w}"
                    );
                }
                assert!(lse.iter().all(|l| l.is_finite()));
            }
        }
    }

    /// Backward in both layouts against central finite differences of the f64 reference, for
    /// every input element of small problems and a stride through one spanning two query blocks.
    #[test]
    fn backward_matches_finite_differences() {
        let mut rng = StdRng::seed_from_u64(11);
        for (t_q, t_k, causal) in [(67, 67, true), (5, 9, true), (6, 7, false)] {
            for layout in LAYOUTS {
                let d_k = 3;
                let dims = Dims {
                    batch: 2,
                    heads: 2,
                    t_q,
                    t_k,
                    d_k,
                };
                let q = random(4 * t_q * d_k, &mut rng);
                let k = random(4 * t_k * d_k, &mut rng);
                let v = random(4 * t_k * d_k, &mut rng);
                let d_out = random(4 * t_q * d_k, &mut rng);
                let scale = 0.7f32;
                let grads = Case { dims, layout }.backward(&q, &k, &v, &d_out, scale, causal);
                let eps = 1e-3f32;
                let loss_of = |inputs: &[Vec<f32>; 3]| {
                    let out = reference(
                        &inputs[0],
                        &inputs[1],
                        &inputs[2],
                        dims,
                        scale as f64,
                        causal,
                    );
                    loss(&out, &d_out)
                };
                let numeric = |which: usize, idx: usize| {
                    let mut inputs = [q.clone(), k.clone(), v.clone()];
                    inputs[which][idx] += eps;
                    let up = loss_of(&inputs);
                    inputs[which][idx] -= 2.0 * eps;
                    (up - loss_of(&inputs)) / (2.0 * eps as f64)
                };
                let step = if t_q > 60 { 7 } else { 1 };
                for (which, grad) in grads.iter().enumerate() {
                    for idx in (0..grad.len()).step_by(step) {
                        let want = numeric(which, idx);
                        assert!(
                            (grad[idx] as f64 - want).abs() < 2e-3 * (1.0 + want.abs()),
                            "{dims:?} {layout:?} input {which} element {idx}: {} vs {want}",
                            grad[idx]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn causal_with_more_queries_than_keys_is_refused() {
        let dims = Dims {
            batch: 1,
            heads: 1,
            t_q: 3,
            t_k: 2,
            d_k: 1,
        };
        let r = std::panic::catch_unwind(|| {
            forward(
                &[0.0; 3],
                &[0.0; 2],
                &[0.0; 2],
                dims,
                HeadLayout::HeadsFirst,
                1.0,
                true,
                None,
            )
        });
        assert!(r.is_err());
    }
}

//! QK-norm and rotary positions on host memory: one pass over every head's query or key in
//! each direction, on the projections' `[b, t, h, d_k]` layout, rows shared over rayon's pool.
//! Burn's ops take a dozen single-threaded passes for the same (square, mean, sqrt, divide,
//! two slices, a negation, a concatenation, two products and a sum, each with its backward)
//! and compute the cos/sin tables again at every call: about 12% of the speedrun step's
//! thread on a Zen 4 (bench/NOTES.md, change 18).
//!
//! The rotation is the same f32 arithmetic as Burn's `x * cos + rotate_half(x) * sin`
//! (`y1 = x1 cos - x2 sin`, `y2 = x2 cos + x1 sin`), so RoPE alone gives the same bits either
//! way; the RMS norm sums its squares in another order than Burn's reduction, so QK-norm
//! differs in the last bits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::uninit::fresh;

/// Rows (one head at one position) per rayon task.
const ROWS_PER_TASK: usize = 128;

/// What to apply to each head's vector: the RMS norm first (`x / sqrt(mean(x^2) + epsilon)`,
/// no gain), then the rotation of positions `offset..` with frequencies `base^(-2c/d_k)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rotary {
    /// The RMS norm's epsilon; `None` leaves the norm out.
    pub rms_epsilon: Option<f64>,
    /// RoPE's frequency base; `None` leaves the rotation out.
    pub rope_base: Option<f64>,
    /// The position of the first row along `t`.
    pub offset: usize,
}

/// The input's shape, `[b, t, h, d_k]` row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub batch: usize,
    pub t: usize,
    pub heads: usize,
    pub d_k: usize,
}

/// `cos` and `sin` of the angles `p * base^(-2c/d_k)` for `c < d_k / 2`, rows of positions
/// `0..len`, computed in f64 and rounded once (as `rope_tables` in headlab-attention).
#[derive(Debug)]
struct Tables {
    len: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

/// The tables for `(d_k, base)` covering positions `..end`, made once and grown on demand
/// (to the next power of two, so a generation that steps one position at a time rebuilds
/// them a logarithmic number of times). A model's `end` is at most its `block_size`.
fn tables(d_k: usize, base: f64, end: usize) -> Arc<Tables> {
    /// By `d_k` and the base's bits.
    type Cache = HashMap<(usize, u64), Arc<Tables>>;
    static CACHE: Mutex<Option<Cache>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let map = cache.get_or_insert_with(HashMap::new);
    let key = (d_k, base.to_bits());
    if let Some(t) = map.get(&key)
        && t.len >= end
    {
        return t.clone();
    }
    let len = end.next_power_of_two();
    let half = d_k / 2;
    let (mut cos, mut sin) = (
        Vec::with_capacity(len * half),
        Vec::with_capacity(len * half),
    );
    for p in 0..len {
        for c in 0..half {
            let angle = p as f64 * base.powf(-2.0 * c as f64 / d_k as f64);
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    let t = Arc::new(Tables { len, cos, sin });
    map.insert(key, t.clone());
    t
}

/// What the backward needs: the normalised input and each row's `sqrt(mean(x^2) + eps)`
/// when the norm ran.
#[derive(Debug, Default)]
pub struct Saved {
    normed: Vec<f32>,
    scale: Vec<f32>,
}

/// The forward: `x [b, t, h, d_k]` row-major -> the same shape, and, with `save`, what the
/// backward needs (nothing is kept without it: evaluation and generation).
///
/// # Panics
/// If `x` is not `dims`, or `d_k` is odd with the rotation on.
pub fn forward(x: &[f32], dims: Dims, spec: Rotary, save: bool) -> (Vec<f32>, Saved) {
    let Dims { t, heads, d_k, .. } = dims;
    check(x.len(), dims, spec);
    let rope = spec
        .rope_base
        .map(|base| tables(d_k, base, spec.offset + t));
    let position = |row: usize| spec.offset + (row / heads) % t;
    let (chunk, rows) = (ROWS_PER_TASK * d_k, x.len() / d_k.max(1));
    let eps = spec.rms_epsilon.map(|eps| eps as f32);
    let rms = |x: &[f32], eps: f32| (crate::simd::dot(x, x) / d_k as f32 + eps).sqrt();
    if let (Some(eps), true) = (eps, save) {
        let shapes = [(x.len(), chunk), (x.len(), chunk), (rows, ROWS_PER_TASK)];
        let ([y, normed, scale], _) = fresh(shapes, |i, [y, normed, scale]| {
            let first = i * ROWS_PER_TASK;
            let x = &x[first * d_k..][..y.len()];
            let mut n = vec![0.0f32; d_k];
            let rows = x.chunks_exact(d_k).zip(y.chunks_exact_mut(d_k));
            let rows = rows.zip(normed.chunks_exact_mut(d_k)).zip(scale);
            for (r, (((x, y), saved), s)) in rows.enumerate() {
                let rms = rms(x, eps);
                s.write(rms);
                for ((n, saved), &x) in n.iter_mut().zip(saved).zip(x) {
                    *n = x / rms;
                    saved.write(*n);
                }
                rotate(&n, rope.as_deref(), position(first + r), false, |c, v| {
                    y[c].write(v);
                });
            }
        });
        return (y, Saved { normed, scale });
    }
    let ([y], _) = fresh([(x.len(), chunk)], |i, [y]| {
        let first = i * ROWS_PER_TASK;
        let x = &x[first * d_k..][..y.len()];
        let mut n = vec![0.0f32; if eps.is_some() { d_k } else { 0 }];
        for (r, (x, y)) in x.chunks_exact(d_k).zip(y.chunks_exact_mut(d_k)).enumerate() {
            let row = match eps {
                Some(eps) => {
                    let rms = rms(x, eps);
                    n.iter_mut().zip(x).for_each(|(n, &x)| *n = x / rms);
                    &n[..]
                }
                None => x,
            };
            rotate(row, rope.as_deref(), position(first + r), false, |c, v| {
                y[c].write(v);
            });
        }
    });
    (y, Saved::default())
}

/// The backward: `d_y [b, t, h, d_k]` -> `d_x`, from the forward's [`Saved`].
///
/// # Panics
/// If `d_y` is not `dims`, or `saved` is not the forward's for `spec`.
pub fn backward(d_y: &[f32], saved: &Saved, dims: Dims, spec: Rotary) -> Vec<f32> {
    let Dims { t, heads, d_k, .. } = dims;
    check(d_y.len(), dims, spec);
    let rope = spec
        .rope_base
        .map(|base| tables(d_k, base, spec.offset + t));
    let position = |row: usize| spec.offset + (row / heads) % t;
    let chunk = ROWS_PER_TASK * d_k;
    let norm = spec.rms_epsilon.is_some();
    assert!(
        !norm || (saved.normed.len() == d_y.len() && saved.scale.len() * d_k == d_y.len()),
        "rotary::backward: saved values are not the forward's"
    );
    let ([d_x], _) = fresh([(d_y.len(), chunk)], |i, [d_x]| {
        let first = i * ROWS_PER_TASK;
        let d_y = &d_y[first * d_k..][..d_x.len()];
        let mut d_n = vec![0.0f32; d_k];
        for (r, (d_y, d_x)) in d_y
            .chunks_exact(d_k)
            .zip(d_x.chunks_exact_mut(d_k))
            .enumerate()
        {
            let row = first + r;
            if !norm {
                rotate(d_y, rope.as_deref(), position(row), true, |c, v| {
                    d_x[c].write(v);
                });
                continue;
            }
            rotate(d_y, rope.as_deref(), position(row), true, |c, v| d_n[c] = v);
            // n = x / s, s = sqrt(mean(x^2) + eps): dx = (dn - n * mean(dn . n)) / s.
            let n = &saved.normed[row * d_k..][..d_k];
            let s = saved.scale[row];
            let mean = crate::simd::dot(&d_n, n) / d_k as f32;
            for ((d_x, &g), &n) in d_x.iter_mut().zip(&d_n).zip(n) {
                d_x.write((g - n * mean) / s);
            }
        }
    });
    d_x
}

fn check(len: usize, dims: Dims, spec: Rotary) {
    let Dims {
        batch,
        t,
        heads,
        d_k,
    } = dims;
    assert_eq!(
        len,
        batch * t * heads * d_k,
        "rotary: the input is not [{batch}, {t}, {heads}, {d_k}]"
    );
    assert!(
        spec.rope_base.is_none() || d_k.is_multiple_of(2),
        "rotary: RoPE needs an even d_k, not {d_k}"
    );
}

/// One row: `y1 = x1 cos - x2 sin`, `y2 = x2 cos + x1 sin` (halves of `d_k`), or its transpose
/// (the rotation back, for the backward) with `back`; `x` itself without tables. Each output
/// element `c` goes to `put(c, value)`.
#[inline]
fn rotate(x: &[f32], rope: Option<&Tables>, p: usize, back: bool, mut put: impl FnMut(usize, f32)) {
    let Some(tables) = rope else {
        for (c, &v) in x.iter().enumerate() {
            put(c, v);
        }
        return;
    };
    let half = x.len() / 2;
    let (cos, sin) = (
        &tables.cos[p * half..][..half],
        &tables.sin[p * half..][..half],
    );
    let (x1, x2) = x.split_at(half);
    for c in 0..half {
        let (a, b, cs, sn) = (x1[c], x2[c], cos[c], sin[c]);
        if back {
            // The transpose: [[cos, sin], [-sin, cos]].
            put(c, a * cs + b * sn);
            put(c + half, b * cs - a * sn);
        } else {
            put(c, a * cs - b * sn);
            put(c + half, b * cs + a * sn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// The whole map in f64 from its definition: normalise, then rotate each pair
    /// `(c, c + d_k/2)` by `p * base^(-2c/d_k)` as a 2x2 rotation matrix.
    fn reference(x: &[f64], dims: Dims, spec: Rotary) -> Vec<f64> {
        let Dims { t, heads, d_k, .. } = dims;
        let half = d_k / 2;
        let mut y = Vec::with_capacity(x.len());
        for (row, x) in x.chunks(d_k).enumerate() {
            let n: Vec<f64> = match spec.rms_epsilon {
                Some(eps) => {
                    let ms = x.iter().map(|v| v * v).sum::<f64>() / d_k as f64;
                    x.iter().map(|v| v / (ms + eps).sqrt()).collect()
                }
                None => x.to_vec(),
            };
            let Some(base) = spec.rope_base else {
                y.extend(n);
                continue;
            };
            let p = (spec.offset + (row / heads) % t) as f64;
            let mut out = vec![0.0; d_k];
            for c in 0..half {
                let theta = p * base.powf(-2.0 * c as f64 / d_k as f64);
                let (s, co) = theta.sin_cos();
                out[c] = co * n[c] - s * n[c + half];
                out[c + half] = s * n[c] + co * n[c + half];
            }
            y.extend(out);
        }
        y
    }

    const SPECS: [Rotary; 3] = [
        Rotary {
            rms_epsilon: Some(1e-6),
            rope_base: Some(10_000.0),
            offset: 0,
        },
        Rotary {
            rms_epsilon: None,
            rope_base: Some(10_000.0),
            offset: 5,
        },
        Rotary {
            rms_epsilon: Some(1e-6),
            rope_base: None,
            offset: 0,
        },
    ];

    #[test]
    fn forward_matches_the_map_in_f64() {
        // Several tasks' worth of rows, positions past the first task's.
        let dims = Dims {
            batch: 3,
            t: 70,
            heads: 2,
            d_k: 8,
        };
        let n = dims.batch * dims.t * dims.heads * dims.d_k;
        for spec in SPECS {
            let x = values(n, 7);
            let (y, _) = forward(&x, dims, spec, false);
            let (y_saved, _) = forward(&x, dims, spec, true);
            assert_eq!(y, y_saved, "{spec:?}: saving changes the values");
            let want = reference(
                &x.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
                dims,
                spec,
            );
            let worst = y
                .iter()
                .zip(&want)
                .map(|(&a, b)| (f64::from(a) - b).abs())
                .fold(0.0, f64::max);
            assert!(worst < 2e-5, "{spec:?}: {worst}");
        }
    }

    #[test]
    fn backward_matches_finite_differences_in_f64() {
        // d/dx of sum(w * f(x)) by central differences of the f64 reference, against the
        // kernel's backward with d_y = w.
        let dims = Dims {
            batch: 2,
            t: 3,
            heads: 2,
            d_k: 6,
        };
        let n = dims.batch * dims.t * dims.heads * dims.d_k;
        for spec in SPECS {
            let x = values(n, 11);
            let w = values(n, 13);
            let (_, saved) = forward(&x, dims, spec, true);
            let got = backward(&w, &saved, dims, spec);
            let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
            let loss = |x: &[f64]| -> f64 {
                reference(x, dims, spec)
                    .iter()
                    .zip(&w)
                    .map(|(y, &w)| y * f64::from(w))
                    .sum()
            };
            for i in 0..n {
                let h = 1e-6;
                let (mut up, mut down) = (x64.clone(), x64.clone());
                up[i] += h;
                down[i] -= h;
                let want = (loss(&up) - loss(&down)) / (2.0 * h);
                let diff = (f64::from(got[i]) - want).abs();
                assert!(
                    diff < 1e-4 * want.abs().max(1.0),
                    "{spec:?} [{i}]: {} vs {want}",
                    got[i]
                );
            }
        }
    }
}

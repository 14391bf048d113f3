//! The kernels' elementwise passes over a block of scores, written as plain loops that
//! vectorise, and compiled twice: for the baseline x86-64 (SSE2) and for AVX2 + FMA, picked
//! at run time. Each takes the block `[m, n]` row-major; row `r` sees its first
//! `min(first + r * step, n)` scores (the causal mask), the rest are zeroed.

/// Which scores each row of a block sees: `min(first + r * step, n)` of its `n`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    pub first: usize,
    pub step: usize,
}

impl Seen {
    #[inline(always)]
    fn row(self, r: usize, n: usize) -> usize {
        (self.first + r * self.step).min(n)
    }
}

/// Defines each function as `$baseline` (any x86-64) and as `$name`, which runs the same body
/// compiled for AVX-512 or AVX2 + FMA, whichever the CPU has.
macro_rules! dispatch {
    ($(#[$doc:meta])* fn $name:ident / $baseline:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        #[inline(always)]
        #[allow(dead_code)]
        pub(crate) fn $baseline($($arg: $ty),*) $body

        $(#[$doc])*
        pub(crate) fn $name($($arg: $ty),*) {
            use $baseline as body;
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                fn avx512($($arg: $ty),*) {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) {
                    body($($arg),*)
                }
                if $crate::simd::has_avx512() {
                    // SAFETY: `avx512` is `body` compiled for the features `has_avx512` found.
                    #[allow(unsafe_code)]
                    unsafe {
                        return avx512($($arg),*);
                    }
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: `avx2` is `body` compiled for AVX2 and FMA, which this CPU was
                    // just found to have.
                    #[allow(unsafe_code)]
                    unsafe {
                        return avx2($($arg),*);
                    }
                }
            }
            body($($arg),*)
        }
    };
}

/// Whether the CPU runs the AVX-512 builds (`HEADLAB_NO_AVX512=1` turns them off, to compare).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::env::var_os("HEADLAB_NO_AVX512").is_none()
    })
}

pub(crate) use dispatch;

dispatch! {
    /// Softmax of each row's seen scores in place (zeros after them); its log-sum-exp into
    /// `lse[r]`.
    fn softmax_rows / softmax_rows_baseline(p: &mut [f32], n: usize, seen: Seen, lse: &mut [f32]) {
        for (r, row) in p.chunks_exact_mut(n).enumerate() {
            let (row, hidden) = row.split_at_mut(seen.row(r, n));
            hidden.fill(0.0);
            let max = if crate::toggle::mutated(crate::Mutation::SoftmaxNoMax) {
                0.0
            } else {
                max(row)
            };
            for x in row.iter_mut() {
                *x = exp(*x - max);
            }
            let sum = sum(row);
            let inv = 1.0 / sum;
            for x in row.iter_mut() {
                *x *= inv;
            }
            lse[r] = max + sum.ln();
        }
    }
}

dispatch! {
    /// `p = exp(p - lse[r])` over each row's seen scores, zeros after them: the forward's
    /// probabilities again, from its log-sum-exp.
    fn exp_rows / exp_rows_baseline(p: &mut [f32], n: usize, seen: Seen, lse: &[f32]) {
        for (r, row) in p.chunks_exact_mut(n).enumerate() {
            let (row, hidden) = row.split_at_mut(seen.row(r, n));
            hidden.fill(0.0);
            let shift = lse[r];
            for x in row.iter_mut() {
                *x = exp(*x - shift);
            }
        }
    }
}

dispatch! {
    /// The softmax backward over a block, written over `p`:
    /// `ds = p * (dp - d[r]) * scale`, with `d[r] = rowsum(d_out * out)` of the block's rows.
    fn softmax_backward_rows / softmax_backward_rows_baseline(
        p: &mut [f32],
        dp: &[f32],
        n: usize,
        d: &[f32],
        scale: f32,
    ) {
        let rows = p.chunks_exact_mut(n).zip(dp.chunks_exact(n));
        for ((p_row, dp_row), &d_i) in rows.zip(d) {
            for (s, g) in p_row.iter_mut().zip(dp_row) {
                *s *= (g - d_i) * scale;
            }
        }
    }
}

/// Largest element, in eight lanes so the loop vectorises.
#[inline(always)]
fn max(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let chunks = xs.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            lanes[l] = if c[l] > lanes[l] { c[l] } else { lanes[l] };
        }
    }
    tail.iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &x| m.max(x))
}

/// Sum in eight lanes (float addition does not reassociate, so one accumulator would not
/// vectorise).
#[inline(always)]
pub(crate) fn sum(xs: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for l in 0..8 {
            lanes[l] += c[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `sum((x - mean)^2)`, in lanes.
#[inline(always)]
pub(crate) fn centered_squares(xs: &[f32], mean: f32) -> f32 {
    let mut lanes = [0.0f32; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f32 = chunks
        .remainder()
        .iter()
        .map(|x| (x - mean) * (x - mean))
        .sum();
    for c in chunks {
        for l in 0..8 {
            let v = c[l] - mean;
            lanes[l] += v * v;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `sum(a * b * c)`, in lanes.
#[inline(always)]
pub(crate) fn dot3(a: &[f32], b: &[f32], c: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (ca, cb, cc) = (a.chunks_exact(8), b.chunks_exact(8), c.chunks_exact(8));
    let tail: f32 = (ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .zip(cc.remainder()))
    .map(|((x, y), z)| x * y * z)
    .sum();
    for ((x, y), z) in ca.zip(cb).zip(cc) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l] * z[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `e^x` to about 2 ulp, branch-free so loops over it vectorise (libm's `expf` is a call per
/// element). Cephes' `expf`: `x = n ln 2 + r`, `|r| <= ln 2 / 2`, a polynomial for `e^r`,
/// and `2^n` built in the exponent bits. Inputs below -87.3 give ~1e-38 instead of 0.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5 * 2^23 rounds to an integer held in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.3);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    // n sits in the low bits of t's mantissa; shift n + 127 into the exponent field.
    let n_bits = t.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    e_r * f32::from_bits(((n_bits + 127) << 23) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_a_few_ulp_of_f64() {
        let mut worst = 0.0f64;
        for i in 0..200_000 {
            let x = -87.0 + 175.0 * i as f32 / 200_000.0;
            let want = (x as f64).exp();
            worst = worst.max(((exp(x) as f64 - want) / want).abs());
        }
        assert!(
            worst < 3.0 * f32::EPSILON as f64,
            "worst relative error {worst}"
        );
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) < 1e-37);
    }

    /// Both compiled versions against f64 softmax, rows shorter and longer than the 8 lanes.
    #[test]
    fn softmax_rows_match_f64_with_the_mask() {
        let (m, n) = (5, 19);
        let block: Vec<f32> = (0..m * n)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.4)
            .collect();
        let seen = Seen { first: 3, step: 4 };
        type Softmax = fn(&mut [f32], usize, Seen, &mut [f32]);
        for (name, softmax) in [
            ("dispatched", softmax_rows as Softmax),
            ("baseline", softmax_rows_baseline),
        ] {
            let mut p = block.clone();
            let mut lse = vec![0.0; m];
            softmax(&mut p, n, seen, &mut lse);
            for r in 0..m {
                let k = seen.row(r, n);
                let row: Vec<f64> = block[r * n..][..k].iter().map(|&x| x as f64).collect();
                let z: f64 = row.iter().map(|x| x.exp()).sum();
                assert!((lse[r] as f64 - z.ln()).abs() < 1e-5);
                for j in 0..n {
                    let want = if j < k { row[j].exp() / z } else { 0.0 };
                    assert!(
                        (p[r * n + j] as f64 - want).abs() < 1e-6,
                        "{name} row {r} col {j}"
                    );
                }
            }
        }
    }
}

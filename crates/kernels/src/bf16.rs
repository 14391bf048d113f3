//! Products in bfloat16 with f32 accumulation (`train.precision = "bf16"`): both operands are
//! rounded to bf16 (round-to-nearest-even) as they are packed, and AVX512-BF16's `vdpbf16ps`
//! multiplies two pairs per f32 lane and adds them into f32 accumulators, twice the f32 FMA
//! rate. Where the CPU lacks the instructions, a plain loop computes the same thing from the
//! same packing (a library fallback; training refuses bf16 there, since it would be slower
//! than f32).
//!
//! Packing. `B` (`k x n`) goes into panels of [`NR`] columns; in a panel, k-pair `p` holds for
//! each column `j` one u32 of two bf16: `B[2p, j]` in the low half, `B[2p + 1, j]` in the high
//! half (an odd `k` and the last panel's missing columns are zeros). `A` goes into panels of
//! [`MR`] rows the same way, `A[i, 2p]` low and `A[i, 2p + 1]` high. The kernel broadcasts
//! one row's pair of `A` against the pairs of 16 columns of `B`: `vdpbf16ps` adds
//! `A[i,2p] B[2p,j] + A[i,2p+1] B[2p+1,j]` into lane `j`. Where the CPU has the instructions,
//! packing converts 32 values per `vcvtne2ps2bf16`, which rounds as [`to_bf16`] does but for
//! denormal inputs, which it takes as zeros (so does `vdpbf16ps` with denormal bf16; the one
//! difference is an f32 just below 2^-126 that [`to_bf16`] rounds up to the smallest normal);
//! one value at a time by [`to_bf16`] elsewhere: at the recipe's shape the scalar packing cost
//! a third of the bf16 step.

use rayon::prelude::*;

use crate::gemm::View;

/// Rows of `A` per kernel call.
pub const MR: usize = 12;
/// Columns of `B` per kernel call: two registers of 16 f32.
pub const NR: usize = 32;

/// `x` rounded to the nearest bf16, ties to even (as `_mm512_cvtne2ps_pbh` does); NaN stays a
/// (quiet) NaN.
pub fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x0040;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// The f32 a bf16 stands for (exact).
pub fn from_bf16(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// Two bf16 in one u32, `lo` in the low half.
fn pair(lo: f32, hi: f32) -> u32 {
    u32::from(to_bf16(lo)) | (u32::from(to_bf16(hi)) << 16)
}

/// [`pair`] by truncation: the planted bug `compare` must catch (`bf16-truncate`).
fn pair_truncated(lo: f32, hi: f32) -> u32 {
    (lo.to_bits() >> 16) | (hi.to_bits() & 0xffff_0000)
}

/// How this process packs: [`pair`], unless the truncation bug is planted (tests only).
fn packer() -> fn(f32, f32) -> u32 {
    if crate::toggle::mutated(crate::Mutation::Bf16Truncate) {
        pair_truncated
    } else {
        pair
    }
}

/// Whether this CPU runs the `vdpbf16ps` kernel.
pub fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| {
            std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512bf16")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `B` packed for the kernel: `panels` panels of `k_pairs * NR` u32.
pub(crate) struct PackedB {
    data: Vec<u32>,
    k_pairs: usize,
    n: usize,
}

/// What one panel packs: `lanes` runs (rows of `A`, columns of `B`) of `k` values each,
/// value `c` of run `j` at `data[j * sj + c * sc]`.
#[derive(Clone, Copy)]
struct Runs<'a> {
    data: &'a [f32],
    lanes: usize,
    k: usize,
    sj: usize,
    sc: usize,
}

/// Packs `runs` into `out` (`k_pairs * width`): `out[p * width + j]` is the pair of values
/// `2p` and `2p + 1` of run `j`, zeros past `k` and past the last run.
fn pack_panel(runs: Runs, width: usize, out: &mut [u32]) {
    let k_pairs = runs.k.div_ceil(2);
    assert!(runs.lanes <= width && out.len() >= k_pairs * width);
    if runs.lanes == 0 || runs.k == 0 {
        out[..k_pairs * width].fill(0);
        return;
    }
    let last = (runs.lanes - 1)
        .checked_mul(runs.sj)
        .zip((runs.k - 1).checked_mul(runs.sc))
        .and_then(|(a, b)| a.checked_add(b));
    assert!(
        last.is_some_and(|last| last < runs.data.len()),
        "bf16 packing: the view runs past its data"
    );
    #[cfg(target_arch = "x86_64")]
    if supported() && !crate::toggle::mutated(crate::Mutation::Bf16Truncate) {
        // SAFETY: `supported` found the instructions; the bounds are checked above.
        #[allow(unsafe_code)]
        unsafe {
            if runs.sc == 1 {
                return pack_along_k(runs, width, out);
            }
            if runs.sj == 1 {
                return pack_across_lanes(runs, width, out);
            }
        }
    }
    let pair = packer();
    let at = |j: usize, c: usize| {
        if j < runs.lanes && c < runs.k {
            runs.data[j * runs.sj + c * runs.sc]
        } else {
            0.0
        }
    };
    for p in 0..k_pairs {
        for j in 0..width {
            out[p * width + j] = pair(at(j, 2 * p), at(j, 2 * p + 1));
        }
    }
}

/// The first `n` (at most 16) lanes.
#[cfg(target_arch = "x86_64")]
fn lanes_mask(n: usize) -> u16 {
    if n >= 16 { u16::MAX } else { (1u16 << n) - 1 }
}

/// [`pack_panel`] for runs contiguous along `k` (`sc == 1`): 32 values of a run are 16 pairs
/// in order, one `vcvtne2ps2bf16` (round to nearest even, as [`to_bf16`] but for denormal
/// inputs, which it takes as zeros as `vdpbf16ps` does anyway), then scattered into their rows.
///
/// # Safety
/// AVX512F, AVX512BW and AVX512-BF16; `runs` in bounds of its data, `out` as [`pack_panel`].
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_along_k(runs: Runs, width: usize, out: &mut [u32]) {
    use std::arch::x86_64::*;
    let (k, k_pairs) = (runs.k, runs.k.div_ceil(2));
    if runs.lanes < width {
        out[..k_pairs * width].fill(0);
    }
    let mut pairs = [0u32; 16];
    for j in 0..runs.lanes {
        let run = runs.data[j * runs.sj..].as_ptr();
        for q in (0..k).step_by(32) {
            let n = (k - q).min(32);
            // SAFETY: the masks keep the loads within the run's `k` values, in bounds.
            unsafe {
                let lo = _mm512_maskz_loadu_ps(lanes_mask(n), run.wrapping_add(q));
                let hi = _mm512_maskz_loadu_ps(
                    lanes_mask(n.saturating_sub(16)),
                    run.wrapping_add(q + 16),
                );
                let packed: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
                _mm512_storeu_si512(pairs.as_mut_ptr().cast(), packed);
            }
            let p0 = q / 2;
            for (t, &v) in pairs[..n.div_ceil(2)].iter().enumerate() {
                out[(p0 + t) * width + j] = v;
            }
        }
    }
}

/// [`pack_panel`] for runs side by side (`sj == 1`): 16 lanes of values `2p` and `2p + 1` load
/// as two vectors, convert in one `vcvtne2ps2bf16` and interleave into 16 pairs.
///
/// # Safety
/// As [`pack_along_k`].
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_across_lanes(runs: Runs, width: usize, out: &mut [u32]) {
    use std::arch::x86_64::*;
    let k_pairs = runs.k.div_ceil(2);
    // Word 2t of the result is word t (the even value), word 2t + 1 word 16 + t (the odd).
    let order: [i16; 32] = std::array::from_fn(|w| ((w / 2) + 16 * (w % 2)) as i16);
    let order = unsafe { _mm512_loadu_si512(order.as_ptr().cast()) };
    let base = runs.data.as_ptr();
    for p in 0..k_pairs {
        let (even, odd) = (2 * p, 2 * p + 1);
        for l in (0..width).step_by(16) {
            let n = runs.lanes.saturating_sub(l).min(16);
            // SAFETY: the masks keep the loads within the runs and `k`, in bounds; the store
            // within row `p` of `out`.
            unsafe {
                let e = _mm512_maskz_loadu_ps(lanes_mask(n), base.wrapping_add(even * runs.sc + l));
                let o_mask = if odd < runs.k { lanes_mask(n) } else { 0 };
                let o = _mm512_maskz_loadu_ps(o_mask, base.wrapping_add(odd * runs.sc + l));
                let words: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(o, e));
                let pairs = _mm512_permutexvar_epi16(order, words);
                _mm512_mask_storeu_epi32(
                    out.as_mut_ptr().add(p * width + l).cast(),
                    lanes_mask(width - l),
                    pairs,
                );
            }
        }
    }
}

/// Packs `b` (`k x n`) into [`NR`]-column panels of bf16 pairs, a panel per rayon task.
pub(crate) fn pack_b(b: View) -> PackedB {
    let (k, n) = (b.rows, b.cols);
    let k_pairs = k.div_ceil(2);
    let panels = n.div_ceil(NR);
    let mut data = vec![0u32; panels * k_pairs * NR];
    data.par_chunks_mut((k_pairs * NR).max(1))
        .enumerate()
        .for_each(|(panel, out)| {
            let c0 = panel * NR;
            let runs = Runs {
                data: &b.data[(c0 * b.cs).min(b.data.len())..],
                lanes: NR.min(n - c0),
                k,
                sj: b.cs,
                sc: b.rs,
            };
            pack_panel(runs, NR, out);
        });
    PackedB { data, k_pairs, n }
}

/// Packs rows `r0..r0 + MR` of `a` (zeros past its last row) into `out` (`k_pairs * MR`).
fn pack_a(a: View, r0: usize, out: &mut [u32]) {
    let runs = Runs {
        data: &a.data[(r0 * a.rs).min(a.data.len())..],
        lanes: MR.min(a.rows.saturating_sub(r0)),
        k: a.cols,
        sj: a.rs,
        sc: a.cs,
    };
    pack_panel(runs, MR, out);
}

/// `tile[i * NR + j] = sum_p` of the pair products of `a`'s row `i` and `b`'s column `j`, in
/// f32, without the instructions: each bf16 widened exactly (their products are exact in f32)
/// and added into the sum high pair first, in the order Intel's manual gives `vdpbf16ps`.
fn kernel_plain(k_pairs: usize, a: &[u32], b: &[u32], tile: &mut [f32; MR * NR]) {
    tile.fill(0.0);
    for p in 0..k_pairs {
        for i in 0..MR {
            let x = a[p * MR + i];
            let (x0, x1) = (from_bf16(x as u16), from_bf16((x >> 16) as u16));
            for j in 0..NR {
                let y = b[p * NR + j];
                let (y0, y1) = (from_bf16(y as u16), from_bf16((y >> 16) as u16));
                tile[i * NR + j] += x1 * y1;
                tile[i * NR + j] += x0 * y0;
            }
        }
    }
}

/// [`kernel_plain`] on `vdpbf16ps`: 24 accumulators (12 rows x 2 registers of 16 columns).
///
/// # Safety
/// The CPU must have AVX512F and AVX512-BF16; `a` must hold `k_pairs * MR` and `b`
/// `k_pairs * NR` values.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn kernel_avx512(k_pairs: usize, a: &[u32], b: &[u32], tile: &mut [f32; MR * NR]) {
    use std::arch::x86_64::*;
    debug_assert!(a.len() >= k_pairs * MR && b.len() >= k_pairs * NR);
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    let (a, b) = (a.as_ptr(), b.as_ptr());
    for p in 0..k_pairs {
        // SAFETY: `p < k_pairs`, and the slices hold `k_pairs` rows of NR (b) and MR (a).
        unsafe {
            let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(p * NR).cast()));
            let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(p * NR + 16).cast()));
            for i in 0..MR {
                let x: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(p * MR + i) as i32));
                acc[i][0] = _mm512_dpbf16_ps(acc[i][0], x, b0);
                acc[i][1] = _mm512_dpbf16_ps(acc[i][1], x, b1);
            }
        }
    }
    for i in 0..MR {
        // SAFETY: row `i` of `tile` holds NR = 32 f32 at `i * NR`.
        unsafe {
            _mm512_storeu_ps(tile.as_mut_ptr().add(i * NR), acc[i][0]);
            _mm512_storeu_ps(tile.as_mut_ptr().add(i * NR + 16), acc[i][1]);
        }
    }
}

/// One tile by whichever kernel the CPU runs.
fn kernel(k_pairs: usize, a: &[u32], b: &[u32], tile: &mut [f32; MR * NR]) {
    assert!(a.len() >= k_pairs * MR && b.len() >= k_pairs * NR);
    #[cfg(target_arch = "x86_64")]
    if supported() {
        // SAFETY: `supported` found AVX512F and AVX512-BF16; the lengths are checked above.
        #[allow(unsafe_code)]
        unsafe {
            return kernel_avx512(k_pairs, a, b, tile);
        }
    }
    kernel_plain(k_pairs, a, b, tile)
}

/// `dst = alpha * lhs * b` (or `+=` with `accumulate`) for `b` packed by [`pack_b`], `dst`
/// rows `dst_rs` apart; single-threaded.
pub(crate) fn matmul_packed(
    dst: &mut [f32],
    dst_rs: usize,
    lhs: View,
    b: &PackedB,
    alpha: f32,
    accumulate: bool,
) {
    let (m, n) = (lhs.rows, b.n);
    assert_eq!(
        lhs.cols.div_ceil(2),
        b.k_pairs,
        "bf16 matmul: inner dimensions differ"
    );
    assert!(
        m == 0 || n == 0 || (m - 1) * dst_rs + n <= dst.len(),
        "bf16 matmul: destination too small"
    );
    let mut a = vec![0u32; b.k_pairs * MR];
    let mut tile = [0f32; MR * NR];
    for r0 in (0..m).step_by(MR) {
        pack_a(lhs, r0, &mut a);
        for (panel, c0) in (0..n).step_by(NR).enumerate() {
            let panel = &b.data[panel * b.k_pairs * NR..(panel + 1) * b.k_pairs * NR];
            kernel(b.k_pairs, &a, panel, &mut tile);
            for i in 0..MR.min(m - r0) {
                let row = &mut dst[(r0 + i) * dst_rs + c0..];
                let cols = NR.min(n - c0);
                let t = &tile[i * NR..i * NR + cols];
                if accumulate {
                    row[..cols]
                        .iter_mut()
                        .zip(t)
                        .for_each(|(d, t)| *d += alpha * t);
                } else {
                    row[..cols]
                        .iter_mut()
                        .zip(t)
                        .for_each(|(d, t)| *d = alpha * t);
                }
            }
        }
    }
}

/// `dst = alpha * lhs * rhs` (or `+=`), as `gemm::matmul` but in bf16; single-threaded.
#[cfg(test)]
pub(crate) fn matmul(
    dst: &mut [f32],
    dst_rs: usize,
    lhs: View,
    rhs: View,
    alpha: f32,
    accumulate: bool,
) {
    assert_eq!(lhs.cols, rhs.rows, "bf16 matmul: inner dimensions differ");
    matmul_packed(dst, dst_rs, lhs, &pack_b(rhs), alpha, accumulate);
}

/// A new row-major `rows x rhs.cols` matrix `alpha * lhs * rhs` in bf16, `rhs` packed once and
/// shared, blocks of `per_task` rows on rayon's pool (as `gemm::product`).
pub(crate) fn product<'a>(
    rows: usize,
    per_task: usize,
    lhs: impl Fn(usize, usize) -> View<'a> + Sync,
    rhs: View<'a>,
    alpha: f32,
) -> Vec<f32> {
    let n = rhs.cols;
    let mut out = vec![0f32; rows * n];
    if rows == 0 || n == 0 {
        return out;
    }
    let b = pack_b(rhs);
    let per_task = per_task.max(1);
    out.par_chunks_mut(per_task * n)
        .enumerate()
        .for_each(|(i, block)| {
            let m = block.len() / n;
            let lhs = lhs(i * per_task, m);
            assert_eq!(lhs.rows, m, "bf16 product: block {i} has the wrong rows");
            matmul_packed(block, n, lhs, &b, alpha, false);
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn rounding_is_to_nearest_even_and_keeps_nan_and_infinity() {
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even one, 1.
        assert_eq!(from_bf16(to_bf16(1.0 + 2f32.powi(-8))), 1.0);
        // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6 (even).
        assert_eq!(
            from_bf16(to_bf16(1.0 + 3.0 * 2f32.powi(-8))),
            1.0 + 2f32.powi(-6)
        );
        // Just above halfway rounds up; just below, down.
        assert_eq!(
            from_bf16(to_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20))),
            1.0 + 2f32.powi(-7)
        );
        assert_eq!(
            from_bf16(to_bf16(1.0 + 2f32.powi(-8) - 2f32.powi(-20))),
            1.0
        );
        assert_eq!(from_bf16(to_bf16(-2.5)), -2.5);
        assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
        assert_eq!(from_bf16(to_bf16(f32::INFINITY)), f32::INFINITY);
        // The largest finite f32 rounds up to infinity, as round-to-nearest does.
        assert_eq!(from_bf16(to_bf16(f32::MAX)), f32::INFINITY);
        // Every value is within half a unit of its rounding: the unit roundoff u = 2^-8 of
        // an 8-bit significand, relative; and the rounding is one of the two neighbours.
        let mut rng = StdRng::seed_from_u64(5);
        for _ in 0..10_000 {
            let x: f32 = rng.random_range(-1e3..1e3);
            let r = from_bf16(to_bf16(x));
            assert!((r - x).abs() <= x.abs() * 2f32.powi(-8), "{x} -> {r}");
            let down = f32::from_bits(x.to_bits() & 0xffff_0000);
            let up = f32::from_bits((x.to_bits() & 0xffff_0000) + 0x1_0000);
            assert!(r == down || r == up, "{x} -> {r}");
            let nearer = if (x - down).abs() <= (up - x).abs() {
                down
            } else {
                up
            };
            if (x - down).abs() != (up - x).abs() {
                assert_eq!(r, nearer, "{x}");
            }
        }
    }

    fn random(n: usize, rng: &mut StdRng) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    /// Every edge of the packing: k odd and even, m and n with tails past MR and NR, and a
    /// transposed lhs; against f64 products with the bound `(2u + u^2 + k 2^-24) sum |a||b|`,
    /// u = 2^-8 (each operand rounded once, their product exact in f32, k f32 additions), and
    /// against a plain loop over the bf16-rounded operands (the same sums, up to f32
    /// summation order). The bound `k u sum |a||b|` is looser from k = 3 on, but not above
    /// 2u at k = 1, where two roundings can reach it.
    #[test]
    fn products_match_f64_within_the_bf16_bound_and_the_rounded_operands_loop() {
        let mut rng = StdRng::seed_from_u64(11);
        for (m, k, n) in [
            (1, 1, 1),
            (12, 2, 32),
            (13, 7, 33),
            (25, 64, 70),
            (5, 129, 31),
            (40, 300, 97),
        ] {
            let a = random(m * k, &mut rng);
            let b = random(k * n, &mut rng);
            // The same matrices stored row-major or as the transposes of [k, m] and [n, k]
            // arrays: every layout the linear layers' products pack from.
            let a_t: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
            let b_t: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let lhs = if ta {
                    View::rows_t(&a_t, k, m)
                } else {
                    View::rows(&a, m, k)
                };
                let rhs = if tb {
                    View::rows_t(&b_t, n, k)
                } else {
                    View::rows(&b, k, n)
                };
                let mut c = vec![0f32; m * n];
                matmul(&mut c, n, lhs, rhs, 1.0, false);
                for i in 0..m {
                    for j in 0..n {
                        let (mut exact, mut mass, mut rounded) = (0f64, 0f64, 0f64);
                        for p in 0..k {
                            let (x, y) = (f64::from(a[i * k + p]), f64::from(b[p * n + j]));
                            exact += x * y;
                            mass += (x * y).abs();
                            rounded += f64::from(from_bf16(to_bf16(a[i * k + p])))
                                * f64::from(from_bf16(to_bf16(b[p * n + j])));
                        }
                        let got = f64::from(c[i * n + j]);
                        let u = 2f64.powi(-8);
                        let bound = (2.0 * u + u * u + k as f64 * 2f64.powi(-24)) * mass;
                        assert!(
                            (got - exact).abs() <= bound,
                            "{m}x{k}x{n} ({i},{j}): {got} vs {exact}, bound {bound}"
                        );
                        // f32 sums of k products: a few units of 2^-24 of their mass.
                        let f32_order = 2.0 * k as f64 * 2f64.powi(-24) * mass;
                        assert!(
                            (got - rounded).abs() <= f32_order + 1e-30,
                            "{m}x{k}x{n} ({i},{j}): {got} vs rounded operands {rounded}"
                        );
                    }
                }
                // `accumulate` adds alpha times the product to what is there.
                let mut d = vec![1f32; m * n];
                matmul(&mut d, n, lhs, rhs, 0.5, true);
                for (d, c) in d.iter().zip(&c) {
                    assert!((d - (1.0 + 0.5 * c)).abs() <= 1e-6 * (1.0 + c.abs()));
                }
            }
            // The threaded product is the same numbers, block by block.
            let p = product(
                m,
                5,
                |r0, rows| View::rows(&a[r0 * k..], rows, k),
                View::rows(&b, k, n),
                1.0,
            );
            let mut c = vec![0f32; m * n];
            matmul(
                &mut c,
                n,
                View::rows(&a, m, k),
                View::rows(&b, k, n),
                1.0,
                false,
            );
            assert_eq!(p, c);
        }
    }

    /// Every layout a panel is packed from (runs along k or side by side, strided or not;
    /// odd k, fewer runs than the width) gives, pair by pair, the two values rounded by
    /// [`to_bf16`] one at a time: exact on bit patterns of every kind but denormals (NaN,
    /// infinities, ties), which the instruction takes as zeros.
    #[test]
    fn panels_pack_every_layout_as_to_bf16_rounds_each_value() {
        let mut rng = StdRng::seed_from_u64(8);
        if !supported() {
            eprintln!("no AVX512-BF16 here: only the scalar packing is checked");
        }
        // Ties both ways, infinities, the largest finite f32 (rounds to infinity), signed zeros.
        let special = [
            1.0 + 2f32.powi(-8),
            1.0 + 3.0 * 2f32.powi(-8),
            -(1.0 + 2f32.powi(-8)),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            -0.0,
            0.0,
        ];
        for (lanes, width, k) in [
            (12, 12, 7),
            (5, 12, 64),
            (32, 32, 33),
            (19, 32, 1),
            (1, 12, 70),
            (7, 12, 23),
            (17, 32, 50),
        ] {
            // A `lanes x k` matrix of raw bit patterns (denormals made zeros), every other
            // value from `special`.
            let values: Vec<f32> = (0..lanes * k)
                .map(|i| {
                    let x = f32::from_bits(rng.random::<u32>());
                    if i % 2 == 1 {
                        special[(i / 2) % special.len()]
                    } else if x.is_subnormal() {
                        0.0
                    } else {
                        x
                    }
                })
                .collect();
            let at = |j: usize, c: usize| {
                if j < lanes && c < k {
                    values[j * k + c]
                } else {
                    0.0
                }
            };
            let k_pairs = k.div_ceil(2);
            let expected: Vec<u32> = (0..k_pairs * width)
                .map(|i| {
                    let (p, j) = (i / width, i % width);
                    u32::from(to_bf16(at(j, 2 * p))) | u32::from(to_bf16(at(j, 2 * p + 1))) << 16
                })
                .collect();
            // Runs along k (rows of a row-major A), side by side (its transpose), and both
            // with a gap of 3 between consecutive values of the other index.
            let transposed: Vec<f32> = (0..k * lanes)
                .map(|i| values[(i % lanes) * k + i / lanes])
                .collect();
            let gapped: Vec<f32> = (0..lanes * (k + 3))
                .map(|i| {
                    let (j, c) = (i / (k + 3), i % (k + 3));
                    if c < k { values[j * k + c] } else { f32::NAN }
                })
                .collect();
            let side_gapped: Vec<f32> = (0..k * (lanes + 3))
                .map(|i| {
                    let (c, j) = (i / (lanes + 3), i % (lanes + 3));
                    if j < lanes {
                        values[j * k + c]
                    } else {
                        f32::NAN
                    }
                })
                .collect();
            for (name, data, sj, sc) in [
                ("along k", &values, k, 1),
                ("side by side", &transposed, 1, lanes),
                ("along k, gapped", &gapped, k + 3, 1),
                ("side by side, gapped", &side_gapped, 1, lanes + 3),
            ] {
                let mut out = vec![u32::MAX; k_pairs * width];
                let runs = Runs {
                    data,
                    lanes,
                    k,
                    sj,
                    sc,
                };
                pack_panel(runs, width, &mut out);
                for (i, (got, want)) in out.iter().zip(&expected).enumerate() {
                    let nan = |h: u32| {
                        from_bf16(h as u16).is_nan() && from_bf16((h >> 16) as u16).is_nan()
                    };
                    assert!(
                        got == want || (nan(*got) && nan(*want)),
                        "{name}, {lanes} runs of {k} in {width}: pair {i}: {got:#010x} vs {want:#010x}"
                    );
                }
            }
        }
    }

    /// The `vdpbf16ps` kernel gives the plain kernel's sums (where the CPU has it).
    #[test]
    fn the_instruction_kernel_matches_the_plain_one() {
        let mut rng = StdRng::seed_from_u64(3);
        let k_pairs = 37;
        let a: Vec<u32> = (0..k_pairs * MR)
            .map(|_| rng.random::<u32>() & 0x3fff_3fff)
            .collect();
        let b: Vec<u32> = (0..k_pairs * NR)
            .map(|_| rng.random::<u32>() & 0x3fff_3fff)
            .collect();
        let (mut x, mut y) = ([0f32; MR * NR], [0f32; MR * NR]);
        kernel_plain(k_pairs, &a, &b, &mut x);
        kernel(k_pairs, &a, &b, &mut y);
        if !supported() {
            eprintln!("no AVX512-BF16 here: the instruction kernel is not run");
        }
        for (x, y) in x.iter().zip(&y) {
            assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "{x} vs {y}");
        }
    }
}

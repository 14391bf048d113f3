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
//! `A[i,2p] B[2p,j] + A[i,2p+1] B[2p+1,j]` into lane `j`.

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
            std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bf16")
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

/// Packs `b` (`k x n`) into [`NR`]-column panels of bf16 pairs, a panel per rayon task.
pub(crate) fn pack_b(b: View) -> PackedB {
    let (k, n) = (b.rows, b.cols);
    let k_pairs = k.div_ceil(2);
    let panels = n.div_ceil(NR);
    let mut data = vec![0u32; panels * k_pairs * NR];
    let at = |r: usize, c: usize| {
        if r < k && c < n {
            b.data[r * b.rs + c * b.cs]
        } else {
            0.0
        }
    };
    let pair = packer();
    data.par_chunks_mut((k_pairs * NR).max(1))
        .enumerate()
        .for_each(|(panel, out)| {
            let c0 = panel * NR;
            for p in 0..k_pairs {
                for j in 0..NR {
                    out[p * NR + j] = pair(at(2 * p, c0 + j), at(2 * p + 1, c0 + j));
                }
            }
        });
    PackedB { data, k_pairs, n }
}

/// Packs rows `r0..r0 + MR` of `a` (zeros past its last row) into `out` (`k_pairs * MR`).
fn pack_a(a: View, r0: usize, out: &mut [u32]) {
    let k_pairs = a.cols.div_ceil(2);
    let at = |r: usize, c: usize| {
        if r < a.rows && c < a.cols {
            a.data[r * a.rs + c * a.cs]
        } else {
            0.0
        }
    };
    let pair = packer();
    for p in 0..k_pairs {
        for i in 0..MR {
            out[p * MR + i] = pair(at(r0 + i, 2 * p), at(r0 + i, 2 * p + 1));
        }
    }
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
            for transposed in [false, true] {
                // The same matrix a, stored row-major or as the transpose of a [k, m] array.
                let a_t: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
                let lhs = if transposed {
                    View::rows_t(&a_t, k, m)
                } else {
                    View::rows(&a, m, k)
                };
                let mut c = vec![0f32; m * n];
                matmul(&mut c, n, lhs, View::rows(&b, k, n), 1.0, false);
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
                matmul(&mut d, n, lhs, View::rows(&b, k, n), 0.5, true);
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

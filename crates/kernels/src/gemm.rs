//! The crate's matrix products: `gemm::gemm` on strided views of slices, with every index it
//! can touch checked against the slices first, and [`product`], which writes a new matrix into
//! uninitialised capacity. Its `unsafe` blocks are among the few the crate allows (listed in
//! its Cargo.toml).

/// A read-only `rows x cols` matrix in `data`: element `(r, c)` is `data[r * rs + c * cs]`,
/// so a transpose is the same data with the strides swapped.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> View<'a> {
    /// Row-major `rows x cols` at the start of `data`.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose of [`View::rows`]: a `cols x rows` view of row-major `rows x cols` data.
    pub fn rows_t(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows: cols,
            cols: rows,
            rs: 1,
            cs: cols,
        }
    }

    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.rs + (self.cols - 1) * self.cs < self.data.len()
    }
}

/// `dst = alpha * lhs * rhs` (or `dst += alpha * lhs * rhs` with `accumulate`), `dst`
/// `lhs.rows x rhs.cols` with rows `dst_rs` apart. Single-threaded: callers parallelise.
pub(crate) fn matmul(
    dst: &mut [f32],
    dst_rs: usize,
    lhs: View,
    rhs: View,
    alpha: f32,
    accumulate: bool,
) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    assert_eq!(rhs.rows, k, "matmul: inner dimensions differ");
    assert!(dst_rs >= n, "matmul: destination rows overlap");
    assert!(
        m == 0 || n == 0 || (m - 1) * dst_rs + n <= dst.len(),
        "matmul: destination too small"
    );
    assert!(lhs.fits() && rhs.fits(), "matmul: view runs past its slice");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            dst.chunks_mut(dst_rs)
                .take(m)
                .for_each(|row| row[..n].fill(0.0));
        }
        return;
    }
    // SAFETY: `dst` holds every `r * dst_rs + c` for `r < m`, `c < n` (checked above, and
    // `dst_rs >= n` keeps rows apart); `lhs` and `rhs` were
    // checked above to stay inside their slices for every `(r, c)` of their shapes; `dst`
    // is a unique borrow, so it aliases neither input.
    #[allow(unsafe_code)]
    unsafe {
        raw_gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            dst_rs,
            accumulate,
            lhs,
            rhs,
            alpha,
        );
    }
}

/// gemm computes a row-major product as its transpose, so its left operand is headlab's `rhs`
/// (a weight in the forward and `dx`, `d_y` in `dW`), and it packs that operand once it meets
/// more than `threshold x 6` columns (8 by default: 48). At 32 (192 columns) the weight
/// gradients of the recipe's shapes (64-128 columns a task) read `d_y` in place, while the
/// forward's and `dx`'s (384-768) and every large product still pack: the recipe's step 1.7%
/// faster at 1 thread (12 of 12 paired runs) and 2.5% at 2 (10 of 12), bench/NOTES.md. The
/// setting is gemm's process-wide one, set at headlab's first product: Burn's own products on
/// flex (flex-burn) see it from then on too; it decides when gemm packs, never what it computes.
const LHS_PACKING_THRESHOLD: usize = 32;

/// `gemm::gemm` for f32 with headlab's argument order: `dst` (rows `dst_rs` apart) `=` or
/// `+=` `alpha * lhs * rhs`, single-threaded.
///
/// # Safety
/// `dst` must be valid for writes (and reads, with `read_dst`) at `r * dst_rs + c` for every
/// `r < m`, `c < n`, aliasing neither view; the views must fit their slices and be
/// `m x k` and `k x n`.
#[allow(unsafe_code)]
unsafe fn raw_gemm(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: usize,
    read_dst: bool,
    lhs: View,
    rhs: View,
    alpha: f32,
) {
    static PACKING: std::sync::Once = std::sync::Once::new();
    PACKING.call_once(|| gemm::set_lhs_packing_threshold_single_thread(LHS_PACKING_THRESHOLD));
    // SAFETY: the caller's contract is gemm's.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_rs as isize,
            read_dst,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr(),
            rhs.cs as isize,
            rhs.rs as isize,
            1.0,
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// A new row-major `rows x rhs.cols` matrix `alpha * lhs * rhs`, computed in blocks of
/// `per_task` rows on rayon's pool, block `r0..r0 + m` being `lhs(r0, m) * rhs`. Every element
/// is written once by `gemm`: the buffer is never zeroed first (zeroing would be a whole extra
/// pass over the outputs; bench/NOTES.md).
///
/// # Panics
/// If a block's `lhs` is not `m x rhs.rows`.
pub(crate) fn product<'a>(
    rows: usize,
    per_task: usize,
    lhs: impl Fn(usize, usize) -> View<'a> + Sync,
    rhs: View<'a>,
    alpha: f32,
) -> Vec<f32> {
    use rayon::prelude::*;
    let (k, n) = (rhs.rows, rhs.cols);
    if k == 0 || n == 0 || rows == 0 {
        return vec![0.0; rows * n];
    }
    assert!(rhs.fits(), "product: rhs runs past its slice");
    let per_task = per_task.max(1);
    let mut out = Vec::<f32>::with_capacity(rows * n);
    let run = |i: usize, block: &mut [std::mem::MaybeUninit<f32>]| {
        {
            let (r0, m) = (i * per_task, block.len() / n);
            let lhs = lhs(r0, m);
            assert!(
                lhs.rows == m && lhs.cols == k,
                "product: block {r0} is not {m} x {k}"
            );
            assert!(lhs.fits(), "product: lhs runs past its slice");
            // SAFETY: `block` holds `m * n` elements and gemm writes `r * n + c` for every
            // `r < m`, `c < n` (read_dst false, k > 0: dst := alpha * lhs * rhs, dst never
            // read); the views were checked to stay inside their slices. "Never read" is
            // gemm 0.19's behaviour on x86 and NEON (its experimental Apple AMX kernel, off
            // here, copies dst first); the workspace pins gemm =0.19.0 for this reason.
            #[allow(unsafe_code)]
            unsafe {
                raw_gemm(
                    m,
                    n,
                    k,
                    block.as_mut_ptr().cast(),
                    n,
                    false,
                    lhs,
                    rhs,
                    alpha,
                );
            }
        }
    };
    let blocks = &mut out.spare_capacity_mut()[..rows * n];
    if rows <= per_task {
        // One block: on this thread, without waking rayon's pool.
        run(0, blocks);
    } else {
        blocks
            .par_chunks_mut(per_task * n)
            .enumerate()
            .for_each(|(i, block)| run(i, block));
    }
    // SAFETY: the blocks cover `0..rows * n` and each was fully written above.
    #[allow(unsafe_code)]
    unsafe {
        out.set_len(rows * n);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// f64 triple loop over the same strided views.
    fn reference(lhs: View, rhs: View) -> Vec<f64> {
        let mut out = vec![0.0; lhs.rows * rhs.cols];
        for r in 0..lhs.rows {
            for c in 0..rhs.cols {
                for i in 0..lhs.cols {
                    out[r * rhs.cols + c] += lhs.data[r * lhs.rs + i * lhs.cs] as f64
                        * rhs.data[i * rhs.rs + c * rhs.cs] as f64;
                }
            }
        }
        out
    }

    #[test]
    fn strided_products_match_f64_and_accumulate() {
        let a: Vec<f32> = (0..35).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..35).map(|i| (i as f32 * 0.91).cos()).collect();
        // a is 5x7 row-major; b is 5x7 row-major, used transposed (7x5).
        let (lhs, rhs) = (View::rows(&a, 5, 7), View::rows_t(&b, 5, 7));
        let want = reference(lhs, rhs);
        let mut dst = vec![1.0f32; 25];
        matmul(&mut dst, 5, lhs, rhs, 2.0, false);
        for (d, w) in dst.iter().zip(&want) {
            assert!((*d as f64 - 2.0 * w).abs() < 1e-5, "{d} vs {}", 2.0 * w);
        }
        matmul(&mut dst, 5, lhs, rhs, 1.0, true);
        for (d, w) in dst.iter().zip(&want) {
            assert!((*d as f64 - 3.0 * w).abs() < 1e-5, "{d} vs {}", 3.0 * w);
        }
    }

    #[test]
    fn products_in_row_blocks_match_f64() {
        let a: Vec<f32> = (0..7 * 5).map(|i| (i as f32 * 0.3).cos()).collect();
        let b: Vec<f32> = (0..5 * 4).map(|i| (i as f32 * 0.7).sin()).collect();
        let want = reference(View::rows(&a, 7, 5), View::rows(&b, 5, 4));
        for per_task in [1, 3, 7, 100] {
            let got = product(
                7,
                per_task,
                |r0, m| View::rows(&a[r0 * 5..], m, 5),
                View::rows(&b, 5, 4),
                0.5,
            );
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (*g as f64 - 0.5 * w).abs() < 1e-5,
                    "per_task {per_task}: {g} vs {}",
                    0.5 * w
                );
            }
        }
    }

    /// Products on either side of gemm's packing threshold (`LHS_PACKING_THRESHOLD`: up to 192
    /// rows here read `rhs` in place, more pack it), with `rhs` plain and transposed.
    #[test]
    fn products_packed_or_read_in_place_match_f64() {
        let (k, n) = (70, 130);
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.21).sin()).collect();
        for m in [100, 300] {
            let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.13).cos()).collect();
            for rhs in [View::rows(&b, k, n), View::rows_t(&b, n, k)] {
                let want = reference(View::rows(&a, m, k), rhs);
                let mut dst = vec![0.0f32; m * n];
                matmul(&mut dst, n, View::rows(&a, m, k), rhs, 1.0, false);
                for (j, (d, w)) in dst.iter().zip(&want).enumerate() {
                    assert!((*d as f64 - w).abs() < 1e-4, "m {m} [{j}]: {d} vs {w}");
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "runs past")]
    fn a_view_past_its_slice_is_refused() {
        let a = vec![0.0f32; 10];
        let mut dst = vec![0.0f32; 16];
        matmul(
            &mut dst,
            4,
            View::rows(&a, 4, 4),
            View::rows(&a, 4, 4),
            1.0,
            false,
        );
    }
}

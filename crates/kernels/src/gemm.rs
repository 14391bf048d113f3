//! The one `unsafe` call of the workspace: `gemm::gemm` on strided views of slices, with every
//! index the kernel can touch checked against the slices first.

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
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
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

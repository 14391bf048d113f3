//! A linear layer on host memory: `y = x W (+ b)` and its two backward products, one `gemm`
//! each on the caller's buffers.

use rayon::prelude::*;

use crate::Precision;
use crate::bf16;
use crate::gemm::{View, matmul, product};

/// Fewest rows per task of a linear layer's products (`dW` has only `d_in` rows to share).
const LINEAR_ROWS: usize = 32;

/// Rows per rayon task for a `rows`-row product costing `work_per_row` each: one task when the
/// product is too small to share, else one per thread.
pub(crate) fn rows_per_task(rows: usize, work_per_row: usize) -> usize {
    let threads = rayon::current_num_threads();
    if threads > 1 && rows * work_per_row >= 1 << 21 {
        rows.div_ceil(threads).max(LINEAR_ROWS)
    } else {
        rows.max(1)
    }
}

/// `y = x W (+ b)` for `x [rows, d_in]`, `W [d_in, d_out]`, `b [d_out]`.
pub fn linear(
    x: &[f32],
    w: &[f32],
    b: Option<&[f32]>,
    d_in: usize,
    d_out: usize,
    precision: Precision,
) -> Vec<f32> {
    assert_eq!(w.len(), d_in * d_out, "linear: W is not [{d_in}, {d_out}]");
    let rows = x.len() / d_in;
    let per_task = rows_per_task(rows, d_in * d_out);
    let x_rows = |r0, m| View::rows(&x[r0 * d_in..], m, d_in);
    let w = View::rows(w, d_in, d_out);
    if precision == Precision::Bf16 {
        // W packed once, shared by every block of rows; the bias first, the product added.
        let w = bf16::pack_b(w);
        let mut y = b.map_or_else(|| vec![0.0; rows * d_out], |b| b.repeat(rows));
        y.par_chunks_mut(per_task * d_out)
            .enumerate()
            .for_each(|(i, y)| {
                let lhs = x_rows(i * per_task, y.len() / d_out);
                bf16::matmul_packed(y, d_out, lhs, &w, 1.0, b.is_some())
            });
        return y;
    }
    let Some(b) = b else {
        return product(rows, per_task, x_rows, w, 1.0);
    };
    // The bias first, then the product added to it.
    let mut y = b.repeat(rows);
    if per_task >= rows {
        matmul(&mut y, d_out, x_rows(0, rows), w, 1.0, true);
        return y;
    }
    y.par_chunks_mut(per_task * d_out)
        .enumerate()
        .for_each(|(i, y)| {
            matmul(
                y,
                d_out,
                x_rows(i * per_task, y.len() / d_out),
                w,
                1.0,
                true,
            )
        });
    y
}

/// `dx = d_y W^T`: `[rows, d_out] x [d_out, d_in]`.
pub fn linear_x_backward(
    d_y: &[f32],
    w: &[f32],
    d_in: usize,
    d_out: usize,
    precision: Precision,
) -> Vec<f32> {
    let rows = d_y.len() / d_out;
    let d_y_rows = |r0, m| View::rows(&d_y[r0 * d_out..], m, d_out);
    let per_task = rows_per_task(rows, d_in * d_out);
    let w_t = View::rows_t(w, d_in, d_out);
    match precision {
        Precision::F32 => product(rows, per_task, d_y_rows, w_t, 1.0),
        Precision::Bf16 => bf16::product(rows, per_task, d_y_rows, w_t, 1.0),
    }
}

/// `dW = x^T d_y`: `[d_in, rows] x [rows, d_out]`, split over the rows of `dW`.
pub fn linear_weight_backward(
    x: &[f32],
    d_y: &[f32],
    d_in: usize,
    d_out: usize,
    precision: Precision,
) -> Vec<f32> {
    let rows = x.len() / d_in;
    // Rows i0..i0 + m of x^T: column i of x is row i of x^T.
    let x_t = |i0: usize, m| View {
        data: &x[i0..],
        rows: m,
        cols: rows,
        rs: 1,
        cs: d_in,
    };
    let per_task = rows_per_task(d_in, rows * d_out);
    let d_y = View::rows(d_y, rows, d_out);
    match precision {
        Precision::F32 => product(d_in, per_task, x_t, d_y, 1.0),
        Precision::Bf16 => bf16::product(d_in, per_task, x_t, d_y, 1.0),
    }
}

/// Sum over rows of a `[rows, width]` matrix (a bias gradient).
pub fn column_sums(m: &[f32], width: usize) -> Vec<f32> {
    let mut sums = vec![0.0f32; width];
    for row in m.chunks_exact(width) {
        sums.iter_mut().zip(row).for_each(|(s, v)| *s += v);
    }
    sums
}

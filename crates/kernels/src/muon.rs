//! Muon's orthogonalisation on host memory: the Newton-Schulz quintic with every product on
//! headlab's gemm, each product's rows shared over rayon's pool, and the quintic's scalings
//! folded into the products (no separate passes over the matrices).

use rayon::prelude::*;

use crate::gemm::{View, matmul};
use crate::linear::rows_per_task;

/// `dst (r x n, row-major) = alpha * lhs * rhs`, plus what `dst` held with `accumulate`;
/// `lhs` row-major `r x rhs.rows`.
fn product_into(dst: &mut [f32], lhs: &[f32], rhs: View, alpha: f32, accumulate: bool) {
    let (k, n) = (rhs.rows, rhs.cols);
    let per_task = rows_per_task(dst.len() / n, k * n);
    dst.par_chunks_mut(per_task * n)
        .enumerate()
        .for_each(|(i, block)| {
            let lhs = View::rows(&lhs[i * per_task * k..], block.len() / n, k);
            matmul(block, n, lhs, rhs, alpha, accumulate);
        });
}

/// The Newton-Schulz iteration `X <- a X + (b A + c A A) X`, `A = X X^T`, `steps` times on
/// `g / |g|_F`, for `g` row-major `[m, n]`; worked on the wide side (`g^T` when `m > n`, so
/// that `A` is `min(m, n)` square) and returned in `g`'s layout. `(a, b, c)` are the
/// quintic's coefficients.
pub fn newton_schulz(
    g: &[f32],
    m: usize,
    n: usize,
    steps: usize,
    (a, b, c): (f32, f32, f32),
) -> Vec<f32> {
    assert_eq!(g.len(), m * n, "newton_schulz: g is not [{m}, {n}]");
    let tall = m > n;
    // [m, n] -> [n, m] when tall: rows r <= cols k.
    let (r, k) = if tall { (n, m) } else { (m, n) };
    let norm = g
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt() as f32;
    let scale = 1.0 / (norm + 1e-7);
    let mut x: Vec<f32> = if tall {
        (0..r * k).map(|i| g[(i % k) * n + i / k] * scale).collect()
    } else {
        g.iter().map(|&v| v * scale).collect()
    };
    let mut gram = vec![0.0f32; r * r];
    let mut poly = vec![0.0f32; r * r];
    let mut next = vec![0.0f32; r * k];
    for _ in 0..steps {
        // A = X X^T: [r, k] x [k, r].
        product_into(&mut gram, &x, View::rows_t(&x, r, k), 1.0, false);
        // P = b A + c A A.
        poly.par_iter_mut()
            .zip(&gram)
            .for_each(|(p, &v)| *p = b * v);
        product_into(&mut poly, &gram, View::rows(&gram, r, r), c, true);
        // X' = a X + P X.
        next.par_iter_mut().zip(&x).for_each(|(y, &v)| *y = a * v);
        product_into(&mut next, &poly, View::rows(&x, r, k), 1.0, true);
        std::mem::swap(&mut x, &mut next);
    }
    if tall {
        (0..m * n).map(|i| x[(i % n) * k + i / n]).collect()
    } else {
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same iteration written as plain loops in f64: the matrix products by their
    /// definition, the transpose by index.
    fn reference(
        g: &[f32],
        m: usize,
        n: usize,
        steps: usize,
        (a, b, c): (f64, f64, f64),
    ) -> Vec<f64> {
        let mul = |p: &[f64], q: &[f64], rows: usize, inner: usize, cols: usize| -> Vec<f64> {
            let mut out = vec![0.0; rows * cols];
            for i in 0..rows {
                for j in 0..cols {
                    out[i * cols + j] =
                        (0..inner).map(|t| p[i * inner + t] * q[t * cols + j]).sum();
                }
            }
            out
        };
        let t = |p: &[f64], rows: usize, cols: usize| -> Vec<f64> {
            (0..rows * cols)
                .map(|i| p[(i % rows) * cols + i / rows])
                .collect()
        };
        let g: Vec<f64> = g.iter().map(|&v| f64::from(v)).collect();
        let tall = m > n;
        let (r, k) = if tall { (n, m) } else { (m, n) };
        let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
        let mut x: Vec<f64> = if tall { t(&g, m, n) } else { g.clone() };
        x.iter_mut().for_each(|v| *v /= norm);
        for _ in 0..steps {
            let gram = mul(&x, &t(&x, r, k), r, k, r);
            let gram2 = mul(&gram, &gram, r, r, r);
            let poly: Vec<f64> = gram
                .iter()
                .zip(&gram2)
                .map(|(p, q)| b * p + c * q)
                .collect();
            let px = mul(&poly, &x, r, r, k);
            x = x.iter().zip(&px).map(|(v, w)| a * v + w).collect();
        }
        if tall { t(&x, r, k) } else { x }
    }

    #[test]
    fn newton_schulz_matches_the_iteration_in_f64() {
        let coefficients = (3.4445, -4.7750, 2.0315);
        let f32s = (3.4445f32, -4.7750f32, 2.0315f32);
        // Wide, tall, square, and large enough that rows are shared between tasks.
        for (m, n) in [(3, 5), (5, 3), (4, 4), (64, 200), (300, 70)] {
            let mut state = (m * 131 + n) as u64;
            let g: Vec<f32> = (0..m * n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
                })
                .collect();
            let got = newton_schulz(&g, m, n, 5, f32s);
            let want = reference(&g, m, n, 5, coefficients);
            let worst = got
                .iter()
                .zip(&want)
                .map(|(&x, y)| (f64::from(x) - y).abs())
                .fold(0.0, f64::max);
            let size = want.iter().map(|y| y.abs()).fold(0.0, f64::max);
            assert!(
                worst < 1e-4 * size.max(1.0),
                "{m}x{n}: {worst} (largest {size})"
            );
        }
    }
}

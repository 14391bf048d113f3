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
/// quintic's coefficients. Matrices whose long side is over 1.5 times the short one take the
/// iteration's Gram form ([`gram_iteration`]), the others the iteration as written.
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
    let x: Vec<f32> = if tall {
        (0..r * k).map(|i| g[(i % k) * n + i / k] * scale).collect()
    } else {
        g.iter().map(|&v| v * scale).collect()
    };
    let x = if 2 * k > 3 * r {
        gram_iteration(&x, r, k, steps, (a, b, c))
    } else {
        direct_iteration(x, r, k, steps, (a, b, c))
    };
    if tall {
        (0..m * n).map(|i| x[(i % n) * k + i / n]).collect()
    } else {
        x
    }
}

/// `poly = b A + c A A` for `gram` (`A`) row-major `[r, r]`: the quintic's polynomial without
/// its constant term, which the two forms add differently.
fn quadratic_into(poly: &mut [f32], gram: &[f32], r: usize, b: f32, c: f32) {
    poly.par_iter_mut().zip(gram).for_each(|(p, &v)| *p = b * v);
    product_into(poly, gram, View::rows(gram, r, r), c, true);
}

/// The iteration as written, on `x` row-major `[r, k]`: per step `2 r^2 k` for `A`, `2 r^3`
/// for `A A` and `2 r^2 k` for `P X`.
fn direct_iteration(
    mut x: Vec<f32>,
    r: usize,
    k: usize,
    steps: usize,
    (a, b, c): (f32, f32, f32),
) -> Vec<f32> {
    let mut gram = vec![0.0f32; r * r];
    let mut poly = vec![0.0f32; r * r];
    let mut next = vec![0.0f32; r * k];
    for _ in 0..steps {
        // A = X X^T: [r, k] x [k, r].
        product_into(&mut gram, &x, View::rows_t(&x, r, k), 1.0, false);
        // P = b A + c A A.
        quadratic_into(&mut poly, &gram, r, b, c);
        // X' = a X + P X.
        next.par_iter_mut().zip(&x).for_each(|(y, &v)| *y = a * v);
        product_into(&mut next, &poly, View::rows(&x, r, k), 1.0, true);
        std::mem::swap(&mut x, &mut next);
    }
    x
}

/// The same iteration in its Gram form, on `x0` row-major `[r, k]`: every iterate is
/// `X_s = Q_s X_0` with `Q_s` a polynomial in `A_0 = X_0 X_0^T`, so all of them commute and
/// `P_s = a I + b A_s + c A_s^2`, `Q_{s+1} = P_s Q_s`, `A_{s+1} = P_s^2 A_s` stay `[r, r]`.
/// Two products with `k` columns (`A_0` and `Q X_0`) and `4 steps - 3` of `[r, r]` in all,
/// against `2 steps` and `steps`: for 5 steps on a `[128, 512]` matrix, 105 MFLOP against
/// 189. Its rounding errs by up to about 1e-3 of the largest entry on badly conditioned
/// matrices (tested), where `A_0`'s rounding in small directions meets `Q`'s steep slope
/// there: fine for an update direction (GPU Muon runs the iteration in bf16).
fn gram_iteration(
    x0: &[f32],
    r: usize,
    k: usize,
    steps: usize,
    (a, b, c): (f32, f32, f32),
) -> Vec<f32> {
    let mut gram = vec![0.0f32; r * r];
    let mut poly = vec![0.0f32; r * r];
    let mut tmp = vec![0.0f32; r * r];
    // A_0 = X_0 X_0^T: [r, k] x [k, r].
    product_into(&mut gram, x0, View::rows_t(x0, r, k), 1.0, false);
    let mut q: Option<Vec<f32>> = None;
    for step in 0..steps {
        // P = a I + b A + c A A.
        quadratic_into(&mut poly, &gram, r, b, c);
        for i in 0..r {
            poly[i * r + i] += a;
        }
        // Q = P Q (Q_0 = I).
        q = Some(match q {
            None => poly.clone(),
            Some(q) => {
                product_into(&mut tmp, &poly, View::rows(&q, r, r), 1.0, false);
                std::mem::replace(&mut tmp, q)
            }
        });
        if step + 1 < steps {
            // A = P (P A).
            product_into(&mut tmp, &poly, View::rows(&gram, r, r), 1.0, false);
            product_into(&mut gram, &poly, View::rows(&tmp, r, r), 1.0, false);
        }
    }
    let Some(q) = q else {
        return x0.to_vec();
    };
    // X = Q X_0: [r, r] x [r, k].
    let mut x = vec![0.0f32; r * k];
    product_into(&mut x, &q, View::rows(x0, r, k), 1.0, false);
    x
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

    /// `U diag(s) V^T` for orthonormal `U [m, r]`, `V [n, r]` (Gram-Schmidt on seeded random
    /// columns, in f64) and the given singular values: the badly conditioned gradients where
    /// the Gram form's rounding is worst.
    fn with_spectrum(m: usize, n: usize, s: &[f64], seed: u64) -> Vec<f32> {
        let mut state = seed;
        let mut columns = |rows: usize| -> Vec<Vec<f64>> {
            let mut q: Vec<Vec<f64>> = Vec::new();
            while q.len() < s.len() {
                let mut c: Vec<f64> = (0..rows)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
                    })
                    .collect();
                for _ in 0..2 {
                    for e in &q {
                        let dot: f64 = c.iter().zip(e).map(|(a, b)| a * b).sum();
                        c.iter_mut().zip(e).for_each(|(a, b)| *a -= dot * b);
                    }
                }
                let norm = c.iter().map(|v| v * v).sum::<f64>().sqrt();
                q.push(c.into_iter().map(|v| v / norm).collect());
            }
            q
        };
        let (u, v) = (columns(m), columns(n));
        (0..m * n)
            .map(|i| {
                let (row, col) = (i / n, i % n);
                s.iter()
                    .enumerate()
                    .map(|(j, sj)| sj * u[j][row] * v[j][col])
                    .sum::<f64>() as f32
            })
            .collect()
    }

    #[test]
    fn the_gram_form_holds_on_badly_conditioned_matrices() {
        let f32s = (3.4445f32, -4.7750f32, 2.0315f32);
        // Singular values from 1 down to 1e-4, and a rank-2 matrix plus 1e-3 noise; wide and
        // tall, both on the Gram form.
        let decaying: Vec<f64> = (0..24)
            .map(|i| 10f64.powf(-4.0 * i as f64 / 23.0))
            .collect();
        let mut rank2 = vec![1.0, 0.5];
        rank2.extend(std::iter::repeat_n(1e-3, 22));
        for (m, n, s) in [(24, 80, &decaying), (80, 24, &decaying), (24, 80, &rank2)] {
            let g = with_spectrum(m, n, s, (m * 7 + n) as u64);
            let got = newton_schulz(&g, m, n, 5, f32s);
            let want = reference(&g, m, n, 5, (3.4445, -4.7750, 2.0315));
            let worst = got
                .iter()
                .zip(&want)
                .map(|(&x, y)| (f64::from(x) - y).abs())
                .fold(0.0, f64::max);
            let size = want.iter().map(|y| y.abs()).fold(0.0, f64::max);
            eprintln!(
                "{m}x{n}: worst {worst:e}, largest {size}, ratio {:e}",
                worst / size
            );
            assert!(worst < 1e-3 * size, "{m}x{n}: {worst} (largest {size})");
        }
    }

    #[test]
    fn newton_schulz_matches_the_iteration_in_f64() {
        let coefficients = (3.4445, -4.7750, 2.0315);
        let f32s = (3.4445f32, -4.7750f32, 2.0315f32);
        // Wide, tall, square, and large enough that rows are shared between tasks; the Gram
        // form where one side is over 1.5 times the other, the direct form for the rest.
        for (m, n) in [(3, 5), (5, 3), (4, 4), (64, 200), (300, 70), (90, 120)] {
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

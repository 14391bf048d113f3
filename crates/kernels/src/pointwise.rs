//! GELU and LayerNorm on host memory, forward and backward, each one pass over the data
//! instead of the chain of primitive ops (and their autodiff nodes) Burn runs under autodiff.

use rayon::prelude::*;

use std::mem::MaybeUninit;

use crate::fresh::fresh;
use crate::gemm::{View, matmul, product};
use crate::simd::exp;

/// Rows per rayon task: small tensors stay on one thread.
const ROWS_PER_TASK: usize = 64;

/// Elements per rayon task for the elementwise GELU.
const CHUNK: usize = 16 * 1024;

/// `(Phi(x), phi(x))`: the standard normal CDF and density. `Phi` via Abramowitz & Stegun
/// 7.1.26 for `erfc` (absolute error below 1.5e-7, the formula PyTorch's vectorised CPU `erf`
/// uses), computed as `erfc` on the negative side so small tails do not cancel.
#[inline(always)]
fn normal_cdf_pdf(x: f32) -> (f32, f32) {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_7,
        -1.453_152,
        1.061_405_4,
    ];
    const INV_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
    const INV_SQRT_2PI: f32 = 0.398_942_3;
    let z = x.abs() * INV_SQRT_2;
    let t = 1.0 / (1.0 + P * z);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let gauss = exp(-z * z); // = exp(-x^2 / 2)
    let half_erfc = 0.5 * poly * gauss;
    let cdf = if x >= 0.0 { 1.0 - half_erfc } else { half_erfc };
    (cdf, gauss * INV_SQRT_2PI)
}

crate::simd::dispatch! {
    fn gelu_slice / gelu_slice_baseline(x: &[f32], y: &mut [MaybeUninit<f32>]) {
        assert_eq!(x.len(), y.len(), "gelu: chunk lengths differ");
        for (y, &x) in y.iter_mut().zip(x) {
            y.write(x * normal_cdf_pdf(x).0);
        }
    }
}

crate::simd::dispatch! {
    fn gelu_derivative_slice / gelu_derivative_slice_baseline(
        x: &[f32],
        y: &mut [MaybeUninit<f32>],
        derivative: &mut [MaybeUninit<f32>],
    ) {
        assert!(x.len() == y.len() && x.len() == derivative.len(), "gelu: chunk lengths differ");
        for ((y, d), &x) in y.iter_mut().zip(derivative.iter_mut()).zip(x) {
            let (cdf, pdf) = normal_cdf_pdf(x);
            y.write(x * cdf);
            d.write(cdf + x * pdf);
        }
    }
}

/// Exact (erf) GELU, `x * Phi(x)`, what `torch.nn.GELU()` computes.
pub fn gelu(x: &[f32]) -> Vec<f32> {
    let ([mut y], _) = fresh([(x.len(), CHUNK)], |i, [y]| {
        gelu_slice(&x[i * CHUNK..][..y.len()], y)
    });
    tanh_gelu_if_mutated(x, &mut y);
    y
}

/// The `TanhGelu` test mutation: GELU's tanh approximation written over `y`.
fn tanh_gelu_if_mutated(x: &[f32], y: &mut [f32]) {
    if crate::switch::mutated(crate::Mutation::TanhGelu) {
        const C: f32 = 0.797_884_6; // sqrt(2 / pi)
        for (y, &x) in y.iter_mut().zip(x) {
            *y = 0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh());
        }
    }
}

/// [`gelu`] and its derivative `gelu'(x) = Phi(x) + x phi(x)` from the same `Phi` and `phi`:
/// the backward is then one product ([`gelu_backward`]) instead of a second pass of `erfc`
/// and `exp`, and keeps `gelu'` in place of the input.
pub fn gelu_with_derivative(x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let n = x.len();
    let ([y, derivative], _) = fresh([(n, CHUNK), (n, CHUNK)], |i, [y, d]| {
        gelu_derivative_slice(&x[i * CHUNK..][..y.len()], y, d)
    });
    let mut y = y;
    tanh_gelu_if_mutated(x, &mut y);
    (y, derivative)
}

/// `d_y * gelu'(x)`, from the derivative [`gelu_with_derivative`] kept.
pub fn gelu_backward(derivative: &[f32], d_y: &[f32]) -> Vec<f32> {
    assert_eq!(
        derivative.len(),
        d_y.len(),
        "gelu_backward: derivative and d_y differ in length"
    );
    derivative.iter().zip(d_y).map(|(d, g)| d * g).collect()
}

/// LayerNorm over the last dimension `d` of `x` (rows of `d`): `y = x_hat * gamma + beta`,
/// `x_hat = (x - mean) / sqrt(var + eps)` with the biased variance. Returns `y`, `x_hat` and
/// each row's `1 / sqrt(var + eps)` for the backward.
pub fn layer_norm(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let d = gamma.len();
    assert!(
        d > 0 && x.len().is_multiple_of(d),
        "layer_norm: x is not rows of {d}"
    );
    assert_eq!(beta.len(), d, "layer_norm: beta is not [{d}]");
    let (rows, task) = (x.len() / d, ROWS_PER_TASK * d);
    let shapes = [(x.len(), task), (x.len(), task), (rows, ROWS_PER_TASK)];
    let ([y, x_hat, rstd], _) = fresh(shapes, |i, [y, x_hat, rstd]| {
        layer_norm_rows(&x[i * task..][..y.len()], gamma, beta, eps, y, x_hat, rstd)
    });
    (y, x_hat, rstd)
}

crate::simd::dispatch! {
    fn layer_norm_rows / layer_norm_rows_baseline(
        x: &[f32],
        gamma: &[f32],
        beta: &[f32],
        eps: f32,
        y: &mut [MaybeUninit<f32>],
        x_hat: &mut [MaybeUninit<f32>],
        rstd: &mut [MaybeUninit<f32>],
    ) {
        let d = gamma.len();
        assert!(
            y.len() == x.len() && x_hat.len() == x.len() && rstd.len() * d == x.len(),
            "layer_norm: chunk lengths differ"
        );
        let rows = x.chunks_exact(d).zip(y.chunks_exact_mut(d).zip(x_hat.chunks_exact_mut(d)));
        for ((x, (y, x_hat)), rstd) in rows.zip(rstd) {
            let mean = crate::simd::sum(x) / d as f32;
            let var = crate::simd::centered_squares(x, mean) / d as f32;
            let r = 1.0 / (var + eps).sqrt();
            rstd.write(r);
            let outs = y.iter_mut().zip(x_hat.iter_mut());
            for ((y, h), ((&x, &g), &b)) in outs.zip(x.iter().zip(gamma).zip(beta)) {
                let normed = (x - mean) * r;
                h.write(normed);
                y.write(normed * g + b);
            }
        }
    }
}

/// Gradients `(dx, dgamma, dbeta)` of LayerNorm from the forward's `x_hat` and `rstd`:
/// `dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))` with `g = d_y * gamma`.
pub fn layer_norm_backward(
    d_y: &[f32],
    x_hat: &[f32],
    rstd: &[f32],
    gamma: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let d = gamma.len();
    assert_eq!(
        d_y.len(),
        x_hat.len(),
        "layer_norm_backward: d_y and x_hat differ"
    );
    assert_eq!(
        rstd.len() * d,
        x_hat.len(),
        "layer_norm_backward: rstd is not one per row"
    );
    let task = ROWS_PER_TASK * d;
    // Each task sums its rows' gamma and beta gradients; the partial sums are added after.
    let ([dx], partials) = fresh([(d_y.len(), task)], |i, [dx]| {
        let (mut dgamma, mut dbeta) = (vec![0.0f32; d], vec![0.0f32; d]);
        let rows = i * ROWS_PER_TASK..i * ROWS_PER_TASK + dx.len() / d;
        let (d_y, x_hat) = (&d_y[i * task..][..dx.len()], &x_hat[i * task..][..dx.len()]);
        layer_norm_backward_rows(d_y, x_hat, &rstd[rows], gamma, dx, &mut dgamma, &mut dbeta);
        (dgamma, dbeta)
    });
    let mut sums = partials.into_iter();
    let (mut dgamma, mut dbeta) = sums
        .next()
        .unwrap_or_else(|| (vec![0.0f32; d], vec![0.0f32; d]));
    for (g, b) in sums {
        dgamma.iter_mut().zip(&g).for_each(|(a, v)| *a += v);
        dbeta.iter_mut().zip(&b).for_each(|(a, v)| *a += v);
    }
    (dx, dgamma, dbeta)
}

crate::simd::dispatch! {
    fn layer_norm_backward_rows / layer_norm_backward_rows_baseline(
        d_y: &[f32],
        x_hat: &[f32],
        rstd: &[f32],
        gamma: &[f32],
        dx: &mut [MaybeUninit<f32>],
        dgamma: &mut [f32],
        dbeta: &mut [f32],
    ) {
        let d = gamma.len();
        assert!(
            d_y.len() == dx.len() && x_hat.len() == dx.len() && rstd.len() * d == dx.len(),
            "layer_norm_backward: chunk lengths differ"
        );
        let rows = d_y.chunks_exact(d).zip(x_hat.chunks_exact(d)).zip(dx.chunks_exact_mut(d));
        for (((d_y, x_hat), dx), &r) in rows.zip(rstd) {
            for i in 0..d {
                dgamma[i] += d_y[i] * x_hat[i];
                dbeta[i] += d_y[i];
            }
            // With g = d_y * gamma; sums in lanes, so the loops vectorise.
            let mean_g = crate::simd::dot(d_y, gamma) / d as f32;
            let mean_gx = crate::simd::dot3(d_y, gamma, x_hat) / d as f32;
            for (((dx, &dy), &g), &h) in dx.iter_mut().zip(d_y).zip(gamma).zip(x_hat) {
                dx.write(r * (dy * g - mean_g - h * mean_gx));
            }
        }
    }
}

/// Fewest rows per task of a linear layer's products (`dW` has only `d_in` rows to share).
const LINEAR_ROWS: usize = 32;

/// Rows per rayon task for a `rows`-row product costing `work_per_row` each: one task when the
/// product is too small to share, else one per thread.
fn rows_per_task(rows: usize, work_per_row: usize) -> usize {
    let threads = rayon::current_num_threads();
    if threads > 1 && rows * work_per_row >= 1 << 21 {
        rows.div_ceil(threads).max(LINEAR_ROWS)
    } else {
        rows.max(1)
    }
}

/// `y = x W (+ b)` for `x [rows, d_in]`, `W [d_in, d_out]`, `b [d_out]`.
pub fn linear(x: &[f32], w: &[f32], b: Option<&[f32]>, d_in: usize, d_out: usize) -> Vec<f32> {
    assert_eq!(w.len(), d_in * d_out, "linear: W is not [{d_in}, {d_out}]");
    let rows = x.len() / d_in;
    let per_task = rows_per_task(rows, d_in * d_out);
    let x_rows = |r0, m| View::rows(&x[r0 * d_in..], m, d_in);
    let w = View::rows(w, d_in, d_out);
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
pub fn linear_x_backward(d_y: &[f32], w: &[f32], d_in: usize, d_out: usize) -> Vec<f32> {
    let rows = d_y.len() / d_out;
    let d_y_rows = |r0, m| View::rows(&d_y[r0 * d_out..], m, d_out);
    let per_task = rows_per_task(rows, d_in * d_out);
    product(rows, per_task, d_y_rows, View::rows_t(w, d_in, d_out), 1.0)
}

/// `dW = x^T d_y`: `[d_in, rows] x [rows, d_out]`, split over the rows of `dW`.
pub fn linear_weight_backward(x: &[f32], d_y: &[f32], d_in: usize, d_out: usize) -> Vec<f32> {
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
    product(d_in, per_task, x_t, View::rows(d_y, rows, d_out), 1.0)
}

/// Sum over rows of a `[rows, width]` matrix (a bias gradient).
pub fn column_sums(m: &[f32], width: usize) -> Vec<f32> {
    let mut sums = vec![0.0f32; width];
    for row in m.chunks_exact(width) {
        sums.iter_mut().zip(row).for_each(|(s, v)| *s += v);
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gelu64(x: f64) -> f64 {
        0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
    }

    #[test]
    fn gelu_and_its_derivative_match_f64() {
        let xs: Vec<f32> = (0..40_001).map(|i| -10.0 + i as f32 * 5e-4).collect();
        let y = gelu(&xs);
        let (y_too, derivative) = gelu_with_derivative(&xs);
        assert_eq!(y, y_too, "gelu_with_derivative's values differ from gelu's");
        let grad_out: Vec<f32> = (0..xs.len()).map(|i| 1.0 + (i % 3) as f32).collect();
        let dy = gelu_backward(&derivative, &grad_out);
        let ([baseline], _) = fresh([(xs.len(), xs.len())], |_, [y]| gelu_slice_baseline(&xs, y));
        for (i, &x) in xs.iter().enumerate() {
            let x64 = x as f64;
            let want = gelu64(x64);
            // 1.5e-7 on Phi, times |x|, plus f32 rounding of the product.
            let tol = 1.5e-7 * x64.abs() + 2.0 * f32::EPSILON as f64 * want.abs() + 1e-12;
            assert!(
                (y[i] as f64 - want).abs() < tol,
                "gelu({x}) = {} vs {want}",
                y[i]
            );
            assert_eq!(
                y[i], baseline[i],
                "the AVX2 and baseline builds differ at {x}"
            );
            let h = 1e-4;
            let slope = (gelu64(x64 + h) - gelu64(x64 - h)) / (2.0 * h);
            let g = grad_out[i] as f64;
            assert!(
                (dy[i] as f64 - g * slope).abs() < 1e-6 * g,
                "{g} gelu'({x}) = {} vs {}",
                dy[i],
                g * slope
            );
        }
    }

    fn layer_norm64(x: &[f64], gamma: &[f64], beta: &[f64], eps: f64) -> Vec<f64> {
        let d = gamma.len();
        x.chunks(d)
            .flat_map(|row| {
                let mean = row.iter().sum::<f64>() / d as f64;
                let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
                let r = 1.0 / (var + eps).sqrt();
                (0..d)
                    .map(move |i| (row[i] - mean) * r * gamma[i] + beta[i])
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Values against f64, gradients against central differences of the f64 LayerNorm, for
    /// fewer rows than one task holds and more (so the partial sums of dgamma and dbeta are added).
    #[test]
    fn layer_norm_and_its_gradients_match_f64() {
        // 5 rows run on the calling thread, 150 on rayon's pool.
        for rows in [5, 150] {
            let (d, eps) = (13, 1e-5);
            let x: Vec<f32> = (0..rows * d)
                .map(|i| ((i * 7919 % 101) as f32 - 50.0) * 0.03)
                .collect();
            let gamma: Vec<f32> = (0..d).map(|i| 0.5 + i as f32 * 0.1).collect();
            let beta: Vec<f32> = (0..d).map(|i| i as f32 * -0.05).collect();
            let d_y: Vec<f32> = (0..rows * d)
                .map(|i| ((i * 31 % 17) as f32 - 8.0) * 0.1)
                .collect();
            let to64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
            let (x64, g64, b64, dy64) = (to64(&x), to64(&gamma), to64(&beta), to64(&d_y));
            let (y, x_hat, rstd) = layer_norm(&x, &gamma, &beta, eps as f32);
            for (a, b) in y.iter().zip(layer_norm64(&x64, &g64, &b64, eps)) {
                assert!((*a as f64 - b).abs() < 1e-5, "{a} vs {b}");
            }
            let (dx, dgamma, dbeta) = layer_norm_backward(&d_y, &x_hat, &rstd, &gamma);
            let loss = |x: &[f64], g: &[f64], b: &[f64]| -> f64 {
                layer_norm64(x, g, b, eps)
                    .iter()
                    .zip(&dy64)
                    .map(|(y, d)| y * d)
                    .sum()
            };
            let h = 1e-6;
            let numeric = |which: usize, i: usize| {
                let mut args = [x64.clone(), g64.clone(), b64.clone()];
                args[which][i] += h;
                let up = loss(&args[0], &args[1], &args[2]);
                args[which][i] -= 2.0 * h;
                (up - loss(&args[0], &args[1], &args[2])) / (2.0 * h)
            };
            for i in (0..dx.len()).step_by(11) {
                let want = numeric(0, i);
                assert!(
                    (dx[i] as f64 - want).abs() < 1e-3 * (1.0 + want.abs()),
                    "dx[{i}] {} vs {want}",
                    dx[i]
                );
            }
            for i in 0..d {
                let (wg, wb) = (numeric(1, i), numeric(2, i));
                assert!(
                    (dgamma[i] as f64 - wg).abs() < 1e-3 * (1.0 + wg.abs()),
                    "dgamma[{i}] {} vs {wg}",
                    dgamma[i]
                );
                assert!(
                    (dbeta[i] as f64 - wb).abs() < 1e-3 * (1.0 + wb.abs()),
                    "dbeta[{i}] {} vs {wb}",
                    dbeta[i]
                );
            }
        }
    }
}

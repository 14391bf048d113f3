//! LayerNorm on host memory, forward and backward: one pass over each row instead of the
//! chain of primitive ops (and their autodiff nodes) Burn runs under autodiff.

use std::mem::MaybeUninit;

use crate::uninit::fresh;

/// Rows per rayon task: small tensors stay on one thread.
const ROWS_PER_TASK: usize = 64;

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

#[cfg(test)]
mod tests {
    use super::*;

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

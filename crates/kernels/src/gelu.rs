//! Exact (erf) GELU on host memory, forward and backward, one pass over the data instead of the
//! chain of primitive ops (and their autodiff nodes) Burn runs under autodiff.

use std::mem::MaybeUninit;

use crate::simd::exp;
use crate::uninit::fresh;

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
    if crate::toggle::mutated(crate::Mutation::TanhGelu) {
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
    let ([dx], _) = fresh([(d_y.len(), CHUNK)], |i, [dx]| {
        let at = i * CHUNK..i * CHUNK + dx.len();
        for ((dx, d), g) in dx.iter_mut().zip(&derivative[at.clone()]).zip(&d_y[at]) {
            dx.write(d * g);
        }
    });
    dx
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
}

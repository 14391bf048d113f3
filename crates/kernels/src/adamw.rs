//! AdamW's update of one parameter as one pass over its values (in chunks on rayon's pool),
//! where Burn's tensor ops take a dozen passes and as many fresh (zero-filled) buffers (their
//! cost: bench/NOTES.md).

use std::mem::MaybeUninit;

use crate::uninit::fresh;

/// Elements per rayon task: a parameter of up to this size is updated on the calling thread.
const CHUNK: usize = 8 * 1024;

/// One AdamW step's settings for one parameter, with PyTorch's `torch.optim.AdamW` semantics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWStep {
    /// Learning rate of this step.
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Added to `sqrt(v_hat)`.
    pub eps: f64,
    /// Decoupled weight decay of this parameter (0 where it is not decayed).
    pub weight_decay: f64,
    /// Multiplies the gradient before anything else: the clipping factor, 1 without.
    pub grad_scale: f64,
    /// Updates made including this one (1 at the first), for the bias corrections.
    pub step: i32,
}

/// The step's scalars in f32, computed once per parameter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scalars {
    grad_scale: f32,
    beta1: f32,
    one_minus_beta1: f32,
    beta2: f32,
    one_minus_beta2: f32,
    /// `1 / (1 - beta1^t)`.
    m_correction: f32,
    /// `1 / (1 - beta2^t)`.
    v_correction: f32,
    eps: f32,
    lr: f32,
    /// `1 - lr * weight_decay`.
    keep: f32,
}

/// Adam's bias correction `1 / (1 - beta^t)`.
fn correction(beta: f64, step: i32) -> f32 {
    if crate::toggle::mutated(crate::Mutation::AdamWNoBiasCorrection) {
        return 1.0;
    }
    (1.0 / (1.0 - beta.powi(step))) as f32
}

impl Scalars {
    fn new(s: &AdamWStep) -> Self {
        Self {
            grad_scale: s.grad_scale as f32,
            beta1: s.beta1 as f32,
            one_minus_beta1: (1.0 - s.beta1) as f32,
            beta2: s.beta2 as f32,
            one_minus_beta2: (1.0 - s.beta2) as f32,
            m_correction: correction(s.beta1, s.step),
            v_correction: correction(s.beta2, s.step),
            eps: s.eps as f32,
            lr: s.lr as f32,
            keep: (1.0 - s.lr * s.weight_decay) as f32,
        }
    }
}

crate::simd::dispatch! {
    fn update / update_baseline(
        p: &[f32],
        g: &[f32],
        m: &[f32],
        v: &[f32],
        c: &Scalars,
        p_out: &mut [MaybeUninit<f32>],
        m_out: &mut [MaybeUninit<f32>],
        v_out: &mut [MaybeUninit<f32>],
    ) {
        let n = p.len();
        let lens = [g.len(), m.len(), v.len(), p_out.len(), m_out.len(), v_out.len()];
        assert!(lens.iter().all(|&l| l == n), "adamw: chunk lengths differ");
        // One pass; every slice cut to `n`, so the loop has no bounds checks and vectorises.
        let (p, g, m, v) = (&p[..n], &g[..n], &m[..n], &v[..n]);
        let (p_out, m_out, v_out) = (&mut p_out[..n], &mut m_out[..n], &mut v_out[..n]);
        for i in 0..n {
            let g = g[i] * c.grad_scale;
            let m = c.beta1 * m[i] + c.one_minus_beta1 * g;
            let v = c.beta2 * v[i] + c.one_minus_beta2 * (g * g);
            let denom = (v * c.v_correction).sqrt() + c.eps;
            p_out[i].write(p[i] * c.keep - c.lr * (m * c.m_correction) / denom);
            m_out[i].write(m);
            v_out[i].write(v);
        }
    }
}

/// One AdamW update: `(param, m, v)` after the step, from the parameter, its gradient and its
/// moments before it (zeros at the first step).
///
/// `m = beta1 m + (1 - beta1) g`, `v = beta2 v + (1 - beta2) g^2` with `g` the gradient times
/// `grad_scale`, then `param = param (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)` with the
/// bias-corrected `m_hat`, `v_hat`.
///
/// # Panics
/// If the four slices differ in length.
pub fn adamw(
    param: &[f32],
    grad: &[f32],
    m: &[f32],
    v: &[f32],
    step: &AdamWStep,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let n = param.len();
    assert!(
        grad.len() == n && m.len() == n && v.len() == n,
        "adamw: param, grad and moments differ in length"
    );
    let c = Scalars::new(step);
    // Chunks on rayon's pool: the optimizer walks the parameters one by one, so without them
    // the other threads would wait through every update.
    let ([p_out, m_out, v_out], _) = fresh([(n, CHUNK); 3], |i, [p_out, m_out, v_out]| {
        let at = i * CHUNK..i * CHUNK + p_out.len();
        update(
            &param[at.clone()],
            &grad[at.clone()],
            &m[at.clone()],
            &v[at],
            &c,
            p_out,
            m_out,
            v_out,
        );
    });
    (p_out, m_out, v_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The update written out in f64, element by element.
    fn reference(
        p: &[f32],
        g: &[f32],
        m: &[f32],
        v: &[f32],
        s: &AdamWStep,
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let mut out = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..p.len() {
            let g = f64::from(g[i]) * s.grad_scale;
            let m = s.beta1 * f64::from(m[i]) + (1.0 - s.beta1) * g;
            let v = s.beta2 * f64::from(v[i]) + (1.0 - s.beta2) * g * g;
            let m_hat = m / (1.0 - s.beta1.powi(s.step));
            let v_hat = v / (1.0 - s.beta2.powi(s.step));
            let p = f64::from(p[i]) * (1.0 - s.lr * s.weight_decay)
                - s.lr * m_hat / (v_hat.sqrt() + s.eps);
            out.0.push(p);
            out.1.push(m);
            out.2.push(v);
        }
        out
    }

    #[test]
    fn matches_the_update_written_out_in_f64() {
        // Two chunks and 1003 values (three tasks on rayon's pool, the last a remainder after
        // every vector width); gradients spanning zero and several magnitudes so the `eps`
        // term and the sign both matter.
        let n = 2 * CHUNK + 1003;
        let val = |i: usize, a: f32, b: f32| (i as f32 * a).sin() * b;
        let p: Vec<f32> = (0..n).map(|i| val(i, 0.37, 1.5)).collect();
        let g: Vec<f32> = (0..n)
            .map(|i| val(i, 1.13, 1.0) * 10f32.powi((i % 7) as i32 - 5))
            .collect();
        let m: Vec<f32> = (0..n).map(|i| val(i, 0.71, 0.01)).collect();
        let v: Vec<f32> = (0..n).map(|i| val(i, 0.53, 1e-4).abs()).collect();
        for (step, weight_decay, grad_scale) in [(1, 0.0, 1.0), (7, 0.1, 0.3)] {
            let s = AdamWStep {
                lr: 1e-3,
                beta1: 0.9,
                beta2: 0.99,
                eps: 1e-8,
                weight_decay,
                grad_scale,
                step,
            };
            let (m0, v0) = if step == 1 {
                (vec![0.0; n], vec![0.0; n])
            } else {
                (m.clone(), v.clone())
            };
            let (pp, mm, vv) = adamw(&p, &g, &m0, &v0, &s);
            let (rp, rm, rv) = reference(&p, &g, &m0, &v0, &s);
            for i in 0..n {
                let close = |a: f32, b: f64, what: &str| {
                    let tol = 1e-6 * b.abs().max(1e-2);
                    assert!(
                        (f64::from(a) - b).abs() <= tol,
                        "{what}[{i}] at step {step}: {a} vs f64 {b}"
                    );
                };
                close(pp[i], rp[i], "param");
                close(mm[i], rm[i], "m");
                // v can be as small as 1e-14: relative to itself.
                assert!(
                    (f64::from(vv[i]) - rv[i]).abs() <= 1e-6 * rv[i].abs() + 1e-30,
                    "v[{i}] at step {step}: {} vs f64 {}",
                    vv[i],
                    rv[i]
                );
            }
        }
    }
}

//! Scaled dot-product attention on its own: `softmax(Q K^T / sqrt(d_k) + mask) V`, what
//! every head computes and what PyTorch calls `scaled_dot_product_attention`.

use burn::tensor::activation::softmax;
use burn::tensor::{Bool, Tensor};

use crate::mask::causal_mask;
use crate::mha::MASKED_SCORE;

/// Post-softmax weights `softmax(q k^T / sqrt(d_k))`, masked causally (query `i` is the
/// `t_k - t_q + i`-th key, so a KV cache can pass fewer queries than keys) and, where given,
/// by a `[b, t_k]` padding mask (`true` = padding).
///
/// # Shapes
/// `q [b, h, t_q, d_k]`, `k [b, h, t_k, d_k]` -> `[b, h, t_q, t_k]`
pub fn attention_weights(
    q: Tensor<4>,
    k: Tensor<4>,
    causal: bool,
    padding: Option<Tensor<2, Bool>>,
) -> Tensor<4> {
    let [b, _, t_q, d_k] = q.dims();
    let t_k = k.dims()[2];
    let device = q.device();
    // [b, h, t_q, d_k] x [b, h, d_k, t_k] -> [b, h, t_q, t_k]
    let mut scores = q
        .matmul(k.transpose())
        .mul_scalar(1.0 / (d_k as f64).sqrt());
    if causal {
        let mask = causal_mask(t_q, t_k, &device);
        scores = scores.mask_fill(mask.unsqueeze::<4>(), MASKED_SCORE);
    }
    if let Some(padding) = padding {
        // [b, t_k] -> [b, 1, 1, t_k]
        scores = scores.mask_fill(padding.reshape([b, 1, 1, t_k]), MASKED_SCORE);
    }
    softmax(scores, 3)
}

/// `softmax(q k^T / sqrt(d_k) + causal mask) v`, materialising the `[t_q, t_k]` weights.
///
/// # Shapes
/// `q [b, h, t_q, d_k]`, `k, v [b, h, t_k, d_k]` -> `[b, h, t_q, d_k]`
pub fn scaled_dot_product_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    causal: bool,
) -> Tensor<4> {
    attention_weights(q, k, causal, None).matmul(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cpu_devices, max_abs_diff, random_tensor, rng, values, wgpu_device};

    /// `softmax(q k^T / sqrt(d)) v` per (batch, head, query) in f64, causal with queries
    /// aligned to the last keys.
    fn reference(q: &[f32], k: &[f32], v: &[f32], [b, h, t_q, t_k, d]: [usize; 5]) -> Vec<f32> {
        let mut out = vec![0.0f32; b * h * t_q * d];
        for bh in 0..b * h {
            for i in 0..t_q {
                let last = t_k - t_q + i;
                let qi = &q[(bh * t_q + i) * d..][..d];
                let scores: Vec<f64> = (0..=last)
                    .map(|j| {
                        let kj = &k[(bh * t_k + j) * d..][..d];
                        let dot: f64 = qi.iter().zip(kj).map(|(a, b)| f64::from(a * b)).sum();
                        dot / (d as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..d {
                    let o: f64 = (0..=last)
                        .map(|j| e[j] / z * f64::from(v[(bh * t_k + j) * d + c]))
                        .sum();
                    out[(bh * t_q + i) * d + c] = o as f32;
                }
            }
        }
        out
    }

    #[test]
    fn matches_f64_attention_on_every_backend_including_fewer_queries_than_keys() {
        let mut devices = cpu_devices();
        devices.extend(wgpu_device().map(|d| ("wgpu", d)));
        for (name, device) in devices {
            for (t_q, t_k) in [(7, 7), (3, 9)] {
                let (b, h, d) = (2, 3, 5);
                let mut r = rng(11);
                let q = random_tensor(&mut r, [b, h, t_q, d], &device);
                let k = random_tensor(&mut r, [b, h, t_k, d], &device);
                let v = random_tensor(&mut r, [b, h, t_k, d], &device);
                let expected = reference(
                    &values(q.clone()),
                    &values(k.clone()),
                    &values(v.clone()),
                    [b, h, t_q, t_k, d],
                );
                let got = values(scaled_dot_product_attention(q, k, v, true));
                let err = max_abs_diff(&got, &expected);
                assert!(err < 1e-5, "{name} t_q {t_q} t_k {t_k}: {err}");
            }
        }
    }
}

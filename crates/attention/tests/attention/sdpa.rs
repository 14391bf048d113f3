//! The attention paths (naive, fused, flash) against an f64 per-query reference.

use crate::common::{cpu_devices, max_abs_diff, random_tensor, rng, wgpu_device};
use burn::tensor::Tensor;
use headlab_attention::*;
use headlab_kernels::to_host;

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

type Attention = fn(Tensor<4>, Tensor<4>, Tensor<4>, bool) -> Tensor<4>;

/// Every implementation against f64, at sizes on both sides of flex's switch from its
/// naive to its tiled kernel (256K score elements, 64-key tiles), with lengths that are
/// not multiples of the tile, and with fewer queries than keys (a KV cache).
#[test]
fn every_kernel_matches_f64_attention_on_every_backend() {
    let mut devices = cpu_devices();
    devices.extend(wgpu_device().map(|d| ("wgpu", d)));
    let kernels: [(&str, Attention); 4] = [
        ("naive", naive_attention),
        ("fused", fused_attention),
        ("flash", flash_attention),
        ("auto", scaled_dot_product_attention),
    ];
    for (name, device) in devices {
        // On wgpu every new shape compiles and tunes kernels (seconds each on lavapipe): one,
        // with fewer queries than keys and both lengths past a 64-wide tile.
        let sizes: &[(usize, usize)] = if name == "wgpu" {
            &[(67, 131)]
        } else {
            &[(7, 7), (3, 9), (70, 70), (600, 600), (5, 1100)]
        };
        for (&(t_q, t_k), (kernel, attend)) in sizes
            .iter()
            .flat_map(|s| kernels.iter().map(move |k| (s, k)))
        {
            let (b, h, d) = if t_k > 500 { (1, 2, 8) } else { (2, 3, 5) };
            let mut r = rng(11);
            let q = random_tensor(&mut r, [b, h, t_q, d], &device);
            let k = random_tensor(&mut r, [b, h, t_k, d], &device);
            let v = random_tensor(&mut r, [b, h, t_k, d], &device);
            let expected = reference(
                &to_host::<f32, _>(q.clone()),
                &to_host::<f32, _>(k.clone()),
                &to_host::<f32, _>(v.clone()),
                [b, h, t_q, t_k, d],
            );
            let got = to_host::<f32, _>(attend(q, k, v, true));
            let err = max_abs_diff(&got, &expected);
            assert!(err < 1e-5, "{name} {kernel} t_q {t_q} t_k {t_k}: {err}");
        }
    }
}

/// Flash's hand-written backward against Burn's autodiff through the naive ops (whose
/// gradients `tests.rs` checks against finite differences of f64 attention): values and
/// the gradients of q, k and v, across query blocks (64 rows), with t not a multiple of the
/// block, fewer queries than keys, non-causal, and inputs that are strided views.
#[test]
fn flash_gradients_match_autodiff_through_the_naive_ops() {
    for (name, device) in cpu_devices() {
        let device = device.autodiff();
        for (t_q, t_k, causal) in [
            (1, 1, true),
            (9, 9, true),
            (130, 130, true),
            (5, 70, true),
            (20, 33, false),
        ] {
            let (b, h, d) = (2, 3, 8);
            let mut r = rng(5);
            let q0 = random_tensor(&mut r, [b, t_q, h, d], &device);
            let k0 = random_tensor(&mut r, [b, t_k, h, d], &device);
            let v0 = random_tensor(&mut r, [b, t_k, h, d], &device);
            let g = random_tensor(&mut r, [b, h, t_q, d], &device);
            let run = |attend: Attention| {
                let (q, k, v) = (
                    q0.clone().require_grad(),
                    k0.clone().require_grad(),
                    v0.clone().require_grad(),
                );
                // [b, t, h, d] -> [b, h, t, d]: strided views, as the model passes them
                let out = attend(
                    q.clone().swap_dims(1, 2),
                    k.clone().swap_dims(1, 2),
                    v.clone().swap_dims(1, 2),
                    causal,
                );
                let grads = out.clone().mul(g.clone()).sum().backward();
                [
                    out.inner(),
                    q.grad(&grads).unwrap().reshape([b, h, t_q, d]),
                    k.grad(&grads).unwrap().reshape([b, h, t_k, d]),
                    v.grad(&grads).unwrap().reshape([b, h, t_k, d]),
                ]
                .map(to_host::<f32, _>)
            };
            let (want, got) = (run(naive_attention), run(flash_attention));
            for (what, (w, g)) in ["out", "dq", "dk", "dv"].iter().zip(want.iter().zip(&got)) {
                let err = max_abs_diff(g, w);
                assert!(
                    err < 1e-5,
                    "{name} t_q {t_q} t_k {t_k} causal {causal}: {what} differs by {err}"
                );
            }
        }
    }
}

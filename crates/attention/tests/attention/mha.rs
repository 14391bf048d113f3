//! Multi-head attention against independent references (a per-head loop, f64 math), on every
//! backend.

use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor, TensorData};
use headlab_kernels::to_host;
use rand::rngs::StdRng;

use crate::common::*;
use headlab_attention::mha::{AttentionOptions, MultiHeadAttention, MultiHeadAttentionConfig};
use headlab_attention::reference::{HostAttention, per_head_loop};
use headlab_attention::{AttentionConfigError, padding_mask};

/// A module with random O(1) weights and biases, so differences are not hidden by GPT-2's
/// tiny initialisation.
fn random_mha(
    config: &MultiHeadAttentionConfig,
    rng: &mut StdRng,
    device: &Device,
) -> MultiHeadAttention {
    let mut mha = config.init(device).expect("valid config");
    for linear in [
        &mut mha.q_proj,
        &mut mha.k_proj,
        &mut mha.v_proj,
        &mut mha.o_proj,
    ] {
        randomize_linear(linear, rng, 0.5, device);
    }
    mha
}

/// (b, t, d_model, n_heads, n_kv_heads) covering h = 1, h = d, odd sizes and GQA.
const SHAPES: [(usize, usize, usize, usize, usize); 7] = [
    (2, 5, 8, 1, 1),
    (2, 5, 8, 2, 2),
    (1, 7, 12, 3, 3),
    (3, 4, 8, 8, 8),
    (2, 6, 16, 4, 2),
    (2, 6, 16, 4, 1),
    (1, 9, 6, 6, 3),
];

#[test]
fn batched_equals_per_head_loop_and_f64() {
    for (name, device) in cpu_devices() {
        let mut rng = rng(1);
        for (i, &(b, t, d, h, kv)) in SHAPES.iter().enumerate() {
            for (causal, bias, padded) in [
                (true, true, false),
                (false, false, true),
                (true, true, true),
            ] {
                let config = MultiHeadAttentionConfig::new(d, h)
                    .with_n_kv_heads(Some(kv))
                    .with_causal(causal)
                    .with_bias(bias);
                let mha = random_mha(&config, &mut rng, &device);
                let x_host = random_vec(&mut rng, b * t * d);
                let x = Tensor::<3>::from_data(TensorData::new(x_host.clone(), [b, t, d]), &device);
                let lengths: Vec<usize> = (0..b).map(|i| t - (i % t.min(3))).collect();
                let lengths = padded.then_some(lengths.as_slice());
                let head_mask: Vec<f32> = (0..h).map(|j| 1.0 - 0.3 * (j % 3) as f32).collect();

                let options = AttentionOptions {
                    padding_mask: lengths.map(|l| padding_mask(l, t, &device)),
                    head_mask: Some(Tensor::from_data(
                        TensorData::new(head_mask.clone(), [h]),
                        &device,
                    )),
                    return_weights: true,
                    ..AttentionOptions::default()
                };
                let out = mha.forward_with(x.clone(), options);
                let (got, got_w) = (
                    to_host::<f32, _>(out.output),
                    to_host::<f32, _>(out.weights.unwrap()),
                );

                let (loop_out, loop_w) = per_head_loop(&mha, x, lengths, Some(&head_mask));
                let host = HostAttention::from_module(&mha);
                let x64: Vec<f64> = x_host.iter().map(|&v| v as f64).collect();
                let m64: Vec<f64> = head_mask.iter().map(|&v| v as f64).collect();
                let (ref_out, ref_w) = host.forward(&x64, b, t, lengths, Some(&m64));
                let ref_out: Vec<f32> = ref_out.iter().map(|&v| v as f32).collect();
                let ref_w: Vec<f32> = ref_w.iter().map(|&v| v as f32).collect();

                let case = format!(
                    "{name} case {i} (b={b} t={t} d={d} h={h} kv={kv} causal={causal} bias={bias} padded={padded})"
                );
                assert!(
                    max_abs_diff(&got, &ref_out) < 1e-4,
                    "{case}: output vs f64 {}",
                    max_abs_diff(&got, &ref_out)
                );
                assert!(
                    max_abs_diff(&got_w, &ref_w) < 1e-5,
                    "{case}: weights vs f64"
                );
                assert!(
                    max_abs_diff(&to_host::<f32, _>(loop_out), &ref_out) < 1e-4,
                    "{case}: loop vs f64"
                );
                assert!(
                    max_abs_diff(&to_host::<f32, _>(loop_w), &ref_w) < 1e-5,
                    "{case}: loop weights vs f64"
                );
            }
        }
    }
}

#[test]
fn equals_burn_multi_head_attention_with_copied_weights() {
    for (name, device) in cpu_devices() {
        let mut rng = rng(2);
        let (b, t, d, h) = (2, 6, 16, 4);
        let ours = random_mha(&MultiHeadAttentionConfig::new(d, h), &mut rng, &device);
        let mut burns = burn::nn::attention::MultiHeadAttentionConfig::new(d, h)
            .with_dropout(0.0)
            .init(&device);
        burns.query = ours.q_proj.clone();
        burns.key = ours.k_proj.clone();
        burns.value = ours.v_proj.clone();
        burns.output = ours.o_proj.clone();

        let x = random_tensor(&mut rng, [b, t, d], &device);
        let causal = headlab_attention::causal_mask(t, t, &device)
            .unsqueeze::<3>()
            .expand([b, t, t]);
        let input = burn::nn::attention::MhaInput::self_attn(x.clone()).mask_attn(causal);
        let expected = burns.forward(input);
        let got = ours.forward_with(x, AttentionOptions::with_weights());
        let diff = max_abs_diff(
            &to_host::<f32, _>(got.output),
            &to_host::<f32, _>(expected.context),
        );
        assert!(diff < 1e-5, "{name}: output differs from burn-nn by {diff}");
        let diff = max_abs_diff(
            &to_host::<f32, _>(got.weights.unwrap()),
            &to_host::<f32, _>(expected.weights),
        );
        assert!(diff < 1e-6, "{name}: weights differ from burn-nn by {diff}");
    }
}

#[test]
fn parameter_count_does_not_depend_on_heads() {
    let device = &cpu_devices()[0].1;
    let d = 32;
    for h in [1, 2, 4, 8] {
        let mha = MultiHeadAttentionConfig::new(d, h).init(device).unwrap();
        // Four d x d projections with biases, however the columns are split into heads.
        assert_eq!(mha.num_params(), 4 * (d * d + d), "h = {h}");
    }
    // Grouped-query attention shrinks K and V only.
    let gqa = MultiHeadAttentionConfig::new(d, 8)
        .with_n_kv_heads(Some(2))
        .init(device)
        .unwrap();
    let d_kv = 2 * (d / 8);
    assert_eq!(gqa.num_params(), 2 * (d * d + d) + 2 * (d * d_kv + d_kv));
}

#[test]
fn causal_outputs_ignore_the_future_and_weights_are_a_lower_triangle() {
    for (name, device) in cpu_devices() {
        let mut rng = rng(3);
        let (b, t, d, h) = (2, 7, 12, 3);
        let mha = random_mha(&MultiHeadAttentionConfig::new(d, h), &mut rng, &device);
        let x = random_tensor(&mut rng, [b, t, d], &device);
        let base = mha.forward_with(x.clone(), AttentionOptions::with_weights());
        let w = to_host::<f32, _>(base.weights.unwrap());
        for row in w.chunks(t).enumerate() {
            let (r, row) = row;
            let i = r % t;
            let sum: f32 = row.iter().sum();
            assert!((sum - 1.0).abs() < 1e-5, "{name}: row {r} sums to {sum}");
            assert!(
                row[i + 1..].iter().all(|&v| v == 0.0),
                "{name}: row {r} looks ahead"
            );
        }
        let base = to_host::<f32, _>(base.output);
        for i in 0..t - 1 {
            // Replace everything after position i.
            let future = random_tensor(&mut rng, [b, t - i - 1, d], &device);
            let changed = x.clone().slice_assign([0..b, i + 1..t, 0..d], future);
            let out = to_host::<f32, _>(mha.forward(changed));
            for bi in 0..b {
                for p in 0..=i {
                    let at = |v: &[f32]| v[(bi * t + p) * d..(bi * t + p + 1) * d].to_vec();
                    let diff = max_abs_diff(&at(&out), &at(&base));
                    assert!(
                        diff < 1e-6,
                        "{name}: position {p} changed by {diff} after editing > {i}"
                    );
                }
                // And the future did change, so the test can see a leak.
                let last = (bi * t + t - 1) * d;
                assert!(max_abs_diff(&out[last..last + d], &base[last..last + d]) > 1e-4);
            }
        }
    }
}

#[test]
fn padded_keys_get_zero_weight() {
    for (name, device) in cpu_devices() {
        let mut rng = rng(4);
        let (b, t, d, h) = (3, 6, 8, 2);
        let config = MultiHeadAttentionConfig::new(d, h).with_causal(false);
        let mha = random_mha(&config, &mut rng, &device);
        let lengths = [6, 4, 1];
        let options = AttentionOptions {
            padding_mask: Some(padding_mask(&lengths, t, &device)),
            ..AttentionOptions::with_weights()
        };
        let w = to_host::<f32, _>(
            mha.forward_with(random_tensor(&mut rng, [b, t, d], &device), options)
                .weights
                .unwrap(),
        );
        for (r, row) in w.chunks(t).enumerate() {
            let len = lengths[r / (h * t)];
            assert!(
                row[len..].iter().all(|&v| v == 0.0),
                "{name}: padded key weighted in row {r}"
            );
            let sum: f32 = row.iter().sum();
            assert!((sum - 1.0).abs() < 1e-5, "{name}: row {r} sums to {sum}");
        }
    }
}

#[test]
fn head_mask_ablates_exactly_one_slice_of_the_concat() {
    for (name, device) in cpu_devices() {
        let mut rng = rng(5);
        let (b, t, d, h) = (2, 5, 12, 3);
        let d_k = d / h;
        let mut mha = random_mha(&MultiHeadAttentionConfig::new(d, h), &mut rng, &device);
        // W_O = I and no bias, so the output is the concat of the heads.
        mha.o_proj.weight = Param::from_tensor(Tensor::eye(d, &device));
        mha.o_proj.bias = None;
        let x = random_tensor(&mut rng, [b, t, d], &device);
        let mask = |m: Vec<f32>| AttentionOptions {
            head_mask: Some(Tensor::from_data(TensorData::new(m, [h]), &device)),
            ..AttentionOptions::default()
        };
        let plain = to_host::<f32, _>(mha.forward(x.clone()));
        let ones = to_host::<f32, _>(mha.forward_with(x.clone(), mask(vec![1.0; h])).output);
        assert_eq!(
            plain, ones,
            "{name}: a head mask of ones changed the output"
        );
        // Captured head outputs are the concat, head by head: [b, h, t, d_k] vs [b, t, h * d_k].
        let captured = mha.forward_with(
            x.clone(),
            AttentionOptions {
                return_head_outputs: true,
                ..AttentionOptions::default()
            },
        );
        let heads = to_host::<f32, _>(captured.head_outputs.unwrap());
        for (idx, &p) in plain.iter().enumerate() {
            let (bt, col) = (idx / d, idx % d);
            let (bi, ti, hi, c) = (bt / t, bt % t, col / d_k, col % d_k);
            assert_eq!(
                heads[((bi * h + hi) * t + ti) * d_k + c],
                p,
                "{name}: head output {idx}"
            );
        }
        // Mean ablation: mask 0 plus the head's mean output puts that mean in its slice.
        let mean: Vec<f32> = (0..d_k)
            .map(|c| (0..b * t).map(|bt| plain[bt * d + d_k + c]).sum::<f32>() / (b * t) as f32)
            .collect();
        let mut bias = vec![0.0f32; h * d_k];
        bias[d_k..2 * d_k].copy_from_slice(&mean);
        let mut m = vec![1.0; h];
        m[1] = 0.0;
        let options = AttentionOptions {
            head_bias: Some(Tensor::from_data(TensorData::new(bias, [h, d_k]), &device)),
            ..mask(m)
        };
        let out = to_host::<f32, _>(mha.forward_with(x.clone(), options).output);
        for (idx, (&o, &p)) in out.iter().zip(&plain).enumerate() {
            let col = idx % d;
            let want = if col / d_k == 1 { mean[col % d_k] } else { p };
            assert!(
                (o - want).abs() < 1e-6,
                "{name}: mean ablation at column {col}"
            );
        }
        for j in 0..h {
            let mut m = vec![1.0; h];
            m[j] = 0.0;
            let out = to_host::<f32, _>(mha.forward_with(x.clone(), mask(m)).output);
            for (idx, (&o, &p)) in out.iter().zip(&plain).enumerate() {
                let col = idx % d;
                if col / d_k == j {
                    assert_eq!(o, 0.0, "{name}: head {j} not ablated at column {col}");
                } else {
                    assert_eq!(o, p, "{name}: ablating head {j} changed column {col}");
                }
            }
        }
    }
}

#[test]
fn grouped_query_equals_multi_head_with_repeated_kv_weights() {
    for (name, device) in cpu_devices() {
        let mut rng = rng(6);
        let (b, t, d, h, kv) = (2, 5, 16, 4, 2);
        let d_k = d / h;
        let gqa = random_mha(
            &MultiHeadAttentionConfig::new(d, h).with_n_kv_heads(Some(kv)),
            &mut rng,
            &device,
        );
        let mut mha = MultiHeadAttentionConfig::new(d, h).init(&device).unwrap();
        mha.q_proj = gqa.q_proj.clone();
        mha.o_proj = gqa.o_proj.clone();
        // Query head j reads K/V head j / (h / kv): tile those columns.
        let tile = |linear: &burn::nn::Linear| {
            let w = linear.weight.val();
            let bias = linear.bias.as_ref().unwrap().val();
            let cols = |j: usize| (j / (h / kv)) * d_k..(j / (h / kv) + 1) * d_k;
            let mut out = linear.clone();
            out.weight = Param::from_tensor(Tensor::cat(
                (0..h).map(|j| w.clone().slice([0..d, cols(j)])).collect(),
                1,
            ));
            out.bias = Some(Param::from_tensor(Tensor::cat(
                (0..h)
                    .map(|j| bias.clone().narrow(0, cols(j).start, d_k))
                    .collect(),
                0,
            )));
            out
        };
        mha.k_proj = tile(&gqa.k_proj);
        mha.v_proj = tile(&gqa.v_proj);
        let x = random_tensor(&mut rng, [b, t, d], &device);
        let diff = max_abs_diff(
            &to_host::<f32, _>(gqa.forward(x.clone())),
            &to_host::<f32, _>(mha.forward(x.clone())),
        );
        assert!(diff < 1e-5, "{name}: GQA differs from tiled MHA by {diff}");

        // n_kv_heads = n_heads is plain multi-head attention.
        let same = MultiHeadAttentionConfig::new(d, h)
            .with_n_kv_heads(Some(h))
            .init(&device)
            .unwrap();
        let same = same.load_record(mha.clone().into_record());
        assert_eq!(
            to_host::<f32, _>(same.forward(x.clone())),
            to_host::<f32, _>(mha.forward(x))
        );
    }
}

/// Gradients of `sum(output * r)` w.r.t. x and every weight against central finite
/// differences of the f64 reference (eps 1e-4 in f64, so truncation error ~1e-8; the f32
/// backward's rounding is ~1e-5 relative, hence the 2e-3 relative tolerance).
#[test]
fn gradients_match_finite_differences_of_the_f64_reference() {
    // kv 2 is grouped-query attention through `attend`; kv 4 is plain multi-head attention,
    // which takes the flash kernel on the projections' own layout (`forward_direct`).
    for ((name, device), kv) in cpu_devices()
        .into_iter()
        .flat_map(|d| [(d.clone(), 2), (d, 4)])
    {
        let device = device.autodiff();
        let mut rng = rng(7);
        let (b, t, d, h) = (2, 4, 8, 4);
        let mha = random_mha(
            &MultiHeadAttentionConfig::new(d, h).with_n_kv_heads(Some(kv)),
            &mut rng,
            &device,
        );
        let x_host = random_vec(&mut rng, b * t * d);
        let r_host = random_vec(&mut rng, b * t * d);
        let x = Tensor::<3>::from_data(TensorData::new(x_host.clone(), [b, t, d]), &device)
            .require_grad();
        let r = Tensor::<3>::from_data(TensorData::new(r_host.clone(), [b, t, d]), &device);
        let grads = mha.forward(x.clone()).mul(r).sum().backward();

        let host = HostAttention::from_module(&mha);
        let x64: Vec<f64> = x_host.iter().map(|&v| v as f64).collect();
        let loss = |host: &HostAttention, x: &[f64]| -> f64 {
            let (out, _) = host.forward(x, b, t, None, None);
            out.iter().zip(&r_host).map(|(o, &r)| o * r as f64).sum()
        };
        let eps = 1e-4;
        let check = |what: &str, analytic: Vec<f32>, perturb: &dyn Fn(usize, f64) -> f64| {
            for idx in (0..analytic.len()).step_by(analytic.len().div_ceil(12)) {
                let numeric = (perturb(idx, eps) - perturb(idx, -eps)) / (2.0 * eps);
                let a = analytic[idx] as f64;
                let tol = 2e-3 * numeric.abs().max(1.0);
                assert!(
                    (a - numeric).abs() < tol,
                    "{name} kv {kv}: d/d{what}[{idx}]: autodiff {a}, finite difference {numeric}"
                );
            }
        };
        check(
            "x",
            to_host::<f32, _>(x.grad(&grads).unwrap()),
            &|idx, e| {
                let mut x = x64.clone();
                x[idx] += e;
                loss(&host, &x)
            },
        );
        type Field = fn(&mut HostAttention) -> &mut (Vec<f64>, Option<Vec<f64>>);
        let fields: [(&str, &burn::nn::Linear, Field); 4] = [
            ("q_proj", &mha.q_proj, |h| &mut h.wq),
            ("k_proj", &mha.k_proj, |h| &mut h.wk),
            ("v_proj", &mha.v_proj, |h| &mut h.wv),
            ("o_proj", &mha.o_proj, |h| &mut h.wo),
        ];
        for (label, linear, field) in fields {
            let gw = to_host::<f32, _>(linear.weight.val().grad(&grads).unwrap());
            check(&format!("{label}.weight"), gw, &|idx, e| {
                let mut p = host.clone();
                field(&mut p).0[idx] += e;
                loss(&p, &x64)
            });
            let gb = to_host::<f32, _>(linear.bias.as_ref().unwrap().val().grad(&grads).unwrap());
            check(&format!("{label}.bias"), gb, &|idx, e| {
                let mut p = host.clone();
                field(&mut p).1.as_mut().unwrap()[idx] += e;
                loss(&p, &x64)
            });
        }
    }
}

#[test]
fn wgpu_matches_flex() {
    let Some(wgpu) = wgpu_device() else { return };
    let flex = &cpu_devices()[0].1;
    let mut rng = rng(8);
    let (b, t, d, h, kv) = (2, 6, 16, 4, 2);
    let mha = random_mha(
        &MultiHeadAttentionConfig::new(d, h).with_n_kv_heads(Some(kv)),
        &mut rng,
        flex,
    );
    let x = random_tensor(&mut rng, [b, t, d], flex);
    let lengths = [6, 3];
    let run = |mha: &MultiHeadAttention, x: Tensor<3>, device: &Device| {
        let options = AttentionOptions {
            padding_mask: Some(padding_mask(&lengths, t, device)),
            head_mask: Some(Tensor::from_data(
                TensorData::new(vec![1.0f32, 0.0, 0.5, 1.0], [h]),
                device,
            )),
            return_weights: true,
            ..AttentionOptions::default()
        };
        let out = mha.forward_with(x, options);
        (
            to_host::<f32, _>(out.output),
            to_host::<f32, _>(out.weights.unwrap()),
        )
    };
    let (flex_out, flex_w) = run(&mha, x.clone(), flex);
    let (gpu_out, gpu_w) = run(&mha.clone().to_device(&wgpu), x.to_device(&wgpu), &wgpu);
    assert!(
        max_abs_diff(&flex_out, &gpu_out) < 1e-4,
        "wgpu output differs from flex"
    );
    assert!(
        max_abs_diff(&flex_w, &gpu_w) < 1e-5,
        "wgpu weights differ from flex"
    );
}

#[test]
fn impossible_configs_are_typed_errors_with_the_fix() {
    let device = &cpu_devices()[0].1;
    let err = |c: MultiHeadAttentionConfig| c.init(device).map(|_| ()).unwrap_err();

    let e = err(MultiHeadAttentionConfig::new(10, 4));
    assert_eq!(
        e,
        AttentionConfigError::HeadsDoNotDivide {
            d_model: 10,
            n_heads: 4,
            valid: vec![1, 2, 5, 10]
        }
    );
    assert!(
        e.to_string()
            .contains("d_model = 10 is not divisible by n_heads = 4"),
        "{e}"
    );
    assert!(e.to_string().contains("[1, 2, 5, 10]"), "{e}");

    let e = err(MultiHeadAttentionConfig::new(16, 4).with_n_kv_heads(Some(3)));
    assert!(matches!(
        e,
        AttentionConfigError::KvHeadsDoNotDivide {
            n_heads: 4,
            n_kv_heads: 3,
            ..
        }
    ));
    assert!(e.to_string().contains("n_kv_heads from [1, 2, 4]"), "{e}");

    for (c, field) in [
        (MultiHeadAttentionConfig::new(0, 1), "d_model"),
        (MultiHeadAttentionConfig::new(8, 0), "n_heads"),
        (
            MultiHeadAttentionConfig::new(8, 2).with_n_kv_heads(Some(0)),
            "n_kv_heads",
        ),
    ] {
        let e = err(c);
        assert_eq!(e, AttentionConfigError::Zero { field });
        assert_eq!(e.to_string(), format!("{field} must be at least 1, got 0"));
    }
    let e = err(MultiHeadAttentionConfig::new(8, 2).with_dropout(1.0));
    assert!(
        e.to_string().contains("dropout must be in [0, 1), got 1"),
        "{e}"
    );
}

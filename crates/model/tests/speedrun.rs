//! The speedrun's model switches, each against math written out here in f64.

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_kernels::to_host;
use headlab_model::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn tokens(ids: &[u32], device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = ids.iter().map(|&t| t as i64).collect();
    Tensor::from_data(TensorData::new(ids.clone(), [1, ids.len()]), device)
}

fn small() -> GptConfig {
    GptConfig::new(23)
        .with_block_size(8)
        .with_d_model(16)
        .with_n_layers(2)
        .with_n_heads(4)
        .with_positional(Positional::Rope)
}

fn host(t: Tensor<3>) -> Vec<f64> {
    to_host::<f32, _>(t).iter().map(|&x| x as f64).collect()
}

/// Raises every weight from GPT-2's 0.02 to O(1) so scores grow large without QK-norm.
fn scaled(model: Gpt, by: f64) -> Gpt {
    struct Scale(f64);
    impl burn::module::ModuleMapper for Scale {
        fn map_float<const D: usize>(
            &mut self,
            param: burn::module::Param<Tensor<D>>,
        ) -> burn::module::Param<Tensor<D>> {
            let by = self.0;
            param.map(|t| t.mul_scalar(by))
        }
    }
    model.map(&mut Scale(by))
}

#[test]
fn relu_squared_and_its_gradient_match_f64() {
    let device = Device::flex().autodiff();
    let xs = [-2.5f32, -0.1, 0.0, 0.3, 1.0, 4.0];
    let x = Tensor::<1>::from_data(TensorData::new(xs.to_vec(), [6]), &device).require_grad();
    let y = block::relu_squared(x.clone());
    let grads = y.clone().sum().backward();
    let got = to_host::<f32, _>(y);
    let grad = to_host::<f32, _>(x.grad(&grads).unwrap());
    for (i, &v) in xs.iter().enumerate() {
        let v = v as f64;
        let expected = if v > 0.0 { v * v } else { 0.0 };
        let slope = if v > 0.0 { 2.0 * v } else { 0.0 };
        assert!((got[i] as f64 - expected).abs() < 1e-6, "{v}: {}", got[i]);
        assert!(
            (grad[i] as f64 - slope).abs() < 1e-6,
            "{v}: slope {}",
            grad[i]
        );
    }
}

#[test]
fn rms_norm_matches_f64() {
    let device = Device::flex();
    let mut rng = StdRng::seed_from_u64(3);
    let (rows, d) = (6, 8);
    let xs: Vec<f32> = (0..rows * d).map(|_| rng.random_range(-3.0..3.0)).collect();
    let x = Tensor::<2>::from_data(TensorData::new(xs.clone(), [rows, d]), &device);
    let got = to_host::<f32, _>(headlab_kernels::rms_norm(x, 1e-6));
    for r in 0..rows {
        let row: Vec<f64> = xs[r * d..(r + 1) * d].iter().map(|&v| v as f64).collect();
        let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
        for c in 0..d {
            let expected = row[c] / (ms + 1e-6).sqrt();
            assert!((got[r * d + c] as f64 - expected).abs() < 1e-5);
        }
    }
}

/// With unit-RMS queries and keys, `|q . k| <= |q| |k| = d_k`, so no score `q . k / sqrt(d_k)`
/// passes `sqrt(d_k)` however large the weights; without QK-norm the same weights do.
#[test]
fn qk_norm_bounds_every_score_by_sqrt_d_k() {
    let device = Device::flex();
    let ids: Vec<u32> = (0..8).map(|i| (i * 5 % 23) as u32).collect();
    let options = ForwardOptions {
        return_sublayers: true,
        ..ForwardOptions::default()
    };
    let bound = (small().d_k() as f64).sqrt();
    let mut largest = [0f64; 2];
    for (i, qk_norm) in [false, true].into_iter().enumerate() {
        let model = Gpt::new(&small().with_qk_norm(qk_norm), &device).unwrap();
        let model = scaled(model, 50.0);
        let out = model.forward_with(tokens(&ids, &device), options.clone());
        for score in out.max_scores {
            largest[i] = largest[i].max(to_host::<f32, _>(score)[0] as f64);
        }
    }
    assert!(largest[0] > bound, "without QK-norm: {}", largest[0]);
    assert!(
        largest[1] <= bound * (1.0 + 1e-5),
        "with QK-norm: {}",
        largest[1]
    );
}

/// Zero projections and a zero head: every block adds nothing and every logit is 0, so the
/// first loss is `ln(vocab)` exactly, whatever the tokens.
#[test]
fn zero_init_projections_and_head_start_at_uniform_logits() {
    let device = Device::flex();
    let config = small()
        .with_tie_embeddings(false)
        .with_zero_init_head(true)
        .with_zero_init_proj(true);
    let model = Gpt::new(&config, &device).unwrap();
    for block in &model.blocks {
        let o = to_host::<f32, _>(block.attn.o_proj.weight.val());
        let c = to_host::<f32, _>(block.mlp.as_ref().unwrap().c_proj.weight.val());
        assert!(o.iter().chain(&c).all(|&w| w == 0.0));
        // The other projections are drawn as usual.
        let q = to_host::<f32, _>(block.attn.q_proj.weight.val());
        assert!(q.iter().any(|&w| w != 0.0));
    }
    let ids = [1u32, 7, 3, 3, 22];
    let logits = model.forward(tokens(&ids, &device));
    assert!(host(logits.clone()).iter().all(|&z| z == 0.0));
    let targets = tokens(&[7, 3, 3, 22, 0], &device);
    let loss = to_host::<f32, _>(cross_entropy(logits, targets, None))[0] as f64;
    assert!((loss - 23f64.ln()).abs() < 1e-6, "{loss}");
    // Without the switches the same seed's logits are not all zero.
    let plain = Gpt::new(&small().with_tie_embeddings(false), &device).unwrap();
    assert!(
        host(plain.forward(tokens(&ids, &device)))
            .iter()
            .any(|&z| z != 0.0)
    );
}

/// The embedding at position `i` is `wte[t_i] + bigram[t_(i-1)]`, with nothing added at the
/// window's first position; read off the tables by index.
#[test]
fn bigram_adds_the_previous_tokens_row() {
    let device = Device::flex();
    let model = Gpt::new(&small().with_bigram(true), &device).unwrap();
    let ids = [4u32, 4, 19, 0, 11];
    let out = model.forward_with(
        tokens(&ids, &device),
        ForwardOptions {
            return_sublayers: true,
            ..ForwardOptions::default()
        },
    );
    let (name, embedding) = &out.sublayers[0];
    assert_eq!(name, "embedding");
    let got = host(embedding.clone());
    let wte = to_host::<f32, _>(model.wte.weight.val());
    let bigram = to_host::<f32, _>(model.bigram.as_ref().unwrap().weight.val());
    let d = 16;
    for (i, &t) in ids.iter().enumerate() {
        for c in 0..d {
            let mut expected = wte[t as usize * d + c] as f64;
            if i > 0 {
                expected += bigram[ids[i - 1] as usize * d + c] as f64;
            }
            assert!((got[i * d + c] - expected).abs() < 1e-7, "position {i}");
        }
    }
    assert_eq!(
        model.num_params(),
        small().with_bigram(true).param_count(true)
    );
}

/// Cached decoding passes the previous token along, so each step's logits are those of a
/// full forward of the window.
#[test]
fn bigram_decoding_matches_a_full_forward() {
    let device = Device::flex();
    let model = scaled(Gpt::new(&small().with_bigram(true), &device).unwrap(), 10.0);
    let mut rng = StdRng::seed_from_u64(5);
    let mut decoder = Decoder::new(&model, &[3, 9, 1]).unwrap();
    for step in 0..12 {
        let window = decoder.window().to_vec();
        let full = to_host::<f32, _>(model.forward(tokens(&window, &device)));
        let last = &full[(window.len() - 1) * 23..];
        for (a, b) in decoder.logits().iter().zip(last) {
            assert!(
                (a - b).abs() < 1e-4 * b.abs().max(1.0),
                "step {step}: {a} vs {b}"
            );
        }
        decoder.push(rng.random_range(0..23));
    }
}

#[test]
fn softcap_is_c_tanh_of_the_uncapped_logits() {
    let device = Device::flex();
    let mut model = scaled(Gpt::new(&small(), &device).unwrap(), 20.0);
    let ids = [2u32, 8, 8, 15];
    let raw = host(model.forward(tokens(&ids, &device)));
    assert!(
        raw.iter().any(|z| z.abs() > 3.0),
        "logits too small to test a cap of 3"
    );
    model.config.logit_softcap = Some(3.0);
    let capped = host(model.forward(tokens(&ids, &device)));
    for (z, got) in raw.iter().zip(&capped) {
        let expected = 3.0 * (z / 3.0).tanh();
        assert!(
            (got - expected).abs() < 1e-5 * z.abs().max(1.0),
            "{z}: {got}"
        );
        assert!(got.abs() <= 3.0);
    }
}

#[test]
fn switches_refuse_what_cannot_work() {
    let tied = small().with_zero_init_head(true).validate().unwrap_err();
    assert!(tied.to_string().contains("model.zero_init_head"), "{tied}");
    assert!(
        tied.to_string().contains("model.tie_embeddings = false"),
        "{tied}"
    );
    for cap in [0.0, -1.0, f64::NAN] {
        let e = small()
            .with_logit_softcap(Some(cap))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("model.logit_softcap"), "{e}");
    }
}

/// The speedrun's shape counted by hand: per block 12 d^2 weights and two gains, the final
/// gain, token table and untied head (and the bigram table when on); forward and backward 6
/// FLOPs per weight and token, plus the attention products 12 L d T. A learned position table
/// is left out.
#[test]
fn flops_per_token_follow_nanogpts_count() {
    let (d, l, t, v) = (128.0, 4.0, 128.0, 65.0);
    let config = GptConfig::new(65)
        .with_block_size(128)
        .with_d_model(128)
        .with_n_layers(4)
        .with_bias(false)
        .with_positional(Positional::Rope)
        .with_tie_embeddings(false);
    let n = l * (12.0 * d * d + 2.0 * d) + d + 2.0 * v * d;
    assert_eq!(n, 804_224.0);
    let attention = 12.0 * l * d * t;
    assert_eq!(config.flops_per_token(), 6.0 * n + attention);
    let bigram = config.clone().with_bigram(true);
    assert_eq!(bigram.flops_per_token(), 6.0 * (n + v * d) + attention);
    let learned = config.with_positional(Positional::Learned);
    assert_eq!(learned.flops_per_token(), 6.0 * n + attention);
}

//! Properties over random inputs: tokenizers round-trip any text in their vocabulary (also
//! after a save and load, as a run directory does), `--set` never panics whatever it is
//! given, and every valid random config builds a model whose forward pass has the
//! documented shapes.

use std::sync::LazyLock;

use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_data::Tokenizer;
use headlab_model::{ForwardOptions, Gpt};
use headlab_train::config::{Norm, Positional, RunConfig};
use proptest::prelude::*;

/// Encodes, decodes, and does the same with the tokenizer written to disk and read back.
fn round_trips(tokenizer: &Tokenizer, text: &str) -> Result<(), TestCaseError> {
    let ids = tokenizer
        .encode(text)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(ids.iter().all(|&i| (i as usize) < tokenizer.vocab_size()));
    prop_assert_eq!(tokenizer.decode(&ids), text);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    tokenizer.save(&path).unwrap();
    let loaded = Tokenizer::load(&path).unwrap();
    prop_assert_eq!(loaded.vocab_size(), tokenizer.vocab_size());
    prop_assert_eq!(loaded.encode(text).unwrap(), ids);
    Ok(())
}

static BPE: LazyLock<Tokenizer> = LazyLock::new(|| {
    let corpus = "the quick brown fox jumps over the lazy dog; héllo wörld ✓\n".repeat(20);
    Tokenizer::train_bpe(&corpus, 300).unwrap()
});

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any text made of the corpus's characters, in any order.
    #[test]
    fn char_tokenizer_round_trips_text_in_its_vocabulary(
        corpus in "\\PC{1,40}",
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 0..60),
    ) {
        let tokenizer = Tokenizer::char_from_corpus(&corpus).unwrap();
        let chars: Vec<char> = corpus.chars().collect();
        let text: String = picks.iter().map(|i| chars[i.index(chars.len())]).collect();
        round_trips(&tokenizer, &text)?;
    }

    #[test]
    fn byte_and_bpe_tokenizers_round_trip_any_text(text in any::<String>()) {
        round_trips(&Tokenizer::byte(), &text)?;
        round_trips(&BPE, &text)?;
    }

    /// Arbitrary `--set` arguments, and arbitrary values for real keys: an error or a change,
    /// never a panic; a failed `--set` leaves the config as it was.
    #[test]
    fn set_never_panics(
        arg in any::<String>(),
        key in prop::sample::select(vec![
            "model.d_model", "model.n_kv_heads", "model.positional", "model.dropout",
            "train.lr", "train.max_iters", "train.backend", "data.path", "data.builtin",
            "data.tokenizer", "model", "train.", ".lr", "",
        ]),
        value in any::<String>(),
    ) {
        for assignment in [arg, format!("{key}={value}")] {
            let mut config = RunConfig::default();
            if config.apply_set(&assignment).is_err() {
                prop_assert_eq!(&config, &RunConfig::default());
            } else {
                // Whatever was accepted validates or says why, and serialises.
                let _ = config.validate();
                prop_assert!(config.to_toml_string().is_ok());
            }
        }
    }
}

/// A random valid `[model]` section (sizes kept small so the forward pass is quick).
fn valid_model() -> impl Strategy<Value = (RunConfig, usize, usize, usize)> {
    (
        1usize..=4,                    // n_heads
        1usize..=6,                    // d_k
        1usize..=3,                    // n_layers
        1usize..=12,                   // block_size
        prop::option::of(1usize..=40), // d_ff
        any::<prop::sample::Index>(),  // n_kv_heads: a divisor of n_heads
        0usize..3,                     // positional
        any::<bool>(),                 // post-norm
        any::<(bool, bool, bool)>(),   // bias, tie_embeddings, attn_only
        2usize..40,                    // vocab
        1usize..=3,                    // batch
        any::<prop::sample::Index>(),  // t <= block_size
    )
        .prop_map(
            |(heads, d_k, layers, block, d_ff, kv, pos, post, flags, vocab, b, t)| {
                let positional = [
                    Positional::Learned,
                    Positional::Sinusoidal,
                    Positional::Rope,
                ][pos];
                // rope rotates pairs of a head's dimensions; sinusoidal pairs of d_model's.
                let d_k = if positional == Positional::Rope {
                    2 * d_k
                } else {
                    d_k
                };
                let d_model = heads * d_k;
                let d_model = if positional == Positional::Sinusoidal && d_model % 2 == 1 {
                    2 * d_model
                } else {
                    d_model
                };
                let divisors: Vec<usize> = (1..=heads).filter(|k| heads % k == 0).collect();
                let mut config = RunConfig::default();
                // Head tracking (on by default) needs block_size >= 3; these are model shapes.
                config.train.track_heads_every = 0;
                let m = &mut config.model;
                m.n_heads = heads;
                m.d_model = d_model;
                m.n_layers = layers;
                m.block_size = block;
                m.d_ff = d_ff;
                m.n_kv_heads = Some(divisors[kv.index(divisors.len())]);
                m.positional = positional;
                m.norm = if post { Norm::Post } else { Norm::Pre };
                (m.bias, m.tie_embeddings, m.attn_only) = flags;
                (config, vocab, b, 1 + t.index(block))
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// `tokens [b, t] -> logits [b, t, vocab]`, and one `[b, n_heads, t, t]` attention map
    /// per layer whose rows are causal distributions.
    #[test]
    fn valid_configs_build_models_with_the_documented_shapes(
        (config, vocab, b, t) in valid_model(),
        seed in any::<u64>(),
    ) {
        prop_assert!(config.validate().is_ok(), "{:?}", config.validate());
        let gpt = config.model.clone().with_vocab_size(vocab);
        prop_assert!(gpt.validate().is_ok(), "{:?}", gpt.validate());
        let device = Device::flex();
        device.seed(seed);
        let model = Gpt::new(&gpt, &device).unwrap();
        let ids: Vec<i64> = (0..b * t).map(|i| ((i as u64 * 7 + seed) % vocab as u64) as i64).collect();
        let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [b, t]), &device);
        prop_assert_eq!(model.forward(tokens.clone()).dims(), [b, t, vocab]);
        let out = model.forward_with(
            tokens,
            ForwardOptions { return_weights: true, ..ForwardOptions::default() },
        );
        prop_assert_eq!(out.logits.dims(), [b, t, vocab]);
        prop_assert_eq!(out.weights.len(), config.model.n_layers);
        for w in &out.weights {
            prop_assert_eq!(w.dims(), [b, config.model.n_heads, t, t]);
            let w: Vec<f32> = w.to_data().try_to_vec().unwrap();
            for (row, probs) in w.chunks(t).enumerate() {
                let query = row % t;
                let total: f32 = probs.iter().sum();
                prop_assert!((total - 1.0).abs() < 1e-4, "row sums to {}", total);
                prop_assert!(probs[query + 1..].iter().all(|&p| p == 0.0), "not causal");
            }
        }
        let logits: Vec<f32> = out.logits.to_data().try_to_vec().unwrap();
        prop_assert!(logits.iter().all(|x| x.is_finite()));
    }
}

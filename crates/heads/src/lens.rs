//! The logit lens (nostalgebraist 2020): what the model would predict if it stopped after each
//! layer. Every intermediate state of the residual stream is read through the model's own
//! final LayerNorm (its statistics recomputed for that state) and LM head.
//!
//! The stages are TransformerLens's (`accumulated_resid` with `incl_mid`): `{i}_pre`, the
//! stream entering block `i` (`0_pre` is the embedding), `{i}_mid`, after block `i`'s attention,
//! and `final_post`, after the last block (the model's own logits). Each stage gets the
//! log-probability of the actual next token at every position, the mean loss over positions,
//! and its top tokens. Pre-norm models only: a post-norm block normalises inside, so its
//! stream has no final LayerNorm to read through.

use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_kernels::to_host;
use headlab_model::{ForwardOptions, Gpt, Norm};
use serde::Serialize;
use thiserror::Error;

/// Why a text cannot be read through the lens.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LensError {
    /// Post-norm models have no final LayerNorm.
    #[error(
        "the logit lens reads the residual stream through the final LayerNorm, and this model \
         is post-norm (model.norm = \"post\"): it has none. Use a pre-norm run"
    )]
    PostNorm,
    /// Fewer than two tokens: nothing to predict.
    #[error("--text is {0} token(s) long; the lens needs at least 2 (one to read, one to predict)")]
    TooShort(usize),
    /// More tokens than the model's context.
    #[error(
        "--text is {tokens} tokens long; the model reads at most block_size + 1 = {limit} \
         (block_size inputs and the token after the last): shorten it"
    )]
    TooLong {
        /// Its length.
        tokens: usize,
        /// `block_size + 1`.
        limit: usize,
    },
}

/// One stage of the residual stream read through the lens.
#[derive(Debug, Clone, Serialize)]
pub struct LensStage {
    /// `0_pre`, `0_mid`, ..., `final_post`.
    pub name: String,
    /// Per input position, `log p(next token)`.
    pub target_log_prob: Vec<f64>,
    /// `-mean(target_log_prob)`: the loss on the text if the model stopped here.
    pub loss: f64,
    /// Per input position, the most likely next tokens and their probabilities, best first.
    pub top: Vec<Vec<(u32, f64)>>,
}

/// The stages of `tokens` (inputs `tokens[..n-1]`, targets `tokens[1..]`), each with its `top_k`
/// most likely tokens per position.
pub fn logit_lens(
    model: &Gpt,
    tokens: &[u32],
    top_k: usize,
    device: &Device,
) -> Result<Vec<LensStage>, LensError> {
    if model.config.norm == Norm::Post {
        return Err(LensError::PostNorm);
    }
    let limit = model.config.block_size + 1;
    match tokens.len() {
        n if n < 2 => return Err(LensError::TooShort(n)),
        n if n > limit => return Err(LensError::TooLong { tokens: n, limit }),
        _ => {}
    }
    let t = tokens.len() - 1;
    let ids: Vec<i64> = tokens[..t].iter().map(|&x| i64::from(x)).collect();
    let input = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, t]), device);
    let out = model.forward_with(
        input,
        ForwardOptions {
            return_sublayers: true,
            ..ForwardOptions::default()
        },
    );
    // The stream, rebuilt from the sublayers as each block adds them: pre + attention = mid,
    // mid + MLP = the next pre.
    let mut sublayers = out.sublayers.into_iter();
    let (_, mut x) = sublayers.next().expect("the embedding comes first");
    let mut stages = Vec::new();
    for layer in 0..model.config.n_layers {
        stages.push((format!("{layer}_pre"), x.clone()));
        let (_, attention) = sublayers.next().expect("each block's attention");
        x = x + attention;
        stages.push((format!("{layer}_mid"), x.clone()));
        if model.blocks[layer].mlp.is_some() {
            let (_, mlp) = sublayers.next().expect("each block's MLP");
            x = x + mlp;
        }
    }
    stages.push(("final_post".to_string(), x));
    let targets = &tokens[1..];
    Ok(stages
        .into_iter()
        .map(|(name, x)| read(&name, model.readout(x), targets, top_k))
        .collect())
}

/// One stage's logits `[1, t, vocab]` as log-probabilities of the targets and top tokens.
fn read(name: &str, logits: Tensor<3>, targets: &[u32], top_k: usize) -> LensStage {
    let vocab = logits.dims()[2];
    let log_probs = to_host::<f32, _>(log_softmax(logits, 2));
    let mut target_log_prob = Vec::new();
    let mut top = Vec::new();
    for (row, &target) in log_probs.chunks(vocab).zip(targets) {
        target_log_prob.push(f64::from(row[target as usize]));
        let mut order: Vec<u32> = (0..vocab as u32).collect();
        // Most likely first; ties by id, so the order is the same everywhere.
        order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
        top.push(
            order
                .into_iter()
                .take(top_k)
                .map(|id| (id, f64::from(row[id as usize]).exp()))
                .collect(),
        );
    }
    let loss = -target_log_prob.iter().sum::<f64>() / target_log_prob.len() as f64;
    LensStage {
        name: name.to_string(),
        target_log_prob,
        loss,
        top,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headlab_model::{GptConfig, cross_entropy};

    fn model(norm: Norm, attn_only: bool) -> (Gpt, Device) {
        let device = Device::flex();
        device.seed(5);
        let config = GptConfig {
            vocab_size: 13,
            block_size: 8,
            d_model: 16,
            n_layers: 2,
            n_heads: 2,
            norm,
            attn_only,
            ..GptConfig::default()
        };
        (Gpt::new(&config, &device).unwrap(), device)
    }

    /// The last stage is the model itself: its loss is the model's cross-entropy on the text,
    /// and its top token at each position is the argmax of the model's logits.
    #[test]
    fn the_final_stage_is_the_models_own_prediction() {
        for attn_only in [false, true] {
            let (model, device) = model(Norm::Pre, attn_only);
            let tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5];
            let stages = logit_lens(&model, &tokens, 2, &device).unwrap();
            let names: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["0_pre", "0_mid", "1_pre", "1_mid", "final_post"]);
            let ids: Vec<i64> = tokens.iter().map(|&x| i64::from(x)).collect();
            let x =
                Tensor::<2, Int>::from_data(TensorData::new(ids[..8].to_vec(), [1, 8]), &device);
            let y =
                Tensor::<2, Int>::from_data(TensorData::new(ids[1..].to_vec(), [1, 8]), &device);
            let logits = model.forward(x);
            let loss: f64 = cross_entropy(logits.clone(), y, None)
                .into_scalar::<f32>()
                .into();
            let last = stages.last().unwrap();
            assert!((last.loss - loss).abs() < 1e-5, "{} vs {loss}", last.loss);
            let logits = to_host::<f32, _>(logits);
            for (p, row) in logits.chunks(13).enumerate() {
                let best = (0..13).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
                assert_eq!(last.top[p][0].0 as usize, best, "position {p}");
                assert!(last.top[p][0].1 >= last.top[p][1].1);
            }
        }
    }

    /// Wrong input is refused with the reason: a post-norm model, one token, too many.
    #[test]
    fn post_norm_models_and_texts_that_do_not_fit_are_refused() {
        let (post, device) = model(Norm::Post, false);
        assert_eq!(
            logit_lens(&post, &[1, 2], 1, &device).unwrap_err(),
            LensError::PostNorm
        );
        let (pre, device) = model(Norm::Pre, false);
        assert_eq!(
            logit_lens(&pre, &[1], 1, &device).unwrap_err(),
            LensError::TooShort(1)
        );
        assert_eq!(
            logit_lens(&pre, &[1; 10], 1, &device).unwrap_err(),
            LensError::TooLong {
                tokens: 10,
                limit: 9
            }
        );
    }

    /// Two exported models against TransformerLens 4.3's `logit_lens` on the same folders
    /// (tests/fixtures/exports/tl-lens.json, made by tools/tl-lens.py): the same stages, the
    /// next token's log-probability at every stage and position to 1e-4 (f32 on both sides,
    /// through a softmax over the vocabulary and up to 2 layers), and the same top 3 tokens
    /// (in another order only where their probabilities tie to 1e-5).
    #[test]
    fn stages_match_transformer_lens_on_exported_models() {
        let device = Device::flex();
        for (name, imported, model, tl) in crate::tl_fixtures::each("tl-lens.json") {
            let tokens = imported
                .tokenizer
                .encode(tl["text"].as_str().unwrap())
                .unwrap();
            let ids: Vec<u32> = serde_json::from_value(tl["ids"].clone()).unwrap();
            assert_eq!(
                tokens, ids,
                "{name}: headlab and TransformerLens tokenize alike"
            );
            let stages = logit_lens(&model, &tokens, 5, &device).unwrap();
            let names: Vec<String> = serde_json::from_value(tl["stages"].clone()).unwrap();
            let ours: Vec<&String> = stages.iter().map(|s| &s.name).collect();
            assert_eq!(ours, names.iter().collect::<Vec<_>>(), "{name}");
            let log_probs: Vec<Vec<f64>> =
                serde_json::from_value(tl["target_log_prob"].clone()).unwrap();
            let top3: Vec<Vec<Vec<u32>>> = serde_json::from_value(tl["top3"].clone()).unwrap();
            for (s, stage) in stages.iter().enumerate() {
                for (p, (x, y)) in stage.target_log_prob.iter().zip(&log_probs[s]).enumerate() {
                    assert!(
                        (x - y).abs() < 1e-4,
                        "{name} {} position {p}: {x} vs TransformerLens {y}",
                        stage.name
                    );
                }
                for (p, theirs) in top3[s].iter().enumerate() {
                    let ours = &stage.top[p];
                    for (k, &id) in theirs.iter().enumerate() {
                        let prob = |id: u32| ours.iter().find(|o| o.0 == id).map(|o| o.1);
                        let tied = prob(id).is_some_and(|q| (q - ours[k].1).abs() < 1e-5);
                        assert!(
                            ours[k].0 == id || tied,
                            "{name} {} position {p}: top {k} is {} here, {id} in TransformerLens",
                            stage.name,
                            ours[k].0
                        );
                    }
                }
            }
        }
    }
}

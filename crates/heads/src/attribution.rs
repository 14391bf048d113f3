//! Direct logit attribution: how much each part of the model writes, directly, into one
//! token's logit (or the difference between two tokens' logits) at one position.
//!
//! In a pre-norm model the last residual stream is a sum of parts: the embedding, each head's
//! output through its rows of `W_O`, each attention layer's output bias, each MLP's output.
//! The final LayerNorm is linear in that sum once its scale is fixed, so with the scale
//! `sigma = sqrt(var(x) + eps)` of the actual stream (TransformerLens's "cached scale"), part
//! `c` contributes `((c - mean(c)) / sigma) . (gamma * u)`, with `u` the token's column of the
//! unembedding (`u_a - u_b` for a pair), and the LayerNorm's shift adds `beta . u`. The parts'
//! contributions add up to the logit (the test holds them to 1e-4 of the model's own). Direct
//! only: what a head writes that later layers read and pass on is credited to those layers.

use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_kernels::to_host;
use headlab_model::block::LN_EPSILON;
use headlab_model::{ForwardOptions, Gpt, Norm};
use serde::Serialize;
use thiserror::Error;

/// Why a logit cannot be attributed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AttributionError {
    /// Post-norm models normalise inside every block.
    #[error(
        "direct logit attribution splits the residual stream before the final LayerNorm, and \
         this model is post-norm (model.norm = \"post\"): it has none. Use a pre-norm run"
    )]
    PostNorm,
    /// No tokens, or more than the context.
    #[error("the text is {tokens} tokens long; give 1 to {block_size} (model.block_size)")]
    Length {
        /// Its length.
        tokens: usize,
        /// The model's context.
        block_size: usize,
    },
    /// A token id outside the vocabulary.
    #[error("token id {0} is outside the vocabulary")]
    Token(u32),
}

/// One part of the residual stream and what it adds to the logit.
#[derive(Debug, Clone, Serialize)]
pub struct Part {
    /// `embedding`, `{l}.{h}` (a head), `L{l} attention bias`, `L{l} MLP`, `final LayerNorm bias`.
    pub name: String,
    /// Its direct contribution.
    pub logit: f64,
}

/// The attribution of one logit (or logit difference) at the last position of a text.
#[derive(Debug, Clone, Serialize)]
pub struct Attribution {
    /// Every part, in the order the model computes them.
    pub parts: Vec<Part>,
    /// The model's own logit (or difference) at that position.
    pub logit: f64,
    /// The final LayerNorm's scale there.
    pub scale: f64,
}

/// Attributes the logit of `answer` (minus that of `versus`, when given) after the last token
/// of `tokens`.
pub fn attribute(
    model: &Gpt,
    tokens: &[u32],
    answer: u32,
    versus: Option<u32>,
    device: &Device,
) -> Result<Attribution, AttributionError> {
    let c = &model.config;
    if c.norm == Norm::Post {
        return Err(AttributionError::PostNorm);
    }
    if tokens.is_empty() || tokens.len() > c.block_size {
        return Err(AttributionError::Length {
            tokens: tokens.len(),
            block_size: c.block_size,
        });
    }
    for id in std::iter::once(answer).chain(versus) {
        if id as usize >= c.vocab_size {
            return Err(AttributionError::Token(id));
        }
    }
    let (t, d, d_k, heads) = (tokens.len(), c.d_model, c.d_k(), c.n_heads);
    let ids: Vec<i64> = tokens.iter().map(|&x| i64::from(x)).collect();
    let out = model.forward_with(
        Tensor::<2, Int>::from_data(TensorData::new(ids, [1, t]), device),
        ForwardOptions {
            return_sublayers: true,
            return_head_outputs: true,
            ..ForwardOptions::default()
        },
    );
    let host =
        |x: Tensor<2>| -> Vec<f64> { to_host::<f32, _>(x).into_iter().map(f64::from).collect() };
    // The last position's vector of a `[1, t, d]` output.
    let last = |x: Tensor<3>| -> Vec<f64> { host(x.slice([0..1, t - 1..t, 0..d]).reshape([1, d])) };
    let mut parts: Vec<(String, Vec<f64>)> = Vec::new();
    let mut sublayers = out.sublayers.into_iter();
    let (_, embedding) = sublayers.next().expect("the embedding comes first");
    parts.push(("embedding".into(), last(embedding)));
    for (layer, block) in model.blocks.iter().enumerate() {
        // [1, h, t, d_k] -> the last position, [h, d_k]
        let context = host(
            out.head_outputs[layer]
                .clone()
                .slice([0..1, 0..heads, t - 1..t, 0..d_k])
                .reshape([heads, d_k]),
        );
        let w_o = host(block.attn.o_proj.weight.val());
        for h in 0..heads {
            let mut v = vec![0.0; d];
            for i in 0..d_k {
                let x = context[h * d_k + i];
                for (j, o) in v.iter_mut().enumerate() {
                    *o += x * w_o[(h * d_k + i) * d + j];
                }
            }
            parts.push((format!("{layer}.{h}"), v));
        }
        let (_, _attention) = sublayers.next().expect("each block's attention");
        if let Some(b) = &block.attn.o_proj.bias {
            parts.push((
                format!("L{layer} attention bias"),
                host(b.val().reshape([1, d])),
            ));
        }
        if block.mlp.is_some() {
            let (_, mlp) = sublayers.next().expect("each block's MLP");
            parts.push((format!("L{layer} MLP"), last(mlp)));
        }
    }
    // The final LayerNorm's scale on the whole stream.
    let stream: Vec<f64> = (0..d)
        .map(|j| parts.iter().map(|(_, v)| v[j]).sum())
        .collect();
    let mean = stream.iter().sum::<f64>() / d as f64;
    let var = stream.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / d as f64;
    let scale = (var + LN_EPSILON).sqrt();
    let ln_f = model
        .ln_f
        .as_ref()
        .expect("a pre-norm model has a final LayerNorm");
    let gamma = host(ln_f.gamma.val().reshape([1, d]));
    let direction = unembedding(model, answer, versus, &host);
    let gu: Vec<f64> = gamma.iter().zip(&direction).map(|(g, u)| g * u).collect();
    let mut attributed: Vec<Part> = parts
        .into_iter()
        .map(|(name, v)| {
            let m = v.iter().sum::<f64>() / d as f64;
            let logit = v.iter().zip(&gu).map(|(x, w)| (x - m) * w).sum::<f64>() / scale;
            Part { name, logit }
        })
        .collect();
    if let Some(beta) = &ln_f.beta {
        let beta = host(beta.val().reshape([1, d]));
        let logit = beta.iter().zip(&direction).map(|(b, u)| b * u).sum();
        attributed.push(Part {
            name: "final LayerNorm bias".into(),
            logit,
        });
    }
    let logits = to_host::<f32, _>(out.logits.slice([0..1, t - 1..t, 0..c.vocab_size]));
    let logit =
        f64::from(logits[answer as usize]) - versus.map_or(0.0, |b| f64::from(logits[b as usize]));
    Ok(Attribution {
        parts: attributed,
        logit,
        scale,
    })
}

/// The unembedding column of `answer`, minus `versus`'s: `[d]`.
fn unembedding(
    model: &Gpt,
    answer: u32,
    versus: Option<u32>,
    host: &dyn Fn(Tensor<2>) -> Vec<f64>,
) -> Vec<f64> {
    let d = model.config.d_model;
    let column = |id: u32| -> Vec<f64> {
        let id = id as usize;
        match &model.lm_head {
            // [d, rows]: column `id`.
            Some(head) => host(head.weight.val().slice([0..d, id..id + 1]).reshape([1, d])),
            // Tied: row `id` of the embedding [rows, d].
            None => host(model.wte.weight.val().slice([id..id + 1, 0..d])),
        }
    };
    let mut u = column(answer);
    if let Some(b) = versus {
        for (x, y) in u.iter_mut().zip(column(b)) {
            *x -= y;
        }
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;
    use headlab_model::GptConfig;

    /// The parts add up to the model's own logit and logit difference, on models with and
    /// without biases, tied and untied heads, learned and rotary positions, with and without
    /// MLPs; every head and sublayer is a part.
    #[test]
    fn the_parts_add_up_to_the_models_logit() {
        let device = Device::flex();
        for (k, (bias, tie, attn_only, rope)) in [
            (true, true, false, false),
            (false, false, false, true),
            (true, false, true, false),
        ]
        .into_iter()
        .enumerate()
        {
            device.seed(20 + k as u64);
            let config = GptConfig {
                vocab_size: 17,
                block_size: 8,
                d_model: 24,
                n_layers: 2,
                n_heads: 3,
                bias,
                tie_embeddings: tie,
                attn_only,
                positional: if rope {
                    headlab_model::Positional::Rope
                } else {
                    headlab_model::Positional::Learned
                },
                ..GptConfig::default()
            };
            let model = Gpt::new(&config, &device).unwrap();
            let tokens = [4, 9, 1, 16, 3];
            for versus in [None, Some(2)] {
                let a = attribute(&model, &tokens, 7, versus, &device).unwrap();
                let total: f64 = a.parts.iter().map(|p| p.logit).sum();
                assert!(
                    (total - a.logit).abs() < 1e-4,
                    "case {k} versus {versus:?}: parts sum to {total}, the model says {}",
                    a.logit
                );
                let expected =
                    1 + 2 * (3 + usize::from(bias) + usize::from(!attn_only)) + usize::from(bias);
                assert_eq!(a.parts.len(), expected, "case {k}");
                assert!(a.parts.iter().any(|p| p.name == "1.2"));
            }
        }
    }

    #[test]
    fn inputs_it_cannot_attribute_are_refused() {
        let device = Device::flex();
        let config = GptConfig {
            vocab_size: 5,
            block_size: 4,
            d_model: 8,
            n_layers: 1,
            n_heads: 2,
            ..GptConfig::default()
        };
        let model = Gpt::new(&config, &device).unwrap();
        let err = |tokens: &[u32], answer| attribute(&model, tokens, answer, None, &device);
        assert_eq!(
            err(&[], 1).unwrap_err(),
            AttributionError::Length {
                tokens: 0,
                block_size: 4
            }
        );
        assert!(err(&[1; 5], 1).unwrap_err().to_string().contains("1 to 4"));
        assert_eq!(err(&[1, 2], 5).unwrap_err(), AttributionError::Token(5));
        let post = Gpt::new(
            &GptConfig {
                norm: Norm::Post,
                ..config
            },
            &device,
        )
        .unwrap();
        assert_eq!(
            attribute(&post, &[1, 2], 1, None, &device).unwrap_err(),
            AttributionError::PostNorm
        );
    }
}

//! Activation patching (causal tracing): run a clean and a corrupted prompt, put one of the
//! clean run's activations into the corrupted run, and measure how much of the clean answer
//! comes back. Where it does, that activation carries what the answer needs.
//!
//! Sites, as TransformerLens's `patching` module sweeps them: the residual stream entering
//! each block, each attention sublayer's and each MLP's output, each at one position, and each
//! head's output (before `W_O`) at every position. The metric is read after the last token:
//! the logit difference between an answer and another token, or the answer's
//! log-probability. Results are normalised as TransformerLens's examples do: 0 is the
//! corrupted run's metric, 1 the clean run's.

use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_kernels::to_host;
use headlab_model::{ForwardOptions, Gpt, Norm, PatchSite};
use serde::Serialize;
use thiserror::Error;

/// What is measured after the last token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// `logit(answer) - logit(versus)`.
    LogitDiff {
        /// The clean prompt's answer.
        answer: u32,
        /// The token it is set against (usually the corrupted prompt's answer).
        versus: u32,
    },
    /// `log p(answer)`.
    LogProb {
        /// The clean prompt's answer.
        answer: u32,
    },
}

/// Why two prompts cannot be patched.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PatchError {
    /// The prompts differ in length: positions would not line up.
    #[error(
        "the clean prompt is {clean} tokens and the corrupted one {corrupted}: patching puts \
         position i of one run into position i of the other, so give prompts of the same length"
    )]
    Lengths {
        /// Tokens in the clean prompt.
        clean: usize,
        /// Tokens in the corrupted prompt.
        corrupted: usize,
    },
    /// Empty, or longer than the context.
    #[error("the prompts are {tokens} tokens long; give 1 to {block_size} (model.block_size)")]
    Length {
        /// Their length.
        tokens: usize,
        /// The model's context.
        block_size: usize,
    },
    /// A token outside the vocabulary.
    #[error("token id {0} is outside the vocabulary")]
    Token(u32),
    /// Post-norm models.
    #[error(
        "patching rebuilds the residual stream from the sublayers' outputs, which only adds up \
         in a pre-norm model, and this one is post-norm (model.norm = \"post\")"
    )]
    PostNorm,
    /// Nothing to restore.
    #[error(
        "the clean and the corrupted prompt give the same metric ({0:.6}): there is nothing for \
         patching to restore; choose prompts whose answers differ"
    )]
    NoDifference(f64),
}

/// One sweep: a site patched at every layer and position (or head).
#[derive(Debug, Clone, Serialize)]
pub struct Sweep {
    /// `resid_pre`, `attn_out`, `mlp_out` or `head`.
    pub site: &'static str,
    /// Layers (rows).
    pub layers: usize,
    /// Positions, or heads for `head` (columns).
    pub columns: usize,
    /// The metric with each patch, row-major `[layers, columns]`.
    pub metric: Vec<f64>,
    /// `(metric - corrupted) / (clean - corrupted)`: 0 nothing restored, 1 all of it.
    pub restored: Vec<f64>,
}

/// Every sweep of a pair of prompts.
#[derive(Debug, Clone, Serialize)]
pub struct Patching {
    /// The clean run's metric.
    pub clean: f64,
    /// The corrupted run's metric.
    pub corrupted: f64,
    /// `resid_pre`, `attn_out`, `mlp_out` (if the model has MLPs), `head`.
    pub sweeps: Vec<Sweep>,
}

/// `tokens` as a `[1, t]` batch.
fn batch(tokens: &[u32], device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = tokens.iter().map(|&x| i64::from(x)).collect();
    Tensor::from_data(TensorData::new(ids, [1, tokens.len()]), device)
}

/// The metric after the last position of `logits [1, t, vocab]`.
pub fn metric_of(logits: Tensor<3>, metric: Metric) -> f64 {
    let [_, t, v] = logits.dims();
    let last = logits.slice([0..1, t - 1..t, 0..v]);
    match metric {
        Metric::LogitDiff { answer, versus } => {
            let l = to_host::<f32, _>(last);
            f64::from(l[answer as usize]) - f64::from(l[versus as usize])
        }
        Metric::LogProb { answer } => {
            f64::from(to_host::<f32, _>(log_softmax(last, 2))[answer as usize])
        }
    }
}

/// Checks the prompts and the metric's tokens against the model.
fn check(model: &Gpt, clean: &[u32], corrupted: &[u32], metric: Metric) -> Result<(), PatchError> {
    let c = &model.config;
    if c.norm == Norm::Post {
        return Err(PatchError::PostNorm);
    }
    if clean.len() != corrupted.len() {
        return Err(PatchError::Lengths {
            clean: clean.len(),
            corrupted: corrupted.len(),
        });
    }
    if clean.is_empty() || clean.len() > c.block_size {
        return Err(PatchError::Length {
            tokens: clean.len(),
            block_size: c.block_size,
        });
    }
    let ids = match metric {
        Metric::LogitDiff { answer, versus } => vec![answer, versus],
        Metric::LogProb { answer } => vec![answer],
    };
    match ids.into_iter().find(|&id| id as usize >= c.vocab_size) {
        Some(id) => Err(PatchError::Token(id)),
        None => Ok(()),
    }
}

/// Every sweep of `clean` into `corrupted`.
pub fn patch_sweeps(
    model: &Gpt,
    clean: &[u32],
    corrupted: &[u32],
    metric: Metric,
    device: &Device,
) -> Result<Patching, PatchError> {
    check(model, clean, corrupted, metric)?;
    let (layers, heads, t) = (model.config.n_layers, model.config.n_heads, clean.len());
    let run = model.forward_with(
        batch(clean, device),
        ForwardOptions {
            return_sublayers: true,
            return_head_outputs: true,
            ..ForwardOptions::default()
        },
    );
    let clean_metric = metric_of(run.logits, metric);
    let corrupted_metric = metric_of(model.forward(batch(corrupted, device)), metric);
    if clean_metric == corrupted_metric {
        return Err(PatchError::NoDifference(clean_metric));
    }
    // The clean run's stream entering each block, its attention and MLP outputs, rebuilt as
    // the blocks add them.
    let mut sublayers = run.sublayers.into_iter().map(|(_, v)| v);
    let mut x = sublayers.next().expect("the embedding comes first");
    let (mut resid_pre, mut attn_out, mut mlp_out) = (Vec::new(), Vec::new(), Vec::new());
    for block in &model.blocks {
        resid_pre.push(x.clone());
        let attention = sublayers.next().expect("each block's attention");
        x = x + attention.clone();
        attn_out.push(attention);
        if block.mlp.is_some() {
            let mlp = sublayers.next().expect("each block's MLP");
            x = x + mlp.clone();
            mlp_out.push(mlp);
        }
    }
    let patched = |layer: usize, site: PatchSite| {
        let options = ForwardOptions {
            patch: Some((layer, site)),
            ..ForwardOptions::default()
        };
        metric_of(
            model.forward_with(batch(corrupted, device), options).logits,
            metric,
        )
    };
    let sweep = |site: &'static str, columns: usize, f: &dyn Fn(usize, usize) -> f64| {
        let values: Vec<f64> = (0..layers)
            .flat_map(|l| (0..columns).map(move |c| (l, c)))
            .map(|(l, c)| f(l, c))
            .collect();
        Sweep {
            site,
            layers,
            columns,
            restored: values
                .iter()
                .map(|m| (m - corrupted_metric) / (clean_metric - corrupted_metric))
                .collect(),
            metric: values,
        }
    };
    let mut sweeps = vec![
        sweep("resid_pre", t, &|l, p| {
            patched(
                l,
                PatchSite::ResidPre {
                    position: p,
                    value: resid_pre[l].clone(),
                },
            )
        }),
        sweep("attn_out", t, &|l, p| {
            patched(
                l,
                PatchSite::Attention {
                    position: p,
                    value: attn_out[l].clone(),
                },
            )
        }),
    ];
    if mlp_out.len() == layers {
        sweeps.push(sweep("mlp_out", t, &|l, p| {
            patched(
                l,
                PatchSite::Mlp {
                    position: p,
                    value: mlp_out[l].clone(),
                },
            )
        }));
    }
    sweeps.push(sweep("head", heads, &|l, h| {
        patched(
            l,
            PatchSite::Head {
                head: h,
                value: run.head_outputs[l].clone(),
            },
        )
    }));
    Ok(Patching {
        clean: clean_metric,
        corrupted: corrupted_metric,
        sweeps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use headlab_attention::AttentionOptions;
    use headlab_model::{BlockOptions, GptConfig};

    fn tiny() -> (Gpt, Device) {
        let device = Device::flex();
        device.seed(3);
        let config = GptConfig {
            vocab_size: 11,
            block_size: 8,
            d_model: 16,
            n_layers: 2,
            n_heads: 2,
            ..GptConfig::default()
        };
        (Gpt::new(&config, &device).unwrap(), device)
    }

    /// The two-run loop written out by hand, through the blocks one at a time: the clean run
    /// keeps every block's input and head outputs; the corrupted run takes row `p` of block
    /// `l`'s input from it (by `slice_assign`), or, for a head, runs block `l` with that head
    /// masked and adds the clean head's output times its rows of `W_O`.
    fn by_hand(
        model: &Gpt,
        clean: &[u32],
        corrupted: &[u32],
        metric: Metric,
        device: &Device,
    ) -> (Vec<f64>, Vec<f64>) {
        let t = clean.len();
        let (d, d_k, heads) = (
            model.config.d_model,
            model.config.d_k(),
            model.config.n_heads,
        );
        let embed = |tokens: &[u32]| {
            let out = model.forward_with(
                batch(tokens, device),
                ForwardOptions {
                    return_sublayers: true,
                    ..ForwardOptions::default()
                },
            );
            out.sublayers[0].1.clone()
        };
        // Clean: each block's input and head outputs.
        let (mut inputs, mut head_outputs) = (Vec::new(), Vec::new());
        let mut x = embed(clean);
        for block in &model.blocks {
            inputs.push(x.clone());
            let out = block.forward(
                x,
                0,
                None,
                BlockOptions {
                    return_head_outputs: true,
                    ..BlockOptions::default()
                },
            );
            head_outputs.push(out.head_outputs.unwrap());
            x = out.x;
        }
        let finish = |mut x: Tensor<3>, from: usize| {
            for block in &model.blocks[from..] {
                x = block.forward(x, 0, None, BlockOptions::default()).x;
            }
            metric_of(model.readout(x), metric)
        };
        let corrupted_input = |upto: usize| {
            let mut x = embed(corrupted);
            for block in &model.blocks[..upto] {
                x = block.forward(x, 0, None, BlockOptions::default()).x;
            }
            x
        };
        let mut resid = Vec::new();
        for l in 0..model.blocks.len() {
            for p in 0..t {
                let row = inputs[l].clone().slice([0..1, p..p + 1, 0..d]);
                let x = corrupted_input(l).slice_assign([0..1, p..p + 1, 0..d], row);
                resid.push(finish(x, l));
            }
        }
        let mut head = Vec::new();
        for (l, block) in model.blocks.iter().enumerate() {
            for h in 0..heads {
                // Pre-norm block l by hand (Burn's LayerNorm): attention with head h masked,
                // plus the clean head's [1, t, d_k] output through its rows of W_O, then the
                // MLP on the corrected stream.
                let x = corrupted_input(l);
                let mask: Vec<f32> = (0..heads).map(|k| f32::from(u8::from(k != h))).collect();
                let options = AttentionOptions {
                    head_mask: Some(Tensor::from_data(TensorData::new(mask, [heads]), device)),
                    ..AttentionOptions::default()
                };
                let masked = block
                    .attn
                    .forward_with(block.ln_1.forward(x.clone()), options);
                let context = head_outputs[l]
                    .clone()
                    .slice([0..1, h..h + 1, 0..t, 0..d_k])
                    .reshape([1, t, d_k]);
                let w_o = block
                    .attn
                    .o_proj
                    .weight
                    .val()
                    .slice([h * d_k..(h + 1) * d_k, 0..d]);
                let mut y = x + masked.output + context.matmul(w_o.unsqueeze_dim(0));
                if let (Some(ln_2), Some(mlp)) = (&block.ln_2, &block.mlp) {
                    y = y.clone() + mlp.forward(ln_2.forward(y));
                }
                head.push(finish(y, l + 1));
            }
        }
        (resid, head)
    }

    /// The resid_pre and head sweeps against the two-run loop written out by hand.
    #[test]
    fn sweeps_match_a_hand_written_two_run_loop() {
        let (model, device) = tiny();
        let clean = [1, 4, 2, 7, 3, 9];
        let corrupted = [1, 5, 2, 8, 3, 9];
        let metric = Metric::LogitDiff {
            answer: 4,
            versus: 5,
        };
        let got = patch_sweeps(&model, &clean, &corrupted, metric, &device).unwrap();
        let (resid, head) = by_hand(&model, &clean, &corrupted, metric, &device);
        let find = |site| got.sweeps.iter().find(|s| s.site == site).unwrap();
        for (name, want) in [("resid_pre", resid), ("head", head)] {
            let sweep = find(name);
            assert_eq!(sweep.metric.len(), want.len(), "{name}");
            for (i, (a, b)) in sweep.metric.iter().zip(&want).enumerate() {
                assert!((a - b).abs() < 1e-5, "{name} [{i}]: {a} vs by hand {b}");
            }
        }
        assert_eq!(find("attn_out").metric.len(), 2 * clean.len());
        assert_eq!(find("mlp_out").metric.len(), 2 * clean.len());
    }

    /// Patching a position where both prompts hold the same token, at the first block's
    /// input, changes nothing: the stream there is the same in both runs.
    #[test]
    fn patching_a_position_both_prompts_share_restores_nothing() {
        let (model, device) = tiny();
        let clean = [1, 4, 2, 7];
        let corrupted = [1, 5, 2, 8];
        let metric = Metric::LogProb { answer: 3 };
        let got = patch_sweeps(&model, &clean, &corrupted, metric, &device).unwrap();
        let resid = &got.sweeps[0];
        // Position 0 and 2 hold the same token in both prompts: nothing to restore there.
        for p in [0, 2] {
            assert!(
                resid.restored[p].abs() < 1e-5,
                "position {p}: {}",
                resid.restored[p]
            );
        }
        assert!((got.clean - got.corrupted).abs() > 1e-6);
    }

    #[test]
    fn prompts_it_cannot_patch_are_refused() {
        let (model, device) = tiny();
        let m = Metric::LogProb { answer: 1 };
        let err = |a: &[u32], b: &[u32], m| patch_sweeps(&model, a, b, m, &device).unwrap_err();
        assert_eq!(
            err(&[1, 2], &[1, 2, 3], m),
            PatchError::Lengths {
                clean: 2,
                corrupted: 3
            }
        );
        assert!(matches!(
            err(&[1; 9], &[1; 9], m),
            PatchError::Length { .. }
        ));
        assert_eq!(
            err(&[1, 2], &[1, 3], Metric::LogProb { answer: 11 }),
            PatchError::Token(11)
        );
        assert!(matches!(
            err(&[1, 2], &[1, 2], m),
            PatchError::NoDifference(_)
        ));
    }

    /// Every sweep against TransformerLens 4.3's `patching` functions on two exported models
    /// (tests/fixtures/exports/tl-patching.json, made by tools/tl-patching.py): the clean and
    /// corrupted metrics and every patched run's, to 1e-4 (a logit difference in f32 on both
    /// sides, after up to two layers; the normalised values divide by the clean-corrupted gap,
    /// which is small for these barely trained models, so the raw metric is what is compared).
    #[test]
    fn sweeps_match_transformer_lens_on_exported_models() {
        let device = Device::flex();
        for (name, imported, model, tl) in crate::tl_fixtures::each("tl-patching.json") {
            let encode = |key: &str| {
                imported
                    .tokenizer
                    .encode(tl[key].as_str().unwrap())
                    .unwrap()
            };
            let (clean, corrupted) = (encode("clean_text"), encode("corrupted_text"));
            let ids = |key: &str| -> Vec<u32> { serde_json::from_value(tl[key].clone()).unwrap() };
            assert_eq!(
                (&clean, &corrupted),
                (&ids("clean_ids"), &ids("corrupted_ids"))
            );
            let metric = Metric::LogitDiff {
                answer: tl["answer"].as_u64().unwrap() as u32,
                versus: tl["versus"].as_u64().unwrap() as u32,
            };
            let got = patch_sweeps(&model, &clean, &corrupted, metric, &device).unwrap();
            let close = |what: &str, a: f64, b: f64| {
                assert!(
                    (a - b).abs() < 1e-4,
                    "{name} {what}: {a} vs TransformerLens {b}"
                );
            };
            close("clean", got.clean, tl["clean"].as_f64().unwrap());
            close(
                "corrupted",
                got.corrupted,
                tl["corrupted"].as_f64().unwrap(),
            );
            for sweep in &got.sweeps {
                let theirs: Vec<Vec<f64>> =
                    serde_json::from_value(tl["sweeps"][sweep.site].clone()).unwrap();
                let theirs: Vec<f64> = theirs.into_iter().flatten().collect();
                assert_eq!(sweep.metric.len(), theirs.len(), "{name} {}", sweep.site);
                for (i, (a, b)) in sweep.metric.iter().zip(&theirs).enumerate() {
                    close(&format!("{} [{i}]", sweep.site), *a, *b);
                }
            }
        }
    }
}

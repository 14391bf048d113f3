//! Head analysis: run probes through a model and score every (layer, head).
//!
//! Three probes, all fixed for a seed so scores are comparable across checkpoints:
//! - text windows from the run's data (previous-token, sink, distance, entropy);
//! - random token sequences repeated twice, `[x, r_1..r_T, r_1..r_T]` (induction and
//!   duplicate-token scores, and the loss on the repeated half);
//! - held-out val batches (ablation and gradient importance).
//!
//! The probes live in [`crate::probe`], the score definitions in [`crate::scores`].

use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_data::{Tokenizer, batch_tensors, ids_tensor};
use headlab_kernels::to_host;
use headlab_model::{ForwardOptions, Gpt, cross_entropy};
use serde::Serialize;

use headlab_train::eval::LossSum;

use crate::circuits::{Weights, ov_circuits};
use crate::composition::{CompositionTable, composition_table};
use crate::detector::{DetectorRow, detector_rows};
use crate::probe::Probe;
use crate::scores::{HeadLabel, Pattern, label};

/// Everything measured about one head.
#[derive(Debug, Clone, Serialize)]
pub struct HeadRow {
    /// Scores read off the attention patterns (layer and head included).
    #[serde(flatten)]
    pub scores: PatternScores,
    /// Val loss increase when the head's output is zeroed.
    pub ablation_zero: f64,
    /// Val loss increase when the head's output is replaced by its mean.
    pub ablation_mean: f64,
    /// Mean `|dL/dm_h|` for a head mask at 1 (Michel et al. 2019).
    pub grad_importance: f64,
    /// Copying score of the full OV circuit, `Re(sum(lambda)) / sum(|lambda|)` in `[-1, 1]`
    /// ([`crate::circuits`], folded weights): positive for a head that raises the logit of
    /// the token it attends to, negative for one that suppresses it.
    pub copying: f64,
    /// Share of tokens whose own logit is the largest in their row of the full OV circuit.
    pub ov_top1: f64,
    /// The head's role.
    pub label: HeadLabel,
    /// The syntactic relations the head tracks on a grammar run's val sentences
    /// ([`crate::syntax::syntax_roles`]: `subject`, `determiner`, ...); empty on other text.
    #[serde(default)]
    pub roles: Vec<String>,
}

fn ids(v: &[u32], rows: usize, cols: usize, device: &Device) -> Tensor<2, Int> {
    ids_tensor(v, rows, cols, device)
}

/// Attention weights of every layer, averaged over the rows of a batch: `[layer][head]` of
/// row-major `[t, t]`.
pub fn mean_patterns(
    model: &Gpt,
    tokens: &[u32],
    rows: usize,
    t: usize,
    device: &Device,
) -> Vec<Vec<Vec<f32>>> {
    let out = model.forward_with(
        ids(tokens, rows, t, device),
        ForwardOptions {
            return_weights: true,
            ..ForwardOptions::default()
        },
    );
    out.weights
        .into_iter()
        .map(|w| {
            let h = w.dims()[1];
            // [b, h, t, t] -> mean over b -> [h, t, t]
            let mean = to_host::<f32, _>(w.mean_dim(0).reshape([h * t * t]));
            mean.chunks(t * t).map(|c| c.to_vec()).collect()
        })
        .collect()
}

/// Scores from attention patterns alone: cheap enough to track during training.
#[derive(Debug, Clone, Serialize)]
pub struct PatternScores {
    /// Block index.
    pub layer: usize,
    /// Head index within the block.
    pub head: usize,
    /// Mean `A[i, i-1]` on text.
    pub previous_token: f64,
    /// Mean attention to the token after the earlier occurrence, on repeated sequences.
    pub induction: f64,
    /// Mean attention to the earlier occurrence itself, on repeated sequences.
    pub duplicate_token: f64,
    /// Mean `A[i, 0]` on text.
    pub first_token: f64,
    /// Mean attention distance on text, in tokens.
    pub mean_distance: f64,
    /// Mean normalised row entropy on text (0 focused, 1 uniform).
    pub entropy: f64,
}

impl PatternScores {
    /// The names of [`values`](Self::values), as files and pages call them.
    pub const NAMES: [&'static str; 6] = [
        "previous_token",
        "induction",
        "duplicate_token",
        "first_token",
        "mean_distance",
        "entropy",
    ];

    /// The six scores in the order the files list them: previous-token, induction,
    /// duplicate-token, first-token, mean distance, entropy.
    pub fn values(&self) -> [f64; 6] {
        [
            self.previous_token,
            self.induction,
            self.duplicate_token,
            self.first_token,
            self.mean_distance,
            self.entropy,
        ]
    }
}

/// Pattern scores of every head, and the mean loss on the repeated halves of the induction
/// probe (which falls sharply when an induction circuit forms).
pub fn pattern_scores(model: &Gpt, probe: &Probe, device: &Device) -> (Vec<PatternScores>, f64) {
    let (n_text, t_text) = probe.text_shape;
    let text = mean_patterns(model, &probe.text, n_text, t_text, device);
    let len = probe.repeated_len();
    let rep = mean_patterns(model, &probe.repeated, probe.n_repeated, len, device);
    let mut rows = Vec::new();
    for (layer, (tl, rl)) in text.iter().zip(&rep).enumerate() {
        for (head, (ta, ra)) in tl.iter().zip(rl).enumerate() {
            let tp = Pattern { a: ta, t: t_text };
            let rp = Pattern { a: ra, t: len };
            rows.push(PatternScores {
                layer,
                head,
                previous_token: tp.previous_token(),
                induction: rp.induction(1, probe.period),
                duplicate_token: rp.duplicate_token(1, probe.period),
                first_token: tp.first_token(),
                mean_distance: tp.mean_distance(),
                entropy: tp.normalized_entropy(),
            });
        }
    }
    (rows, repeated_half_loss(model, probe, device))
}

/// Mean next-token loss at the positions whose target lies in the second copy: an
/// induction circuit predicts those perfectly, a bigram model cannot.
pub fn repeated_half_loss(model: &Gpt, probe: &Probe, device: &Device) -> f64 {
    let len = probe.repeated_len();
    let (n, p) = (probe.n_repeated, probe.period);
    // Inputs are positions 0..len-1; targets 1..len. Targets in the second copy start at
    // position 1 + p + 1 (the first repeated token cannot be predicted), input index p + 1.
    let x: Vec<u32> = probe
        .repeated
        .chunks(len)
        .flat_map(|r| r[..len - 1].to_vec())
        .collect();
    let y: Vec<i64> = probe
        .repeated
        .chunks(len)
        .flat_map(|r| {
            r[1..]
                .iter()
                .enumerate()
                .map(|(i, &v)| if i > p { v as i64 } else { -1 })
                .collect::<Vec<_>>()
        })
        .collect();
    let logits = model.forward(ids(&x, n, len - 1, device));
    let y = Tensor::<2, Int>::from_data(TensorData::new(y, [n, len - 1]), device);
    cross_entropy(logits, y, Some(-1)).into_scalar::<f32>() as f64
}

pub(crate) fn held_out_loss(
    model: &Gpt,
    probe: &Probe,
    options: &ForwardOptions,
    device: &Device,
) -> f64 {
    let t = model.config.block_size;
    let mut sum = LossSum::default();
    for (x, y) in &probe.held_out {
        sum.add(model, (x, y), (probe.batch, t), Some(options), device);
    }
    sum.mean()
}

/// The full head table: pattern scores, zero and mean ablation, gradient importance, the OV
/// circuits' copying score and top-1 accuracy. Without held-out batches
/// ([`Probe::from_text`]) ablation and importance are NaN.
pub fn analyze(model: &Gpt, probe: &Probe, device: &Device) -> Vec<HeadRow> {
    let (patterns, _) = pattern_scores(model, probe, device);
    let circuits = ov_circuits(model, Weights::Folded);
    let t = model.config.block_size;
    let label_of = |p: &PatternScores| {
        label(
            p.induction,
            p.previous_token,
            p.first_token,
            p.mean_distance,
            t,
        )
    };
    if probe.held_out.is_empty() {
        return patterns
            .into_iter()
            .zip(&circuits)
            .map(|(p, c)| HeadRow {
                ablation_zero: f64::NAN,
                ablation_mean: f64::NAN,
                grad_importance: f64::NAN,
                copying: c.copying,
                ov_top1: c.top1,
                label: label_of(&p),
                roles: Vec::new(),
                scores: p,
            })
            .collect();
    }
    let (n_layers, n_heads, d_k) = (
        model.config.n_layers,
        model.config.n_heads,
        model.config.d_k(),
    );
    let base = held_out_loss(model, probe, &ForwardOptions::default(), device);

    let sums = mean_head_outputs(model, probe, device);
    let mask_without = |layer: usize, head: usize| {
        let mut m = vec![1.0f32; n_layers * n_heads];
        m[layer * n_heads + head] = 0.0;
        Tensor::<2>::from_data(TensorData::new(m, [n_layers, n_heads]), device)
    };
    let importance = gradient_importance(model, probe, device);

    patterns
        .into_iter()
        .zip(&circuits)
        .map(|(p, c)| {
            let (layer, head) = (p.layer, p.head);
            let zero = ForwardOptions {
                head_mask: Some(mask_without(layer, head)),
                ..ForwardOptions::default()
            };
            let mut bias = vec![0.0f32; n_layers * n_heads * d_k];
            let at = (layer * n_heads + head) * d_k;
            for c in 0..d_k {
                bias[at + c] = sums[at + c] as f32;
            }
            let mean = ForwardOptions {
                head_bias: Some(Tensor::from_data(
                    TensorData::new(bias, [n_layers, n_heads, d_k]),
                    device,
                )),
                ..zero.clone()
            };
            HeadRow {
                ablation_zero: held_out_loss(model, probe, &zero, device) - base,
                ablation_mean: held_out_loss(model, probe, &mean, device) - base,
                grad_importance: importance[layer * n_heads + head],
                copying: c.copying,
                ov_top1: c.top1,
                label: label_of(&p),
                roles: Vec::new(),
                scores: p,
            }
        })
        .collect()
}

/// Mean output of every head over the held-out tokens, `[n_layers, n_heads, d_k]` row-major:
/// what mean ablation puts in a head's place.
fn mean_head_outputs(model: &Gpt, probe: &Probe, device: &Device) -> Vec<f64> {
    let t = model.config.block_size;
    let (n_layers, n_heads, d_k) = (
        model.config.n_layers,
        model.config.n_heads,
        model.config.d_k(),
    );
    let mut sums = vec![0.0f64; n_layers * n_heads * d_k];
    for (x, _) in &probe.held_out {
        let out = model.forward_with(
            ids(x, probe.batch, t, device),
            ForwardOptions {
                return_head_outputs: true,
                ..ForwardOptions::default()
            },
        );
        for (layer, h) in out.head_outputs.into_iter().enumerate() {
            // [b, h, t, d_k] -> mean over b and t -> [h, d_k]
            let mean = to_host::<f32, _>(h.mean_dim(0).mean_dim(2).reshape([n_heads * d_k]));
            for (i, v) in mean.iter().enumerate() {
                sums[layer * n_heads * d_k + i] += *v as f64 / probe.held_out.len() as f64;
            }
        }
    }
    sums
}

/// `mean over batches |dL/dm|` at `m = 1`, one value per (layer, head), row-major.
pub fn gradient_importance(model: &Gpt, probe: &Probe, device: &Device) -> Vec<f64> {
    let n = model.config.n_layers * model.config.n_heads;
    gradient_importance_at(model, probe, &vec![1.0; n], device)
}

/// [`gradient_importance`] at the head mask `at` (row-major `[n_layers, n_heads]`, 0 for a
/// head removed): Michel et al.'s importance of each head of a model already pruned.
pub fn gradient_importance_at(model: &Gpt, probe: &Probe, at: &[f32], device: &Device) -> Vec<f64> {
    let (n_layers, n_heads) = (model.config.n_layers, model.config.n_heads);
    let t = model.config.block_size;
    let autodiff = &device.clone().autodiff();
    // Gradients flow to the mask only, but the graph needs autodiff tensors throughout.
    let model = model.differentiable();
    let mut total = vec![0.0f64; n_layers * n_heads];
    for (x, y) in &probe.held_out {
        let mask =
            Tensor::<2>::from_data(TensorData::new(at.to_vec(), [n_layers, n_heads]), autodiff)
                .require_grad();
        let (x, y) = batch_tensors(x, y, probe.batch, t, autodiff);
        let options = ForwardOptions {
            head_mask: Some(mask.clone()),
            ..ForwardOptions::default()
        };
        let loss = cross_entropy(model.forward_with(x, options).logits, y, None);
        let grads = loss.backward();
        let g = to_host::<f32, _>(mask.grad(&grads).expect("the mask is used"));
        for (acc, v) in total.iter_mut().zip(g) {
            *acc += v.abs() as f64 / probe.held_out.len() as f64;
        }
    }
    total
}

/// Attention maps of one text: `weights[layer][head]` is row-major `[t, t]`.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionMaps {
    /// Token labels, whitespace made visible.
    pub tokens: Vec<String>,
    /// Per layer, per head.
    pub weights: Vec<Vec<Vec<f32>>>,
}

/// A checkpoint's head table and the attention maps of one text: what `headlab heads`
/// reports.
#[derive(Debug, Clone)]
pub struct HeadReport {
    /// Every head's scores, ablations and importance.
    pub rows: Vec<HeadRow>,
    /// The maps of `map_ids`.
    pub maps: AttentionMaps,
    /// How much later heads read what earlier ones write, from the weights.
    pub composition: CompositionTable,
    /// TransformerLens's detector scores on the same probe.
    pub detector: Vec<DetectorRow>,
}

/// Analyses `model` on `probe` and draws the attention maps of the text `map_ids`.
pub fn head_report(
    model: &Gpt,
    tokenizer: &Tokenizer,
    probe: &Probe,
    map_ids: &[u32],
    device: &Device,
) -> HeadReport {
    let rows = analyze(model, probe, device);
    let t = map_ids.len();
    let maps = AttentionMaps {
        tokens: map_ids.iter().map(|&id| tokenizer.token_text(id)).collect(),
        weights: mean_patterns(model, map_ids, 1, t, device),
    };
    HeadReport {
        rows,
        maps,
        composition: composition_table(model),
        detector: detector_rows(model, probe, device),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::probe_rng;
    use headlab_model::GptConfig;
    use rand::Rng;
    use rand::rngs::StdRng;

    /// A seeded 2-layer, 2-head model with `dropout` and a probe with two held-out batches of
    /// random ids.
    fn model_and_probe(dropout: f64) -> (Gpt, Probe, Device) {
        let device = Device::flex();
        device.seed(7);
        let config = GptConfig {
            vocab_size: 11,
            block_size: 8,
            d_model: 16,
            n_layers: 2,
            n_heads: 2,
            dropout,
            ..GptConfig::default()
        };
        let model = Gpt::new(&config, &device).unwrap();
        let mut probe = Probe::from_text(8, 11, (0..8).collect(), 3);
        probe.batch = 3;
        let mut rng = probe_rng(5);
        let batch = |rng: &mut StdRng| -> Vec<u32> {
            (0..probe.batch * 8)
                .map(|_| rng.random_range(0..11))
                .collect()
        };
        probe.held_out = (0..2).map(|_| (batch(&mut rng), batch(&mut rng))).collect();
        (model, probe, device)
    }

    /// Gradient importance is `mean over batches |dL/dm|`: set against central finite
    /// differences of each batch's loss in the head's mask value around 1, also for a model
    /// trained with dropout (the analysis differentiates the model, without dropout).
    #[test]
    fn gradient_importance_matches_finite_differences_of_the_loss() {
        for dropout in [0.0, 0.5] {
            importance_against_finite_differences(dropout);
        }
    }

    fn importance_against_finite_differences(dropout: f64) {
        let (model, probe, device) = model_and_probe(dropout);
        let importance = gradient_importance(&model, &probe, &device);
        let (n_layers, n_heads) = (2, 2);
        let eps = 1e-2f32;
        for layer in 0..n_layers {
            for head in 0..n_heads {
                let mut expected = 0.0;
                for batch in &probe.held_out {
                    let one = Probe {
                        held_out: vec![batch.clone()],
                        ..probe.clone()
                    };
                    let loss_at = |m: f32| {
                        let mut mask = vec![1.0f32; n_layers * n_heads];
                        mask[layer * n_heads + head] = m;
                        let options = ForwardOptions {
                            head_mask: Some(Tensor::from_data(
                                TensorData::new(mask, [n_layers, n_heads]),
                                &device,
                            )),
                            ..ForwardOptions::default()
                        };
                        held_out_loss(&model, &one, &options, &device)
                    };
                    let slope = (loss_at(1.0 + eps) - loss_at(1.0 - eps)) / (2.0 * eps as f64);
                    expected += slope.abs() / probe.held_out.len() as f64;
                }
                let got = importance[layer * n_heads + head];
                assert!(
                    (got - expected).abs() <= 2e-4 + 2e-2 * expected,
                    "dropout {dropout}, layer {layer} head {head}: {got} vs finite differences \
                     {expected}"
                );
            }
        }
    }

    /// The previous-token score is the mean of `A[i, i-1]` over the text's rows `i >= 1`: set
    /// against the attention weights read one entry at a time.
    #[test]
    fn previous_token_score_is_the_mean_attention_to_the_previous_position() {
        let (model, probe, device) = model_and_probe(0.0);
        let (scores, _) = pattern_scores(&model, &probe, &device);
        let (rows, t) = probe.text_shape;
        let out = model.forward_with(
            ids(&probe.text, rows, t, &device),
            ForwardOptions {
                return_weights: true,
                ..ForwardOptions::default()
            },
        );
        for s in &scores {
            let w = to_host::<f32, _>(out.weights[s.layer].clone());
            let at = |b: usize, i: usize, j: usize| w[((b * 2 + s.head) * t + i) * t + j] as f64;
            let mut sum = 0.0;
            for b in 0..rows {
                for i in 1..t {
                    sum += at(b, i, i - 1);
                }
            }
            let expected = sum / (rows * (t - 1)) as f64;
            assert!(
                (s.previous_token - expected).abs() < 1e-5,
                "layer {} head {}: {} vs {expected}",
                s.layer,
                s.head,
                s.previous_token
            );
        }
    }
}

//! Head analysis: run probes through a model and score every (layer, head).
//!
//! Three probes, all fixed for a seed so scores are comparable across checkpoints:
//! - text windows from the run's data (previous-token, sink, distance, entropy);
//! - random token sequences repeated twice, `[x, r_1..r_T, r_1..r_T]` (induction and
//!   duplicate-token scores, and the loss on the repeated half);
//! - held-out val batches (ablation and gradient importance).
//!
//! The score definitions live in [`crate::scores`].

use std::path::Path;

use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_model::{ForwardOptions, Gpt, cross_entropy};
use plotters::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::data::{DataError, Dataset, Split};
use crate::scores::{HeadLabel, Pattern, label};
use crate::trainer::{batch_tensors, mix_seed};

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
    /// The head's role.
    pub label: HeadLabel,
}

/// The fixed inputs head scores are measured on.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Text windows, row-major `[n_text, t_text]`.
    pub text: Vec<u32>,
    /// Rows and length of `text`.
    pub text_shape: (usize, usize),
    /// Repeated random sequences `[n_rep, 1 + 2 * period]`, `period = min((block - 1) / 2, 16)`.
    pub repeated: Vec<u32>,
    /// Rows of `repeated`.
    pub n_repeated: usize,
    /// Length of the random half.
    pub period: usize,
    /// Held-out `(x, y)` batches, each `[batch, block]`.
    pub held_out: Vec<(Vec<u32>, Vec<u32>)>,
    /// Batch size of `held_out`.
    pub batch: usize,
}

impl Probe {
    /// Probes for a model of context `block_size` on `data`, seeded.
    ///
    /// `text` overrides the text windows with one given sequence (cropped to `block_size`).
    pub fn new(
        data: &Dataset,
        block_size: usize,
        vocab_size: usize,
        text: Option<Vec<u32>>,
        seed: u64,
    ) -> Result<Self, DataError> {
        let mut rng = StdRng::seed_from_u64(mix_seed(seed, 0, 0x4845_4144));
        let (text, text_shape) = match text {
            Some(ids) => {
                let ids: Vec<u32> = ids[..ids.len().min(block_size)].to_vec();
                let n = ids.len();
                (ids, (1, n))
            }
            None => {
                let (x, _) = data.sample_batch(Split::Val, 8, block_size, &mut rng)?;
                (x, (8, block_size))
            }
        };
        // Runs of 16 (fewer in short contexts): the scale of the induction corpus's runs.
        let period = ((block_size - 1) / 2).min(16);
        let n_repeated = 8;
        let mut repeated = Vec::with_capacity(n_repeated * (1 + 2 * period));
        for _ in 0..n_repeated {
            let first = rng.random_range(0..vocab_size as u32);
            let half: Vec<u32> = (0..period)
                .map(|_| rng.random_range(0..vocab_size as u32))
                .collect();
            repeated.push(first);
            repeated.extend_from_slice(&half);
            repeated.extend_from_slice(&half);
        }
        let batch = 8;
        let held_out = (0..4)
            .map(|_| data.sample_batch(Split::Val, batch, block_size, &mut rng))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            text,
            text_shape,
            repeated,
            n_repeated,
            period,
            held_out,
            batch,
        })
    }

    /// Length of each repeated sequence.
    pub fn repeated_len(&self) -> usize {
        1 + 2 * self.period
    }
}

fn ids(v: &[u32], rows: usize, cols: usize, device: &Device) -> Tensor<2, Int> {
    let v: Vec<i64> = v.iter().map(|&x| x as i64).collect();
    Tensor::from_data(TensorData::new(v, [rows, cols]), device)
}

fn host<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .try_into_vec_as::<f32>()
        .expect("float tensor")
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
            let mean = host(w.mean_dim(0).reshape([h * t * t]));
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

fn held_out_loss(model: &Gpt, probe: &Probe, options: &ForwardOptions, device: &Device) -> f64 {
    let t = model.config.block_size;
    let mut total = 0.0;
    for (x, y) in &probe.held_out {
        let (x, y) = batch_tensors(x, y, probe.batch, t, device);
        let logits = model.forward_with(x, options.clone()).logits;
        total += cross_entropy(logits, y, None).into_scalar::<f32>() as f64;
    }
    total / probe.held_out.len() as f64
}

/// The full head table: pattern scores, zero and mean ablation, gradient importance.
pub fn analyze(model: &Gpt, probe: &Probe, device: &Device) -> Vec<HeadRow> {
    let (patterns, _) = pattern_scores(model, probe, device);
    let (n_layers, n_heads, d_k) = (
        model.config.n_layers,
        model.config.n_heads,
        model.config.d_k(),
    );
    let t = model.config.block_size;
    let base = held_out_loss(model, probe, &ForwardOptions::default(), device);

    // Mean output of every head over the held-out tokens: [n_layers, n_heads, d_k].
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
            let mean = host(h.mean_dim(0).mean_dim(2).reshape([n_heads * d_k]));
            for (i, v) in mean.iter().enumerate() {
                sums[layer * n_heads * d_k + i] += *v as f64 / probe.held_out.len() as f64;
            }
        }
    }
    let mask_without = |layer: usize, head: usize| {
        let mut m = vec![1.0f32; n_layers * n_heads];
        m[layer * n_heads + head] = 0.0;
        Tensor::<2>::from_data(TensorData::new(m, [n_layers, n_heads]), device)
    };
    let importance = gradient_importance(model, probe, device);

    patterns
        .into_iter()
        .map(|p| {
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
                label: label(
                    p.induction,
                    p.previous_token,
                    p.first_token,
                    p.mean_distance,
                    t,
                ),
                scores: p,
            }
        })
        .collect()
}

/// `mean over batches |dL/dm|` at `m = 1`, one value per (layer, head), row-major.
pub fn gradient_importance(model: &Gpt, probe: &Probe, device: &Device) -> Vec<f64> {
    let (n_layers, n_heads) = (model.config.n_layers, model.config.n_heads);
    let t = model.config.block_size;
    let autodiff = &device.clone().autodiff();
    // Gradients flow to the mask only, but the graph needs autodiff tensors throughout.
    let model = burn::module::Module::train(model.clone());
    let mut total = vec![0.0f64; n_layers * n_heads];
    for (x, y) in &probe.held_out {
        let mask = Tensor::<2>::ones([n_layers, n_heads], autodiff).require_grad();
        let (x, y) = batch_tensors(x, y, probe.batch, t, autodiff);
        let options = ForwardOptions {
            head_mask: Some(mask.clone()),
            ..ForwardOptions::default()
        };
        let loss = cross_entropy(model.forward_with(x, options).logits, y, None);
        let grads = loss.backward();
        let g = host(mask.grad(&grads).expect("the mask is used"));
        for (acc, v) in total.iter_mut().zip(g) {
            *acc += v.abs() as f64 / probe.held_out.len() as f64;
        }
    }
    total
}

/// The table as CSV.
pub fn to_csv(rows: &[HeadRow]) -> String {
    let mut out = String::from(
        "layer,head,label,previous_token,induction,duplicate_token,first_token,mean_distance,entropy,ablation_zero,ablation_mean,grad_importance\n",
    );
    for r in rows {
        out.push_str(&format!(
            "{},{},{},{:.4},{:.4},{:.4},{:.4},{:.3},{:.4},{:.5},{:.5},{:.5}\n",
            r.scores.layer,
            r.scores.head,
            r.label,
            r.scores.previous_token,
            r.scores.induction,
            r.scores.duplicate_token,
            r.scores.first_token,
            r.scores.mean_distance,
            r.scores.entropy,
            r.ablation_zero,
            r.ablation_mean,
            r.grad_importance
        ));
    }
    out
}

/// The table for a terminal.
pub fn to_table(rows: &[HeadRow]) -> String {
    let mut out = format!(
        "{:>5} {:>4}  {:<14} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8}\n",
        "layer",
        "head",
        "label",
        "prev",
        "induct",
        "dup",
        "first",
        "dist",
        "entr",
        "abl-zero",
        "abl-mean",
        "grad"
    );
    for r in rows {
        out.push_str(&format!(
            "{:>5} {:>4}  {:<14} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>6.2} {:>6.3} {:>8.4} {:>8.4} {:>8.4}\n",
            r.scores.layer,
            r.scores.head,
            r.label.to_string(),
            r.scores.previous_token,
            r.scores.induction,
            r.scores.duplicate_token,
            r.scores.first_token,
            r.scores.mean_distance,
            r.scores.entropy,
            r.ablation_zero,
            r.ablation_mean,
            r.grad_importance
        ));
    }
    out
}

/// Pattern scores through training: one `heads.csv` row per (step, layer, head).
#[derive(Debug, Default, Clone)]
pub struct HeadHistory {
    /// `(step, loss on the repeated half, scores)`.
    pub points: Vec<(usize, f64, Vec<PatternScores>)>,
}

/// Header of `heads.csv`.
pub const HISTORY_HEADER: &str = "step,layer,head,previous_token,induction,duplicate_token,first_token,mean_distance,entropy,repeat_loss\n";

impl HeadHistory {
    /// Adds a measurement and returns its CSV rows.
    pub fn push(&mut self, step: usize, repeat_loss: f64, scores: Vec<PatternScores>) -> String {
        let mut out = String::new();
        for s in &scores {
            out.push_str(&format!(
                "{step},{},{},{:.4},{:.4},{:.4},{:.4},{:.3},{:.4},{:.4}\n",
                s.layer,
                s.head,
                s.previous_token,
                s.induction,
                s.duplicate_token,
                s.first_token,
                s.mean_distance,
                s.entropy,
                repeat_loss
            ));
        }
        self.points.push((step, repeat_loss, scores));
        out
    }

    /// Reads `heads.csv` back (for a resumed run's plot), keeping steps `<= upto`.
    pub fn parse(text: &str, upto: usize) -> Self {
        let mut history = Self::default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let num = |i: usize| {
                f.get(i)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(f64::NAN)
            };
            let (Some(step), Some(layer), Some(head)) = (
                f.first().and_then(|v| v.parse::<usize>().ok()),
                f.get(1).and_then(|v| v.parse::<usize>().ok()),
                f.get(2).and_then(|v| v.parse::<usize>().ok()),
            ) else {
                continue;
            };
            if step > upto {
                continue;
            }
            let score = PatternScores {
                layer,
                head,
                previous_token: num(3),
                induction: num(4),
                duplicate_token: num(5),
                first_token: num(6),
                mean_distance: num(7),
                entropy: num(8),
            };
            match history.points.last_mut() {
                Some(last) if last.0 == step => last.2.push(score),
                _ => history.points.push((step, num(9), vec![score])),
            }
        }
        history
    }

    /// `heads.png`: every head's induction (solid) and previous-token (pale) score against
    /// step, with the loss on the repeated half on a second axis.
    pub fn plot(&self, path: &Path) -> Result<(), String> {
        crate::plot::ensure_font();
        let err = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
        let x1 = self.points.last().map_or(1, |p| p.0.max(1)) as f64;
        let loss_max = self
            .points
            .iter()
            .map(|p| p.1)
            .filter(|v| v.is_finite())
            .fold(0.1, f64::max);
        let root = BitMapBackend::new(path, (960, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption("head scores through training", ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .right_y_label_area_size(60)
            .build_cartesian_2d(0.0..x1, 0.0..1.0)
            .map_err(|e| err(&e))?
            .set_secondary_coord(0.0..x1, 0.0..loss_max * 1.05);
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc("score (solid: induction, pale: previous-token)")
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        chart
            .configure_secondary_axes()
            .y_desc("loss on the repeated half (black)")
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        let heads: Vec<(usize, usize)> = self.points.first().map_or(Vec::new(), |p| {
            p.2.iter().map(|s| (s.layer, s.head)).collect()
        });
        for (k, &(layer, head)) in heads.iter().enumerate() {
            let color = crate::plot::PALETTE[k % crate::plot::PALETTE.len()];
            let series = |f: fn(&PatternScores) -> f64| {
                self.points
                    .iter()
                    .filter_map(|(step, _, scores)| {
                        scores
                            .iter()
                            .find(|s| s.layer == layer && s.head == head)
                            .map(|s| (*step as f64, f(s)))
                    })
                    .collect::<Vec<_>>()
            };
            chart
                .draw_series(LineSeries::new(
                    series(|s| s.induction),
                    color.stroke_width(2),
                ))
                .map_err(|e| err(&e))?
                .label(format!("L{layer} H{head}"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(LineSeries::new(
                    series(|s| s.previous_token),
                    color.mix(0.35).stroke_width(1),
                ))
                .map_err(|e| err(&e))?;
        }
        chart
            .draw_secondary_series(LineSeries::new(
                self.points
                    .iter()
                    .map(|p| (p.0 as f64, p.1))
                    .filter(|p| p.1.is_finite()),
                BLACK.stroke_width(2),
            ))
            .map_err(|e| err(&e))?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))
    }
}

/// Files written by [`write_report`].
#[derive(Debug, Clone)]
pub struct Report {
    /// The head table.
    pub rows: Vec<HeadRow>,
    /// The table as printed.
    pub table: String,
}

/// Analyses `model` and writes `heads.csv`, `heads.json`, `attention.png` and `heads.html`
/// into `out`. `map_ids` is the text drawn in the attention maps.
pub fn write_report(
    out: &Path,
    title: &str,
    model: &Gpt,
    tokenizer: &crate::tokenizer::Tokenizer,
    probe: &Probe,
    map_ids: &[u32],
    device: &Device,
) -> Result<Report, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let rows = analyze(model, probe, device);
    let write = |name: &str, text: String| {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    write("heads.csv", to_csv(&rows))?;
    write(
        "heads.json",
        serde_json::to_string_pretty(&rows).expect("serialisable"),
    )?;
    let t = map_ids.len();
    let maps = crate::heads_view::AttentionMaps {
        tokens: map_ids.iter().map(|&id| tokenizer.token_text(id)).collect(),
        weights: mean_patterns(model, map_ids, 1, t, device),
    };
    crate::heads_view::maps_png(&out.join("attention.png"), &maps, &rows)?;
    write(
        "heads.html",
        crate::heads_view::html_page(title, &maps, &rows),
    )?;
    Ok(Report {
        table: to_table(&rows),
        rows,
    })
}

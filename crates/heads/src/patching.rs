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
//!
//! [`path_sweep`] patches paths instead of sites: one head's write into one later head's Q, K
//! or V input alone.

use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_kernels::to_host;
use headlab_model::{ForwardOptions, Gpt, HeadInput, Norm, PatchSite};
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
pub(crate) fn batch(tokens: &[u32], device: &Device) -> Tensor<2, Int> {
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

/// The metric after the last position of `logits [1, t, vocab]` as a tensor `[1]` that
/// gradients flow back from (attribution patching, EAP); [`metric_of`] reads the same number.
pub(crate) fn metric_tensor(logits: Tensor<3>, metric: Metric) -> Tensor<1> {
    let [_, t, v] = logits.dims();
    // [1, t, v] -> [1, 1, v] -> [v]
    let last = logits.slice([0..1, t - 1..t, 0..v]).reshape([v]);
    let pick = |x: Tensor<1>, id: u32| x.narrow(0, id as usize, 1);
    match metric {
        Metric::LogitDiff { answer, versus } => pick(last.clone(), answer) - pick(last, versus),
        Metric::LogProb { answer } => pick(log_softmax(last, 0), answer),
    }
}

/// Checks the prompts and the metric's tokens against the model.
pub(crate) fn check(
    model: &Gpt,
    clean: &[u32],
    corrupted: &[u32],
    metric: Metric,
) -> Result<(), PatchError> {
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
    let run = model.forward_with(batch(clean, device), Sites::options());
    let clean_metric = metric_of(run.logits.clone(), metric);
    let corrupted_metric = metric_of(model.forward(batch(corrupted, device)), metric);
    if clean_metric == corrupted_metric {
        return Err(PatchError::NoDifference(clean_metric));
    }
    let Sites {
        resid_pre,
        attn_out,
        mlp_out,
        head: head_outputs,
    } = Sites::of(model, run);
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
                value: head_outputs[l].clone(),
            },
        )
    }));
    Ok(Patching {
        clean: clean_metric,
        corrupted: corrupted_metric,
        sweeps,
    })
}

/// A run's activations at every site patching sweeps, one per block.
pub(crate) struct Sites {
    /// `[b, t, d_model]`: the stream entering the block.
    pub resid_pre: Vec<Tensor<3>>,
    /// `[b, t, d_model]`: what its attention adds.
    pub attn_out: Vec<Tensor<3>>,
    /// `[b, t, d_model]`: what its MLP adds (empty attention-only).
    pub mlp_out: Vec<Tensor<3>>,
    /// `[b, n_heads, t, d_k]`: each head's output before `W_O`.
    pub head: Vec<Tensor<4>>,
}

impl Sites {
    /// What a forward pass must return for [`Sites::of`].
    pub fn options() -> ForwardOptions {
        ForwardOptions {
            return_sublayers: true,
            return_head_outputs: true,
            ..ForwardOptions::default()
        }
    }

    /// The sites of `run` (made with [`Sites::options`]): the stream entering each block is
    /// rebuilt from the embedding and the sublayers' outputs as the blocks add them.
    pub fn of(model: &Gpt, run: headlab_model::GptOutput) -> Self {
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
        Self {
            resid_pre,
            attn_out,
            mlp_out,
            head: run.head_outputs,
        }
    }
}

/// One path of a direct path patching sweep.
#[derive(Debug, Clone, Serialize)]
pub struct PathPatch {
    /// The head whose clean write is sent, `(layer, head)`.
    pub sender: (usize, usize),
    /// The later head that receives it, `(layer, head)`.
    pub receiver: (usize, usize),
    /// Which of the receiver's projections reads it.
    pub input: HeadInput,
    /// The metric with this path patched.
    pub metric: f64,
    /// `(metric - corrupted) / (clean - corrupted)`.
    pub restored: f64,
}

/// A direct path patching sweep.
#[derive(Debug, Clone, Serialize)]
pub struct PathPatching {
    /// The clean run's metric.
    pub clean: f64,
    /// The corrupted run's metric.
    pub corrupted: f64,
    /// Sender by sender, then receiver by receiver, Q, K, V for each.
    pub paths: Vec<PathPatch>,
}

/// Which paths a direct path sweep measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paths {
    /// From every head into every head of a later layer.
    All,
    /// From one head into every head of a later layer.
    From((usize, usize)),
    /// From one head into one later head.
    Between((usize, usize), (usize, usize)),
}

/// Why a path cannot be patched.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PathError {
    /// The prompts or the metric.
    #[error(transparent)]
    Prompts(#[from] PatchError),
    /// A head the model does not have.
    #[error(
        "head {0}.{1} does not exist: this model has {2} layers of {3} heads, so LAYER.HEAD \
         runs from 0.0 to {last_layer}.{last_head} (both counted from 0)",
        last_layer = .2 - 1, last_head = .3 - 1
    )]
    NoHead(usize, usize, usize, usize),
    /// A receiver not after its sender.
    #[error(
        "head {}.{} cannot receive from head {}.{}: a head reads only what earlier layers \
         wrote, so the receiver's layer must be after the sender's",
        .receiver.0, .receiver.1, .sender.0, .sender.1
    )]
    Order {
        /// The sender.
        sender: (usize, usize),
        /// The receiver.
        receiver: (usize, usize),
    },
    /// A sender in the last layer.
    #[error(
        "head {}.{} is in the last layer: no later head reads what it writes; choose a sender \
         in a layer below {}",
        .0.0, .0.1, .1
    )]
    LastLayer((usize, usize), usize),
}

/// Direct path patching (Wang et al. 2022, TransformerLens's `get_act_patch_direct_path`):
/// the sender's clean-minus-corrupted write, `(z_clean - z_corrupted) W_O` at every position,
/// is added to the receiver's own copy of the stream before its Q, K or V projection in the
/// corrupted run, and nowhere else: every other head, the MLPs and the logits read the sender's
/// corrupted output, while what the receiver then writes flows on as it would. A path that
/// restores the answer is an edge the circuit uses, where composition scores only say it could.
pub fn path_sweep(
    model: &Gpt,
    clean: &[u32],
    corrupted: &[u32],
    metric: Metric,
    paths: Paths,
    device: &Device,
) -> Result<PathPatching, PathError> {
    let (layers, heads) = (model.config.n_layers, model.config.n_heads);
    let later = |from: (usize, usize)| -> Vec<(usize, usize)> {
        (from.0 + 1..layers)
            .flat_map(|l| (0..heads).map(move |h| (l, h)))
            .collect()
    };
    let pairs: Vec<((usize, usize), (usize, usize))> = match paths {
        Paths::All => (0..layers)
            .flat_map(|l| (0..heads).map(move |h| (l, h)))
            .flat_map(|s| later(s).into_iter().map(move |r| (s, r)))
            .collect(),
        Paths::From(sender) => {
            exists(model, sender)?;
            if sender.0 + 1 == layers {
                return Err(PathError::LastLayer(sender, layers - 1));
            }
            later(sender).into_iter().map(|r| (sender, r)).collect()
        }
        Paths::Between(sender, receiver) => {
            check_pair(model, sender, receiver)?;
            vec![(sender, receiver)]
        }
    };
    let runs = PathRuns::new(model, clean, corrupted, metric, device)?;
    let mut out = Vec::new();
    let mut sent: Option<((usize, usize), Tensor<3>)> = None;
    for (sender, receiver) in pairs {
        let delta = match &sent {
            Some((s, d)) if *s == sender => d.clone(),
            _ => {
                let d = runs.delta(sender);
                sent = Some((sender, d.clone()));
                d
            }
        };
        for input in HeadInput::ALL {
            let grouped = model.blocks[receiver.0].attn.n_kv_heads != heads;
            if grouped && input != HeadInput::Q {
                // A shared key/value head has no per-query-head K or V input (as
                // TransformerLens refuses it): only the Q path is measured.
                continue;
            }
            let into = (receiver.0, vec![receiver.1]);
            let m = runs.patched(into, input, delta.clone());
            out.push(PathPatch {
                sender,
                receiver,
                input,
                metric: m,
                restored: runs.restored(m),
            });
        }
    }
    Ok(PathPatching {
        clean: runs.clean,
        corrupted: runs.corrupted,
        paths: out,
    })
}

/// One sender's path into the same input of several heads of one later layer at once (all of
/// a layer's induction heads, where each alone carries part of the answer): the share
/// restored, as [`PathPatch::restored`].
pub fn path_into_heads(
    model: &Gpt,
    (clean, corrupted): (&[u32], &[u32]),
    metric: Metric,
    sender: (usize, usize),
    (layer, heads): (usize, &[usize]),
    input: HeadInput,
    device: &Device,
) -> Result<f64, PathError> {
    for &h in heads {
        check_pair(model, sender, (layer, h))?;
    }
    let runs = PathRuns::new(model, clean, corrupted, metric, device)?;
    let m = runs.patched((layer, heads.to_vec()), input, runs.delta(sender));
    Ok(runs.restored(m))
}

/// A head the model has.
fn exists(model: &Gpt, (l, h): (usize, usize)) -> Result<(), PathError> {
    let (layers, heads) = (model.config.n_layers, model.config.n_heads);
    if l < layers && h < heads {
        Ok(())
    } else {
        Err(PathError::NoHead(l, h, layers, heads))
    }
}

/// Two heads the model has, the receiver in a later layer.
fn check_pair(
    model: &Gpt,
    sender: (usize, usize),
    receiver: (usize, usize),
) -> Result<(), PathError> {
    exists(model, sender)?;
    exists(model, receiver)?;
    if receiver.0 <= sender.0 {
        return Err(PathError::Order { sender, receiver });
    }
    Ok(())
}

/// Both runs of a path patching experiment, with every head's output kept.
struct PathRuns<'a> {
    model: &'a Gpt,
    corrupted_ids: &'a [u32],
    metric: Metric,
    device: &'a Device,
    /// `[1, n_heads, t, d_k]` per layer.
    z_clean: Vec<Tensor<4>>,
    z_corrupted: Vec<Tensor<4>>,
    clean: f64,
    corrupted: f64,
}

impl<'a> PathRuns<'a> {
    fn new(
        model: &'a Gpt,
        clean: &[u32],
        corrupted: &'a [u32],
        metric: Metric,
        device: &'a Device,
    ) -> Result<Self, PathError> {
        check(model, clean, corrupted, metric)?;
        let with_heads = ForwardOptions {
            return_head_outputs: true,
            ..ForwardOptions::default()
        };
        let clean_run = model.forward_with(batch(clean, device), with_heads.clone());
        let corrupted_run = model.forward_with(batch(corrupted, device), with_heads);
        let clean_metric = metric_of(clean_run.logits, metric);
        let corrupted_metric = metric_of(corrupted_run.logits, metric);
        if clean_metric == corrupted_metric {
            return Err(PatchError::NoDifference(clean_metric).into());
        }
        Ok(Self {
            model,
            corrupted_ids: corrupted,
            metric,
            device,
            z_clean: clean_run.head_outputs,
            z_corrupted: corrupted_run.head_outputs,
            clean: clean_metric,
            corrupted: corrupted_metric,
        })
    }

    /// The sender's clean-minus-corrupted write into the stream, `[1, t, d]`.
    fn delta(&self, (l, h): (usize, usize)) -> Tensor<3> {
        let (d, d_k) = (self.model.config.d_model, self.model.config.d_k());
        let t = self.corrupted_ids.len();
        let z = |run: &[Tensor<4>]| {
            // [1, n_heads, t, d_k] -> [1, 1, t, d_k] -> [1, t, d_k]
            run[l]
                .clone()
                .slice([0..1, h..h + 1, 0..t, 0..d_k])
                .reshape([1, t, d_k])
        };
        let w_o = self.model.blocks[l]
            .attn
            .o_proj
            .weight
            .val()
            .slice([h * d_k..(h + 1) * d_k, 0..d]);
        // [1, t, d_k] x [1, d_k, d] -> [1, t, d]
        (z(&self.z_clean) - z(&self.z_corrupted)).matmul(w_o.unsqueeze_dim(0))
    }

    /// The corrupted run's metric with `delta` added to the `input` stream of `heads` of
    /// `layer`.
    fn patched(
        &self,
        (layer, heads): (usize, Vec<usize>),
        input: HeadInput,
        delta: Tensor<3>,
    ) -> f64 {
        let options = ForwardOptions {
            patch: Some((
                layer,
                PatchSite::HeadInput {
                    heads,
                    input,
                    delta,
                },
            )),
            ..ForwardOptions::default()
        };
        let logits = self
            .model
            .forward_with(batch(self.corrupted_ids, self.device), options)
            .logits;
        metric_of(logits, self.metric)
    }

    /// `(metric - corrupted) / (clean - corrupted)`.
    fn restored(&self, metric: f64) -> f64 {
        (metric - self.corrupted) / (self.clean - self.corrupted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::Param;
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

    /// Direct path patching written out by hand: both runs block by block, the sender's
    /// clean-minus-corrupted head output through its rows of `W_O`, then the receivers' block
    /// with the receivers masked out of Burn's attention and each one's own output computed
    /// from its columns of `W_Q`, `W_K`, `W_V` (the patched stream through `ln_1` for one of
    /// them), a causal softmax and its rows of `W_O`; the later blocks as they are.
    fn path_by_hand(
        model: &Gpt,
        clean: &[u32],
        corrupted: &[u32],
        metric: Metric,
        (sender, (rl, receivers), input): ((usize, usize), (usize, &[usize]), HeadInput),
        device: &Device,
    ) -> f64 {
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
        // Each block's input and head outputs.
        let run = |tokens: &[u32]| {
            let (mut inputs, mut z) = (Vec::new(), Vec::new());
            let mut x = embed(tokens);
            for block in &model.blocks {
                inputs.push(x.clone());
                let options = BlockOptions {
                    return_head_outputs: true,
                    ..BlockOptions::default()
                };
                let out = block.forward(x, 0, None, options);
                z.push(out.head_outputs.unwrap());
                x = out.x;
            }
            (inputs, z)
        };
        let ((_, z_clean), (inputs, z_corrupted)) = (run(clean), run(corrupted));
        let rows = |w: Tensor<2>, h: usize| w.slice([h * d_k..(h + 1) * d_k, 0..d]);
        let cols = |w: Tensor<2>, h: usize| w.slice([0..d, h * d_k..(h + 1) * d_k]);
        let head_z = |z: &Tensor<4>, h: usize| {
            z.clone()
                .slice([0..1, h..h + 1, 0..t, 0..d_k])
                .reshape([t, d_k])
        };
        let (sl, sh) = sender;
        let w_o_sender = rows(model.blocks[sl].attn.o_proj.weight.val(), sh);
        let delta = (head_z(&z_clean[sl], sh) - head_z(&z_corrupted[sl], sh)).matmul(w_o_sender);
        let block = &model.blocks[rl];
        let x = inputs[rl].clone();
        let plain = block.ln_1.forward(x.clone());
        let patched = block.ln_1.forward(x.clone() + delta.reshape([1, t, d]));
        let stream = |which: HeadInput| {
            if which == input {
                patched.clone()
            } else {
                plain.clone()
            }
            .reshape([t, d])
        };
        let attn = &block.attn;
        let mut y = x.clone();
        for &rh in receivers {
            let project = |which: HeadInput, linear: &burn::nn::Linear| {
                let y = stream(which).matmul(cols(linear.weight.val(), rh));
                match &linear.bias {
                    Some(b) => y + b.val().slice(rh * d_k..(rh + 1) * d_k).unsqueeze_dim(0),
                    None => y,
                }
            };
            let q = project(HeadInput::Q, &attn.q_proj);
            let k = project(HeadInput::K, &attn.k_proj);
            let v = project(HeadInput::V, &attn.v_proj);
            let mut scores =
                to_host::<f32, _>(q.matmul(k.transpose()).div_scalar((d_k as f64).sqrt()));
            for i in 0..t {
                let row = &mut scores[i * t..(i + 1) * t];
                let max = row[..=i].iter().copied().fold(f32::MIN, f32::max);
                let sum: f32 = row[..=i].iter().map(|x| (x - max).exp()).sum();
                for (j, x) in row.iter_mut().enumerate() {
                    *x = if j <= i { (*x - max).exp() / sum } else { 0.0 };
                }
            }
            let weights = Tensor::<2>::from_data(TensorData::new(scores, [t, t]), device);
            let out = weights.matmul(v).matmul(rows(attn.o_proj.weight.val(), rh));
            y = y + out.reshape([1, t, d]);
        }
        let mask: Vec<f32> = (0..heads)
            .map(|k| f32::from(u8::from(!receivers.contains(&k))))
            .collect();
        let options = AttentionOptions {
            head_mask: Some(Tensor::from_data(TensorData::new(mask, [heads]), device)),
            ..AttentionOptions::default()
        };
        let masked = attn.forward_with(plain, options);
        let mut y = y + masked.output;
        if let (Some(ln_2), Some(mlp)) = (&block.ln_2, &block.mlp) {
            y = y.clone() + mlp.forward(ln_2.forward(y));
        }
        for block in &model.blocks[rl + 1..] {
            y = block.forward(y, 0, None, BlockOptions::default()).x;
        }
        metric_of(model.readout(y), metric)
    }

    /// Every path of a three-layer model (senders in layers 0 and 1, Q, K and V) against the
    /// loop written out by hand; patching nothing of the receiver's (a zero delta) gives the
    /// corrupted run, and the sweep's bad requests are refused with their reason.
    #[test]
    fn paths_match_a_hand_written_loop() {
        let device = Device::flex();
        device.seed(8);
        let config = GptConfig {
            vocab_size: 11,
            block_size: 8,
            d_model: 16,
            n_layers: 3,
            n_heads: 2,
            ..GptConfig::default()
        };
        let mut model = Gpt::new(&config, &device).unwrap();
        // Sharper attention and larger writes than a fresh init has, so that a Q, a K and a V
        // path each move the metric their own way.
        for block in &mut model.blocks {
            let attn = &mut block.attn;
            for (linear, scale) in [
                (&mut attn.q_proj, 20.0),
                (&mut attn.k_proj, 20.0),
                (&mut attn.v_proj, 3.0),
                (&mut attn.o_proj, 3.0),
            ] {
                linear.weight = Param::from_tensor(linear.weight.val().mul_scalar(scale));
            }
        }
        let clean = [1, 4, 2, 7, 3, 9];
        let corrupted = [1, 5, 2, 8, 3, 9];
        let metric = Metric::LogitDiff {
            answer: 4,
            versus: 5,
        };
        let got = path_sweep(&model, &clean, &corrupted, metric, Paths::All, &device).unwrap();
        let between_metrics = (got.clean, got.corrupted);
        // Senders in layer 0 reach 4 heads, in layer 1 two: (2 x 4 + 2 x 2) x 3 inputs.
        assert_eq!(got.paths.len(), 36);
        for p in &got.paths {
            let want = path_by_hand(
                &model,
                &clean,
                &corrupted,
                metric,
                (p.sender, (p.receiver.0, &[p.receiver.1]), p.input),
                &device,
            );
            assert!(
                (p.metric - want).abs() < 1e-5,
                "{:?} -> {:?} {:?}: {} vs by hand {want}",
                p.sender,
                p.receiver,
                p.input,
                p.metric
            );
        }
        // Every kind of path moves the metric well beyond the tolerance above (else that check
        // would hold for a patch that did nothing, or one that patched the wrong input).
        for input in HeadInput::ALL {
            let moved = got
                .paths
                .iter()
                .filter(|p| p.input == input)
                .map(|p| (p.metric - got.corrupted).abs())
                .fold(0.0, f64::max);
            assert!(moved > 1e-3, "{input:?}: {moved}");
        }
        // Into both heads of a layer at once, for every input.
        for (sender, layer) in [((0, 0), 1), ((0, 1), 2), ((1, 1), 2)] {
            for input in HeadInput::ALL {
                let prompts = (&clean[..], &corrupted[..]);
                let into = (layer, &[0, 1][..]);
                let got =
                    path_into_heads(&model, prompts, metric, sender, into, input, &device).unwrap();
                let m = path_by_hand(
                    &model,
                    &clean,
                    &corrupted,
                    metric,
                    (sender, into, input),
                    &device,
                );
                let gap = between_metrics.0 - between_metrics.1;
                let want = (m - between_metrics.1) / gap;
                // In the metric's units, as above: the share divides by the clean-corrupted
                // gap, which the process-wide RNG (other tests draw from it at the same time)
                // may make small, magnifying f32 rounding.
                assert!(
                    ((got - want) * gap).abs() < 1e-5,
                    "{sender:?} -> layer {layer} {input:?}: {got} vs by hand {want}"
                );
            }
        }
        let one = Paths::Between((0, 1), (2, 0));
        let between = path_sweep(&model, &clean, &corrupted, metric, one, &device).unwrap();
        assert_eq!(between.paths.len(), 3);
        let err =
            |paths| path_sweep(&model, &clean, &corrupted, metric, paths, &device).unwrap_err();
        assert_eq!(
            err(Paths::Between((1, 0), (1, 1))),
            PathError::Order {
                sender: (1, 0),
                receiver: (1, 1)
            }
        );
        assert_eq!(err(Paths::From((0, 2))), PathError::NoHead(0, 2, 3, 2));
        assert_eq!(err(Paths::From((2, 0))), PathError::LastLayer((2, 0), 2));
    }

    /// Every path of two exported models against TransformerLens 4.3's
    /// `get_act_patch_direct_path_all_sources` for q, k and v (tests/fixtures/exports/
    /// tl-path.json, made by tools/tl-path.py), to 1e-4 as the activation patching sweeps.
    #[test]
    fn paths_match_transformer_lens_on_exported_models() {
        let device = Device::flex();
        for (name, _, model, tl) in crate::tl_fixtures::each("tl-path.json") {
            let ids = |key: &str| -> Vec<u32> { serde_json::from_value(tl[key].clone()).unwrap() };
            let metric = Metric::LogitDiff {
                answer: tl["answer"].as_u64().unwrap() as u32,
                versus: tl["versus"].as_u64().unwrap() as u32,
            };
            let (clean, corrupted) = (ids("clean_ids"), ids("corrupted_ids"));
            let got = path_sweep(&model, &clean, &corrupted, metric, Paths::All, &device).unwrap();
            let theirs = tl["paths"].as_array().unwrap();
            assert_eq!(got.paths.len(), theirs.len(), "{name}");
            for t in theirs {
                let pair =
                    |k: &str| -> (usize, usize) { serde_json::from_value(t[k].clone()).unwrap() };
                let (sender, receiver) = (pair("sender"), pair("receiver"));
                let input = t["input"].as_str().unwrap();
                let ours = got
                    .paths
                    .iter()
                    .find(|p| {
                        p.sender == sender && p.receiver == receiver && p.input.name() == input
                    })
                    .unwrap();
                let want = t["metric"].as_f64().unwrap();
                assert!(
                    (ours.metric - want).abs() < 1e-4,
                    "{name} {sender:?} -> {receiver:?} {input}: {} vs TransformerLens {want}",
                    ours.metric
                );
            }
        }
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

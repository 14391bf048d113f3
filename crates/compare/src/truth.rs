//! `headlab compare`'s ground truth: the model's first steps in f64, and how far an f32
//! backend may sit from it.
//!
//! # The bound
//! An f32 operation rounds its result with a relative error of at most `u = 2^-24`. A
//! reduction of length `K` (a dot product, a row sum) collects one rounding per term. The
//! worst case, every rounding pointing the same way, gives `K u` (the bound of the old
//! tolerance, [`crate::Tolerance`]). Modelled instead as independent, zero-mean
//! errors, which is what real summation orders produce, they grow like `sqrt(K) u` relative
//! to the size of the result. Reductions chained one after another add in quadrature, so a
//! value at the end of a chain of reductions of lengths `K_1 .. K_n` has a relative error of
//! about `u sqrt(K_1 + .. + K_n)` (one standard deviation). The largest of `N` such errors is
//! about `sqrt(2 ln 2N)` standard deviations. For an f32 tensor `a` of `N` elements and its
//! f64 truth `t`:
//!
//! ```text
//! error(a) = max |a - t| / rms(t)  <=  bound = C sqrt(2 ln 2N) u sqrt(K_1 + .. + K_n)
//! ```
//!
//! The chain ([`Chain`]) counts, per block, the LayerNorm (`d_model`), the Q/K/V projection
//! (`d_model`), the scores (`d_k`), the softmax and the weighted sum of values (`t` each), the
//! output projection (`d_model`); then the MLP's LayerNorm and first matmul (`d_model` each)
//! and its second (`d_ff`); the final LayerNorm and LM head (`d_model` each). The loss adds the
//! vocabulary (log-softmax) and the tokens it averages; gradients run the chain back again
//! and sum over the batch's tokens. `C` = [`SAFETY`] was set from measurements of the
//! backends known to be right (README, "Comparing backends").

use headlab_kernels::{Precision, to_host};
use std::path::Path;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, FloatDType, Tensor};
use headlab_data::{Dataset, ids_tensor};
use headlab_model::{ForwardOptions, Gpt, GptConfig};
use serde::Serialize;

use headlab_train::config::RunConfig;
use headlab_train::optim::Optimizer;
use headlab_train::step::{Team, optimizer_config, step_batches, take_step};

use crate::StepsError;

/// The f32 unit roundoff.
pub const UNIT_ROUNDOFF: f64 = 1.0 / (1u64 << 24) as f64;

/// bf16's unit roundoff, `2^-8`: an 8-bit significand.
pub const BF16_UNIT_ROUNDOFF: f64 = 1.0 / 256.0;

/// A bf16 product in the chain, in the units of `k` (f32 reductions of length 1): both
/// operands rounded to bf16, each an independent relative error of up to `2^-8 = 2^16 u`,
/// whatever the reduction's length (the f32 accumulation counts as any product's does).
pub const BF16_PRODUCT: f64 =
    2.0 * (BF16_UNIT_ROUNDOFF / UNIT_ROUNDOFF) * (BF16_UNIT_ROUNDOFF / UNIT_ROUNDOFF);

/// `C` of the bound: how many modelled standard deviations (beyond the `sqrt(2 ln 2N)` of the
/// largest of `N`) a correct backend may reach.
pub const SAFETY: f64 = 4.0;

/// A backend whose error exceeds this multiple of the best backend's on the same check is
/// flagged even inside the bound (it may still be a bug the bound is too loose to see), once
/// the error also reaches this fraction of the bound: far below the bound, errors that
/// average out (the loss's) differ by more than 10x between correct backends.
pub const BEST_RATIO: f64 = 10.0;

/// What one backend computed on its first step, widened to f64: the values checked against
/// the truth.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// The embedding, every sublayer and the logits on step 0's first micro-batch, named.
    pub forward: Vec<(String, Vec<f64>)>,
    /// Step 0's gradient of every parameter, by its path (`blocks.0.mlp.c_fc.weight`).
    pub grads: Vec<(String, Vec<f64>)>,
    /// The losses of the first [`TRUTH_STEPS`] steps (fewer when the run is shorter).
    pub losses: Vec<f64>,
    /// Per layer, the largest `|q . k| / sqrt(d_k)` on the forward values' batch.
    pub max_scores: Vec<f64>,
}

/// One value set against its f64 truth.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was compared: `block 0 MLP`, `logits`, `loss (step 1)`, `gradients`.
    pub name: String,
    /// Where the gradients' worst case sits (the parameter), when it is a summary.
    pub detail: Option<String>,
    /// `max |value - truth| / rms(truth)`; for gradients the scale is at least the rms of
    /// the whole gradient.
    pub error: f64,
    /// The bound of the module docs for it.
    pub bound: f64,
    /// Whether this value is computed in the forward pass (a wrong forward kernel shows first
    /// in the earliest of these).
    pub forward: bool,
}

impl Check {
    /// `error / bound`: above 1 is out of bound; NaN counts as out.
    pub fn ratio(&self) -> f64 {
        if self.error.is_nan() {
            f64::INFINITY
        } else {
            self.error / self.bound
        }
    }
}

/// The largest `error / bound` of `checks` (0 for none; infinite with a NaN error).
pub fn worst_ratio(checks: &[Check]) -> f64 {
    checks.iter().map(Check::ratio).fold(0.0, f64::max)
}

/// The lengths of the reductions a value passes through, summed, at each point of the model.
#[derive(Debug, Clone)]
pub struct Chain {
    d_model: usize,
    d_k: usize,
    d_ff: usize,
    block_size: usize,
    vocab: usize,
    tokens: usize,
    attn_only: bool,
    /// Per layer, the largest `|q . k| / sqrt(d_k)` (the truth's).
    max_scores: Vec<f64>,
    /// What each linear layer's product adds besides its f32 reduction: [`BF16_PRODUCT`] in
    /// bf16 (`train.precision`), 0 in f32.
    product: f64,
}

impl Chain {
    /// For a model, the tokens one step's loss averages over, and each layer's largest
    /// attention score in the truth.
    pub fn new(
        config: &GptConfig,
        tokens: usize,
        max_scores: &[f64],
        precision: Precision,
    ) -> Self {
        let mut max_scores = max_scores.to_vec();
        max_scores.resize(config.n_layers, 0.0);
        Self {
            d_model: config.d_model,
            d_k: config.d_k(),
            d_ff: config.mlp_width(),
            block_size: config.block_size,
            vocab: config.vocab_size,
            tokens,
            attn_only: config.attn_only,
            max_scores,
            product: match precision {
                Precision::F32 => 0.0,
                Precision::Bf16 => BF16_PRODUCT,
            },
        }
    }

    /// Summed reduction lengths up to each forward value, in the order of
    /// `Gpt::forward_with`'s sublayers, then the logits.
    ///
    /// The softmax turns an absolute error in a score into a relative error in its weight, and
    /// a score's absolute error is its relative one times its size: the attention of layer `i`
    /// adds `s_i^2` times the chain up to its scores, `s_i` its largest `|q . k| / sqrt(d_k)`.
    pub fn forward(&self) -> Vec<(String, f64)> {
        let d = self.d_model as f64;
        let mut k = 1.0; // the position embedding's add
        let mut out = vec![("embedding".to_string(), k)];
        let p = self.product;
        for (i, &s) in self.max_scores.iter().enumerate() {
            // LayerNorm, projection, then q . k.
            let scores = k + 2.0 * d + p + self.d_k as f64;
            // Softmax and the weighted sum over the keys, then W_O.
            k = scores + 2.0 * self.block_size as f64 + d + p + s * s * scores;
            out.push((format!("block {i} attention"), k));
            if !self.attn_only {
                // The residual add, LayerNorm, c_fc, c_proj.
                k += 1.0 + 2.0 * d + self.d_ff as f64 + 2.0 * p;
                out.push((format!("block {i} MLP"), k));
            }
        }
        // The final LayerNorm and the LM head.
        out.push(("logits".into(), k + 2.0 * d + p));
        out
    }

    fn logits(&self) -> f64 {
        self.forward().last().map_or(0.0, |(_, k)| *k)
    }

    /// Up to the loss: the logits, the log-softmax over the vocabulary, the mean over tokens.
    pub fn loss(&self) -> f64 {
        self.logits() + (self.vocab + self.tokens) as f64
    }

    /// Up to a gradient: forward, back again, and the sum over the batch's tokens.
    pub fn gradient(&self) -> f64 {
        2.0 * self.logits() + (self.vocab + self.tokens) as f64
    }
}

/// The bound of the module docs for `n` values at the end of a chain of length `k`.
pub fn bound(n: usize, k: f64) -> f64 {
    SAFETY * (2.0 * (2.0 * n.max(1) as f64).ln()).sqrt() * UNIT_ROUNDOFF * k.sqrt()
}

/// `max |a - t| / rms(t)`; an exact match is 0, a difference from an all-zero truth is
/// infinite, NaN anywhere is NaN.
pub fn relative_error(a: &[f64], t: &[f64]) -> f64 {
    relative_error_floored(a, t, 0.0)
}

fn rms(t: &[f64]) -> f64 {
    (t.iter().map(|v| v * v).sum::<f64>() / t.len().max(1) as f64).sqrt()
}

/// [`relative_error`] with the scale `max(rms(t), floor)`.
fn relative_error_floored(a: &[f64], t: &[f64], floor: f64) -> f64 {
    if a.len() != t.len() {
        return f64::NAN;
    }
    let mut max = 0.0f64;
    for (x, y) in a.iter().zip(t) {
        let d = (x - y).abs();
        if d.is_nan() {
            return f64::NAN;
        }
        max = max.max(d);
    }
    let rms = rms(t).max(floor);
    if max == 0.0 {
        0.0
    } else if rms == 0.0 {
        f64::INFINITY
    } else {
        max / rms
    }
}

/// Sets a backend's measured against the truth: the forward values in order, the losses, then
/// the gradients' worst parameter.
pub fn checks(
    measured: &Measured,
    truth: &Measured,
    config: &GptConfig,
    tokens: usize,
    precision: Precision,
) -> Vec<Check> {
    let chain = Chain::new(config, tokens, &truth.max_scores, precision);
    let lengths = chain.forward();
    let mut out = Vec::new();
    for ((name, t), (_, a)) in truth.forward.iter().zip(&measured.forward) {
        let k = lengths
            .iter()
            .find(|(n, _)| n == name)
            .map_or(f64::NAN, |(_, k)| *k);
        out.push(Check {
            name: name.clone(),
            detail: None,
            error: relative_error(a, t),
            bound: bound(t.len(), k),
            forward: true,
        });
    }
    let scales: Vec<Check> = match precision {
        Precision::F32 => Vec::new(),
        Precision::Bf16 => truth
            .forward
            .iter()
            .zip(&measured.forward)
            .filter(|((name, _), _)| name != "embedding")
            .map(|((name, t), (_, a))| {
                let k = lengths
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(f64::NAN, |(_, k)| *k);
                let width = if name == "logits" {
                    config.vocab_size
                } else {
                    config.d_model
                };
                Check {
                    name: format!("{name} scale"),
                    detail: None,
                    error: scale_error(a, t),
                    bound: scale_bound(width, k),
                    forward: true,
                }
            })
            .collect(),
    };
    // A run of one step has no loss at step 1 to check.
    for (step, t) in truth.losses.iter().enumerate().take(measured.losses.len()) {
        let a = measured.losses[step];
        out.push(Check {
            name: format!("loss (step {step})"),
            detail: None,
            error: relative_error(&[a], &[*t]),
            // Each update adds another pass of rounding.
            bound: bound(1, (1 + step) as f64 * chain.loss()),
            forward: step == 0,
        });
    }
    // A gradient that cancels to about 0 is measured against the whole gradient's scale, the
    // size of the terms that cancelled: the key projection's bias has gradient 0 in exact
    // arithmetic (softmax ignores a constant added to a row of scores), so its f32 rounding
    // has no size of its own to be relative to.
    let all: Vec<f64> = truth
        .grads
        .iter()
        .flat_map(|(_, t)| t.iter().copied())
        .collect();
    let floor = rms(&all);
    let k = chain.gradient();
    let worst = truth
        .grads
        .iter()
        .map(|(name, t)| {
            let a = measured
                .grads
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, a)| a);
            let error = a.map_or(f64::NAN, |a| relative_error_floored(a, t, floor));
            (name, error, bound(t.len(), k))
        })
        .max_by(|x, y| {
            let r =
                |(_, e, b): &(&String, f64, f64)| if e.is_nan() { f64::INFINITY } else { e / b };
            r(x).total_cmp(&r(y))
        });
    if let Some((name, error, bound)) = worst {
        out.push(Check {
            name: "gradients".into(),
            detail: Some(name.clone()),
            error,
            bound,
            forward: false,
        });
    }
    // After the checks every backend has, so that rows line up in the report.
    out.extend(scales);
    out
}

/// How far the values' fitted scale against the truth is from 1: `|sum a t / sum t^2 - 1|`.
/// Unbiased rounding leaves it near 0 however large each value's error; a biased one (bf16
/// by truncation) shrinks every product by about `2^-8` and shows here.
pub fn scale_error(a: &[f64], t: &[f64]) -> f64 {
    let tt: f64 = t.iter().map(|t| t * t).sum();
    if a.len() != t.len() || tt == 0.0 {
        return f64::NAN;
    }
    (a.iter().zip(t).map(|(a, t)| a * t).sum::<f64>() / tt - 1.0).abs()
}

/// The bound of [`scale_error`]: the chain's relative error `u sqrt(k)` averaged over the
/// independent errors a value's `width` columns carry (every row shares its weights'
/// roundings, so columns, not elements, average out), times `C`.
pub fn scale_bound(width: usize, k: f64) -> f64 {
    SAFETY * UNIT_ROUNDOFF * k.sqrt() / (width.max(1) as f64).sqrt()
}

/// The forward values of the measured (embedding, sublayers and logits on `tokens`, named) and
/// each layer's largest attention score.
pub fn forward_values(
    model: &Gpt,
    tokens: &[u32],
    batch: usize,
    device: &Device,
) -> (Vec<(String, Vec<f64>)>, Vec<f64>) {
    let x = ids_tensor(tokens, batch, model.config.block_size, device);
    let options = ForwardOptions {
        return_sublayers: true,
        ..ForwardOptions::default()
    };
    let out = model.valid().forward_with(x, options);
    let mut values: Vec<(String, Vec<f64>)> = out
        .sublayers
        .into_iter()
        .map(|(name, t)| (name, to_host::<f64, _>(t)))
        .collect();
    values.push(("logits".into(), to_host::<f64, _>(out.logits)));
    let scores = out
        .max_scores
        .into_iter()
        .flat_map(to_host::<f64, _>)
        .collect();
    (values, scores)
}

/// Every parameter's gradient by path.
pub fn gradient_values(model: &Gpt, grads: &GradientsParams) -> Vec<(String, Vec<f64>)> {
    struct Collect<'a> {
        grads: &'a GradientsParams,
        path: Vec<String>,
        out: Vec<(String, Vec<f64>)>,
    }
    impl ModuleVisitor for Collect<'_> {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.grads.get::<D>(param.id) {
                self.out.push((self.path.join("."), to_host::<f64, _>(g)));
            }
        }
    }
    let mut visitor = Collect {
        grads,
        path: Vec::new(),
        out: Vec::new(),
    };
    model.visit(&mut visitor);
    visitor.out
}

/// Losses the truth has: steps 0, 1 and 2. Two updates, because Adam's bias corrections
/// cancel in the first (`(1 - beta1) / sqrt(1 - beta2)` is 1 for nanoGPT's betas) and show
/// in the second.
pub const TRUTH_STEPS: usize = 3;

/// The truth: the model of `init` in f64 on flex (Burn's ops: headlab's kernels run on f32
/// only), its step 0 as `headlab train` takes it, and the losses of its first `steps` steps
/// (at most [`TRUTH_STEPS`]).
pub fn f64_truth(
    config: &RunConfig,
    gpt: &GptConfig,
    data: &Dataset,
    init: &Path,
    steps: usize,
) -> Result<Measured, StepsError> {
    let tc = &config.train;
    let device = Device::flex().autodiff();
    let model = Gpt::new(gpt, &device)?.load_weights(init)?;
    let mut model = model.cast(FloatDType::F64);
    let inner = device.clone().inner();
    let batches = step_batches(data, tc, gpt.block_size, 0)?;
    let (forward, max_scores) = forward_values(&model, &batches[0].0, tc.batch_size, &inner);
    let mut optim = Optimizer::new(optimizer_config(tc));
    let (mut grads, mut losses) = (Vec::new(), Vec::new());
    let team = Team::alone(tc);
    for it in 0..steps.min(TRUTH_STEPS) {
        let (next, step) = take_step(
            model,
            &mut optim,
            data,
            tc,
            it,
            &device,
            false,
            &team,
            |m, g, _| {
                if it == 0 {
                    grads = gradient_values(m, &g.grads);
                }
                Ok::<_, StepsError>(())
            },
        )?;
        model = next;
        losses.push(step.gradients.loss);
    }
    Ok(Measured {
        forward,
        grads,
        losses,
        max_scores,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_error_is_relative_to_the_truths_rms() {
        assert_eq!(relative_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        let e = relative_error(&[3.0, 4.5], &[3.0, 4.0]);
        let rms = ((9.0 + 16.0) / 2.0f64).sqrt();
        assert!((e - 0.5 / rms).abs() < 1e-15);
        assert!(relative_error(&[1e-9], &[0.0]).is_infinite());
        assert!(relative_error(&[f64::NAN], &[1.0]).is_nan());
        assert!(relative_error(&[1.0], &[1.0, 2.0]).is_nan());
    }

    #[test]
    fn the_bound_grows_like_the_square_root_of_the_chain() {
        let (a, b) = (bound(1000, 100.0), bound(1000, 400.0));
        assert!((b / a - 2.0).abs() < 1e-12);
        let expected = SAFETY * (2.0 * 2000f64.ln()).sqrt() * UNIT_ROUNDOFF * 10.0;
        assert!((a - expected).abs() < 1e-18);
    }

    #[test]
    fn the_chain_counts_each_sublayer_once_in_order_and_the_softmax_by_its_scores() {
        let gpt = GptConfig::new(65)
            .with_n_layers(2)
            .with_d_model(64)
            .with_n_heads(4)
            .with_block_size(32);
        let lengths = |scores: &[f64]| -> Vec<f64> {
            Chain::new(&gpt, 512, scores, Precision::F32)
                .forward()
                .into_iter()
                .map(|(_, k)| k)
                .collect()
        };
        let (attention, mlp) = (3.0 * 64.0 + 16.0 + 2.0 * 32.0, 2.0 * 64.0 + 256.0 + 1.0);
        let flat = lengths(&[]);
        let want = [
            1.0,
            1.0 + attention,
            1.0 + attention + mlp,
            1.0 + 2.0 * attention + mlp,
            1.0 + 2.0 * (attention + mlp),
            1.0 + 2.0 * (attention + mlp) + 128.0,
        ];
        assert_eq!(flat, want);
        let names: Vec<String> = Chain::new(&gpt, 512, &[], Precision::F32)
            .forward()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names[1], "block 0 attention");
        assert_eq!(names[4], "block 1 MLP");
        // Scores of 10 in layer 1 add 100 times the chain up to them there and after.
        let sharp = lengths(&[0.0, 10.0]);
        assert_eq!(sharp[..3], flat[..3]);
        let before = want[2] + 2.0 * 64.0 + 16.0;
        assert!((sharp[3] - flat[3] - 100.0 * before).abs() < 1e-9);
        assert!((sharp[5] - flat[5] - 100.0 * before).abs() < 1e-9);
        let chain = Chain::new(&gpt, 512, &[], Precision::F32);
        assert_eq!(chain.loss(), want[5] + 65.0 + 512.0);
        assert_eq!(chain.gradient(), 2.0 * want[5] + 65.0 + 512.0);

        // In bf16 each linear layer's product adds 2 (2^-8 / 2^-24)^2: Q/K/V and W_O in each
        // attention, c_fc and c_proj in each MLP, and the LM head.
        let p = 2.0 * 65536.0 * 65536.0;
        let bf16: Vec<f64> = Chain::new(&gpt, 512, &[], Precision::Bf16)
            .forward()
            .into_iter()
            .map(|(_, k)| k)
            .collect();
        let extra: Vec<f64> = bf16.iter().zip(&want).map(|(b, f)| (b - f) / p).collect();
        assert_eq!(extra, [0.0, 2.0, 4.0, 6.0, 8.0, 9.0]);
    }
}

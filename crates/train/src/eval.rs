//! Loss on held-out text: the one evaluator behind `train`'s periodic evaluations,
//! `headlab eval`, and the head ablations.

use burn::tensor::Device;
use headlab_data::{Dataset, STREAM_EVAL, Split, batch_tensors, mix_seed};
use headlab_model::{ForwardOptions, Gpt, cross_entropy};
use rand::SeedableRng;
use rand::rngs::StdRng;

use headlab_data::DataError;

/// Next-token loss summed over windows of text.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LossSum {
    /// Total loss in nats.
    pub nats: f64,
    /// Tokens predicted.
    pub tokens: usize,
}

impl LossSum {
    /// Mean loss per token (NaN with no tokens).
    pub fn mean(&self) -> f64 {
        self.nats / self.tokens as f64
    }

    /// Adds `rows` windows of `len` tokens: inputs `x` and targets `y`, row-major. With
    /// `options` (head masks for ablation) the model runs through `forward_with`.
    pub fn add(
        &mut self,
        model: &Gpt,
        (x, y): (&[u32], &[u32]),
        (rows, len): (usize, usize),
        options: Option<&ForwardOptions>,
        device: &Device,
    ) {
        let (x, y) = batch_tensors(x, y, rows, len, device);
        let logits = match options {
            Some(options) => model.forward_with(x, options.clone()).logits,
            None => model.forward(x),
        };
        let loss: f32 = cross_entropy(logits, y, None).into_scalar();
        let n = rows * len;
        self.nats += f64::from(loss) * n as f64;
        self.tokens += n;
    }

    /// The loss over all of `tokens`, in consecutive windows of at most `block_size`
    /// tokens, each starting fresh as in training.
    pub fn of_tokens(model: &Gpt, tokens: &[u32], block_size: usize, device: &Device) -> Self {
        let mut sum = Self::default();
        let mut start = 0;
        while start + 1 < tokens.len() {
            let len = block_size.min(tokens.len() - 1 - start);
            let window = (
                &tokens[start..start + len],
                &tokens[start + 1..start + 1 + len],
            );
            sum.add(model, window, (1, len), None, device);
            start += len;
        }
        sum
    }
}

impl LossSum {
    /// The loss over the first `max_tokens` tokens of `split` (all of it when the split is
    /// shorter) in consecutive, non-overlapping windows of `block_size` (the last one
    /// shorter), each starting fresh as in training: the same tokens whatever the seed,
    /// unlike [`estimate_loss`]'s random windows. Full windows go through the model
    /// [`FULL_SPLIT_ROWS`] at a time. `Ok(None)` for fewer than 2 tokens; `Err(Stopped)` when
    /// a stop is requested ([`crate::stop`]) between two forward passes.
    pub fn of_split(
        model: &Gpt,
        data: &Dataset,
        split: Split,
        max_tokens: usize,
        device: &Device,
    ) -> Result<Option<Self>, Stopped> {
        let ids = data.tokens(split);
        // Targets reach one token past the last input.
        let end = ids.len().min(max_tokens.saturating_add(1));
        let t = model.config.block_size;
        let windows = end.checked_sub(1).map_or(0, |n| n / t);
        let mut sum = Self::default();
        for first in (0..windows).step_by(FULL_SPLIT_ROWS) {
            if first > 0 {
                crate::stop::test_point(format_args!("final"));
            }
            if crate::stop::requested() {
                return Err(Stopped);
            }
            let rows = FULL_SPLIT_ROWS.min(windows - first);
            let (start, stop) = (first * t, (first + rows) * t);
            let x = ids.to_vec(start..stop);
            let y = ids.to_vec(start + 1..stop + 1);
            sum.add(model, (&x, &y), (rows, t), None, device);
        }
        if end > windows * t {
            let rest = LossSum::of_tokens(model, &ids.to_vec(windows * t..end), t, device);
            sum.nats += rest.nats;
            sum.tokens += rest.tokens;
        }
        Ok((sum.tokens > 0).then_some(sum))
    }
}

/// A loss that was not finished because a stop was requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped;

/// Windows per forward pass of [`LossSum::of_split`].
pub const FULL_SPLIT_ROWS: usize = 32;

/// Mean loss over `iters` batches of `split`, the same batches at every call for a seed, so
/// curves compare like with like.
pub fn estimate_loss(
    model: &Gpt,
    data: &Dataset,
    split: Split,
    batches: (usize, usize),
    seed: u64,
    device: &Device,
) -> Result<f64, DataError> {
    estimate(model, data, split, batches, seed, device, || false)
        .map(|loss| loss.unwrap_or(f64::NAN))
}

/// [`estimate_loss`] that gives up (`Ok(None)`) between batches once a stop is requested
/// ([`crate::stop`]): the training loop's evaluations.
pub fn estimate_loss_unless_stopped(
    model: &Gpt,
    data: &Dataset,
    split: Split,
    batches: (usize, usize),
    seed: u64,
    device: &Device,
) -> Result<Option<f64>, DataError> {
    estimate(
        model,
        data,
        split,
        batches,
        seed,
        device,
        crate::stop::requested,
    )
}

fn estimate(
    model: &Gpt,
    data: &Dataset,
    split: Split,
    (iters, batch_size): (usize, usize),
    seed: u64,
    device: &Device,
    stop: impl Fn() -> bool,
) -> Result<Option<f64>, DataError> {
    let t = model.config.block_size;
    let mut rng = StdRng::seed_from_u64(mix_seed(seed, split as u64, STREAM_EVAL));
    let mut sum = LossSum::default();
    for _ in 0..iters {
        if stop() {
            return Ok(None);
        }
        let (x, y) = data.sample_batch(split, batch_size, t, &mut rng)?;
        sum.add(model, (&x, &y), (batch_size, t), None, device);
    }
    Ok(Some(sum.mean()))
}

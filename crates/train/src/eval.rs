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
    /// The loss over every token of `split` in consecutive, non-overlapping windows of
    /// `block_size` (the last one shorter), each starting fresh as in training: the same
    /// tokens whatever the seed, unlike [`estimate_loss`]'s random windows. Full windows go
    /// through the model [`FULL_SPLIT_ROWS`] at a time. `None` for a split of under 2 tokens.
    pub fn of_split(model: &Gpt, data: &Dataset, split: Split, device: &Device) -> Option<Self> {
        let tokens = data.tokens(split);
        let t = model.config.block_size;
        let windows = tokens.len().checked_sub(1)? / t;
        let mut sum = Self::default();
        for first in (0..windows).step_by(FULL_SPLIT_ROWS) {
            let rows = FULL_SPLIT_ROWS.min(windows - first);
            let (start, end) = (first * t, (first + rows) * t);
            let window = (&tokens[start..end], &tokens[start + 1..end + 1]);
            sum.add(model, window, (rows, t), None, device);
        }
        let rest = LossSum::of_tokens(model, &tokens[windows * t..], t, device);
        sum.nats += rest.nats;
        sum.tokens += rest.tokens;
        (sum.tokens > 0).then_some(sum)
    }
}

/// Windows per forward pass of [`LossSum::of_split`].
pub const FULL_SPLIT_ROWS: usize = 32;

/// Mean loss over `iters` batches of `split`, the same batches at every call for a seed, so
/// curves compare like with like.
pub fn estimate_loss(
    model: &Gpt,
    data: &Dataset,
    split: Split,
    (iters, batch_size): (usize, usize),
    seed: u64,
    device: &Device,
) -> Result<f64, DataError> {
    let t = model.config.block_size;
    let mut rng = StdRng::seed_from_u64(mix_seed(seed, split as u64, STREAM_EVAL));
    let mut sum = LossSum::default();
    for _ in 0..iters {
        let (x, y) = data.sample_batch(split, batch_size, t, &mut rng)?;
        sum.add(model, (&x, &y), (batch_size, t), None, device);
    }
    Ok(sum.mean())
}

//! The fixed inputs heads are measured on: text windows, repeated random sequences and
//! held-out batches, all drawn from one seeded stream so scores compare across checkpoints.
//! Its own module because both the head table ([`crate::analysis`]) and TransformerLens's
//! detector ([`crate::detector`]) read it, and neither should import the other for it.

use headlab_data::{DataError, Dataset, Split, mix_seed};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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
    /// `text` overrides the text windows with one given sequence (cropped to `block_size`);
    /// it changes nothing else: the repeated sequences and held-out batches do not depend on it.
    pub fn new(
        data: &Dataset,
        block_size: usize,
        vocab_size: usize,
        text: Option<Vec<u32>>,
        seed: u64,
    ) -> Result<Self, DataError> {
        let mut rng = probe_rng(seed);
        // The val windows are drawn even when `text` replaces them, so the repeated sequences
        // and held-out batches drawn after them (and with them the ablation and importance
        // columns) are the same with a text of one's own as without.
        let (windows, _) = data.sample_batch(Split::Val, 8, block_size, &mut rng)?;
        let (text, text_shape) = match text {
            Some(ids) => cropped(ids, block_size),
            None => (windows, (8, block_size)),
        };
        let mut probe = Self::without_data(text, text_shape, block_size, vocab_size, &mut rng);
        probe.held_out = (0..4)
            .map(|_| data.sample_batch(Split::Val, probe.batch, block_size, &mut rng))
            .collect::<Result<_, _>>()?;
        Ok(probe)
    }

    /// Probes without a dataset: the given text (cropped to `block_size`) and repeated random
    /// sequences, no held-out batches, so [`crate::analysis::analyze`] leaves ablation and
    /// importance NaN. For `headlab heads --text` on a run whose data is not at hand.
    pub fn from_text(block_size: usize, vocab_size: usize, text: Vec<u32>, seed: u64) -> Self {
        let (text, text_shape) = cropped(text, block_size);
        let mut rng = probe_rng(seed);
        Self::without_data(text, text_shape, block_size, vocab_size, &mut rng)
    }

    /// The text windows given, the repeated sequences drawn from `rng`, no held-out batches.
    fn without_data(
        text: Vec<u32>,
        text_shape: (usize, usize),
        block_size: usize,
        vocab_size: usize,
        rng: &mut StdRng,
    ) -> Self {
        // Runs of 16 (fewer in short contexts): the scale of the induction corpus's runs.
        let period = ((block_size - 1) / 2).min(16);
        let n_repeated = 8;
        Self {
            text,
            text_shape,
            repeated: repeated_sequences(rng, n_repeated, period, vocab_size),
            n_repeated,
            period,
            held_out: Vec::new(),
            batch: 8,
        }
    }

    /// Length of each repeated sequence.
    pub fn repeated_len(&self) -> usize {
        1 + 2 * self.period
    }
}

/// The probes' random stream for a run's seed.
pub(crate) fn probe_rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(mix_seed(seed, 0, 0x4845_4144))
}

/// One text window: `ids` cut to `block_size`, with its shape.
fn cropped(ids: Vec<u32>, block_size: usize) -> (Vec<u32>, (usize, usize)) {
    let ids = ids[..ids.len().min(block_size)].to_vec();
    let n = ids.len();
    (ids, (1, n))
}

/// `rows` sequences of a random token then a random half of `period` tokens twice,
/// row-major.
fn repeated_sequences(rng: &mut StdRng, rows: usize, period: usize, vocab: usize) -> Vec<u32> {
    let mut repeated = Vec::with_capacity(rows * (1 + 2 * period));
    for _ in 0..rows {
        let first = rng.random_range(0..vocab as u32);
        let half: Vec<u32> = (0..period)
            .map(|_| rng.random_range(0..vocab as u32))
            .collect();
        repeated.push(first);
        repeated.extend_from_slice(&half);
        repeated.extend_from_slice(&half);
    }
    repeated
}

#[cfg(test)]
mod tests {
    use super::*;
    use headlab_data::TokenizerKind;

    /// A text of one's own replaces the text windows and nothing else: the repeated sequences
    /// and the held-out batches (what ablation and importance are measured on) stay the same.
    #[test]
    fn a_text_of_ones_own_changes_only_the_text_windows() {
        let text: String = (0..400).map(|i| format!("the cat {i} sat. ")).collect();
        let data = Dataset::from_text(&text, TokenizerKind::Char, 0.2, "cats").unwrap();
        let vocab = data.tokenizer().vocab_size();
        let plain = Probe::new(&data, 16, vocab, None, 1337).unwrap();
        let own = Probe::new(&data, 16, vocab, Some(vec![1, 2, 3, 4, 5]), 1337).unwrap();
        assert_eq!(
            (own.text.clone(), own.text_shape),
            (vec![1, 2, 3, 4, 5], (1, 5))
        );
        assert_eq!(plain.text_shape, (8, 16));
        assert!(!plain.held_out.is_empty());
        assert_eq!(own.held_out, plain.held_out);
        assert_eq!(own.repeated, plain.repeated);
    }
}

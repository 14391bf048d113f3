//! The in-context-learning score (Olsson et al. 2022, "In-context learning and induction
//! heads"): the loss on tokens late in the context minus the loss on tokens early in it, on
//! held-out text. It is negative when the model uses what it has read so far, and it falls
//! abruptly in the steps in which induction heads form. The head tracker records it at every
//! tracked step in `icl_history.csv`.
//!
//! Which positions: the last [`WINDOW`] of the context against positions 2 to 9 (0-based:
//! the prediction made after reading 3 to 10 tokens). Positions 0 and 1 are left out because
//! their prediction rests on one or two tokens, a bigram or trigram guess that any model
//! learns in the first steps and that says nothing of using context; from position 2 on a
//! prediction has a little context, and the last positions have all of it. Olsson et al. take token 500 against token 50 of a 1024-token
//! context; a context of 64 to 256 has no room for single tokens that far apart, so each end
//! is a mean over 8 positions, which also steadies the estimate.

use std::ops::Range;

use burn::tensor::Device;
use burn::tensor::activation::log_softmax;
use headlab_data::ids_tensor;
use headlab_kernels::to_host;
use headlab_model::Gpt;

/// File name of the score through training in a run directory.
pub const ICL_FILE: &str = "icl_history.csv";

/// Header of [`ICL_FILE`]: per tracked step, the mean loss at the early and late positions
/// and their difference.
pub const ICL_HEADER: &str = "step,early_loss,late_loss,icl_score\n";

/// Positions averaged at each end.
pub const WINDOW: usize = 8;

/// The first early position.
pub const FIRST: usize = 2;

/// The early and late positions of a context of `t` tokens; `None` when they would overlap
/// (`t` below 18).
pub fn positions(t: usize) -> Option<(Range<usize>, Range<usize>)> {
    let early = FIRST..FIRST + WINDOW;
    (t >= early.end + WINDOW).then(|| (early, t - WINDOW..t))
}

/// The score at one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IclScore {
    /// Mean loss (nats) at the early positions.
    pub early: f64,
    /// Mean loss at the late positions.
    pub late: f64,
}

impl IclScore {
    /// `late - early`: below 0 when later tokens are predicted better.
    pub fn score(&self) -> f64 {
        self.late - self.early
    }

    /// The [`ICL_FILE`] row of step `step`.
    pub fn row(&self, step: usize) -> String {
        format!(
            "{step},{:.4},{:.4},{:.4}\n",
            self.early,
            self.late,
            self.score()
        )
    }
}

/// The score of `model` on `batches` of `(x, y)` rows `[rows, t]` (the probe's held-out
/// batches): the loss of every row at every early and late position, averaged. `None` for a
/// context too short for both ends ([`positions`]) or no batches.
pub fn icl_score(
    model: &Gpt,
    batches: &[(Vec<u32>, Vec<u32>)],
    rows: usize,
    device: &Device,
) -> Option<IclScore> {
    let t = model.config.block_size;
    let (early, late) = positions(t)?;
    if batches.is_empty() {
        return None;
    }
    let (mut e, mut l) = (0.0f64, 0.0f64);
    for (x, y) in batches {
        let logits = model.forward(ids_tensor(x, rows, t, device));
        let v = logits.dims()[2];
        // [rows, t, v] log-probabilities, row-major on the host.
        let lp = to_host::<f32, 3>(log_softmax(logits, 2));
        let nll = |r: usize, i: usize| -f64::from(lp[(r * t + i) * v + y[r * t + i] as usize]);
        for r in 0..rows {
            e += early.clone().map(|i| nll(r, i)).sum::<f64>();
            l += late.clone().map(|i| nll(r, i)).sum::<f64>();
        }
    }
    let n = (batches.len() * rows * WINDOW) as f64;
    Some(IclScore {
        early: e / n,
        late: l / n,
    })
}

/// [`ICL_FILE`] read back: `(step, score)` in file order; rows that do not parse are skipped.
pub fn parse_icl_history(text: &str) -> Vec<(usize, IclScore)> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            Some((
                f.first()?.parse().ok()?,
                IclScore {
                    early: f.get(1)?.parse().ok()?,
                    late: f.get(2)?.parse().ok()?,
                },
            ))
        })
        .collect()
}

/// The steepest fall of the score between two consecutive recorded steps: `(fall, the later
/// step)`, the fall positive; `None` with fewer than two steps or no fall.
pub fn steepest_fall(history: &[(usize, IclScore)]) -> Option<(f64, usize)> {
    history
        .windows(2)
        .map(|w| (w[0].1.score() - w[1].1.score(), w[1].0))
        .filter(|(fall, _)| *fall > 0.0)
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Tensor;
    use headlab_model::GptConfig;

    #[test]
    fn positions_are_two_to_nine_and_the_last_eight() {
        assert_eq!(positions(64), Some((2..10, 56..64)));
        assert_eq!(positions(18), Some((2..10, 10..18)));
        assert_eq!(positions(17), None);
    }

    /// The score against each row's losses read one position at a time: the model run on
    /// the row alone, log-softmax written out in f64 from its logits.
    #[test]
    fn the_score_is_the_late_minus_the_early_losses_by_hand() {
        let device = Device::flex();
        device.seed(5);
        let config = GptConfig {
            vocab_size: 11,
            block_size: 20,
            d_model: 16,
            n_layers: 1,
            n_heads: 2,
            ..GptConfig::default()
        };
        let model = Gpt::new(&config, &device).unwrap();
        let (rows, t) = (3, 20);
        let batch = |k: u32| -> (Vec<u32>, Vec<u32>) {
            let x: Vec<u32> = (0..rows * t).map(|i| (i as u32 * 7 + k) % 11).collect();
            let y: Vec<u32> = (0..rows * t).map(|i| (i as u32 * 5 + 3 * k) % 11).collect();
            (x, y)
        };
        let batches = [batch(1), batch(2)];
        let got = icl_score(&model, &batches, rows, &device).unwrap();

        let (mut early, mut late) = (Vec::new(), Vec::new());
        for (x, y) in &batches {
            for r in 0..rows {
                let row: Vec<u32> = x[r * t..(r + 1) * t].to_vec();
                let logits: Tensor<3> = model.forward(ids_tensor(&row, 1, t, &device));
                let z = to_host::<f32, 3>(logits);
                for i in 0..t {
                    let zi: Vec<f64> = z[i * 11..(i + 1) * 11].iter().map(|&v| v as f64).collect();
                    let max = zi.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let lse = max + zi.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
                    let nll = lse - zi[y[r * t + i] as usize];
                    if (2..10).contains(&i) {
                        early.push(nll);
                    }
                    if (12..20).contains(&i) {
                        late.push(nll);
                    }
                }
            }
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        assert_eq!(early.len(), 2 * rows * 8);
        assert!((got.early - mean(&early)).abs() < 1e-4, "{got:?}");
        assert!((got.late - mean(&late)).abs() < 1e-4, "{got:?}");
        assert!((got.score() - (mean(&late) - mean(&early))).abs() < 2e-4);
        assert!(icl_score(&model, &[], rows, &device).is_none());
    }

    #[test]
    fn history_rows_read_back_and_the_steepest_fall_is_found() {
        let a = IclScore {
            early: 3.0,
            late: 3.1,
        };
        let b = IclScore {
            early: 2.5,
            late: 2.0,
        };
        let c = IclScore {
            early: 2.4,
            late: 1.2,
        };
        let text = format!("{ICL_HEADER}{}{}{}", a.row(0), b.row(50), c.row(100));
        assert_eq!(text.lines().nth(2), Some("50,2.5000,2.0000,-0.5000"));
        let history = parse_icl_history(&text);
        assert_eq!(history.len(), 3);
        assert_eq!(history[2], (100, c));
        // Scores 0.1, -0.5, -1.2: falls of 0.6 (to step 50) and 0.7 (to step 100).
        let (fall, step) = steepest_fall(&history).unwrap();
        assert_eq!(step, 100);
        assert!((fall - 0.7).abs() < 1e-9);
        assert_eq!(steepest_fall(&history[..1]), None);
    }
}

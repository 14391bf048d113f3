//! Pruning heads one at a time, as Michel et al. 2019 ("Are Sixteen Heads Really Better than
//! One?") measured it: remove the head whose gradient importance `E |dL/dm_h|` is smallest,
//! recompute the importance of the heads left on the model so pruned, and repeat; after each
//! removal, the loss on held-out batches and, on a grammar run, forced-choice agreement. As
//! baselines the same curve in reverse order (the most important head first, recomputed) and
//! in random orders. Where the curve stays flat, heads can go; whether removing any head makes
//! the model worse is read off the first removals.

use burn::tensor::{Device, Tensor, TensorData};
use headlab_data::{BuiltinCorpus, DataError, Dataset, Tokenizer};
use headlab_model::{ForwardOptions, Gpt};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use thiserror::Error;

use crate::analysis::{gradient_importance_at, held_out_loss};
use crate::probe::Probe;
use crate::syntax::{
    HeadId, MAX_SENTENCES, SyntaxProbe, SyntaxScoreError, forced_choice, val_probe,
};
#[cfg(doc)]
use headlab_data::syntax::Construction;

/// Why a model cannot be pruned.
#[derive(Debug, Error)]
pub enum PruneError {
    /// One head has nothing to be compared with.
    #[error(
        "this model has one head (model.n_layers = {n_layers}, model.n_heads = {n_heads}): \
         pruning removes heads one at a time and compares what is left, so it needs at least \
         two"
    )]
    OneHead {
        /// Its layers.
        n_layers: usize,
        /// Its heads per layer.
        n_heads: usize,
    },
    /// No held-out batches to measure the loss on.
    #[error("pruning measures the loss on the run's val split, which is not at hand")]
    NoData,
    /// The forced choice.
    #[error(transparent)]
    Syntax(#[from] SyntaxScoreError),
    /// Drawing the held-out batches.
    #[error(transparent)]
    Data(#[from] DataError),
}

/// In which order heads are removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The least important head left first, importance recomputed after each removal.
    Importance,
    /// The most important head left first, recomputed the same way.
    Reverse,
    /// A random order, seeded.
    Random(u64),
}

impl Order {
    /// The name in `prune.csv`: `importance`, `reverse`, `random-SEED`.
    pub fn name(self) -> String {
        match self {
            Order::Importance => "importance".into(),
            Order::Reverse => "reverse".into(),
            Order::Random(seed) => format!("random-{seed}"),
        }
    }
}

/// The model after one more removal.
#[derive(Debug, Clone, PartialEq)]
pub struct PruneStep {
    /// The head removed at this step; `None` for the intact model.
    pub removed: Option<HeadId>,
    /// Heads left.
    pub heads_left: usize,
    /// Mean cross-entropy on the held-out batches with the removed heads zeroed.
    pub val_loss: f64,
    /// Forced-choice agreement with them zeroed (a grammar run), 0.5 is chance.
    pub agreement: Option<f64>,
    /// The same per construction, in [`Construction::ALL`]'s order (NaN where no verb of it
    /// was asked); empty off the grammar.
    pub agreement_by: Vec<f64>,
}

/// One pruning curve: the intact model, then one step per head removed, down to none.
#[derive(Debug, Clone, PartialEq)]
pub struct PruneCurve {
    /// Its order.
    pub order: Order,
    /// The steps, intact first.
    pub steps: Vec<PruneStep>,
}

/// Removes every head of `model`, one at a time in `order`, measuring after each removal on
/// `probe`'s held-out batches and, given one, on the grammar's forced choice.
pub fn prune_curve(
    model: &Gpt,
    probe: &Probe,
    syntax: Option<(&Tokenizer, &SyntaxProbe)>,
    order: Order,
    device: &Device,
) -> Result<PruneCurve, PruneError> {
    let (n_layers, n_heads) = (model.config.n_layers, model.config.n_heads);
    let total = n_layers * n_heads;
    if total < 2 {
        return Err(PruneError::OneHead { n_layers, n_heads });
    }
    if probe.held_out.is_empty() {
        return Err(PruneError::NoData);
    }
    let mut mask = vec![1.0f32; total];
    let mut removed: Vec<HeadId> = Vec::new();
    let mut random = match order {
        Order::Random(seed) => {
            let mut all: Vec<usize> = (0..total).collect();
            all.shuffle(&mut StdRng::seed_from_u64(seed));
            all
        }
        _ => Vec::new(),
    };
    let measure = |mask: &[f32], removed: &[HeadId], head| -> Result<PruneStep, PruneError> {
        let options = ForwardOptions {
            head_mask: Some(Tensor::<2>::from_data(
                TensorData::new(mask.to_vec(), [n_layers, n_heads]),
                device,
            )),
            ..ForwardOptions::default()
        };
        let choice = match syntax {
            Some((tokenizer, probe)) => {
                Some(forced_choice(model, tokenizer, probe, removed, device)?)
            }
            None => None,
        };
        Ok(PruneStep {
            removed: head,
            heads_left: mask.iter().filter(|&&m| m != 0.0).count(),
            val_loss: held_out_loss(model, probe, &options, device),
            agreement: choice.as_ref().map(|c| c.accuracy),
            agreement_by: choice.map_or(Vec::new(), |c| {
                c.by_construction.iter().map(|b| b.accuracy).collect()
            }),
        })
    };
    let mut steps = vec![measure(&mask, &removed, None)?];
    for _ in 0..total {
        let next = match order {
            Order::Random(_) => random.remove(0),
            Order::Importance | Order::Reverse => {
                let importance = gradient_importance_at(model, probe, &mask, device);
                let left = (0..total).filter(|&i| mask[i] != 0.0);
                // Ties go to the first head, layer-major.
                let pick = match order {
                    Order::Importance => {
                        left.reduce(|b, i| if importance[i] < importance[b] { i } else { b })
                    }
                    _ => left.reduce(|b, i| if importance[i] > importance[b] { i } else { b }),
                };
                pick.expect("a head is left")
            }
        };
        mask[next] = 0.0;
        let head = (next / n_heads, next % n_heads);
        removed.push(head);
        steps.push(measure(&mask, &removed, Some(head))?);
    }
    Ok(PruneCurve { order, steps })
}

/// Every curve `headlab prune` draws for a run trained with `config` on `data`: the
/// importance order, the reverse order and one random order per seed of `random_seeds`,
/// measured on the head table's held-out batches (drawn with the run's seed) and, on the
/// grammar corpus, on the forced choice over the val split's first sentences. Logs a line per
/// order, since each takes a gradient pass per removal.
pub fn prune_run(
    model: &Gpt,
    config: &headlab_train::config::RunConfig,
    data: &Dataset,
    tokenizer: &Tokenizer,
    random_seeds: &[u64],
    device: &Device,
) -> Result<Vec<PruneCurve>, PruneError> {
    let (n_layers, n_heads) = (model.config.n_layers, model.config.n_heads);
    if n_layers * n_heads < 2 {
        return Err(PruneError::OneHead { n_layers, n_heads });
    }
    let probe = Probe::new(
        data,
        config.model.block_size,
        tokenizer.vocab_size(),
        None,
        config.train.seed,
    )?;
    let syntax = if config.data.builtin.as_deref() == Some(BuiltinCorpus::Grammar.name()) {
        val_probe(data, tokenizer, MAX_SENTENCES)?.map(|(p, _)| p)
    } else {
        None
    };
    let mut orders = vec![Order::Importance, Order::Reverse];
    orders.extend(random_seeds.iter().map(|&s| Order::Random(s)));
    orders
        .into_iter()
        .map(|order| {
            headlab_train::log_line!(
                "prune: {} order, {} heads",
                order.name(),
                n_layers * n_heads
            );
            let with = syntax.as_ref().map(|p| (tokenizer, p));
            prune_curve(model, &probe, with, order, device)
        })
        .collect()
}

/// The last `n` heads `curve` removes, the last first: what its order keeps to the end.
pub fn last_removed(curve: &PruneCurve, n: usize) -> Vec<HeadId> {
    curve
        .steps
        .iter()
        .rev()
        .filter_map(|s| s.removed)
        .take(n)
        .collect()
}

/// How many heads `curve` removes before the loss rises by `loss_share` of the intact loss
/// (0.01: 1%) or agreement falls by `agreement_points` (0.01: one point), whichever comes
/// first: the removals that cost nothing that matters.
pub fn removable(curve: &PruneCurve, loss_share: f64, agreement_points: f64) -> usize {
    let intact = &curve.steps[0];
    curve.steps[1..]
        .iter()
        .take_while(|s| {
            let loss_ok = s.val_loss <= intact.val_loss * (1.0 + loss_share);
            let agreement_ok = match (s.agreement, intact.agreement) {
                (Some(a), Some(i)) => a >= i - agreement_points,
                _ => true,
            };
            loss_ok && agreement_ok
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(loss: f64, agreement: Option<f64>) -> PruneStep {
        PruneStep {
            removed: Some((0, 0)),
            heads_left: 0,
            val_loss: loss,
            agreement,
            agreement_by: Vec::new(),
        }
    }

    /// Removals count until the first one past either bound, not the ones after it.
    #[test]
    fn removable_counts_the_removals_before_either_bound() {
        let curve = PruneCurve {
            order: Order::Importance,
            steps: vec![
                step(1.0, Some(0.90)),
                step(1.005, Some(0.90)),
                step(1.0099, Some(0.895)),
                step(1.02, Some(0.90)),
                step(1.0, Some(0.90)),
            ],
        };
        assert_eq!(removable(&curve, 0.01, 0.01), 2);
        let mut by_agreement = curve.clone();
        by_agreement.steps[2].agreement = Some(0.88);
        assert_eq!(removable(&by_agreement, 0.01, 0.01), 1);
        let mut no_grammar = curve;
        for s in &mut no_grammar.steps {
            s.agreement = None;
        }
        assert_eq!(removable(&no_grammar, 0.01, 0.01), 2);
    }
}

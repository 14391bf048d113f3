//! `headlab prune`'s results as files and text: `prune.csv`, `prune.json` (the same curves
//! for the run's page) and the summary ([`crate::pruning`] measures them).

use std::fmt::Write as _;

use crate::pruning::{PruneCurve, last_removed, removable};

/// `prune.csv`'s header: one row per order and step. `order` (`importance`, `reverse`,
/// `random-SEED`), `step` (heads removed so far), `removed` (the head removed at that step,
/// `layer.head`; empty for the intact model), `heads_left`, `val_loss` (mean cross-entropy on
/// the held-out val batches with the removed heads zeroed), `agreement` (forced-choice
/// agreement then, 0.5 is chance; empty on a run not on the grammar corpus), then the same
/// for the verbs of each construction (`agreement_prepositional`, `agreement_relative`,
/// `agreement_nothing`: what stands between subject and verb; empty where none was asked).
pub const PRUNE_HEADER: &str = "order,step,removed,heads_left,val_loss,agreement,\
     agreement_prepositional,agreement_relative,agreement_nothing";

/// `prune.json`, what the run's page draws: per order its `order` name, whether it is a
/// `random` baseline, and its `steps` (intact first): `removed` (`layer.head`, null for the
/// intact model), `heads_left`, `val_loss`, `agreement` (null off the grammar corpus).
pub fn prune_json(curves: &[PruneCurve]) -> serde_json::Value {
    let finite = |x: f64| x.is_finite().then_some(x);
    curves
        .iter()
        .map(|c| {
            let steps: Vec<serde_json::Value> = c
                .steps
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "removed": s.removed.map(|(l, h)| format!("{l}.{h}")),
                        "heads_left": s.heads_left,
                        "val_loss": finite(s.val_loss),
                        "agreement": s.agreement.and_then(finite),
                    })
                })
                .collect();
            serde_json::json!({
                "order": c.order.name(),
                "random": matches!(c.order, crate::pruning::Order::Random(_)),
                "steps": steps,
            })
        })
        .collect()
}

/// `prune.csv` ([`PRUNE_HEADER`]).
pub fn prune_csv(curves: &[PruneCurve]) -> String {
    let mut s = format!("{PRUNE_HEADER}\n");
    for curve in curves {
        for (k, step) in curve.steps.iter().enumerate() {
            let removed = step
                .removed
                .map_or(String::new(), |(l, h)| format!("{l}.{h}"));
            let share = |a: f64| {
                if a.is_finite() {
                    format!("{a:.6}")
                } else {
                    String::new()
                }
            };
            let agreement = step.agreement.map_or(String::new(), share);
            let by: Vec<String> = if step.agreement_by.is_empty() {
                vec![String::new(); 3]
            } else {
                step.agreement_by.iter().map(|&a| share(a)).collect()
            };
            let _ = writeln!(
                s,
                "{},{k},{removed},{},{:.6},{agreement},{}",
                curve.order.name(),
                step.heads_left,
                step.val_loss,
                by.join(",")
            );
        }
    }
    s
}

/// The summary `headlab prune` prints: per order, how many heads go before the loss rises 1%
/// or agreement falls a point, and the heads the importance order keeps to the last.
pub fn summary(curves: &[PruneCurve]) -> String {
    let Some(first) = curves.first() else {
        return String::new();
    };
    let total = first.steps.len() - 1;
    let intact = &first.steps[0];
    let agreement = intact.agreement.map_or(String::new(), |a| {
        format!(", forced-choice agreement {a:.2}")
    });
    let mut s = format!(
        "pruning {total} heads one at a time (Michel et al. 2019); intact: val loss {:.4}{agreement}\n",
        intact.val_loss
    );
    let bound = if intact.agreement.is_some() {
        "before the val loss rises 1% or agreement falls 1 point"
    } else {
        "before the val loss rises 1%"
    };
    let _ = writeln!(s, "  heads removed {bound}:");
    for curve in curves {
        let _ = writeln!(
            s,
            "    {:<12} {} of {total}",
            curve.order.name(),
            removable(curve, 0.01, 0.01),
        );
    }
    // Every order ends at the same model, with no head left: said once.
    let last = first.steps.last().expect("a curve has its intact step");
    let _ = writeln!(
        s,
        "  with every head removed: val loss {:.4}",
        last.val_loss
    );
    let kept: Vec<String> = last_removed(first, 3)
        .iter()
        .map(|(l, h)| format!("{l}.{h}"))
        .collect();
    let _ = writeln!(
        s,
        "  the last heads the importance order removes (the last first): {}",
        kept.join(", ")
    );
    s
}

//! `headlab circuit`'s results as text: `circuit.csv` and the summary it prints
//! ([`crate::discovery`] finds them).

use crate::discovery::Discovery;
use crate::patch_report::CLOSE_NATS;

/// `circuit.csv`'s header: one row per edge of the graph. `sender` (`embed`, `L.H`, `mlp L`),
/// `receiver` (`L.H`, `mlp L`, `logits`), `input` (the receiving head's `Q`, `K` or `V`; empty
/// for an MLP or the logits), `score` (the share of the clean-minus-corrupted gap the metric
/// loses when the edge is corrupted, positive where the edge carries the task: ACDC's
/// measured when it tried the edge, EAP's its first-order estimate), `kept` (in the circuit).
pub const CIRCUIT_HEADER: &str = "sender,receiver,input,score,kept";

/// `circuit.csv` ([`CIRCUIT_HEADER`]).
pub fn circuit_csv(found: &Discovery) -> String {
    let mut s = format!("{CIRCUIT_HEADER}\n");
    for e in &found.edges {
        s += &format!(
            "{},{},{},{:.6},{}\n",
            e.edge.from.name(),
            e.edge.to.name(),
            e.edge.to.input(),
            e.score,
            e.kept
        );
    }
    s
}

/// The warning when the whole model's metric on the clean prompt is within
/// [`CLOSE_NATS`] of the corrupted one's: every score is divided by that gap, as patch's
/// shares are ([`crate::patch_report::too_close`]).
pub fn small_gap(found: &Discovery) -> Option<String> {
    let gap = found.full - found.empty;
    (gap.abs() < CLOSE_NATS).then(|| {
        format!(
            "the metric is {:.4} on the clean prompt and {:.4} on the corrupted one, {:.4} \
             apart, under {CLOSE_NATS} nat: the prompts barely disagree about the answer, and \
             every score is divided by that gap; choose prompts whose next tokens differ, with \
             --answer the clean one's and --versus the corrupted one's",
            found.full,
            found.empty,
            gap.abs()
        )
    })
}

/// What `headlab circuit` prints: the method, the edges kept, the circuit's faithfulness and
/// its cost, then every kept edge, largest score first.
pub fn circuit_summary(found: &Discovery) -> String {
    let kept = found.edges.iter().filter(|e| e.kept).count();
    let mut s = format!(
        "circuit discovery ({}, threshold {}): {} of {} edges kept\n",
        found.method.name(),
        found.threshold,
        kept,
        found.edges.len()
    );
    s += &format!(
        "  metric: whole model {:.4}, circuit alone {:.4} ({:.3} of the gap), every edge \
         corrupted {:.4}\n",
        found.full,
        found.circuit,
        found.recovered(),
        found.empty
    );
    s += &format!(
        "  cost: {} forward passes in {:.2} s\n",
        found.passes, found.seconds
    );
    s += "  kept edges (score: the share of the gap lost when the edge is corrupted):\n";
    for e in found.kept_by_score() {
        s += &format!(
            "    {:>8} -> {:<10} {:+.4}\n",
            e.edge.from.name(),
            e.edge.to.label(),
            e.score
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::Method;

    fn found(full: f64, empty: f64) -> Discovery {
        Discovery {
            method: Method::Acdc,
            threshold: 0.02,
            edges: Vec::new(),
            full,
            circuit: full,
            empty,
            passes: 2,
            seconds: 0.0,
        }
    }

    /// The warning comes exactly when the two runs are under a nat apart, as patch's.
    #[test]
    fn a_gap_under_a_nat_is_warned_about() {
        let w = small_gap(&found(0.8684, 0.8195)).expect("0.049 apart");
        assert!(w.contains("0.0489 apart"), "{w}");
        assert!(small_gap(&found(8.5196, -8.5337)).is_none());
        assert!(small_gap(&found(1.0, 0.0)).is_none());
        assert!(small_gap(&found(0.5, -0.4999)).is_some());
    }
}

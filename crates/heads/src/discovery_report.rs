//! `headlab circuit`'s results as text: `circuit.csv` and the summary it prints
//! ([`crate::discovery`] finds them).

use crate::discovery::Discovery;

/// `circuit.csv`'s header: one row per edge of the graph. `sender` (`embed`, `L.H`, `mlp L`),
/// `receiver` (`L.H`, `mlp L`, `logits`), `input` (the receiving head's `Q`, `K` or `V`; empty
/// for an MLP or the logits), `score` (ACDC: how far corrupting the edge moved the metric when
/// it was tried, as a share of the clean-minus-corrupted gap; EAP: the first-order estimate of
/// the metric's change when it is corrupted, as a share of the gap, signed), `kept` (in the
/// circuit).
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
    s += "  kept edges (score: a share of the gap):\n";
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

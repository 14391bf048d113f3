//! The labs' `summary.md` pages and tables, from what the experiments measured.

use std::fmt::Write as _;

use headlab_heads::lab::{AmbiguityLab, HeadsLab, InductionLab};

use crate::heads::to_table;

/// `lab induction`'s summary.
pub fn induction_summary(lab: &InductionLab, reproduce: &str) -> String {
    let (cfg, c) = (&lab.config, &lab.circuit);
    let mut s = String::from("# lab induction\n\n");
    let _ = writeln!(
        s,
        "A {}-layer attention-only model (d_model {}, {} heads, {} positions) trained for {} steps \
         on the built-in induction corpus (random runs over 62 symbols, each written twice), seed {}, in {:.0} s. Layers and heads count from 0: layer 1 is the second layer.\n",
        cfg.model.n_layers,
        cfg.model.d_model,
        cfg.model.n_heads,
        cfg.model.block_size,
        cfg.train.max_iters,
        cfg.train.seed,
        lab.seconds
    );
    let crossed = c.crossed_at.map_or(" (never above 0.5)".to_string(), |st| {
        format!(", above 0.5 from step {st}")
    });
    let _ = writeln!(
        s,
        "- **induction head**: layer {} head {}, induction score {:.2}{crossed}",
        c.induction_head.0, c.induction_head.1, c.induction_score
    );
    let _ = writeln!(
        s,
        "- **previous-token head**: layer {} head {}, previous-token score {:.2}",
        c.previous_token_head.0, c.previous_token_head.1, c.previous_token_score
    );
    let _ = writeln!(
        s,
        "- **loss on the repeated half**: {:.2} at step 0, {:.2} at the end; steepest fall {:.2} nats in the interval ending at step {}",
        c.repeat_loss.0, c.repeat_loss.1, c.steepest_drop.0, c.steepest_drop.1
    );
    let formed = c.induction_score > 0.5 && c.previous_token_score > 0.5;
    let verdict = if formed {
        "The circuit formed: a first-layer head copies each token's predecessor into its position, and a second-layer head uses it to find the token after the earlier occurrence of the current token."
    } else {
        "No complete circuit formed at these settings (see the scores above)."
    };
    let _ = writeln!(s, "\n{verdict}\n");
    s += "![head scores](heads.png)\n\n![attention maps on a repeated sequence](attention.png)\n\n";
    s += "Watch the circuit form: [report.html](report.html) replays every head's map through \
          training on a step slider, with the scores and the loss at the same step.\n\n";
    let _ = writeln!(
        s,
        "Head table (`heads.csv`, explorer: `heads.html`):\n\n```\n{}```",
        to_table(&lab.report.rows)
    );
    s += &format!("\nReproduce: `{reproduce}`\n");
    s
}

/// `lab heads`'s summary: one row per head count, val loss over the seeds.
pub fn heads_summary(lab: &HeadsLab, reproduce: &str) -> String {
    let m = &lab.base.model;
    let mut s = String::from("# lab heads\n\n");
    let _ = writeln!(
        s,
        "Same d_model ({}), layers ({}) and parameter count, different numbers of heads, \
         {} steps each on the grammar corpus, seeds {:?}. Final val loss (mean and spread \
         across seeds) and the head labels of each run.\n",
        m.d_model, m.n_layers, lab.base.train.max_iters, lab.seeds
    );
    s += "| heads | d_k | parameters | val loss mean | min | max | head labels (all seeds) |\n";
    s += "|---|---|---|---|---|---|---|\n";
    for c in &lab.counts {
        let losses = &c.val_losses;
        let mean = losses.iter().sum::<f64>() / losses.len() as f64;
        let (min, max) = losses
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        let labels: Vec<String> = c.labels.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {mean:.4} | {min:.4} | {max:.4} | {} |",
            c.n_heads,
            c.d_k,
            c.params,
            labels.join(", ")
        );
    }
    s += &format!(
        "\nReproduce: `{reproduce}` (per-run directories `h<heads>-s<seed>/` hold curves, \
         checkpoints and each run's page, `report.html`).\n"
    );
    s
}

/// `lab heads`'s `val_loss.csv`: one row per run.
pub fn heads_csv(lab: &HeadsLab) -> String {
    let mut csv = String::from("n_heads,seed,val_loss\n");
    for c in &lab.counts {
        for (seed, loss) in lab.seeds.iter().zip(&c.val_losses) {
            let _ = writeln!(csv, "{},{seed},{loss:.5}", c.n_heads);
        }
    }
    csv
}

/// `lab ambiguity`'s summary.
pub fn ambiguity_summary(lab: &AmbiguityLab, reproduce: &str) -> String {
    let (layers, heads) = (lab.config.model.n_layers, lab.config.model.n_heads);
    let mut s = String::from("# lab ambiguity\n\n");
    let _ = writeln!(
        s,
        "{} A {layers}-layer, {heads}-head char-level model trained on the grammar corpus; attention from the last letter of \"with\" to the letters of the verb and of the object noun, averaged over {} such sentences.\n",
        readings(&lab.example.text, lab.example.main_verb),
        lab.sentences
    );
    s += "| layer | head | to verb | to noun | attaches to |\n|---|---|---|---|---|\n";
    for l in 0..layers {
        for h in 0..heads {
            let (v, o) = (lab.to_verb[l * heads + h], lab.to_noun[l * heads + h]);
            let side = if (v - o).abs() < 0.05 {
                "neither"
            } else if v > o {
                "verb"
            } else {
                "noun"
            };
            let _ = writeln!(s, "| {l} | {h} | {v:.3} | {o:.3} | {side} |");
        }
    }
    s += "\nBoth readings fit every such sentence; the table shows which side each head reads from when the model is at \"with\".\n\n";
    s += &format!(
        "![attention on an example sentence](attention.png)\n\nThe run's page, with every \
         head's map through training: [report.html](report.html).\n\nReproduce: `{reproduce}`\n"
    );
    s
}

/// The question an attachment sentence poses, in its own words: "with X" as the verb's
/// instrument or as the noun's possession.
pub fn readings(sentence: &str, main_verb: usize) -> String {
    let words: Vec<&str> = sentence.trim_end_matches('.').split(' ').collect();
    let Some(with) = words.iter().position(|w| *w == "with") else {
        return format!("In \"{sentence}\", where does the prepositional phrase attach?");
    };
    let (verb, noun, object) = (
        words[main_verb],
        words[with - 1],
        words[with + 1..].join(" "),
    );
    format!(
        "In \"{sentence}\", does \"with {object}\" attach to the verb (an instrument: {verb} \
         using {object}) or to the noun (the {noun} with {object})?"
    )
}

#[cfg(test)]
mod tests {
    use super::readings;

    #[test]
    fn the_readings_quote_the_measured_sentence() {
        let text = readings("the cat watches the tall children with a camera.", 2);
        assert_eq!(
            text,
            "In \"the cat watches the tall children with a camera.\", does \"with a camera\" \
             attach to the verb (an instrument: watches using a camera) or to the noun (the \
             children with a camera)?"
        );
    }
}

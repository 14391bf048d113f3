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
    let corpus = lab.base.data.builtin.as_deref().unwrap_or("a file");
    let lookup = lab
        .counts
        .iter()
        .all(|c| c.lookups.len() == c.val_losses.len());
    let mut s = String::from("# lab heads\n\n");
    let _ = writeln!(
        s,
        "Same d_model ({}), layers ({}) and parameter count, different numbers of heads, {} \
         steps each on the {corpus} corpus, seeds {:?}. Final val loss and, on the lookup \
         corpus, task accuracy (share of letters whose two sources are in view where the most \
         likely letter is the rule's), as mean and range across seeds, and the head labels of \
         every run.\n",
        m.d_model, m.n_layers, lab.base.train.max_iters, lab.seeds
    );
    if lookup {
        s += "The task: each letter is set by the letters 2 and 6 back (one of 16, 10% drawn at \
              random instead). Neither source is the current token, and either alone leaves the \
              letter open (about 1.4 nats left against 0.56 with both, measured on the corpus by \
              `the_next_letter_needs_both_sources_and_either_alone_leaves_it_open`): a prediction \
              needs two lookups at once.\n\n";
    }
    let range = |v: &[f64]| {
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let (min, max) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        (mean, min, max)
    };
    // The best head count by mean val loss; another is worse only when its range lies wholly
    // above the best's.
    let best = lab
        .counts
        .iter()
        .min_by(|a, b| range(&a.val_losses).0.total_cmp(&range(&b.val_losses).0));
    let best_range = best.map(|b| range(&b.val_losses));
    s += "| heads | d_k | parameters | val loss mean (min-max) | accuracy mean (min-max) | against the best | head labels (all seeds) |\n";
    s += "|---|---|---|---|---|---|---|\n";
    let mut verdicts = Vec::new();
    for c in &lab.counts {
        let (mean, min, max) = range(&c.val_losses);
        let accuracy = if c.lookups.is_empty() {
            "-".to_string()
        } else {
            let acc: Vec<f64> = c.lookups.iter().map(|l| l.accuracy).collect();
            let (a, lo, hi) = range(&acc);
            format!("{a:.3} ({lo:.3}-{hi:.3})")
        };
        let verdict = match (best, best_range) {
            (Some(b), _) if b.n_heads == c.n_heads => "best".to_string(),
            (_, Some((_, _, best_max))) if min > best_max => "worse (ranges apart)".to_string(),
            _ => "level (ranges overlap)".to_string(),
        };
        verdicts.push((c.n_heads, c.d_k, verdict.clone()));
        let labels: Vec<String> = c.labels.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {mean:.4} ({min:.4}-{max:.4}) | {accuracy} | {verdict} | {} |",
            c.n_heads,
            c.d_k,
            c.params,
            labels.join(", ")
        );
    }
    if lab.counts.len() > 1 {
        s += "\n![val loss against the number of heads](heads.png)\n";
    }
    // What the table says, in words that go no further than it.
    let worse: Vec<String> = verdicts
        .iter()
        .filter(|v| v.2.starts_with("worse"))
        .map(|v| format!("{} (d_k {})", v.0, v.1))
        .collect();
    if let Some(b) = best {
        let _ = write!(
            s,
            "\nLowest mean val loss: {} heads (d_k {}). ",
            b.n_heads, b.d_k
        );
        if worse.is_empty() {
            s += "No other head count is worse by more than the spread across seeds.\n";
        } else {
            let _ = writeln!(
                s,
                "Worse with no overlap of seed ranges: {}; every other head count is level with \
                 it.",
                worse.join(", ")
            );
        }
    }
    if lookup {
        s += &mechanism(lab);
        s += &lookup_reading(lab);
    }
    s += &format!(
        "\nReproduce: `{reproduce}` (per-run directories `h<heads>-s<seed>/` hold curves, \
         checkpoints and each run's page, `report.html`; `val_loss.csv` every run's numbers).\n"
    );
    s
}

/// Which heads fetch which source in the best multi-head run and in a one-head run, with the
/// accuracy left when each head is ablated.
fn mechanism(lab: &HeadsLab) -> String {
    let mut s = String::new();
    let runs = lab.counts.iter().flat_map(|c| {
        c.lookups
            .iter()
            .zip(&c.val_losses)
            .zip(&lab.seeds)
            .map(move |((l, loss), seed)| (c.n_heads, *seed, l, *loss))
    });
    let name = |h: usize, k: usize| format!("{}.{}", k / h, k % h);
    let top = |v: &[f64]| {
        (0..v.len())
            .max_by(|&a, &b| v[a].total_cmp(&v[b]))
            .unwrap_or(0)
    };
    // The fewest heads above one: every head in view.
    if let Some(fewest) = lab
        .counts
        .iter()
        .map(|c| c.n_heads)
        .filter(|&h| h > 1)
        .min()
    {
        let _ = writeln!(
            s,
            "\n## Who fetches what: {fewest} heads\n\nAttention from each predicting position to \
             the near source (1 back) and the far source (5 back), and the accuracy with that \
             head's output zeroed (chance: 1/16 = 0.0625).\n"
        );
        s += "| seed | layer.head | to near source | to far source | accuracy | accuracy ablated |\n|---|---|---|---|---|---|\n";
        let mut lines = Vec::new();
        for (h, seed, l, _) in runs.clone().filter(|r| r.0 == fewest) {
            for k in 0..l.to_near.len() {
                let _ = writeln!(
                    s,
                    "| {seed} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
                    name(h, k),
                    l.to_near[k],
                    l.to_far[k],
                    l.accuracy,
                    l.ablated[k]
                );
            }
            let (near, far) = (top(&l.to_near), top(&l.to_far));
            lines.push(if near == far {
                format!(
                    "seed {seed}: head {} gives both sources the most attention (the lookups \
                     are not split)",
                    name(h, near)
                )
            } else {
                format!(
                    "seed {seed}: head {} takes the near source, head {} the far one; zeroing \
                     them leaves {:.3} and {:.3}",
                    name(h, near),
                    name(h, far),
                    l.ablated[near],
                    l.ablated[far]
                )
            });
        }
        let _ = writeln!(s, "\n{}.", lines.join("; "));
    }
    // The run with the lowest val loss among several heads: its busiest heads.
    let best = runs
        .clone()
        .filter(|r| r.0 > 1)
        .min_by(|a, b| a.3.total_cmp(&b.3));
    if let Some((h, seed, l, loss)) = best {
        let _ = writeln!(
            s,
            "\n## The lowest val loss: {h} heads, seed {seed} (val loss {loss:.4}, accuracy {:.3} \
             over {} predictions)\n\nThe heads that give each source the most attention, and \
             every head whose ablation costs more than 0.02 of accuracy:\n",
            l.accuracy, l.predictions
        );
        s += "| layer.head | to near source | to far source | accuracy ablated |\n|---|---|---|---|\n";
        let (near, far) = (top(&l.to_near), top(&l.to_far));
        let mut shown: Vec<usize> = vec![near, far];
        shown.extend((0..l.to_near.len()).filter(|&k| l.accuracy - l.ablated[k] > 0.02));
        shown.sort_unstable();
        shown.dedup();
        for k in shown {
            let _ = writeln!(
                s,
                "| {} | {:.3} | {:.3} | {:.3} |",
                name(h, k),
                l.to_near[k],
                l.to_far[k],
                l.ablated[k]
            );
        }
    }
    let single: Vec<_> = runs.filter(|r| r.0 == 1).collect();
    if !single.is_empty() {
        s += "\n## One head\n\n| seed | to near source | to far source | accuracy |\n|---|---|---|---|\n";
        for (_, seed, l, _) in &single {
            let _ = writeln!(
                s,
                "| {seed} | {:.3} | {:.3} | {:.3} |",
                l.to_near.first().unwrap_or(&f64::NAN),
                l.to_far.first().unwrap_or(&f64::NAN),
                l.accuracy
            );
        }
        s += "\nA single head has one softmax per position: whatever it gives the near source it \
              takes from the far one, and what it passes on is the weighted average of the two \
              letters' values.\n";
    }
    s
}

/// What the lookup table shows and does not, in sentences built from its own numbers.
fn lookup_reading(lab: &HeadsLab) -> String {
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let accuracy = |c: &headlab_heads::lab::HeadCount| {
        mean(&c.lookups.iter().map(|l| l.accuracy).collect::<Vec<_>>())
    };
    let Some(best) = lab
        .counts
        .iter()
        .min_by(|a, b| mean(&a.val_losses).total_cmp(&mean(&b.val_losses)))
    else {
        return String::new();
    };
    let best_max = best.val_losses.iter().copied().fold(f64::MIN, f64::max);
    let apart = |c: &headlab_heads::lab::HeadCount| {
        c.val_losses.iter().copied().fold(f64::MAX, f64::min) > best_max
    };
    let mut s = String::from("\n## What this shows, and what it does not\n\n");
    if let Some(one) = lab.counts.iter().find(|c| c.n_heads == 1) {
        let near = mean(&one.lookups.iter().map(|l| l.to_near[0]).collect::<Vec<_>>());
        let far = mean(&one.lookups.iter().map(|l| l.to_far[0]).collect::<Vec<_>>());
        let (acc, acc_best) = (accuracy(one), accuracy(best));
        let _ = write!(
            s,
            "One head picks the rule's letter with accuracy {acc:.3} (the best head count: \
             {acc_best:.3}). It gives the near source {near:.2} of its attention and the far \
             one {far:.2}; "
        );
        if (acc_best - acc).abs() < 0.01 {
            s += "attending to both places at once is enough here: on this task one head is not \
                  unable to make two lookups. ";
        } else {
            s += "the two letters arrive mixed, and it loses letters that several heads keep. ";
        }
        if apart(one) && one.n_heads != best.n_heads {
            let _ = write!(
                s,
                "It does fall short in val loss, {:.4} against {:.4} with {} heads, with no \
                 overlap across seeds: in how much probability it puts on that letter, not in \
                 which letter it picks. ",
                mean(&one.val_losses),
                mean(&best.val_losses),
                best.n_heads
            );
        } else {
            s += "Its val loss is within the seeds' spread of the best. ";
        }
    }
    let many: Vec<String> = lab
        .counts
        .iter()
        .filter(|c| c.d_k <= 2 && apart(c) && c.n_heads != best.n_heads)
        .map(|c| format!("{} heads (d_k {})", c.n_heads, c.d_k))
        .collect();
    if !many.is_empty() {
        let _ = write!(
            s,
            "With the smallest heads, {}, val loss is worse again (ranges apart). ",
            many.join(", ")
        );
    }
    let level: Vec<String> = lab
        .counts
        .iter()
        .filter(|c| !apart(c) && c.n_heads != best.n_heads)
        .map(|c| c.n_heads.to_string())
        .collect();
    if !level.is_empty() {
        let _ = write!(
            s,
            "{} heads are level with the best {}: there the seeds decide more than the head \
             count. ",
            level.join(", "),
            best.n_heads
        );
    }
    s += "\n\nAccuracy is close to 1 for every head count here, so it does not rank them; the \
          ranking rests on val loss, and the differences are hundredths of a nat. This is one \
          task, one layer, one width and one training length with three seeds: it does not \
          show where the plateau's edges move with depth, d_model or longer training, nor that \
          heads split other tasks this way.\n";
    s
}

/// `lab heads`'s `val_loss.csv`: one row per run (accuracy empty off the lookup corpus).
pub fn heads_csv(lab: &HeadsLab) -> String {
    let mut csv = String::from("n_heads,d_k,seed,val_loss,accuracy\n");
    for c in &lab.counts {
        for (i, (seed, loss)) in lab.seeds.iter().zip(&c.val_losses).enumerate() {
            let acc = c
                .lookups
                .get(i)
                .map_or(String::new(), |l| format!("{:.5}", l.accuracy));
            let _ = writeln!(csv, "{},{},{seed},{loss:.5},{acc}", c.n_heads, c.d_k);
        }
    }
    csv
}

/// `lab heads`'s picture: val loss against log2(heads), one faint line per seed and the mean
/// (accuracy, in the table, is left out: near 1 it would flatten the loss curve).
pub fn heads_png(lab: &HeadsLab, path: &std::path::Path) -> Result<(), crate::ReportError> {
    use crate::plot::{Series, line_chart};
    let x = |c: &headlab_heads::lab::HeadCount| (c.n_heads as f64).log2();
    let mut series = Vec::new();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    series.push(Series {
        label: "val loss, mean over seeds".into(),
        points: lab
            .counts
            .iter()
            .map(|c| (x(c), mean(&c.val_losses)))
            .collect(),
        faint: false,
    });
    for (i, seed) in lab.seeds.iter().enumerate() {
        series.push(Series {
            label: format!("val loss, seed {seed}"),
            points: lab
                .counts
                .iter()
                .filter_map(|c| c.val_losses.get(i).map(|&v| (x(c), v)))
                .collect(),
            faint: true,
        });
    }
    line_chart(
        path,
        "lab heads: val loss at equal parameters",
        "log2(heads)",
        "val loss (nats)",
        &series,
    )
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

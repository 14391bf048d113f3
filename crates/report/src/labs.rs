//! The labs' `summary.md` pages and tables, from what the experiments measured.

use std::fmt::Write as _;

use headlab_data::corpus::{EITHER, INSTRUMENTS, POSSESSIONS};
use headlab_heads::lab::{AmbiguityLab, HeadsLab, InductionLab, Reading, ReadingRow};

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
         checkpoints and each run's page, `report.html`; `val_loss.csv` every run's val loss, accuracy \
         and head labels).\n"
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
        s += "With a head zeroed, \"fits near\" is the share of predictions whose most likely \
              letter is one the near source allows (whatever the far letter), \"fits far\" the \
              same for the far source: 1 while that lookup survives, about 1/4 once it is lost.\n\n";
        s += "| seed | layer.head | to near source | to far source | accuracy | accuracy ablated | fits near, ablated | fits far, ablated |\n|---|---|---|---|---|---|---|---|\n";
        let mut lines = Vec::new();
        for (h, seed, l, _) in runs.clone().filter(|r| r.0 == fewest) {
            for k in 0..l.to_near.len() {
                let _ = writeln!(
                    s,
                    "| {seed} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                    name(h, k),
                    l.to_near[k],
                    l.to_far[k],
                    l.accuracy,
                    l.ablated[k],
                    l.ablated_fits_near[k],
                    l.ablated_fits_far[k]
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
                     {} leaves accuracy {:.3} with {:.3} of predictions fitting the near source \
                     and {:.3} the far one; zeroing {} leaves {:.3}, fitting {:.3} and {:.3}",
                    name(h, near),
                    name(h, far),
                    name(h, near),
                    l.ablated[near],
                    l.ablated_fits_near[near],
                    l.ablated_fits_far[near],
                    name(h, far),
                    l.ablated[far],
                    l.ablated_fits_near[far],
                    l.ablated_fits_far[far]
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

/// `lab heads`'s `val_loss.csv`: one row per run, with its val loss, accuracy (empty off the
/// lookup corpus) and head labels.
pub fn heads_csv(lab: &HeadsLab) -> String {
    let mut csv = String::from("n_heads,d_k,seed,val_loss,accuracy,head_labels\n");
    for c in &lab.counts {
        for (i, (seed, loss)) in lab.seeds.iter().zip(&c.val_losses).enumerate() {
            let acc = c
                .lookups
                .get(i)
                .map_or(String::new(), |l| format!("{:.5}", l.accuracy));
            // "diffuse 3; previous-token 1": no commas inside the field.
            let labels = c.run_labels.get(i).map_or(String::new(), |m| {
                m.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            });
            let _ = writeln!(
                csv,
                "{},{},{seed},{loss:.5},{acc},{labels}",
                c.n_heads, c.d_k
            );
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
    let n = layers * heads;
    let mut s = String::from("# lab ambiguity\n\n");
    let _ = writeln!(
        s,
        "In \"{}\", does \"with\" attach to the verb (the subject uses the thing) or to the \
         noun (the object has it)? In the `attach` corpus the sentence ends \"and hide(s) it\", \
         the verb agreeing with whoever has the thing: instruments ({}) attach to the verb, \
         worn things ({}) to the noun, and {} either way at random, so only that last verb \
         shows which. A {layers}-layer, {heads}-head model on {} tokens (\"with\" and \"and\" \
         one token each), {} steps. Measured on sentences whose subject and object differ in \
         number, so the last verb's number tells the reading; \"from the city\" stands between \
         the noun and \"with\" in about half of them.\n",
        lab.example,
        INSTRUMENTS.join(", "),
        POSSESSIONS.join(", "),
        EITHER.join(", "),
        lab.config.data.tokenizer,
        lab.config.train.max_iters
    );
    s += "| reading | sentences | the model prefers the holder's number at \"and\" |\n|---|---|---|\n";
    for r in &lab.rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.3} |",
            r.reading.name(),
            r.sentences,
            r.agreement
        );
    }
    let row = |reading: Reading| lab.rows.iter().find(|r| r.reading == reading);
    let (Some(inst), Some(poss), Some(either)) = (
        row(Reading::Instrument),
        row(Reading::Possession),
        row(Reading::Ambiguous),
    ) else {
        return s;
    };
    s += "\nAttention from \"and\", the position that predicts the agreeing verb, to the main \
          verb and to the object noun:\n\n";
    s += "| layer.head | instrument: verb | noun | possession: verb | noun | either: verb | noun | reads |\n|---|---|---|---|---|---|---|---|\n";
    let margin = 0.05;
    let (mut switching, mut both) = (Vec::new(), Vec::new());
    let (mut verb_side, mut noun_side) = (Vec::new(), Vec::new());
    for k in 0..n {
        let (iv, inn) = (inst.at_and.to_verb[k], inst.at_and.to_noun[k]);
        let (pv, pn) = (poss.at_and.to_verb[k], poss.at_and.to_noun[k]);
        let (ev, en) = (either.at_and.to_verb[k], either.at_and.to_noun[k]);
        let name = format!("{}.{}", k / heads, k % heads);
        let reads = if iv > inn + margin && pn > pv + margin {
            switching.push(name.clone());
            "switches: verb for instruments, noun for possessions"
        } else if iv > inn + margin && pv > pn + margin {
            verb_side.push(name.clone());
            "the verb either way"
        } else if inn > iv + margin && pn > pv + margin {
            noun_side.push(name.clone());
            "the noun either way"
        } else {
            "no side by more than 0.05"
        };
        if ev >= 0.1 && en >= 0.1 {
            both.push(format!("{name} ({ev:.2} verb, {en:.2} noun)"));
        }
        let _ = writeln!(
            s,
            "| {name} | {iv:.3} | {inn:.3} | {pv:.3} | {pn:.3} | {ev:.3} | {en:.3} | {reads} |"
        );
    }
    s += "\nFrom \"with\" (which comes before the thing, so it cannot know the reading yet), all \
          sentences:\n\n| layer.head | to verb | to noun |\n|---|---|---|\n";
    let total: usize = lab.rows.iter().map(|r| r.sentences).sum::<usize>().max(1);
    for k in 0..n {
        let mean = |f: &dyn Fn(&ReadingRow) -> f64| {
            lab.rows
                .iter()
                .map(|r| f(r) * r.sentences as f64)
                .sum::<f64>()
                / total as f64
        };
        let _ = writeln!(
            s,
            "| {}.{} | {:.3} | {:.3} |",
            k / heads,
            k % heads,
            mean(&|r| r.at_with.to_verb[k]),
            mean(&|r| r.at_with.to_noun[k])
        );
    }
    let adjacent = lab.rows.iter().map(|r| r.noun_adjacent).sum::<f64>() / 3.0;
    let distant = lab.rows.iter().map(|r| r.noun_distant).sum::<f64>() / 3.0;
    let _ = writeln!(
        s,
        "\nDistance: from \"with\", a head gives the noun {adjacent:.3} of its attention on \
         average when the noun is next to \"with\", and {distant:.3} when \"from the city\" \
         stands between them.\n"
    );
    s += "## What this shows, and what it does not\n\n";
    let _ = write!(
        s,
        "With an instrument the model prefers the subject's number at \"and\" in {:.0}% of \
         sentences, with a possession the object's in {:.0}%: ",
        100.0 * inst.agreement,
        100.0 * poss.agreement
    );
    s += if inst.agreement > 0.9 && poss.agreement > 0.9 {
        "it has learned what the attachment decides. "
    } else {
        "it has not fully learned what the attachment decides. "
    };
    let _ = write!(
        s,
        "With a thing that fits both, the reading is a coin toss the model cannot see, and it \
         matches it in {:.0}% of sentences. ",
        100.0 * either.agreement
    );
    if switching.is_empty() {
        s += "No head switches from the verb to the noun with the reading by more than 0.05. ";
    } else {
        let _ = write!(
            s,
            "Heads that look at the verb under the instrument reading and at the noun under the \
             possession reading: {}. ",
            switching.join(", ")
        );
    }
    if !verb_side.is_empty() && !noun_side.is_empty() {
        let _ = write!(
            s,
            "Different heads fetch the two candidates under every reading: {} the verb, {} the \
             noun; since where they look does not change with the reading, the choice between \
             the two numbers is not made by where these heads look. ",
            verb_side.join(", "),
            noun_side.join(", ")
        );
    }
    if both.is_empty() {
        s += "Under the ambiguous sentences no head gives both the verb and the noun 0.1 of \
              its attention or more: no head keeps both readings in view.";
    } else {
        let _ = write!(
            s,
            "Under the ambiguous sentences these heads give both the verb and the noun at \
             least 0.1 of their attention, keeping both in view: {}.",
            both.join(", ")
        );
    }
    s += "\n\nAttention is where a head reads from, not proof of what the model uses: the \
          number could also reach \"and\" through the residual stream of other positions (the \
          verb's own form carries the subject's number). One model, one seed, one size.\n\n";
    s += &format!(
        "![attention on an example sentence](attention.png)\n\nThe run's page, with every \
         head's map through training: [report.html](report.html).\n\nReproduce: `{reproduce}`\n"
    );
    s
}

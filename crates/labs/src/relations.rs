//! `lab relations`: one head holds one relation; do several heads hold syntax and meaning at
//! once? Word-level models with 1, 2 and 4 heads a layer at equal d_model (so equal
//! parameters), over seeds, on the `relations` corpus ([`headlab_data::relations`]), where a
//! verb's number comes from its subject (syntax) and its object's class from the verb
//! (meaning). For every run: each head's Clark score on both relations against the best
//! fixed-offset rule, both forced choices (the verb's number; an object that fits against
//! one of another class), and both again with each head zeroed alone.
//!
//! Files: one run per head count and seed (`h<H>-s<SEED>/`, with its `report.html`);
//! `relations.csv` ([`RELATIONS_HEADER`]: per run, head and relation, the head's Clark
//! `accuracy` with the rule's `baseline_offset` and `baseline_accuracy`, `role` (it beats the
//! rule by [`ROLE_MARGIN`] over [`ROLE_MIN_ARCS`] arcs or more), and the relation's forced
//! choice intact and with that head zeroed, as a share right and as the mean logit margin);
//! `choices.png` (both forced choices against the head count); `zeroing.png` (what zeroing
//! each relation's carrier does to its own relation and to the other); `report.html` and
//! `heads.html`, the page and head explorer of the run with the clearest double
//! dissociation; and `summary.md`.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use headlab_data::Split;
use headlab_data::relations::{VERB_CLASSES, relation_sentences};
use headlab_data::syntax::Relation;
use headlab_heads::relations::{
    Choices, RELATIONS, RelationProbe, forced_choices, relation_scores,
};
use headlab_heads::syntax::{HeadId, ROLE_MARGIN, ROLE_MIN_ARCS, RelationScore};
use headlab_heads::{Probe, head_report};
use headlab_report::plot::{Series, Style, line_chart_styled};
use headlab_report::{report_run, write_head_report};
use headlab_train::config::RunConfig;

use crate::{LabError, Runs, check_head_counts, lab_config, open, train_run, write, write_summary};

/// The shipped config: the syntax lab's model, 1000 steps on the relations corpus.
pub const CONFIG: &str = include_str!("../../../configs/lab-relations.toml");

/// The seeds when none are given.
pub const SEEDS: [u64; 3] = [1, 2, 3];

/// The head counts when none are given.
pub const HEAD_COUNTS: [usize; 3] = [1, 2, 4];

/// The seed of the test sentences: not one a run trains on.
pub const PROBE_SEED: u64 = 1_000_003;

/// How many test sentences: about a third have an attractor of the other number, the ones
/// the verb's number is asked on.
pub const PROBE_SENTENCES: usize = 600;

/// Zeroing a head *breaks* a relation when its forced choice falls by this share or more.
pub const BREAKS: f64 = 0.10;

/// Zeroing a head *spares* a relation when its forced choice stays within this share.
pub const SPARES: f64 = 0.05;

/// `relations.csv`'s header (the module's doc says what each column is).
pub const RELATIONS_HEADER: &str = "n_heads,seed,val_loss,layer,head,relation,accuracy,\
     baseline_offset,baseline_accuracy,role,choice_intact,choice_zeroed,margin_intact,\
     margin_zeroed";

/// The relations `--relations` names, comma-separated ("subject", "object").
pub fn parse_relations(text: &str) -> Result<Vec<Relation>, LabError> {
    let mut out = Vec::new();
    for name in text.split(',').map(str::trim) {
        let relation = RELATIONS
            .into_iter()
            .find(|r| r.name() == name)
            .ok_or_else(|| LabError::Setting {
                flag: "--relations",
                value: name.to_string(),
                why: "is not a relation of the relations corpus: give subject, object, or \
                      subject,object",
            })?;
        if !out.contains(&relation) {
            out.push(relation);
        }
    }
    Ok(out)
}

/// One run of the lab.
#[derive(Debug, Clone)]
pub struct RelationsRun {
    pub n_heads: usize,
    pub seed: u64,
    /// Its last evaluation's val loss.
    pub val_loss: f64,
    /// Seconds it trained (in an earlier lab, for a run `--resume` kept).
    pub train_seconds: f64,
    /// Per head (layer-major), per relation in [`RELATIONS`]'s order.
    pub scores: Vec<RelationScore>,
    /// Both forced choices of the whole model.
    pub intact: Choices,
    /// Both again with each head zeroed alone, layer-major.
    pub zeroed: Vec<(HeadId, Choices)>,
}

impl RelationsRun {
    /// The head whose zeroing lowers `relation`'s forced choice the most (the first on a tie),
    /// with the fall.
    pub fn carrier(&self, relation: Relation) -> Option<(HeadId, f64)> {
        let intact = self.intact.of(relation).accuracy;
        self.zeroed
            .iter()
            .map(|(h, c)| (*h, intact - c.of(relation).accuracy))
            .fold(None, |best: Option<(HeadId, f64)>, (h, fall)| match best {
                Some((_, b)) if b >= fall => best,
                _ => Some((h, fall)),
            })
    }

    /// What zeroing `head` does to `relation`'s forced choice: the fall from intact.
    pub fn fall(&self, head: HeadId, relation: Relation) -> f64 {
        let intact = self.intact.of(relation).accuracy;
        self.zeroed
            .iter()
            .find(|(h, _)| *h == head)
            .map_or(0.0, |(_, c)| intact - c.of(relation).accuracy)
    }

    /// A double dissociation: two heads, each of which breaks one relation ([`BREAKS`]) and
    /// spares the other ([`SPARES`]); `(subject's head, object's head)`.
    pub fn dissociation(&self) -> Option<(HeadId, HeadId)> {
        let (s, o) = (Relation::Subject, Relation::Object);
        let own = |r: Relation, other: Relation| {
            self.zeroed
                .iter()
                .map(|(h, _)| *h)
                .filter(|&h| self.fall(h, r) >= BREAKS && self.fall(h, other) <= SPARES)
                .max_by(|&a, &b| self.fall(a, r).total_cmp(&self.fall(b, r)))
        };
        match (own(s, o), own(o, s)) {
            (Some(a), Some(b)) if a != b => Some((a, b)),
            _ => None,
        }
    }

    /// The most accurate head on `relation` (the first on a tie).
    pub fn best(&self, relation: Relation) -> Option<&RelationScore> {
        self.scores
            .iter()
            .filter(|r| r.relation == relation)
            .reduce(|b, r| if r.accuracy > b.accuracy { r } else { b })
    }
}

/// Whether `r` beats its rule by the role margin over enough arcs.
fn has_role(r: &RelationScore) -> bool {
    r.n >= ROLE_MIN_ARCS && r.accuracy - r.baseline.accuracy >= ROLE_MARGIN
}

/// What `lab relations` measured.
#[derive(Debug, Clone)]
pub struct RelationsLab {
    /// The config every run starts from.
    pub base: RunConfig,
    pub seeds: Vec<u64>,
    pub head_counts: Vec<usize>,
    /// The relations reported.
    pub relations: Vec<Relation>,
    /// Head count major, then seed.
    pub runs: Vec<RelationsRun>,
    /// Wall seconds the lab took.
    pub seconds: f64,
}

/// Runs the lab into `out` with `sets` applied to its config, and writes its files and
/// `summary.md` (returned), which ends with `reproduce`.
pub fn run(
    out: &Path,
    sets: &[String],
    seeds: Vec<u64>,
    head_counts: &[usize],
    relations: &[Relation],
    reproduce: &str,
    runs: Runs<'_>,
) -> Result<String, LabError> {
    let base = lab_config(CONFIG, "configs/lab-relations.toml", sets)?;
    let lab = relations_lab(base, seeds, head_counts, relations, out, runs)?;
    write(&out.join("relations.csv"), &relations_csv(&lab))?;
    choices_png(&lab, &out.join("choices.png"))?;
    zeroing_png(&lab, &out.join("zeroing.png"))?;
    if let Some(shown) = shown_run(&lab) {
        let dir = out.join(run_name(shown.n_heads, shown.seed));
        let (trained, device, data) = open(&dir)?;
        let (config, tokenizer, model) = (&trained.config, &trained.tokenizer, &trained.model);
        let block = config.model.block_size;
        let map_ids = data.tokens(Split::Val).to_vec(0..block.min(32));
        let probe = Probe::new(&data, block, tokenizer.vocab_size(), None, shown.seed)?;
        let table = head_report(model, tokenizer, &probe, &map_ids, &device);
        let title = format!(
            "headlab lab relations: {} heads, seed {}",
            shown.n_heads, shown.seed
        );
        write_head_report(&dir.join("heads"), &title, &table, None)?;
        report_run(&dir)?;
        for (from, to) in [
            ("report.html", "report.html"),
            ("heads/heads.html", "heads.html"),
        ] {
            let from = dir.join(from);
            std::fs::copy(&from, out.join(to)).map_err(|source| LabError::File {
                action: "copy",
                path: from,
                source,
            })?;
        }
    }
    write_summary(out, summary(&lab, reproduce))
}

/// A run's folder name.
fn run_name(n_heads: usize, seed: u64) -> String {
    format!("h{n_heads}-s{seed}")
}

/// Trains `base` with each of `head_counts` and `seeds` into `dir/h<heads>-s<seed>` and
/// measures each run. Settings that cannot run are refused before anything is trained.
pub fn relations_lab(
    base: RunConfig,
    seeds: Vec<u64>,
    head_counts: &[usize],
    relations: &[Relation],
    dir: &Path,
    runs: Runs<'_>,
) -> Result<RelationsLab, LabError> {
    check_head_counts(base.model.d_model, head_counts)?;
    let empty = |flag: &'static str| LabError::Setting {
        flag,
        value: "(none)".into(),
        why: "names nothing: give at least one",
    };
    if seeds.is_empty() {
        return Err(empty("--seeds"));
    }
    if head_counts.is_empty() {
        return Err(empty("--heads"));
    }
    if relations.is_empty() {
        return Err(empty("--relations"));
    }
    if base.data.builtin.as_deref() != Some("relations") || base.data.path.is_some() {
        return Err(LabError::Setting {
            flag: "--set data.builtin",
            value: base.data.builtin.clone().unwrap_or_default(),
            why: "must stay \"relations\": the lab measures that corpus's two relations",
        });
    }
    let started = Instant::now();
    let total = head_counts.len() * seeds.len();
    let sentences = relation_sentences(PROBE_SEED, PROBE_SENTENCES);
    let mut out = Vec::new();
    for &h in head_counts {
        for &seed in &seeds {
            headlab_train::log_line!(
                "lab relations: run {}/{total}: {h} heads, seed {seed} ({:.0} s so far)",
                out.len() + 1,
                started.elapsed().as_secs_f64()
            );
            let mut config = base.clone();
            config.model.n_heads = h;
            config.train.seed = seed;
            let run_dir = dir.join(run_name(h, seed));
            let done = train_run(config, run_dir.clone(), runs)?;
            let (trained, device, _) = open(&run_dir)?;
            let (tokenizer, model) = (&trained.tokenizer, &trained.model);
            let block = trained.config.model.block_size;
            let probe = RelationProbe::new(tokenizer, sentences.clone(), block)?;
            let scores = relation_scores(model, &probe, &device);
            let intact = forced_choices(model, &probe, &[], &device)?;
            let mut zeroed = Vec::new();
            for layer in 0..trained.config.model.n_layers {
                for head in 0..h {
                    let c = forced_choices(model, &probe, &[(layer, head)], &device)?;
                    zeroed.push(((layer, head), c));
                }
            }
            report_run(&run_dir)?;
            out.push(RelationsRun {
                n_heads: h,
                seed,
                val_loss: done.val_loss,
                train_seconds: done.seconds,
                scores,
                intact,
                zeroed,
            });
        }
    }
    Ok(RelationsLab {
        base,
        seeds,
        head_counts: head_counts.to_vec(),
        relations: relations.to_vec(),
        runs: out,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// `relations.csv` ([`RELATIONS_HEADER`]).
pub fn relations_csv(lab: &RelationsLab) -> String {
    let mut s = format!("{RELATIONS_HEADER}\n");
    for run in &lab.runs {
        for r in run
            .scores
            .iter()
            .filter(|r| lab.relations.contains(&r.relation))
        {
            let intact = run.intact.of(r.relation);
            let zeroed = run
                .zeroed
                .iter()
                .find(|(h, _)| *h == (r.layer, r.head))
                .map(|(_, c)| c.of(r.relation));
            let (choice, margin) = zeroed.map_or((String::new(), String::new()), |z| {
                (format!("{:.6}", z.accuracy), format!("{:.6}", z.margin))
            });
            let _ = writeln!(
                s,
                "{},{},{:.6},{},{},{},{:.6},{},{:.6},{},{:.6},{choice},{:.6},{margin}",
                run.n_heads,
                run.seed,
                run.val_loss,
                r.layer,
                r.head,
                r.relation,
                r.accuracy,
                r.baseline.offset,
                r.baseline.accuracy,
                has_role(r),
                intact.accuracy,
                intact.margin,
            );
        }
    }
    s
}

/// What a relation's forced choice is, for labels.
fn choice_name(relation: Relation) -> &'static str {
    match relation {
        Relation::Subject => "the verb's number (subject)",
        _ => "an object that fits the verb (object)",
    }
}

/// The mean of `values` (NaN when empty).
fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// `choices.png`: each relation's forced choice against the head count, the mean over seeds
/// (markers), and each seed faint.
pub fn choices_png(lab: &RelationsLab, path: &Path) -> Result<(), headlab_report::ReportError> {
    let mut series = Vec::new();
    for (i, &rel) in lab.relations.iter().enumerate() {
        let at = |h: usize| -> Vec<f64> {
            lab.runs
                .iter()
                .filter(|r| r.n_heads == h)
                .map(|r| r.intact.of(rel).accuracy)
                .collect()
        };
        let points = lab
            .head_counts
            .iter()
            .map(|&h| (h as f64, mean(&at(h))))
            .collect();
        let style = Style {
            markers: true,
            ..Style::nth(i)
        };
        series.push((
            Series {
                label: format!("{}, mean of {} seeds", choice_name(rel), lab.seeds.len()),
                points,
                faint: false,
            },
            style,
        ));
        for &seed in &lab.seeds {
            let points = lab
                .runs
                .iter()
                .filter(|r| r.seed == seed)
                .map(|r| (r.n_heads as f64, r.intact.of(rel).accuracy))
                .collect();
            series.push((
                Series {
                    label: String::new(),
                    points,
                    faint: true,
                },
                Style::nth(i),
            ));
        }
    }
    line_chart_styled(
        path,
        "forced choices of the whole model against heads per layer",
        "heads per layer",
        "share chosen right",
        &series,
    )
}

/// `zeroing.png`: per relation, what zeroing the head that carries it (the one whose zeroing
/// hurts it most) does to it and to the other relation, mean over seeds: far apart, heads
/// hold the relations apart; together, one head holds both.
pub fn zeroing_png(lab: &RelationsLab, path: &Path) -> Result<(), headlab_report::ReportError> {
    let mut series = Vec::new();
    for (i, &rel) in lab.relations.iter().enumerate() {
        let other = if rel == Relation::Subject {
            Relation::Object
        } else {
            Relation::Subject
        };
        let falls = |h: usize, of: Relation| -> f64 {
            let v: Vec<f64> = lab
                .runs
                .iter()
                .filter(|r| r.n_heads == h)
                .filter_map(|r| r.carrier(rel).map(|(head, _)| r.fall(head, of)))
                .collect();
            mean(&v)
        };
        for (of, faint) in [(rel, false), (other, true)] {
            let points = lab
                .head_counts
                .iter()
                .map(|&h| (h as f64, falls(h, of)))
                .collect();
            let label = if of == rel {
                format!("zeroing the {rel} carrier: its own choice falls by")
            } else {
                format!("zeroing the {rel} carrier: the {of} choice falls by")
            };
            let style = Style {
                markers: true,
                ..Style::nth(i)
            };
            series.push((
                Series {
                    label,
                    points,
                    faint,
                },
                style,
            ));
        }
    }
    line_chart_styled(
        path,
        "zeroing each relation's carrier head, mean over seeds",
        "heads per layer",
        "fall in share chosen right",
        &series,
    )
}

/// The run whose page the lab shows: the one with a double dissociation whose two heads
/// break their relations the most, else the first.
fn shown_run(lab: &RelationsLab) -> Option<&RelationsRun> {
    let strength = |r: &RelationsRun| {
        r.dissociation().map(|(a, b)| {
            r.fall(a, Relation::Subject)
                .min(r.fall(b, Relation::Object))
        })
    };
    lab.runs
        .iter()
        .filter(|r| strength(r).is_some())
        .reduce(|b, r| if strength(r) > strength(b) { r } else { b })
        .or_else(|| lab.runs.first())
}

/// `layer.head`.
fn name((layer, head): HeadId) -> String {
    format!("{layer}.{head}")
}

/// The range of `values` as "a" or "a-b", two decimals.
fn range(values: &[f64]) -> String {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if (hi - lo).abs() < 0.005 {
        format!("{lo:.2}")
    } else {
        format!("{lo:.2}-{hi:.2}")
    }
}

/// `lab relations`'s summary.
pub fn summary(lab: &RelationsLab, reproduce: &str) -> String {
    let (m, t, d) = (&lab.base.model, &lab.base.train, &lab.base.data);
    let counts: Vec<String> = lab.head_counts.iter().map(|h| h.to_string()).collect();
    let seeds: Vec<String> = lab.seeds.iter().map(|s| s.to_string()).collect();
    let classes: Vec<String> = VERB_CLASSES
        .iter()
        .map(|c| format!("\"{}\" {}", c.verb.singular, c.class))
        .collect();
    let mut s = format!(
        "# lab relations\n\n\
         In \"the dog near the cats chases one of the red mice\", the verb's number comes from \
         its subject across the attractor \"cats\" (syntax), and the object comes from the \
         verb: {} (meaning). Word-level models ({} layers, d_model {}, block {}, {} steps on \
         {} characters of the built-in relations corpus) with {} heads per layer (d_k = \
         d_model / heads, the same parameters), seeds {}: {:.0} s of training, and {:.0} s for \
         this lab's command.\n\n\
         What is measured, each on {PROBE_SENTENCES} test sentences drawn from a seed no run \
         trains on, at the word that predicts the related word (a causal model predicts a word \
         from the one before it):\n\n\
         - **Clark score**: the share of arcs on which a head attends most to the related word \
           (the subject, where the verb is predicted; the verb, where the object is), against \
           the best \"k words back\" rule on the same arcs. A head has a role when it beats the \
           rule by {ROLE_MARGIN} over {ROLE_MIN_ARCS} arcs or more.\n\
         - **Forced choice**: the share of sentences on which the model puts more probability \
           on the right word: the verb's agreeing form against the other (on sentences whose \
           attractor differs in number from the subject), and the object noun against the \
           noun of another verb's class in the same number.\n\
         - **Zeroing**: both forced choices again with one head's output zeroed. A head \
           *breaks* a relation when that relation's choice falls by {BREAKS} or more, and \
           *spares* it when it stays within {SPARES}; two heads that each break one relation \
           and spare the other are a double dissociation.\n\n",
        classes.join(", "),
        m.n_layers,
        m.d_model,
        m.block_size,
        t.max_iters,
        d.builtin_chars,
        counts.join(", "),
        seeds.join(", "),
        lab.runs.iter().map(|r| r.train_seconds).sum::<f64>(),
        lab.seconds,
    );
    s += "## The whole model, by head count\n\n| heads per layer | val loss |";
    for &rel in &lab.relations {
        let _ = write!(s, " {} |", choice_name(rel));
    }
    s += " runs with a double dissociation |\n|---|---|";
    s += &"---|".repeat(lab.relations.len() + 1);
    s += "\n";
    for &h in &lab.head_counts {
        let of: Vec<&RelationsRun> = lab.runs.iter().filter(|r| r.n_heads == h).collect();
        let losses: Vec<f64> = of.iter().map(|r| r.val_loss).collect();
        let _ = write!(s, "| {h} | {} |", range(&losses).replace('-', " to "));
        for &rel in &lab.relations {
            let v: Vec<f64> = of.iter().map(|r| r.intact.of(rel).accuracy).collect();
            let _ = write!(s, " {:.2} ({}) |", mean(&v), range(&v));
        }
        let both = of.iter().filter(|r| r.dissociation().is_some()).count();
        let _ = writeln!(s, " {both} of {} |", of.len());
    }
    s += "\n(Each choice: the mean over seeds, and its range.)\n\n";

    s += "## Each run: which head holds which relation\n\n\
          | heads | seed | relation | forced choice | best head by attention: accuracy vs rule | \
          carrier: the head whose zeroing hurts it most | its choice with the carrier zeroed | \
          the other relation's choice with it zeroed |\n|---|---|---|---|---|---|---|---|\n";
    for run in &lab.runs {
        for &rel in &lab.relations {
            let other = if rel == Relation::Subject {
                Relation::Object
            } else {
                Relation::Subject
            };
            let best = run.best(rel).map_or("-".to_string(), |b| {
                format!(
                    "{}.{}: {:.2} vs {:.2} ({} back){}",
                    b.layer,
                    b.head,
                    b.accuracy,
                    b.baseline.accuracy,
                    b.baseline.offset,
                    if has_role(b) { ", a role" } else { "" }
                )
            });
            let (carrier, own, cross) = match run.carrier(rel) {
                Some((head, _)) => (
                    name(head),
                    format!(
                        "{:.2} -> {:.2}",
                        run.intact.of(rel).accuracy,
                        run.intact.of(rel).accuracy - run.fall(head, rel)
                    ),
                    format!(
                        "{:.2} -> {:.2}",
                        run.intact.of(other).accuracy,
                        run.intact.of(other).accuracy - run.fall(head, other)
                    ),
                ),
                None => ("-".into(), String::new(), String::new()),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {rel} | {:.2} | {best} | {carrier} | {own} | {cross} |",
                run.n_heads,
                run.seed,
                run.intact.of(rel).accuracy,
            );
        }
    }
    s += "\n";
    s += &verdict(lab);
    if let Some(r) = shown_run(lab) {
        let _ = writeln!(
            s,
            "The page of run {} ([report.html](report.html), its head explorer \
             [heads.html](heads.html)) replays its heads through training.\n",
            run_name(r.n_heads, r.seed)
        );
    }
    s += "![forced choices against the head count](choices.png)\n\n\
          ![zeroing each relation's carrier](zeroing.png)\n\n\
          Files: `relations.csv` (per run, head and relation: the Clark score and rule, and \
          the forced choice intact and with that head zeroed), `choices.png`, `zeroing.png`, \
          and each run's folder (`h<H>-s<SEED>/`, with its `report.html`).\n\n";
    let _ = writeln!(s, "Reproduce: `{reproduce}`");
    s
}

/// What the numbers say about the claim, in plain words, from the numbers themselves.
fn verdict(lab: &RelationsLab) -> String {
    let mut s = String::from("## What this shows\n\n");
    let at = |h: usize, rel: Relation| -> Option<f64> {
        let v: Vec<f64> = lab
            .runs
            .iter()
            .filter(|r| r.n_heads == h)
            .map(|r| r.intact.of(rel).accuracy)
            .collect();
        (!v.is_empty()).then(|| mean(&v))
    };
    let both = lab.relations.len() == 2;
    if both
        && let (Some(s1), Some(o1), Some(s2), Some(o2)) = (
            at(1, Relation::Subject),
            at(1, Relation::Object),
            at(2, Relation::Subject),
            at(2, Relation::Object),
        )
    {
        let _ = write!(
            s,
            "With one head per layer the model chooses the verb's number right {s1:.2} of the \
             time and the object {o1:.2}; with two, {s2:.2} and {o2:.2}. "
        );
        let worse: Vec<&str> = [("the verb's number", s1, s2), ("the object", o1, o2)]
            .iter()
            .filter(|(_, one, two)| two - one >= 0.05)
            .map(|(n, _, _)| *n)
            .collect();
        if worse.len() == 1 {
            let _ = write!(
                s,
                "So one head solves one relation about as well as two heads do, and {} is worse \
                 with one head: the trade-off the claim predicts. ",
                worse[0]
            );
        } else if worse.is_empty() {
            s += "So one head per layer does as well as two on both relations (within 0.05): \
                  the trade-off the claim predicts does not show at this size. ";
        } else {
            s += "So one head per layer is worse on both relations than two, not on one alone: \
                  more than a trade-off between them. ";
        }
    }
    if both {
        let multi: Vec<&RelationsRun> = lab.runs.iter().filter(|r| r.n_heads >= 2).collect();
        let with: Vec<String> = multi
            .iter()
            .filter_map(|r| {
                r.dissociation().map(|(a, b)| {
                    format!(
                        "{} ({} the subject, {} the object)",
                        run_name(r.n_heads, r.seed),
                        name(a),
                        name(b)
                    )
                })
            })
            .collect();
        let _ = write!(
            s,
            "A double dissociation (two heads, each breaking its own relation by {BREAKS} or \
             more and sparing the other within {SPARES}) shows in {} of the {} runs with two or \
             more heads per layer{}. ",
            with.len(),
            multi.len(),
            if with.is_empty() {
                String::new()
            } else {
                format!(": {}", with.join("; "))
            }
        );
        let same: Vec<String> = lab
            .runs
            .iter()
            .filter(|r| {
                matches!(
                    (r.carrier(Relation::Subject), r.carrier(Relation::Object)),
                    (Some((a, fa)), Some((b, fb))) if a == b && fa >= BREAKS && fb >= BREAKS
                )
            })
            .map(|r| run_name(r.n_heads, r.seed))
            .collect();
        if !same.is_empty() {
            let _ = write!(
                s,
                "In {} one head breaks both relations when zeroed. ",
                same.join(", ")
            );
        }
    }
    let _ = write!(
        s,
        "\n\nZeroing shows what the model needs a head for, the Clark score only where it \
         looks: a head may carry a relation without attending most to its word. Zeroing a \
         layer-0 head also cuts what later layers read, so a layer-0 carrier of both relations \
         may be plumbing rather than a role. Small models, {} seeds, one corpus.\n\n",
        lab.seeds.len()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use headlab_heads::relations::ChoiceScore;

    fn choices(number: f64, object: f64) -> Choices {
        let c = |accuracy| ChoiceScore {
            n: 10,
            accuracy,
            margin: 0.0,
        };
        Choices {
            number: c(number),
            object: c(object),
        }
    }

    fn run(intact: Choices, zeroed: Vec<(HeadId, Choices)>) -> RelationsRun {
        RelationsRun {
            n_heads: 2,
            seed: 1,
            val_loss: 1.0,
            train_seconds: 0.0,
            scores: Vec::new(),
            intact,
            zeroed,
        }
    }

    /// Carriers and dissociations read off zeroing tables written by hand.
    #[test]
    fn a_double_dissociation_needs_two_heads_each_breaking_its_own() {
        // 1.0 breaks the number (0.95 -> 0.60) and spares the object (0.90 -> 0.88); 1.1 the
        // other way round; 0.x touch nothing.
        let r = run(
            choices(0.95, 0.90),
            vec![
                ((0, 0), choices(0.95, 0.90)),
                ((0, 1), choices(0.94, 0.89)),
                ((1, 0), choices(0.60, 0.88)),
                ((1, 1), choices(0.93, 0.50)),
            ],
        );
        assert_eq!(r.carrier(Relation::Subject).map(|c| c.0), Some((1, 0)));
        assert_eq!(r.carrier(Relation::Object).map(|c| c.0), Some((1, 1)));
        assert_eq!(r.dissociation(), Some(((1, 0), (1, 1))));
        // One head that breaks both: no dissociation.
        let r = run(
            choices(0.95, 0.90),
            vec![((1, 0), choices(0.60, 0.50)), ((1, 1), choices(0.95, 0.90))],
        );
        assert_eq!(r.dissociation(), None);
        // A fall of 0.09 does not break.
        let r = run(
            choices(0.95, 0.90),
            vec![((1, 0), choices(0.86, 0.90)), ((1, 1), choices(0.95, 0.50))],
        );
        assert_eq!(r.dissociation(), None);
    }

    #[test]
    fn relations_are_named_or_refused() {
        assert_eq!(
            parse_relations("object, subject,object").unwrap(),
            [Relation::Object, Relation::Subject]
        );
        let err = parse_relations("subject,antecedent")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("antecedent") && err.contains("subject,object"),
            "{err}"
        );
    }
}

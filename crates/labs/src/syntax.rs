//! `lab syntax`: the default run's word-level model with 1, 2, 4 and 8 heads at equal d_model,
//! over seeds, on the grammar corpus. For every run and relation the best head against the
//! best fixed-offset rule (Clark et al. 2019); the run's syntactic head (the one that beats
//! its rule by the most), the step it formed at (from `syntax_history.csv`) and what zeroing
//! it alone does to agreement, by construction; and whether each relation finds a head on
//! every seed. The models with the most heads are pruned as Michel et al. 2019 pruned theirs
//! (heads removed one at a time by recomputed gradient importance, against the reverse and
//! random orders): how many heads go before the loss or agreement moves, and when the
//! syntactic head goes.
//!
//! Files: one run per head count and seed (`h<H>-s<SEED>/`, with its `heads/` syntax files and
//! `report.html`); `syntax.csv` ([`SYNTAX_LAB_HEADER`]: per run and relation, `n_heads`,
//! `seed`, the best head's `layer` and `head`, its `accuracy`, the rule's `baseline_offset`
//! and `baseline_accuracy`, `role` (beats the rule by the role margin over enough arcs),
//! `syntactic` (it is the run's syntactic head) and `formed_at` (the first tracked step from
//! which it beat the rule by the margin at every later one; empty if not the syntactic head));
//! `syntax.png`; `prune.png` (the pruned models' val loss as heads go, importance order against
//! the mean of the random ones, per seed; each pruned run's own curves and CSV are in its
//! `prune/`); `report.html` and `heads.html`, the page and head explorer of the pruned run
//! whose syntactic head beats its rule by the most; and `summary.md`.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use headlab_data::Split;
use headlab_data::syntax::{Construction, Relation};
use headlab_heads::pruning::{Order, PruneCurve, last_removed, prune_run, removable};
use headlab_heads::syntax::{
    AblationKind, ROLE_MARGIN, RelationScore, SYNTAX_HISTORY_FILE, SyntaxPoint,
    parse_syntax_history,
};
use headlab_heads::syntax_report::{self, SyntaxReport, measure, syntactic_head};
use headlab_heads::{Probe, head_report};
use headlab_report::plot::{Series, Style, line_chart_styled};
use headlab_report::pruning::write_pruning;
use headlab_report::{report_run, write_head_report};
use headlab_train::config::RunConfig;

use crate::{LabError, Runs, check_head_counts, lab_config, open, train_run, write, write_summary};

/// The shipped config: the default run's model, 1000 steps.
pub const CONFIG: &str = include_str!("../../../configs/lab-syntax.toml");

/// The seeds when none are given.
pub const SEEDS: [u64; 3] = [1, 2, 3];

/// The head counts when none are given.
pub const HEAD_COUNTS: [usize; 4] = [1, 2, 4, 8];

/// The seeds of the random pruning orders, as `headlab prune` draws them by default.
pub const PRUNE_SEEDS: [u64; 3] = [1, 2, 3];

/// A pruned head goes "at no cost" while the val loss stays within this share of the intact
/// model's and agreement within this many points (as `headlab prune`'s summary counts).
const PRUNE_BOUND: (f64, f64) = (0.01, 0.01);

/// `syntax.csv`'s header (the module's doc says what each column is).
pub const SYNTAX_LAB_HEADER: &str = "n_heads,seed,relation,layer,head,accuracy,baseline_offset,\
     baseline_accuracy,role,syntactic,formed_at";

/// One run of the lab.
#[derive(Debug, Clone)]
pub struct SyntaxRun {
    pub n_heads: usize,
    pub seed: u64,
    /// Its last evaluation's val loss.
    pub val_loss: f64,
    /// Its syntactic heads, measured on its first val sentences.
    pub report: SyntaxReport,
    /// The step its syntactic head formed at (see [`formed_at`]).
    pub formed_at: Option<usize>,
    /// Its pruning curves (importance, reverse, then the random orders), for the runs with
    /// the lab's largest head count; empty for the others.
    pub pruning: Vec<PruneCurve>,
}

/// What `lab syntax` measured.
#[derive(Debug, Clone)]
pub struct SyntaxLab {
    /// The config every run starts from.
    pub base: RunConfig,
    pub seeds: Vec<u64>,
    pub head_counts: Vec<usize>,
    /// Head count major, then seed.
    pub runs: Vec<SyntaxRun>,
    /// Wall seconds the lab took.
    pub seconds: f64,
}

/// Runs the lab into `out` with `sets` applied to its config: one run per head count and
/// seed, `syntax.csv`, `syntax.png` and `summary.md` (returned), which ends with `reproduce`.
pub fn run(
    out: &Path,
    sets: &[String],
    seeds: Vec<u64>,
    head_counts: &[usize],
    reproduce: &str,
    runs: Runs<'_>,
) -> Result<String, LabError> {
    let base = lab_config(CONFIG, "configs/lab-syntax.toml", sets)?;
    let lab = syntax_lab(base, seeds, head_counts, out, runs)?;
    write(&out.join("syntax.csv"), &syntax_csv(&lab))?;
    syntax_png(&lab, &out.join("syntax.png"))?;
    prune_png(&lab, &out.join("prune.png"))?;
    if let Some(shown) = shown_run(&lab) {
        let dir = out.join(format!("h{}-s{}", shown.n_heads, shown.seed));
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

/// Trains `base` with each of `head_counts` and `seeds` into `dir/h<heads>-s<seed>` and
/// measures each run's syntactic heads.
pub fn syntax_lab(
    base: RunConfig,
    seeds: Vec<u64>,
    head_counts: &[usize],
    dir: &Path,
    runs: Runs<'_>,
) -> Result<SyntaxLab, LabError> {
    check_head_counts(base.model.d_model, head_counts)?;
    let started = Instant::now();
    let total = head_counts.len() * seeds.len();
    let most = head_counts.iter().copied().max().unwrap_or(0);
    let pruned = |h: usize| h == most && h * base.model.n_layers >= 2;
    let mut out = Vec::new();
    for &h in head_counts {
        for &seed in &seeds {
            headlab_train::log_line!(
                "lab syntax: run {}/{total}: {h} heads, seed {seed} ({:.0} s so far)",
                out.len() + 1,
                started.elapsed().as_secs_f64()
            );
            let mut config = base.clone();
            config.model.n_heads = h;
            config.train.seed = seed;
            let run_dir = dir.join(format!("h{h}-s{seed}"));
            let done = train_run(config, run_dir.clone(), runs)?;
            let (trained, device, data) = open(&run_dir)?;
            let heads_dir = run_dir.join("heads");
            std::fs::create_dir_all(&heads_dir).map_err(|source| LabError::File {
                action: "write",
                path: heads_dir.clone(),
                source,
            })?;
            let (config, tokenizer, model) = (&trained.config, &trained.tokenizer, &trained.model);
            let report = measure(config, &data, tokenizer, model, &device, &heads_dir)?
                .ok_or_else(|| LabError::NoSyntax(run_dir.clone()))?;
            let history = std::fs::read_to_string(run_dir.join(SYNTAX_HISTORY_FILE))
                .map(|t| parse_syntax_history(&t))
                .unwrap_or_default();
            let formed = syntactic_head(&report.scores, &report.roles)
                .and_then(|r| formed_at(&history, r, h));
            let pruning = if pruned(h) {
                headlab_train::log_line!("lab syntax: pruning {h} heads, seed {seed}");
                let curves = prune_run(model, config, &data, tokenizer, &PRUNE_SEEDS, &device)?;
                write_pruning(&run_dir.join("prune"), &curves)?;
                // The head table too, as `headlab heads` writes it, for the run's page and
                // head explorer, which the lab shows.
                let block = config.model.block_size;
                let map_ids = data.tokens(Split::Val).to_vec(0..block.min(32));
                let probe = Probe::new(&data, block, tokenizer.vocab_size(), None, seed)?;
                let mut table = head_report(model, tokenizer, &probe, &map_ids, &device);
                report.mark_roles(&mut table.rows);
                let title = format!("headlab lab syntax: {h} heads, seed {seed}");
                let relations = syntax_report::syntax_json(&report);
                write_head_report(&heads_dir, &title, &table, Some(&relations))?;
                curves
            } else {
                Vec::new()
            };
            // After the pruning, so the page draws its curves.
            report_run(&run_dir)?;
            out.push(SyntaxRun {
                n_heads: h,
                seed,
                val_loss: done.val_loss,
                report,
                formed_at: formed,
                pruning,
            });
        }
    }
    Ok(SyntaxLab {
        base,
        seeds,
        head_counts: head_counts.to_vec(),
        runs: out,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The first tracked step from which head `r` (of a model with `n_heads` heads a layer) beats
/// the fixed-offset rule on `r`'s relation by [`ROLE_MARGIN`] at that step and every later
/// one; `None` if it does not at the last tracked step.
pub fn formed_at(
    history: &[(usize, Vec<SyntaxPoint>)],
    r: &RelationScore,
    n_heads: usize,
) -> Option<usize> {
    let n = Relation::ALL.len();
    let k = Relation::ALL.iter().position(|&x| x == r.relation)?;
    let i = r.layer * n_heads + r.head;
    let mut formed = None;
    for (step, points) in history.iter().rev() {
        match points.get(i) {
            Some(p) if p[2 + k] - p[2 + n + k] >= ROLE_MARGIN => formed = Some(*step),
            _ => break,
        }
    }
    formed
}

/// The best head of each relation in `report` (the most accurate; the first on a tie).
fn best_heads(report: &SyntaxReport) -> Vec<&RelationScore> {
    syntax_report::best_heads(&report.scores)
}

/// Whether `r` has a role in `report`.
fn has_role(report: &SyntaxReport, r: &RelationScore) -> bool {
    syntax_report::has_role(&report.roles, r)
}

/// `syntax.csv` ([`SYNTAX_LAB_HEADER`]).
pub fn syntax_csv(lab: &SyntaxLab) -> String {
    let mut s = format!("{SYNTAX_LAB_HEADER}\n");
    for run in &lab.runs {
        let syntactic = syntactic_head(&run.report.scores, &run.report.roles);
        for r in best_heads(&run.report) {
            let is = syntactic
                .is_some_and(|x| (x.layer, x.head, x.relation) == (r.layer, r.head, r.relation));
            let formed = run
                .formed_at
                .filter(|_| is)
                .map_or(String::new(), |s| s.to_string());
            let _ = writeln!(
                s,
                "{},{},{},{},{},{:.6},{},{:.6},{},{is},{formed}",
                run.n_heads,
                run.seed,
                r.relation,
                r.layer,
                r.head,
                r.accuracy,
                r.baseline.offset,
                r.baseline.accuracy,
                has_role(&run.report, r),
            );
        }
    }
    s
}

/// `syntax.png`: per relation, the best head's accuracy minus its rule's against the head
/// count, the mean over seeds (a marker at each head count), with the role margin drawn grey:
/// a relation whose line stays above it found a head with a role on most seeds.
pub fn syntax_png(lab: &SyntaxLab, path: &Path) -> Result<(), headlab_report::ReportError> {
    let mut series: Vec<(Series, Style)> = Relation::ALL
        .iter()
        .enumerate()
        .map(|(i, &rel)| {
            let points = lab
                .head_counts
                .iter()
                .filter_map(|&h| {
                    let margins: Vec<f64> = lab
                        .runs
                        .iter()
                        .filter(|r| r.n_heads == h)
                        .flat_map(|r| best_heads(&r.report))
                        .filter(|b| b.relation == rel)
                        .map(|b| b.accuracy - b.baseline.accuracy)
                        .collect();
                    (!margins.is_empty())
                        .then(|| (h as f64, margins.iter().sum::<f64>() / margins.len() as f64))
                })
                .collect();
            let series = Series {
                label: rel.to_string(),
                points,
                faint: false,
            };
            let style = Style {
                markers: true,
                ..Style::nth(i)
            };
            (series, style)
        })
        .collect();
    let (lo, hi) = lab
        .head_counts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &h| {
            (a.min(h as f64), b.max(h as f64))
        });
    if lo <= hi {
        let margin = Series {
            label: format!("role margin ({ROLE_MARGIN})"),
            points: vec![(lo, ROLE_MARGIN), (hi, ROLE_MARGIN)],
            faint: false,
        };
        series.push((margin, Style::NEUTRAL));
    }
    line_chart_styled(
        path,
        "best head's accuracy minus the best offset rule's, mean over seeds",
        "heads per layer",
        "accuracy - rule",
        &series,
    )
}

/// The run whose page the lab shows: among the pruned runs (all runs if none was pruned),
/// the one whose syntactic head beats its rule by the most, else the first.
fn shown_run(lab: &SyntaxLab) -> Option<&SyntaxRun> {
    let pruned: Vec<&SyntaxRun> = lab.runs.iter().filter(|r| !r.pruning.is_empty()).collect();
    let among = if pruned.is_empty() {
        lab.runs.iter().collect()
    } else {
        pruned
    };
    let margin = |r: &SyntaxRun| {
        syntactic_head(&r.report.scores, &r.report.roles).map(|s| s.accuracy - s.baseline.accuracy)
    };
    among
        .iter()
        .copied()
        .filter(|r| margin(r).is_some())
        .reduce(|b, r| if margin(r) > margin(b) { r } else { b })
        .or_else(|| among.first().copied())
}

/// `prune.png`: for each pruned run, the val loss's rise over the intact model's (percent) as
/// heads go in the importance order, and the mean of its random orders (faint, same colour).
pub fn prune_png(lab: &SyntaxLab, path: &Path) -> Result<(), headlab_report::ReportError> {
    let rise = |curve: &PruneCurve| -> Vec<f64> {
        let intact = curve.steps[0].val_loss;
        curve
            .steps
            .iter()
            .map(|s| 100.0 * (s.val_loss / intact - 1.0))
            .collect()
    };
    let points = |ys: Vec<f64>| -> Vec<(f64, f64)> {
        ys.into_iter()
            .enumerate()
            .map(|(k, y)| (k as f64, y))
            .collect()
    };
    let mut series = Vec::new();
    for (i, run) in lab
        .runs
        .iter()
        .filter(|r| !r.pruning.is_empty())
        .enumerate()
    {
        if let Some(c) = run.pruning.iter().find(|c| c.order == Order::Importance) {
            let s = Series {
                label: format!("seed {}: importance order", run.seed),
                points: points(rise(c)),
                faint: false,
            };
            series.push((s, Style::nth(i)));
        }
        let random: Vec<Vec<f64>> = run
            .pruning
            .iter()
            .filter(|c| matches!(c.order, Order::Random(_)))
            .map(rise)
            .collect();
        if let Some(first) = random.first() {
            let mean = (0..first.len())
                .map(|k| random.iter().map(|r| r[k]).sum::<f64>() / random.len() as f64)
                .collect();
            let s = Series {
                label: format!("seed {}: random orders, mean of {}", run.seed, random.len()),
                points: points(mean),
                faint: true,
            };
            series.push((s, Style::nth(i)));
        }
    }
    let most = lab.head_counts.iter().max().copied().unwrap_or(0);
    let heads = most * lab.base.model.n_layers;
    line_chart_styled(
        path,
        &format!("pruning the {most}-head models ({heads} heads in all): val loss as heads go"),
        "heads removed",
        "val loss over the intact model's (%)",
        &series,
    )
}

/// `lab syntax`'s pruning section: per pruned run, how many heads go at no cost in each
/// order, the heads the importance order keeps to the last, and where its syntactic head goes.
fn prune_section(lab: &SyntaxLab) -> String {
    let pruned: Vec<&SyntaxRun> = lab.runs.iter().filter(|r| !r.pruning.is_empty()).collect();
    let Some(first) = pruned.first() else {
        return String::new();
    };
    let total = first.pruning[0].steps.len() - 1;
    let (loss, points) = PRUNE_BOUND;
    let mut s = format!(
        "## Pruning the {}-head models\n\nAs Michel et al. 2019 pruned theirs: the {total} heads \
         removed one at a time, each time the one of least gradient importance on the model \
         pruned so far; as baselines the reverse order (the most important first) and random \
         orders (seeds {}). A head goes at no cost while the val loss (on the head table's \
         held-out batches) stays within {:.0}% of the intact model's and forced-choice \
         agreement within {:.0} point of it.\n\n\
         | seed | intact: val loss, agreement | heads removed at no cost: importance / reverse \
         / random | the last three the importance order keeps (the last first) | the \
         syntactic head goes |\n|---|---|---|---|---|\n",
        first.n_heads,
        PRUNE_SEEDS.map(|s| s.to_string()).join(", "),
        loss * 100.0,
        points * 100.0,
    );
    let count = |run: &SyntaxRun, order: Order| -> Option<usize> {
        run.pruning
            .iter()
            .find(|c| c.order == order)
            .map(|c| removable(c, loss, points))
    };
    let shown = |n: Option<usize>| n.map_or("-".to_string(), |n| n.to_string());
    let share = |a: Option<f64>| a.map_or("-".to_string(), |a| format!("{a:.2}"));
    for run in &pruned {
        let intact = &run.pruning[0].steps[0];
        let random: Vec<String> = PRUNE_SEEDS
            .iter()
            .map(|&x| shown(count(run, Order::Random(x))))
            .collect();
        let importance = run.pruning.iter().find(|c| c.order == Order::Importance);
        let last: Vec<String> = importance.map_or(Vec::new(), |c| {
            last_removed(c, 3)
                .iter()
                .map(|(l, h)| format!("{l}.{h}"))
                .collect()
        });
        let goes = match (
            syntactic_head(&run.report.scores, &run.report.roles),
            importance,
        ) {
            (Some(r), Some(c)) => c
                .steps
                .iter()
                .position(|s| s.removed == Some((r.layer, r.head)))
                .map_or(String::new(), |k| {
                    format!(
                        "{}.{}, removal {k} of {total} (agreement after it {})",
                        r.layer,
                        r.head,
                        share(c.steps[k].agreement)
                    )
                }),
            _ => "none".to_string(),
        };
        let _ = writeln!(
            s,
            "| {} | {:.4}, {} | {} / {} / {} | {} | {goes} |",
            run.seed,
            intact.val_loss,
            share(intact.agreement),
            shown(count(run, Order::Importance)),
            shown(count(run, Order::Reverse)),
            random.join(", "),
            last.join(", "),
        );
    }
    let free = pruned
        .iter()
        .filter(|r| r.pruning.iter().any(|c| removable(c, loss, points) > 0))
        .count();
    let beats = pruned
        .iter()
        .filter(|r| {
            let importance = count(r, Order::Importance).unwrap_or(0);
            PRUNE_SEEDS
                .iter()
                .all(|&x| count(r, Order::Random(x)).is_none_or(|n| importance >= n))
        })
        .count();
    let _ = writeln!(
        s,
        "\nA common claim about multi-head attention, that removing any head makes the model \
         worse: on {free} of {n} models some order removes a head at no cost. The importance order removes at least as many heads \
         at no cost as every random order on {beats} of {n}. Each run's curves are in its \
         `prune/` (`prune.csv`, `prune.png`, `agreement.png`) and on its page; `prune.png` here \
         sets the importance order against the random ones.\n",
        n = pruned.len(),
    );
    s
}

/// `lab syntax`'s summary.
pub fn summary(lab: &SyntaxLab, reproduce: &str) -> String {
    let (m, t, d) = (&lab.base.model, &lab.base.train, &lab.base.data);
    let counts: Vec<String> = lab.head_counts.iter().map(|h| h.to_string()).collect();
    let seeds: Vec<String> = lab.seeds.iter().map(|s| s.to_string()).collect();
    let mut s = format!(
        "# lab syntax\n\nWord-level models ({} layers, d_model {}, block {}, {} steps on {} \
         characters of the built-in grammar corpus, `data.tokenizer = \"{}\"`) with {} heads \
         per layer (d_k = d_model / heads, the same parameters), seeds {}, in {:.0} s. A head \
         has a role on a relation when the word it attends to most is the related word more \
         often than the best \"k words back\" rule's, by {ROLE_MARGIN} over at least 20 arcs \
         (Clark et al. 2019); a run's syntactic head is the one that beats its rule by the most. \
         Heads are named layer.head, both from 0.\n\n",
        m.n_layers,
        m.d_model,
        m.block_size,
        t.max_iters,
        d.builtin_chars,
        d.tokenizer,
        counts.join(", "),
        seeds.join(", "),
        lab.seconds,
    );
    s += "## Each run's syntactic head\n\n\
          | heads | seed | val loss | syntactic head | accuracy vs rule | formed at step | \
          zeroed alone: forced choice (intact 1.00 where not said); across a phrase / a clause / \
          nothing | each other head of its layer alone: forced choice |\n\
          |---|---|---|---|---|---|---|---|\n";
    for run in &lab.runs {
        let rep = &run.report;
        let Some(r) = syntactic_head(&rep.scores, &rep.roles) else {
            let _ = writeln!(
                s,
                "| {} | {} | {:.4} | none | | | | |",
                run.n_heads, run.seed, run.val_loss
            );
            continue;
        };
        let intact = rep.sweep.iter().find(|x| x.kind == AblationKind::Intact);
        let alone = rep.sweep.iter().find(|x| x.kind == AblationKind::Syntactic);
        let by = |row: &headlab_heads::syntax::AblationRow| -> String {
            Construction::ALL
                .iter()
                .map(|c| {
                    row.result
                        .by_construction
                        .iter()
                        .find(|b| b.construction == *c)
                        .filter(|b| b.n > 0)
                        .map_or("-".to_string(), |b| format!("{:.2}", b.accuracy))
                })
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let zeroed = match (intact, alone) {
            (Some(i), Some(a)) => format!(
                "{:.2} -> {:.2}; {}",
                i.result.accuracy,
                a.result.accuracy,
                by(a)
            ),
            _ => String::new(),
        };
        let others: Vec<f64> = rep
            .sweep
            .iter()
            .filter(|x| x.kind == AblationKind::SameLayer)
            .map(|x| x.result.accuracy)
            .collect();
        let others = syntax_report::range_text(&others, |x| format!("{x:.2}"))
            .unwrap_or_else(|| "none".to_string());
        let _ = writeln!(
            s,
            "| {} | {} | {:.4} | {}.{} ({}) | {:.2} vs {:.2} ({} back) | {} | {zeroed} | {others} |",
            run.n_heads,
            run.seed,
            run.val_loss,
            r.layer,
            r.head,
            r.relation,
            r.accuracy,
            r.baseline.accuracy,
            r.baseline.offset,
            run.formed_at.map_or("-".to_string(), |s| s.to_string()),
        );
    }
    s += "\n## Does each relation find a head on every seed?\n\n| relation |";
    for h in &lab.head_counts {
        let _ = write!(s, " {h} heads |");
    }
    s += "\n|---|";
    s += &"---|".repeat(lab.head_counts.len());
    s += "\n";
    for &rel in &Relation::ALL {
        let _ = write!(s, "| {rel} |");
        for &h in &lab.head_counts {
            let of: Vec<&SyntaxRun> = lab.runs.iter().filter(|r| r.n_heads == h).collect();
            let with = of
                .iter()
                .filter(|r| {
                    best_heads(&r.report)
                        .iter()
                        .any(|b| b.relation == rel && has_role(&r.report, b))
                })
                .count();
            let best: Vec<String> = of
                .iter()
                .flat_map(|r| best_heads(&r.report))
                .filter(|b| b.relation == rel)
                .map(|b| format!("{:.2}", b.accuracy - b.baseline.accuracy))
                .collect();
            let _ = write!(s, " {with} of {} ({}) |", of.len(), best.join(", "));
        }
        s += "\n";
    }
    s += "\n(In each cell: the seeds whose best head on the relation has a role, and each \
          seed's best accuracy minus the rule's.)\n\n";
    s += &prune_section(lab);
    if let Some(r) = shown_run(lab) {
        let _ = writeln!(
            s,
            "The page of run h{}-s{} ([report.html](report.html), its head explorer \
             [heads.html](heads.html)) replays its heads through training, with its relation \
             table and pruning curves.\n",
            r.n_heads, r.seed
        );
    }
    s += "Files: `syntax.csv` (per run and \
          relation), `syntax.png` (the best head's margin over the rule against the head \
          count), `prune.png` (the pruned models' loss curves), and each run's folder \
          (`h<H>-s<SEED>/`, its `heads/syntax.csv`, `heads/agreement.csv`, `prune/` where it was \
          pruned, and `report.html`).\n\n";
    let _ = writeln!(s, "Reproduce: `{reproduce}`");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use headlab_data::syntax::Baseline;

    /// The step a head formed at: the first of the tracked steps from which it beats its rule
    /// by the margin to the end, read off a history written out by hand.
    #[test]
    fn formed_at_is_the_start_of_the_last_run_of_steps_beating_the_rule() {
        let n = Relation::ALL.len();
        let k = 2; // antecedent
        let point = |acc: f64, base: f64| {
            let mut p: SyntaxPoint = [0.0; 2 + 2 * Relation::ALL.len()];
            p[2 + k] = acc;
            p[2 + n + k] = base;
            p
        };
        // Two heads a layer; head 1.1 is index 3.
        let at = |acc: f64| {
            vec![point(0.0, 0.5); 3]
                .into_iter()
                .chain([point(acc, 0.5)])
                .collect()
        };
        let history = vec![
            (0, at(0.5)),
            (100, at(0.7)),
            (200, at(0.6)),
            (300, at(0.66)),
            (400, at(0.9)),
        ];
        let r = RelationScore {
            layer: 1,
            head: 1,
            relation: Relation::Antecedent,
            n: 30,
            accuracy: 0.9,
            mass: 0.5,
            baseline: Baseline {
                relation: Relation::Antecedent,
                offset: 2,
                accuracy: 0.5,
                n: 30,
            },
        };
        assert_eq!(formed_at(&history, &r, 2), Some(300));
        assert_eq!(formed_at(&history[..3], &r, 2), None);
        assert_eq!(formed_at(&[], &r, 2), None);
    }
}

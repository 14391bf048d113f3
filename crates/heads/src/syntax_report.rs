//! The syntactic heads of a run on the built-in grammar corpus as files and text, for
//! `headlab heads` and `headlab train`: each head's score on each dependency against the best
//! fixed-offset rule, the heads that look at the verb's subject where the verb writes its
//! number, and whether zeroing them breaks agreement ([`crate::syntax`] measures them).
//!
//! Measured on a fixed held-out text: the start of the run's val split, from the end of its
//! first sentence (the split may cut into it) to the end of its [`MAX_SENTENCES`]th whole one
//! after that. Files written beside the head table:
//!
//! - `syntax.txt`: that text.
//! - `syntax.csv` ([`SYNTAX_HEADER`]), one row per head and relation: `n` arcs scored (those
//!   whose earlier word is inside the model's context window when the sentence's "." is
//!   read), `accuracy` (share whose later word attends most to the earlier one), `mass`
//!   (mean attention on it), `baseline_offset` and `baseline_accuracy` (the best "attend k
//!   words back" rule on the same arcs), `role` (`true` when accuracy beats the baseline by
//!   [`ROLE_MARGIN`] over at least [`ROLE_MIN_ARCS`] arcs).
//! - `agreement.csv` ([`AGREEMENT_HEADER`]), the ablation sweep: `ablated` heads (`1.1+1.2`,
//!   `none` intact), `kind` (`intact`, `tracked`, `control`; where a head has a role, then
//!   `syntactic` for the [`syntactic_head`] zeroed alone and `same-layer` for each other head
//!   of its layer zeroed alone), `n` verbs whose attractor
//!   differs from the subject in number, forced-choice `accuracy` (0.5 is chance) and
//!   `mean_p_right`; then what the model writes with those heads zeroed: `sampled`
//!   sentences (the run's `train.grammar_sentences`, at most [`SWEEP_SENTENCES`], at its
//!   seed), the share `well_formed`
//!   and `agreeing`, the share of the well-formed ones whose verbs agree (what the terminal and
//!   the page print; empty when none were sampled or none is well-formed); then the
//!   forced choice split by what stands between subject and verb
//!   ([`headlab_data::syntax::Construction`]): `n_` and `accuracy_` of `prepositional` (a
//!   prepositional phrase), `relative` (a relative clause) and `nothing` (accuracy empty where
//!   no verb was asked); then, of the sampled well-formed sentences, the share of each
//!   construction's verbs that agree (`agreeing_prepositional`, `agreeing_relative`,
//!   `agreeing_nothing`; empty where none was sampled).
//! - `syntax.json`: the same for the run's page.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use headlab_data::syntax::Relation;
use headlab_data::{BuiltinCorpus, Dataset, Tokenizer};
use headlab_model::Gpt;
use headlab_train::config::RunConfig;
use thiserror::Error;

use crate::syntax::{
    AblationKind, AblationRow, AgreementScore, HeadId, MAX_SENTENCES, ROLE_MARGIN, ROLE_MIN_ARCS,
    RelationScore, Sampled, SyntaxRoles, SyntaxScoreError, SyntaxScores, ablation_sweep,
    layer_sweep, subject_trackers, syntax_roles, syntax_scores, val_probe,
};

/// Why [`measure`] could not write its files.
#[derive(Debug, Error)]
pub enum SyntaxReportError {
    /// Reading the val split's sentences, or the ablation sweep.
    #[error("measuring the syntactic heads: {0}")]
    Score(#[from] SyntaxScoreError),
    /// Writing one of the files.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// At more than this share of the verbs a subject tracker puts more attention on the subject
/// than on the attractor ([`subject_trackers`]): more often than not.
pub const TRACKER_SHARE: f64 = 0.5;
/// And at least this much more attention on the subject than on the attractor, on average.
pub const TRACKER_MARGIN: f64 = 0.05;
/// The most control sets of the sweep, drawn at random from a fixed seed when there are more
/// (on the default run the trackers' layer leaves one: the pair 1.0 + 1.3).
pub const MAX_CONTROLS: usize = 6;
/// Sentences sampled per row of the sweep: a model with a layer-0 head zeroed rarely ends
/// its sentences, so each row costs seconds.
pub const SWEEP_SENTENCES: usize = 100;

pub const TEXT_FILE: &str = "syntax.txt";
pub const SYNTAX_FILE: &str = "syntax.csv";
pub const AGREEMENT_FILE: &str = "agreement.csv";
/// All of it for the run's page (`headlab_report::SYNTAX_JSON` in the run).
pub const JSON_FILE: &str = "syntax.json";
pub const SYNTAX_HEADER: &str =
    "layer,head,relation,n,accuracy,mass,baseline_offset,baseline_accuracy,role";
pub const AGREEMENT_HEADER: &str = "ablated,kind,n,accuracy,mean_p_right,sampled,well_formed,\
     agreeing,n_prepositional,accuracy_prepositional,n_relative,accuracy_relative,n_nothing,\
     accuracy_nothing,agreeing_prepositional,agreeing_relative,agreeing_nothing";

/// What [`measure`] found.
#[derive(Debug, Clone)]
pub struct SyntaxReport {
    /// Sentences of the val split measured on.
    pub sentences: usize,
    /// Their characters.
    pub chars: usize,
    pub scores: SyntaxScores,
    pub roles: Vec<SyntaxRoles>,
    /// The heads ablated as trackers.
    pub tracked: Vec<HeadId>,
    /// Whether no head passed [`TRACKER_SHARE`] and [`TRACKER_MARGIN`], so `tracked` is the
    /// head with the most subject mass.
    pub fallback: bool,
    pub sweep: Vec<AblationRow>,
}

impl SyntaxReport {
    /// Fills the head table's `roles` column: each head's syntactic roles on these sentences
    /// (`rows` in the table's order, layer-major, as `roles` is).
    pub fn mark_roles(&self, rows: &mut [crate::HeadRow]) {
        for (row, roles) in rows.iter_mut().zip(&self.roles) {
            row.roles = roles.roles.iter().map(|r| r.name().to_string()).collect();
        }
    }
}

/// The syntax scores, roles and ablation sweep of a grammar run, written into `out`; `None`
/// for a run on anything but the built-in grammar corpus, or with too little val text.
pub fn measure(
    config: &RunConfig,
    data: &Dataset,
    tokenizer: &Tokenizer,
    model: &Gpt,
    device: &Device,
    out: &Path,
) -> Result<Option<SyntaxReport>, SyntaxReportError> {
    if config.data.builtin.as_deref() != Some(BuiltinCorpus::Grammar.name()) {
        return Ok(None);
    }
    let Some((probe, sentences)) = val_probe(data, tokenizer, MAX_SENTENCES)? else {
        return Ok(None);
    };
    let text = probe.text.as_str();
    let scores = syntax_scores(model, &probe, device);
    let roles = syntax_roles(&scores);
    let mut tracked = subject_trackers(&scores, TRACKER_SHARE, TRACKER_MARGIN);
    let fallback = tracked.is_empty();
    if fallback {
        // The first of the largest, layer-major.
        let best = scores.agreement.iter().filter(|a| a.n > 0).reduce(|b, a| {
            if a.subject_mass > b.subject_mass {
                a
            } else {
                b
            }
        });
        tracked.extend(best.map(|a| (a.layer, a.head)));
    }
    let sample = (
        config.train.grammar_sentences.min(SWEEP_SENTENCES),
        config.train.seed,
    );
    let mut sweep = ablation_sweep(
        model,
        tokenizer,
        &probe,
        &tracked,
        MAX_CONTROLS,
        sample,
        device,
    )?;
    if let Some(r) = syntactic_head(&scores, &roles) {
        let head = (r.layer, r.head);
        let rows = layer_sweep(model, tokenizer, &probe, head, sample, &sweep, device)?;
        sweep.extend(rows);
    }
    let report = SyntaxReport {
        sentences,
        chars: text.len(),
        scores,
        roles,
        tracked,
        fallback,
        sweep,
    };
    let write = |name: &str, body: String| {
        let path = out.join(name);
        std::fs::write(&path, body).map_err(|source| SyntaxReportError::Write { path, source })
    };
    write(TEXT_FILE, format!("{text}\n"))?;
    write(SYNTAX_FILE, syntax_csv(&report))?;
    write(JSON_FILE, syntax_json(&report).to_string())?;
    write(AGREEMENT_FILE, agreement_csv(&report.sweep))?;
    Ok(Some(report))
}

/// The head that beats its fixed-offset baseline by the most on any relation, among those
/// with a role (the first such in `scores`' order on a tie): the run's syntactic head.
pub fn syntactic_head<'a>(
    scores: &'a SyntaxScores,
    roles: &[SyntaxRoles],
) -> Option<&'a RelationScore> {
    let margin = |r: &RelationScore| r.accuracy - r.baseline.accuracy;
    scores
        .relations
        .iter()
        .filter(|r| has_role(roles, r))
        .reduce(|best, r| if margin(r) > margin(best) { r } else { best })
}

fn head_name((layer, head): HeadId) -> String {
    format!("{layer}.{head}")
}

fn heads_name(heads: &[HeadId]) -> String {
    if heads.is_empty() {
        return "none".to_string();
    }
    heads
        .iter()
        .map(|&h| head_name(h))
        .collect::<Vec<_>>()
        .join("+")
}

/// Whether head `r` has `r`'s relation among its roles.
pub fn has_role(roles: &[SyntaxRoles], r: &RelationScore) -> bool {
    roles
        .iter()
        .any(|o| (o.layer, o.head) == (r.layer, r.head) && o.roles.contains(&r.relation))
}

/// `syntax.csv`: [`SYNTAX_HEADER`], then a row per head (layer-major) and relation.
pub fn syntax_csv(report: &SyntaxReport) -> String {
    let mut s = format!("{SYNTAX_HEADER}\n");
    for r in &report.scores.relations {
        writeln!(
            s,
            "{},{},{},{},{:.6},{:.6},{},{:.6},{}",
            r.layer,
            r.head,
            r.relation,
            r.n,
            r.accuracy,
            r.mass,
            r.baseline.offset,
            r.baseline.accuracy,
            has_role(&report.roles, r)
        )
        .expect("writing to a String");
    }
    s
}

/// `syntax.json`: what the run's page shows of the syntactic heads (the scores, roles, the
/// trackers and the ablation sweep without its per-verb choices).
pub fn syntax_json(report: &SyntaxReport) -> serde_json::Value {
    let sweep: Vec<serde_json::Value> = report
        .sweep
        .iter()
        .map(|row| {
            let r = &row.result;
            serde_json::json!({
                "ablated": heads_name(&r.ablated),
                "kind": row.kind,
                "n": r.n,
                "accuracy": r.accuracy,
                "mean_p_right": r.mean_p_right,
                "sampled": row.sampled,
                "by_construction": r.by_construction,
            })
        })
        .collect();
    serde_json::json!({
        "sentences": report.sentences,
        "chars": report.chars,
        "dropped": report.scores.dropped,
        "role_margin": ROLE_MARGIN,
        "role_min_arcs": ROLE_MIN_ARCS,
        "tracker_share": TRACKER_SHARE,
        "tracker_margin": TRACKER_MARGIN,
        "relations": report.scores.relations,
        "agreement": report.scores.agreement,
        "roles": report.roles,
        "tracked": report.tracked.iter().map(|&h| head_name(h)).collect::<Vec<_>>(),
        "fallback": report.fallback,
        "sweep": sweep,
        "syntactic": syntactic_head(&report.scores, &report.roles)
            .map(|r| head_name((r.layer, r.head))),
        "syntactic_line": syntactic_line(report),
        "line": one_line(report),
    })
}

/// `agreement.csv`: [`AGREEMENT_HEADER`], then a row per ablation of the sweep.
pub fn agreement_csv(sweep: &[AblationRow]) -> String {
    let mut s = format!("{AGREEMENT_HEADER}\n");
    for row in sweep {
        let kind = match row.kind {
            AblationKind::Intact => "intact",
            AblationKind::Tracked => "tracked",
            AblationKind::Control => "control",
            AblationKind::Syntactic => "syntactic",
            AblationKind::SameLayer => "same-layer",
        };
        let r = &row.result;
        let sampled = row.sampled.map_or(",,".to_string(), |g| {
            let among = g.agreeing_if_formed();
            let among = if among.is_finite() {
                format!("{among:.6}")
            } else {
                String::new()
            };
            format!("{},{:.6},{among}", g.sentences, g.well_formed)
        });
        let constructions: String = r
            .by_construction
            .iter()
            .map(|c| {
                let accuracy = if c.accuracy.is_finite() {
                    format!("{:.6}", c.accuracy)
                } else {
                    String::new()
                };
                format!(",{},{accuracy}", c.n)
            })
            .collect();
        // The sampled sentences' verbs that agree, per construction.
        let sampled_by: String = match row.sampled {
            Some(g) => g
                .by_construction
                .iter()
                .map(|&(verbs, agree)| {
                    if verbs == 0 {
                        ",".to_string()
                    } else {
                        format!(",{:.6}", agree as f64 / verbs as f64)
                    }
                })
                .collect(),
            None => ",,,".to_string(),
        };
        writeln!(
            s,
            "{},{kind},{},{:.6},{:.6},{sampled}{constructions}{sampled_by}",
            heads_name(&r.ablated),
            r.n,
            r.accuracy,
            r.mean_p_right
        )
        .expect("writing to a String");
    }
    s
}

/// Per relation, the head of best accuracy (the first in layer-major order on ties), among
/// relations with arcs.
pub fn best_heads(scores: &SyntaxScores) -> Vec<&RelationScore> {
    Relation::ALL
        .iter()
        .filter_map(|&rel| {
            scores
                .relations
                .iter()
                .filter(|r| r.relation == rel && r.n > 0)
                .reduce(|b, r| if r.accuracy > b.accuracy { r } else { b })
        })
        .collect()
}

fn agreement_of(report: &SyntaxReport, head: HeadId) -> Option<&AgreementScore> {
    report
        .scores
        .agreement
        .iter()
        .find(|a| (a.layer, a.head) == head)
}

/// Mean accuracy of the control rows, and how many there are.
fn controls(sweep: &[AblationRow]) -> Option<(f64, usize)> {
    let c: Vec<f64> = sweep
        .iter()
        .filter(|r| r.kind == AblationKind::Control)
        .map(|r| r.result.accuracy)
        .collect();
    (!c.is_empty()).then(|| (c.iter().sum::<f64>() / c.len() as f64, c.len()))
}

/// `lo-hi, mean m` of the finite `values`, each through `show`; `None` when there are none.
fn spread(values: impl Iterator<Item = f64>, show: impl Fn(f64) -> String) -> Option<String> {
    let v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    if v.len() == 1 {
        return Some(show(lo));
    }
    Some(format!("{}-{}, mean {}", show(lo), show(hi), show(mean)))
}

/// `lo-hi` of the finite `values`, each through `show`, or the one value where both show
/// alike; `None` when there are none.
pub fn range_text(values: &[f64], show: impl Fn(f64) -> String) -> Option<String> {
    let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match v.len() {
        0 => None,
        _ if show(lo) == show(hi) => Some(show(lo)),
        _ => Some(format!("{}-{}", show(lo), show(hi))),
    }
}

/// What a set of as many heads as were tracked is called.
fn sets_name(k: usize) -> &'static str {
    match k {
        1 => "heads",
        2 => "pairs",
        3 => "triples",
        _ => "sets",
    }
}

/// The summary `headlab heads` prints on stderr.
pub fn summary(report: &SyntaxReport) -> String {
    let mut s = String::new();
    let dropped = match report.scores.dropped {
        0 => String::new(),
        d => format!(
            "; {d} arcs and verbs left out, their earlier word before the model's context \
             window"
        ),
    };
    let _ = writeln!(
        s,
        "syntax: measured on the run's val split, first {} sentences ({} characters, in \
         {TEXT_FILE}){dropped}",
        report.sentences, report.chars
    );
    let _ = writeln!(
        s,
        "  best head per relation (accuracy: how often the word attends most to the related \
         one; a role needs {ROLE_MARGIN:.2} over the best fixed-offset rule and {ROLE_MIN_ARCS} \
         arcs):"
    );
    for r in best_heads(&report.scores) {
        let role = if has_role(&report.roles, r) {
            "  role"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "    {:<11} head {}  {:.2} (mass {:.2})  vs baseline {:.2} ({} back), {} arcs{role}",
            r.relation.name(),
            head_name((r.layer, r.head)),
            r.accuracy,
            r.mass,
            r.baseline.accuracy,
            r.baseline.offset,
            r.n
        );
    }
    let masses: Vec<String> = report
        .tracked
        .iter()
        .filter_map(|&h| agreement_of(report, h))
        .map(|a| {
            format!(
                "{} (subject {:.2}, attractor {:.2})",
                head_name((a.layer, a.head)),
                a.subject_mass,
                a.attractor_mass
            )
        })
        .collect();
    if report.fallback {
        let which = if masses.is_empty() {
            "and no verb with an attractor was scored".to_string()
        } else {
            format!("ablating the head with the most: {}", masses.join(", "))
        };
        let _ = writeln!(
            s,
            "  subject trackers: no head puts more attention on the verb's subject than on its \
             attractor at most verbs and {TRACKER_MARGIN} more on average, where the verb writes \
             its number; {which}"
        );
    } else {
        let _ = writeln!(
            s,
            "  subject trackers (more attention on the verb's subject than on its attractor at \
             most verbs, and {TRACKER_MARGIN} more on average, where the verb writes its \
             number): {}",
            masses.join(", ")
        );
    }
    let Some(intact) = report.sweep.first() else {
        return s;
    };
    if intact.result.n == 0 {
        let _ = writeln!(
            s,
            "  agreement: no verb has an attractor of the other number; no forced choice"
        );
        return s;
    }
    let mut parts = vec![format!("intact {:.2}", intact.result.accuracy)];
    for row in report
        .sweep
        .iter()
        .filter(|r| r.kind == AblationKind::Tracked)
    {
        parts.push(format!(
            "{} ablated {:.2}",
            heads_name(&row.result.ablated),
            row.result.accuracy
        ));
    }
    if let Some((mean, n)) = controls(&report.sweep) {
        parts.push(format!(
            "other {} ({n}) ablated: mean {mean:.2}",
            sets_name(report.tracked.len())
        ));
    }
    let _ = writeln!(
        s,
        "  agreement (forced choice between the verb's two forms, {} verbs whose attractor \
         differs in number; 0.50 is chance): {}",
        intact.result.n,
        parts.join("; ")
    );
    if let Some(line) = sampled_line(&report.sweep) {
        let _ = writeln!(s, "  {line}");
    }
    if let Some(line) = syntactic_line(report) {
        let _ = writeln!(s, "  {}", line.replacen("; each", ";\n    each", 1));
    }
    let _ = writeln!(
        s,
        "  forced choice by what stands between subject and verb (intact, then each row \
         zeroed, as in agreement.csv):"
    );
    for (k, c) in intact.result.by_construction.iter().enumerate() {
        let rows: Vec<String> = report
            .sweep
            .iter()
            .map(|row| {
                let a = row.result.by_construction[k].accuracy;
                if a.is_finite() {
                    format!("{a:.2}")
                } else {
                    "-".into()
                }
            })
            .collect();
        let _ = writeln!(
            s,
            "    {:<14} {} verbs: {}",
            c.construction.name(),
            c.n,
            rows.join(" ")
        );
    }
    if report.sweep.iter().all(|r| r.sampled.is_some()) {
        let _ = writeln!(
            s,
            "  sampled sentences' verbs that agree, by construction (the same rows):"
        );
        for (k, c) in intact.result.by_construction.iter().enumerate() {
            let rows: Vec<String> = report
                .sweep
                .iter()
                .filter_map(|row| row.sampled)
                .map(|g| match g.by_construction[k] {
                    (0, _) => "-".to_string(),
                    (verbs, agree) => headlab_train::grammar::percent(agree as f64 / verbs as f64),
                })
                .collect();
            let _ = writeln!(s, "    {:<14} {}", c.construction.name(), rows.join(" "));
        }
    }
    s
}

/// What the model writes with the sweep's heads zeroed: the share of sampled sentences that
/// agree, intact, with the tracked heads zeroed, and with the other sets (mean).
fn sampled_line(sweep: &[AblationRow]) -> Option<String> {
    let intact = sweep.first()?.sampled?;
    let pct = headlab_train::grammar::percent;
    let show = |g: Sampled| {
        format!(
            "{} well-formed, {} of those agreeing",
            pct(g.well_formed),
            pct(g.agreeing_if_formed())
        )
    };
    let mut parts = vec![format!("intact {}", show(intact))];
    for row in sweep.iter().filter(|r| r.kind == AblationKind::Tracked) {
        if let Some(g) = row.sampled {
            parts.push(format!(
                "{} ablated {}",
                heads_name(&row.result.ablated),
                show(g)
            ));
        }
    }
    let controls = || sweep.iter().filter(|r| r.kind == AblationKind::Control);
    let formed = spread(
        controls().filter_map(|r| r.sampled.map(|g| g.well_formed)),
        pct,
    );
    let agree = spread(
        controls().filter_map(|r| r.sampled.map(|g| g.agreeing_if_formed())),
        pct,
    );
    if let (Some(formed), Some(agree)) = (formed, agree) {
        parts.push(format!(
            "the other sets ({}) ablated: {formed} well-formed, {agree} of those agreeing",
            controls().count()
        ));
    }
    Some(format!(
        "sampled sentences ({} per row, checked by the grammar's parser): {}",
        intact.sentences,
        parts.join("; ")
    ))
}

/// What `headlab train` prints at its end, a few lines a student can read: what the subject
/// trackers look at, then a table of what zeroing them does (intact, the trackers zeroed, each
/// control set zeroed; forced choice, well-formed and agreeing shares side by side), then the
/// heads that beat their fixed-offset baseline. [`one_line`] says the same in one line.
pub fn block(report: &SyntaxReport) -> String {
    let mut s = format!("syntax, measured on {} val sentences:\n", report.sentences);
    // A control set with a head outside every tracker's layer ([`ablation_sweep`]'s rule
    // when the layer has too few other heads).
    let elsewhere = |heads: &[(usize, usize)]| {
        heads
            .iter()
            .any(|&(l, _)| !report.tracked.iter().any(|&(t, _)| t == l))
    };
    let tracked: Vec<&AgreementScore> = report
        .tracked
        .iter()
        .filter_map(|&h| agreement_of(report, h))
        .collect();
    let list = |f: &dyn Fn(&AgreementScore) -> String| {
        tracked.iter().map(|a| f(a)).collect::<Vec<_>>().join(", ")
    };
    let heads = list(&|a| head_name((a.layer, a.head)));
    let subject = list(&|a| format!("{:.2}", a.subject_mass));
    let attractor = list(&|a| format!("{:.2}", a.attractor_mass));
    let (them, their, attend) = if tracked.len() == 1 {
        ("head", "its", "attends")
    } else {
        ("heads", "their", "attend")
    };
    if tracked.is_empty() {
        s += "  no verb with an attractor was scored\n";
    } else if report.fallback {
        let _ = writeln!(
            s,
            "  no head attends to the verb's subject more than to its attractor at most verbs \
             (and by {TRACKER_MARGIN} on average)\n  the most: {them} {heads}, subject \
             {subject} of {their} attention, attractor {attractor}"
        );
    } else {
        let _ = writeln!(
            s,
            "  {them} {heads} {attend} to the verb's subject: {subject} of {their} attention \
             (the attractor, the nearer noun: {attractor})"
        );
    }
    let intact = report.sweep.first().map(|r| &r.result);
    if let Some(intact) = intact.filter(|r| r.n > 0) {
        let pct = |x: f64| {
            if x.is_finite() {
                headlab_train::grammar::percent(x)
            } else {
                "-".to_string()
            }
        };
        let sampled = report
            .sweep
            .first()
            .and_then(|r| r.sampled)
            .map_or("none sampled".to_string(), |g| {
                format!("{} sentences sampled per row", g.sentences)
            });
        let _ = writeln!(
            s,
            "  zeroing heads ({} verbs whose attractor differs in number; {sampled}):",
            intact.n
        );
        // The syntactic head's rows have a line of their own below.
        let table: Vec<&AblationRow> = report
            .sweep
            .iter()
            .filter(|r| !matches!(r.kind, AblationKind::Syntactic | AblationKind::SameLayer))
            .collect();
        let names: Vec<String> = table
            .iter()
            .map(|row| match row.kind {
                AblationKind::Intact => "intact".to_string(),
                AblationKind::Control if elsewhere(&row.result.ablated) => {
                    format!(
                        "{} zeroed (control, other layer)",
                        heads_name(&row.result.ablated)
                    )
                }
                AblationKind::Control => {
                    format!("{} zeroed (control)", heads_name(&row.result.ablated))
                }
                _ => format!("{} zeroed", heads_name(&row.result.ablated)),
            })
            .collect();
        let borrowed = table
            .iter()
            .any(|r| r.kind == AblationKind::Control && elsewhere(&r.result.ablated));
        let w = names.iter().map(String::len).max().unwrap_or(0);
        let _ = writeln!(
            s,
            "    {:<w$} {:>13} {:>11} {:>9}",
            "", "forced choice", "well-formed", "agreeing"
        );
        for (row, name) in table.iter().zip(&names) {
            let (formed, agreeing) = row.sampled.map_or(("-".into(), "-".into()), |g| {
                (pct(g.well_formed), pct(g.agreeing_if_formed()))
            });
            let _ = writeln!(
                s,
                "    {name:<w$} {:>13.2} {formed:>11} {agreeing:>9}",
                row.result.accuracy
            );
        }
        s += "    (forced choice: the verb's right form over its wrong one, 0.50 is chance;\n     \
              agreeing: the share of the well-formed sentences whose verbs agree)\n";
        if borrowed {
            s += "    (controls are as many other heads of the trackers' layer; this one has too \
                  few, so they come\n     from other layers too, whose zeroing also breaks \
                  what every later layer reads)\n";
        }
    }
    let roles: Vec<String> = report
        .scores
        .relations
        .iter()
        .filter(|r| has_role(&report.roles, r))
        .map(|r| {
            format!(
                "head {} on {}: {:.2} against {:.2} for the best \"{} back\" rule",
                head_name((r.layer, r.head)),
                r.relation,
                r.accuracy,
                r.baseline.accuracy,
                r.baseline.offset
            )
        })
        .collect();
    if roles.is_empty() {
        let _ = writeln!(
            s,
            "  no head beats its fixed-offset baseline by {ROLE_MARGIN:.2} on any relation"
        );
    } else {
        let _ = writeln!(
            s,
            "  beating the fixed-offset baseline by {ROLE_MARGIN:.2}: {}",
            roles.join("; ")
        );
    }
    if let Some(line) = syntactic_line(report) {
        let _ = writeln!(s, "  {}", line.replacen("; each", ";\n    each", 1));
    }
    // Three measures, three sets of heads: what each is, a line each.
    s += "  (attend to the subject: where a head looks from a verb, subject against attractor;\n   \
          beating the baseline: a head's most-attended word is the relation's more often than\n   \
          any fixed offset's (Clark et al.); the syntactic head: the one of those that beats it\n   \
          by the most, zeroed alone against each other head of its layer)\n";
    s
}

/// What zeroing the syntactic head alone does to agreement, against each other head of its
/// layer alone: `None` without a syntactic head or its rows.
pub fn syntactic_line(report: &SyntaxReport) -> Option<String> {
    let head = syntactic_head(&report.scores, &report.roles)?;
    let intact = report
        .sweep
        .iter()
        .find(|r| r.kind == AblationKind::Intact)?;
    let alone = report
        .sweep
        .iter()
        .find(|r| r.kind == AblationKind::Syntactic)?;
    let others: Vec<&AblationRow> = report
        .sweep
        .iter()
        .filter(|r| r.kind == AblationKind::SameLayer)
        .collect();
    let agreeing = |r: &AblationRow| r.sampled.map(|g| g.agreeing_if_formed());
    let pct = |x: Option<f64>| {
        x.filter(|x| x.is_finite())
            .map_or("-".to_string(), headlab_train::grammar::percent)
    };
    let range = |f: &dyn Fn(&AblationRow) -> Option<f64>, show: &dyn Fn(f64) -> String| {
        let v: Vec<f64> = others.iter().filter_map(|r| f(r)).collect();
        range_text(&v, show).unwrap_or_else(|| "-".to_string())
    };
    let name = head_name((head.layer, head.head));
    let mut line = format!(
        "the syntactic head, {name} ({} {:.2} against {:.2}), zeroed alone: forced choice \
         {:.2} -> {:.2}, samples agreeing {} -> {}",
        head.relation,
        head.accuracy,
        head.baseline.accuracy,
        intact.result.accuracy,
        alone.result.accuracy,
        pct(agreeing(intact)),
        pct(agreeing(alone)),
    );
    if !others.is_empty() {
        let _ = write!(
            line,
            "; each other head of layer {} zeroed alone: forced choice {}, samples agreeing {}",
            head.layer,
            range(&|r| Some(r.result.accuracy), &|x| format!("{x:.2}")),
            range(&agreeing, &|x| headlab_train::grammar::percent(x)),
        );
    }
    Some(line)
}

/// The heads that beat their baseline, and the subject tracker's attention and ablation, in
/// one line: `syntax.json`'s `line`.
pub fn one_line(report: &SyntaxReport) -> String {
    let mut roles: Vec<String> = Vec::new();
    for r in &report.scores.relations {
        if has_role(&report.roles, r) {
            roles.push(format!(
                "{} {} {:.2} vs {:.2}",
                head_name((r.layer, r.head)),
                r.relation,
                r.accuracy,
                r.baseline.accuracy
            ));
        }
    }
    let roles = if roles.is_empty() {
        format!("no head beats its fixed-offset baseline by {ROLE_MARGIN:.2} on any relation")
    } else {
        format!("beating the fixed-offset baseline: {}", roles.join(", "))
    };
    let mut tracker = String::new();
    let tracked: Vec<&AgreementScore> = report
        .tracked
        .iter()
        .filter_map(|&h| agreement_of(report, h))
        .collect();
    if !tracked.is_empty() {
        let list = |f: &dyn Fn(&AgreementScore) -> String| {
            tracked.iter().map(|a| f(a)).collect::<Vec<_>>().join(", ")
        };
        let heads = list(&|a| head_name((a.layer, a.head)));
        let subject = list(&|a| format!("{:.2}", a.subject_mass));
        let attractor = list(&|a| format!("{:.2}", a.attractor_mass));
        if report.fallback {
            let _ = write!(
                tracker,
                "no head attends to the verb's subject more than to its attractor at most \
                 verbs and by {TRACKER_MARGIN} on average (the most: head {heads} at {subject}, \
                 attractor {attractor})"
            );
        } else if tracked.len() == 1 {
            let _ = write!(
                tracker,
                "head {heads} attends to the verb's subject at {subject} of its attention \
                 (attractor {attractor})"
            );
        } else {
            let _ = write!(
                tracker,
                "heads {heads} attend to the verb's subject at {subject} of their attention \
                 (attractor {attractor})"
            );
        }
        let intact = report.sweep.first().map(|r| &r.result);
        let all_row = report
            .sweep
            .iter()
            .rfind(|r| r.kind == AblationKind::Tracked);
        let all = all_row.map(|r| &r.result);
        let all_sampled = all_row.and_then(|r| r.sampled);
        if let (Some(intact), Some(all)) = (intact, all)
            && intact.n > 0
        {
            let control_rows = || {
                report
                    .sweep
                    .iter()
                    .filter(|r| r.kind == AblationKind::Control)
            };
            let sets = sets_name(report.tracked.len());
            let others = spread(control_rows().map(|r| r.result.accuracy), |x| {
                format!("{x:.2}")
            })
            .map_or(String::new(), |s| format!(" (other {sets}: {s})"));
            let heads = if all.ablated.len() > 1 {
                "heads"
            } else {
                "head"
            };
            let (from, to) = (intact.accuracy, all.accuracy);
            let change = if format!("{from:.2}") == format!("{to:.2}") {
                format!("leaves forced-choice agreement at {from:.2}")
            } else {
                let verb = if to < from { "drops" } else { "raises" };
                format!("{verb} forced-choice agreement from {from:.2} to {to:.2}")
            };
            let pct = headlab_train::grammar::percent;
            let sampled = match (report.sweep.first().and_then(|r| r.sampled), all_sampled) {
                (Some(a), Some(b)) => {
                    let formed = spread(
                        control_rows().filter_map(|r| r.sampled.map(|g| g.well_formed)),
                        pct,
                    );
                    let agree = spread(
                        control_rows().filter_map(|r| r.sampled.map(|g| g.agreeing_if_formed())),
                        pct,
                    );
                    let others = match (formed, agree) {
                        (Some(f), Some(a)) => {
                            format!("; other {sets}: {f} well-formed, {a} of those agree")
                        }
                        _ => String::new(),
                    };
                    format!(
                        "; of the sentences it samples then, {} are well-formed and {} of those \
                         agree (intact {}{others})",
                        pct(b.well_formed),
                        pct(b.agreeing_if_formed()),
                        pct(a.agreeing_if_formed())
                    )
                }
                _ => String::new(),
            };
            let _ = write!(
                tracker,
                "; ablating {heads} {} {change}{others}{sampled}",
                heads_name(&all.ablated)
            );
        }
        tracker.push_str("; ");
    }
    format!(
        "syntax ({} val sentences): {tracker}{roles}",
        report.sentences
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::ForcedChoice;

    fn row(kind: AblationKind, ablated: Vec<HeadId>, accuracy: f64) -> AblationRow {
        AblationRow {
            kind,
            result: ForcedChoice {
                ablated,
                n: 10,
                accuracy,
                mean_p_right: accuracy,
                by_construction: Vec::new(),
                choices: Vec::new(),
            },
            sampled: Some(Sampled {
                sentences: 100,
                well_formed: 0.5,
                agreeing: 0.25,
                by_construction: [(0, 0); 3],
            }),
        }
    }

    fn report(tracked: Vec<HeadId>, sweep: Vec<AblationRow>) -> SyntaxReport {
        SyntaxReport {
            sentences: 10,
            chars: 100,
            scores: SyntaxScores {
                relations: Vec::new(),
                agreement: Vec::new(),
                dropped: 0,
            },
            roles: Vec::new(),
            tracked,
            fallback: false,
            sweep,
        }
    }

    /// Issue 79: three trackers in a four-head layer leave one other head there, so the
    /// control set comes from layer 0 too; the block says so on its row and why, and a
    /// control of the trackers' own layer reads plain "(control)".
    #[test]
    fn a_control_from_another_layer_is_named_so() {
        let tracked = vec![(1, 0), (1, 1), (1, 2)];
        let borrowed = report(
            tracked.clone(),
            vec![
                row(AblationKind::Intact, vec![], 1.0),
                row(AblationKind::Tracked, tracked.clone(), 0.6),
                row(AblationKind::Control, vec![(0, 0), (0, 1), (1, 3)], 0.7),
            ],
        );
        let text = block(&borrowed);
        assert!(
            text.contains("0.0+0.1+1.3 zeroed (control, other layer)"),
            "{text}"
        );
        assert!(text.contains("from other layers too"), "{text}");
        let own = report(
            vec![(1, 0)],
            vec![
                row(AblationKind::Intact, vec![], 1.0),
                row(AblationKind::Tracked, vec![(1, 0)], 0.6),
                row(AblationKind::Control, vec![(1, 3)], 1.0),
            ],
        );
        let text = block(&own);
        assert!(text.contains("1.3 zeroed (control) "), "{text}");
        assert!(!text.contains("other layer"), "{text}");
    }

    /// Issue 79: agreement.csv's `agreeing` is the share the terminal prints, of the
    /// well-formed sentences (0.25 of all, 0.5 well-formed: 0.5), not of all of them.
    #[test]
    fn agreeing_is_a_share_of_the_well_formed_sentences() {
        let csv = agreement_csv(&[row(AblationKind::Intact, vec![], 1.0)]);
        let fields: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        assert_eq!((fields[6], fields[7]), ("0.500000", "0.500000"), "{csv}");
        let text = block(&report(
            vec![],
            vec![row(AblationKind::Intact, vec![], 1.0)],
        ));
        assert!(text.contains(" 50%       50%"), "{text}");
    }
}

//! `report.html`: one self-contained page per run, drawn from the run's own files. A step
//! slider replays every head's attention map, with the head scores and the loss marked at the
//! same step, so a phase change shows as maps, scores and loss moving together.
//!
//! The results of `headlab patch` (`patch/patch.json`), of `headlab prune`
//! (`prune/prune.json`) and, on a grammar run, the syntactic heads (`syntax_history.csv`
//! through training, `heads/syntax.json` at the end) get sections when there are any.
//!
//! What a run lacks (no tracked maps in a run made before they were kept, no head table
//! before `headlab heads`, no sample from a run that was stopped) is said on the page and
//! returned as notes; the rest is drawn.

use std::path::{Path, PathBuf};

use headlab_heads::icl::{ICL_FILE, parse_icl_history};
use headlab_heads::syntax::{
    SYNTAX_HISTORY_FILE, SyntaxPoint, parse_syntax_history, syntax_point_names,
};
use headlab_heads::{HISTORY_FILE, HeadHistory, MAPS_FILE, MapHistory, PatternScores};
use headlab_train::config::RunConfig;
use headlab_train::metrics::read_losses;
use headlab_train::run::{RunDir, SAMPLE_FILE};
use serde::Serialize;

use crate::ReportError;

/// File name of the page in a run directory.
pub const REPORT_FILE: &str = "report.html";

/// Where `headlab patch` leaves its results for the page, in a run directory.
pub const PATCH_FILE: &str = "patch/patch.json";
/// Where `headlab prune` leaves its curves for the page, in a run directory.
pub const PRUNE_FILE: &str = "prune/prune.json";

/// Where `headlab heads` keeps a grammar run's syntactic heads for the page.
pub const SYNTAX_JSON: &str = "heads/syntax.json";

/// The page's data, as the script reads it (`assets/report.js`).
#[derive(Debug, Serialize)]
struct ReportData {
    title: String,
    config: String,
    notes: Vec<String>,
    losses: Losses,
    lr: Vec<(usize, f64)>,
    /// A grammar run's `(step, well-formed share, agreeing share)` at each evaluation.
    grammar: Vec<(usize, f64, f64)>,
    /// `(step, early loss, late loss)` of the in-context-learning score at each tracked step
    /// (`icl_history.csv`).
    icl: Vec<(usize, f64, f64)>,
    score_names: [&'static str; 6],
    n_layers: usize,
    n_heads: usize,
    /// The tokenizer's vocabulary: chance on the repeated-half probe is ln of it (0: unknown).
    vocab_size: usize,
    /// The tracked maps' probe window, as text.
    probe: Vec<String>,
    tracked: Vec<Tracked>,
    /// `RUN/heads/heads.json` as written by `headlab heads`.
    table: Option<serde_json::Value>,
    /// `RUN/patch/patch.json` as written by `headlab patch`.
    patching: Option<serde_json::Value>,
    /// `RUN/prune/prune.json` as written by `headlab prune`.
    pruning: Option<serde_json::Value>,
    /// The names of each tracked step's `syntax` values (`syntax_history.csv`'s columns).
    syntax_names: Vec<String>,
    /// `RUN/heads/syntax.json` as written by `headlab heads` on a grammar run.
    syntax: Option<serde_json::Value>,
    sample: Option<String>,
    /// `RUN/beside.json` as `headlab report --beside` writes it: another run's sample.
    beside: Option<Beside>,
}

/// Another run's model sampled exactly as this run's sample was (prompt, tokens,
/// temperature, seed), to read side by side on the page: `RUN/beside.json`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Beside {
    /// The other run, as given.
    pub run: String,
    /// Its sample.
    pub sample: String,
    /// The prompt both samples start from.
    pub prompt: String,
    /// Tokens sampled.
    pub tokens: usize,
    /// Sampling temperature.
    pub temperature: f64,
    /// Sampling seed.
    pub seed: u64,
}

/// The file [`Beside`] is kept in.
pub const BESIDE_FILE: &str = "beside.json";

#[derive(Debug, Serialize)]
struct Losses {
    /// Every training batch's loss (metrics.csv's `iter` rows), as loss.png draws it.
    batches: Vec<(usize, f64)>,
    /// Train and val loss at each evaluation.
    train: Vec<(usize, f64)>,
    val: Vec<(usize, f64)>,
}

#[derive(Debug, Serialize)]
struct Tracked {
    step: usize,
    repeat_loss: f64,
    /// Per head (`layer * n_heads + head`), in [`PatternScores::NAMES`] order.
    scores: Vec<[f64; 6]>,
    /// Every head's map as base64 `u8`, `[layer][head][t][t]`; `None` where not kept.
    maps: Option<String>,
    /// Per head, its gradient norm (the step before); `null` where not recorded.
    grad_norms: Vec<Option<f64>>,
    /// Per head, its copying score; `null` where not recorded.
    copying: Vec<Option<f64>>,
    /// A grammar run's syntactic scores per head, in `syntax_names` order; `None` where not
    /// recorded.
    syntax: Option<Vec<SyntaxPoint>>,
}

/// What `headlab report` wrote.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The page.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: usize,
    /// What the run lacks, one line each.
    pub notes: Vec<String>,
}

/// Writes `RUN/report.html` from the run's files.
// Over 80 lines on purpose: one page's data gathered from the run's files field by field, each a few lines.
pub fn write_run_report(run: &RunDir) -> Result<RunReport, ReportError> {
    let root = &run.root;
    let read = |name: &str| std::fs::read_to_string(root.join(name)).ok();
    let unreadable = |message: String| ReportError::Read {
        path: run.config_path(),
        message,
    };
    let config_text =
        std::fs::read_to_string(run.config_path()).map_err(|e| unreadable(e.to_string()))?;
    let config = RunConfig::from_toml_str(&config_text, "config.toml")
        .map_err(|e| unreadable(e.to_string()))?;
    let shell = |what: &str| format!("`headlab {what} {}`", root.display());
    let shell_with = |what: &str, then: &str| format!("`headlab {what} {} {then}`", root.display());
    let mut notes = Vec::new();

    let losses = read_losses(&run.metrics_path());
    if losses.evals.is_empty() {
        notes.push("no evaluations in metrics.csv yet".to_string());
    }
    // The last checkpoint says where training stopped; evaluations may end earlier (a run
    // stopped between them) or be gone (metrics.csv deleted).
    let step = run
        .last_step()
        .or_else(|| losses.evals.last().map(|e| e.0))
        .unwrap_or(0);
    let finished = step >= config.train.max_iters;
    // Imported and never given a text; once fine-tuned it is a run like any other.
    let untrained_import = run.is_imported() && config.data.source().is_err();
    if untrained_import {
        notes.push(format!(
            "imported weights, never trained here: {} fine-tunes them on your text",
            shell_with("train --resume", "--set data.path=FILE")
        ));
    } else if let Some(holder) = run.training_pid() {
        notes.push(format!(
            "the run is still training ({}): this page shows it as its last \
             checkpoint left it, at step {step} of {}; training redraws the page when it ends",
            headlab_train::run::holder_name(holder),
            config.train.max_iters
        ));
    } else if !finished {
        notes.push(format!(
            "the run stopped at step {step} of {}: {} continues it",
            config.train.max_iters,
            shell("train --resume")
        ));
    }

    let history = read(HISTORY_FILE).map(|t| HeadHistory::parse(&t, usize::MAX));
    let maps = match read(MAPS_FILE) {
        Some(text) => match MapHistory::parse(&text, usize::MAX) {
            Ok(maps) => Some(maps),
            Err(why) => {
                notes.push(format!("{MAPS_FILE} cannot be read ({why}); maps left out"));
                None
            }
        },
        None => None,
    };
    let syntax_history = read(SYNTAX_HISTORY_FILE)
        .map(|t| parse_syntax_history(&t))
        .unwrap_or_default();
    let tracked: Vec<Tracked> = history
        .iter()
        .flat_map(|h| h.points.iter().zip(&h.grad_norms).zip(&h.copying))
        .map(|(((step, repeat_loss, scores), grads), copying)| Tracked {
            step: *step,
            repeat_loss: *repeat_loss,
            scores: scores.iter().map(PatternScores::values).collect(),
            grad_norms: grads.iter().map(|g| g.is_finite().then_some(*g)).collect(),
            copying: copying
                .iter()
                .map(|c| c.is_finite().then_some(*c))
                .collect(),
            syntax: syntax_history
                .iter()
                .find(|(s, _)| s == step)
                .map(|(_, points)| points.clone()),
            maps: maps.as_ref().and_then(|m| {
                m.steps
                    .iter()
                    .find(|(s, _)| s == step)
                    .map(|(_, bytes)| headlab_heads::maps::to_base64(bytes))
            }),
        })
        .collect();
    if tracked.is_empty() {
        notes.push(
            "no tracked heads: train with train.track_heads_every = N to score every head and \
             keep its map every N steps"
                .to_string(),
        );
    } else if tracked.iter().all(|t| t.maps.is_none()) {
        notes.push(
            "no tracked maps (runs made before maps were kept have only the scores): train \
             again with train.track_heads_every to replay the maps"
                .to_string(),
        );
    }

    let table = read("heads/heads.json").and_then(|t| serde_json::from_str(&t).ok());
    if table.is_none() {
        notes.push(format!("no head table: {} makes one", shell("heads")));
    }
    let patching = read(PATCH_FILE).and_then(|t| serde_json::from_str(&t).ok());
    let pruning = read(PRUNE_FILE).and_then(|t| serde_json::from_str(&t).ok());
    let syntax = read(SYNTAX_JSON).and_then(|t| serde_json::from_str(&t).ok());
    let sample = read(SAMPLE_FILE);
    if sample.is_none() {
        let why = if finished || untrained_import {
            "sample.txt is missing"
        } else {
            "the run has not finished"
        };
        notes.push(format!("no sample ({why}): {} makes one", shell("sample")));
    }

    let title = format!("headlab run {}", root.display());
    let data = ReportData {
        title: title.clone(),
        config: config_text,
        notes: notes.clone(),
        losses: Losses {
            batches: losses.iters.clone(),
            train: losses.evals.iter().map(|e| (e.0, e.1)).collect(),
            val: losses.evals.iter().map(|e| (e.0, e.2)).collect(),
        },
        lr: losses.lr,
        grammar: losses.grammar,
        icl: read(ICL_FILE)
            .map(|t| parse_icl_history(&t))
            .unwrap_or_default()
            .into_iter()
            .map(|(step, s)| (step, s.early, s.late))
            .collect(),
        score_names: PatternScores::NAMES,
        n_layers: config.model.n_layers,
        n_heads: config.model.n_heads,
        vocab_size: run.tokenizer().map_or(0, |t| t.vocab_size()),
        probe: maps.map(|m| m.header.tokens).unwrap_or_default(),
        tracked,
        table,
        patching,
        pruning,
        syntax_names: syntax_point_names(),
        syntax,
        sample,
        beside: read(BESIDE_FILE).and_then(|t| serde_json::from_str(&t).ok()),
    };
    let json = serde_json::to_string(&data).expect("report data serialises");
    let html = fill_page(&title, &json);
    let path = root.join(REPORT_FILE);
    crate::write(&path, &html)?;
    Ok(RunReport {
        path,
        bytes: html.len(),
        notes,
    })
}

/// The report's HTML, CSS and script (real files in `assets/`, embedded at build time) around
/// `json`.
fn fill_page(title: &str, json: &str) -> String {
    const HTML: &str = include_str!("../assets/report.html");
    const CSS: &str = include_str!("../assets/report.css");
    const JS: &str = include_str!("../assets/report.js");
    crate::explorer::fill(HTML, CSS, JS, title, json)
}

/// Reads a run as `headlab report` does, for a path that may not be one.
pub fn report_run(root: &Path) -> Result<RunReport, ReportError> {
    let run = RunDir::open(root).map_err(|e| ReportError::Read {
        path: root.to_path_buf(),
        message: e.to_string(),
    })?;
    write_run_report(&run)
}

//! `headlab lab <name>`: experiments on head specialisation that anyone can rerun. One module
//! per lab holds its experiment (the runs it trains and what it measures in them), its summary
//! page and the files it writes; the CLI only parses options.
//!
//! - [`induction`]: a 2-layer attention-only model on the induction corpus forms the
//!   previous-token -> induction circuit of Olsson et al. 2022, with a visible phase change.
//! - [`head_count`] (`lab heads`): equal d_model and parameter count with 1..64 heads, several
//!   seeds, on the two-lookup `lookup` corpus, with which head fetches which source.
//! - [`symmetry`]: heads that start identical stay identical; a perturbation of size eps, and
//!   random initialisation, let gradients pull them apart.
//! - [`ambiguity`]: on the `attach` corpus, where "with" and "and" look when what "with"
//!   attaches to decides the last verb's number.
//! - [`syntax`]: the default run's word-level model with 1, 2, 4 and 8 heads over seeds:
//!   which relations find a syntactic head, when it forms and what zeroing it does.
//! - [`relations`]: models with 1, 2 and 4 heads on the `relations` corpus, where the verb's
//!   number comes from its subject and its object from the verb: which head holds which
//!   relation, proven by zeroing each.
//! - [`grokking`]: a 1-layer model on a + b mod p memorises its training pairs, then
//!   generalises long after under weight decay, its embedding turning to a few Fourier
//!   frequencies (Power et al. 2022; Nanda et al. 2023).
//!
//! Analysis comes from `headlab-heads`, drawing from `headlab-report`; the training runs from
//! `headlab-train`, with observers (head tracking, plots) the caller supplies.

pub mod ambiguity;
pub mod grokking;
pub mod head_count;
pub mod induction;
pub mod relations;
pub mod sweep;
pub mod symmetry;
pub mod syntax;

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use headlab_data::{DataError, Dataset, TokenizerError};
use headlab_heads::HeadReport;
use headlab_report::{ReportError, report_run, write_head_report};
use headlab_train::config::{ConfigError, RunConfig};
use headlab_train::run::{OpenError, RunDir, RunError, Trained, open_trained};
use headlab_train::trainer::{InitHook, Observer, TrainError, TrainOptions, load_dataset, train};
use thiserror::Error;

/// Why a lab could not finish.
#[derive(Debug, Error)]
pub enum LabError {
    /// Its config, or a `--set` on it.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Training one of its runs (boxed: a `TrainError` is large).
    #[error(transparent)]
    Train(Box<TrainError>),
    /// Opening a finished run.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Its data.
    #[error(transparent)]
    Data(#[from] DataError),
    /// Encoding a probe sentence.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// Drawing its pictures and pages.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// Reading or writing one of its files.
    #[error("cannot {action} {}: {source}", path.display())]
    File {
        /// `read`, `write` or `copy`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Measuring a relations run's heads.
    #[error(transparent)]
    Relations(#[from] headlab_heads::relations::RelationsError),
    /// Measuring a grammar run's syntactic heads.
    #[error(transparent)]
    Syntax(#[from] headlab_heads::syntax_report::SyntaxReportError),
    /// A `lab syntax` run whose val split holds too few sentences to measure.
    #[error("{} has too little val text to measure its syntactic heads; raise data.builtin_chars", .0.display())]
    NoSyntax(PathBuf),
    /// The induction run wrote no head scores to read the circuit from.
    #[error("{} holds no head scores: the run tracked none (train.track_heads_every = 0?)", .0.display())]
    NoHeadHistory(PathBuf),
    /// A head count of `lab heads` that does not split d_model.
    #[error("--heads {heads} does not divide d_model = {d_model}; choose among {choices:?}")]
    HeadsDoNotDivide {
        /// The count asked for.
        heads: usize,
        /// The model width.
        d_model: usize,
        /// The counts that divide it.
        choices: Vec<usize>,
    },
    /// The causal test of a lab's circuit.
    #[error(transparent)]
    Patch(#[from] headlab_heads::PatchError),
    /// `lab grokking`'s modulus or split.
    #[error(transparent)]
    Modular(#[from] headlab_data::modular::ModularError),
    /// A model its settings cannot build.
    #[error(transparent)]
    Model(headlab_model::GptConfigError),
    /// A `lab grokking` flag out of its range.
    #[error("{flag} {value} {why}")]
    Setting {
        /// The flag, e.g. `--lr`.
        flag: &'static str,
        /// What was given.
        value: String,
        /// What it must be.
        why: &'static str,
    },
    /// The path patching of a lab's circuit.
    #[error(transparent)]
    Path(#[from] headlab_heads::PathError),
    /// Searching a lab's model for its circuit.
    #[error(transparent)]
    Circuit(#[from] headlab_heads::discovery::CircuitError),
    /// A folder given as a sweep's that holds none (a run folder, a file, nothing).
    #[error("{} is not a sweep folder: {why}", .dir.display())]
    NoSweep {
        /// What was given.
        dir: PathBuf,
        /// What it is, and what to give instead.
        why: String,
    },
    /// A folder whose `sweep.json` is not a sweep's.
    #[error("{} is not a headlab sweep's file ({why}); give the folder a sweep made, or start one there with --force", .path.display())]
    NotASweep {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A `--set` of a key that an axis of the grid also sets.
    #[error(
        "--set {set}: {key} is an axis of the grid, which sets it for each run; drop the --set, \
         or give the value as the axis's only one (--grid {key}=...)"
    )]
    SetOnAxis {
        /// The `--set` as given.
        set: String,
        /// Its key.
        key: String,
    },
    /// A grid value a config cannot take (the key and the valid ones named, as `--set` does).
    #[error("{0}")]
    Grid(String),
    /// A `[sweep]` table that cannot be read.
    #[error("{}: {why}", .path.display())]
    SweepTable {
        /// The config file.
        path: PathBuf,
        /// What is wrong, and what it takes.
        why: String,
    },
    /// Results asked of a sweep whose runs are not all finished.
    #[error("{} of the sweep in {} not finished: {}; `headlab sweep {} --status` says where each stands and the command that continues them", crate::sweep::runs(.runs.len()), .dir.display(), .runs.join(", "), .dir.display())]
    Unfinished {
        /// The sweep folder.
        dir: PathBuf,
        /// The runs not finished.
        runs: Vec<String>,
    },
    /// Pruning a lab's model.
    #[error(transparent)]
    Prune(#[from] headlab_heads::pruning::PruneError),
    /// A stop request while the lab measured a finished run: the runs it finished are kept.
    #[error(
        "interrupted while the {what} measured its runs; the runs it finished are kept in {}. \
         Continue the {what} with: {resume}",
        .out.display()
    )]
    Between {
        /// `lab` or `sweep`.
        what: &'static str,
        /// The lab's folder.
        out: PathBuf,
        /// The command that continues the lab.
        resume: String,
    },
    /// A stop request (Ctrl-C, SIGTERM) ended one of the lab's runs at a checkpoint.
    #[error(
        "interrupted at step {step} of {}, which saved a checkpoint there; the {what}'s \
         finished runs are kept. Continue the {what} with: {resume}",
        .run.display()
    )]
    Interrupted {
        /// `lab` or `sweep`.
        what: &'static str,
        /// The step the run stopped at.
        step: usize,
        /// The run.
        run: PathBuf,
        /// The command that continues the lab.
        resume: String,
    },
    /// A stop request ended `lab grokking`'s loop, which keeps no checkpoint; its files
    /// were written up to there.
    #[error(
        "interrupted at step {step} of {steps}: the results up to there are in {} \
         (summary.md, grokking.csv, fourier.csv and the pictures); lab grokking keeps no \
         checkpoint, so run it again for all its steps",
        .out.display()
    )]
    Cut {
        /// The step it stopped at (measured).
        step: usize,
        /// The steps it was to train.
        steps: usize,
        /// The lab's folder.
        out: PathBuf,
    },
    /// A loss or gradient of one of the lab's runs went non-finite: the lab stops there, as
    /// `train` does, and writes no summary that could read as a result.
    #[error(
        "{who} diverged at step {step}: the {what} is {value} (lr {lr:.3e}); the lab stopped \
         and wrote no summary. {fix}"
    )]
    Diverged {
        /// The run: `lab grokking`, or `the lab's run OUT/NAME`.
        who: String,
        /// The step.
        step: usize,
        /// `train loss`, `test loss` (grokking), `loss` or `gradient norm`.
        what: &'static str,
        /// The value.
        value: f64,
        /// The learning rate at that step.
        lr: f64,
        /// What to change.
        fix: &'static str,
    },
    /// The disk filled up under one of the lab's runs (its partial checkpoint removed).
    #[error(
        "the disk holding {} is full ({cause}). The {what}'s finished runs and this run's last \
         checkpoint are kept; free some space, then continue the {what} with: {resume}",
        .run.display()
    )]
    DiskFull {
        /// `lab` or `sweep`.
        what: &'static str,
        /// The run.
        run: PathBuf,
        /// What could not be written.
        cause: String,
        /// The command that continues the lab.
        resume: String,
    },
    /// `lab ambiguity` found no sentence to measure.
    #[error(
        "no ambiguous sentence fits the model's context with \"with\" and \"and\" as one token \
         each (lab ambiguity needs data.builtin = \"attach\" and data.tokenizer = \"bpe\")"
    )]
    NoAmbiguousSentence,
}

impl From<TrainError> for LabError {
    fn from(e: TrainError) -> Self {
        Self::Train(Box::new(e))
    }
}

/// Makes the observers of each training run (head tracking, plots).
pub type Observers<'a> = &'a dyn Fn() -> Vec<Box<dyn Observer>>;

/// How a lab trains its runs.
#[derive(Clone, Copy)]
pub struct Runs<'a> {
    /// Each run's observers.
    pub observers: Observers<'a>,
    /// `--resume`: keep what an earlier, stopped lab left in the output directory. A run that
    /// finished with the same config is reused, one stopped at a checkpoint continues from
    /// it, and any other trains from the start.
    pub resume: bool,
    /// The command that continues this lab, for the line a stop request prints.
    pub resume_command: &'a str,
    /// What continues: `lab` or `sweep`, for that line.
    pub what: &'static str,
}

/// A lab's shipped config (embedded, so `headlab lab` works from any folder) with the user's
/// `--set`s applied, validated. `name` is the file it came from, for error messages.
pub fn lab_config(toml: &str, name: &str, sets: &[String]) -> Result<RunConfig, LabError> {
    let mut config = RunConfig::from_toml_str(toml, name)?;
    config.apply_sets(sets)?;
    config.validate().map_err(ConfigError::from)?;
    Ok(config)
}

/// Every head count of `counts` splits `d_model` into whole heads.
fn check_head_counts(d_model: usize, counts: &[usize]) -> Result<(), LabError> {
    match counts
        .iter()
        .find(|&&h| h == 0 || !d_model.is_multiple_of(h))
    {
        Some(&heads) => Err(LabError::HeadsDoNotDivide {
            heads,
            d_model,
            choices: (1..=d_model)
                .filter(|k| d_model.is_multiple_of(*k))
                .collect(),
        }),
        None => Ok(()),
    }
}

/// A trained run of a lab.
#[derive(Debug, Clone, Copy)]
struct RunDone {
    /// Its last evaluation's val loss.
    val_loss: f64,
    /// Wall seconds it trained, over every process that trained it.
    seconds: f64,
    /// Kept from an earlier lab (`--resume`), not trained now.
    reused: bool,
}

/// What `--resume` finds where a lab's run goes.
#[derive(Debug, PartialEq)]
enum Earlier {
    /// Nothing: the run trains.
    Nothing,
    /// A run that finished with this config: it is reused.
    Finished,
    /// A run of this config stopped at the checkpoint of this step: it continues there.
    Stopped(usize),
    /// Anything else (another config, no checkpoint, unreadable): the run trains again from
    /// the start, for this reason.
    Unusable(String),
}

/// What an earlier lab left in `dir` for a run of `config`.
fn earlier(dir: &Path, config: &RunConfig) -> Earlier {
    if !dir.exists() {
        return Earlier::Nothing;
    }
    let run = match RunDir::open(dir) {
        Ok(run) => run,
        Err(e) => return Earlier::Unusable(e.to_string()),
    };
    let saved = match run.config() {
        Ok(saved) => saved,
        Err(e) => return Earlier::Unusable(e.to_string()),
    };
    // A fresh run records its text's path absolutely; compare it so.
    let mut now = config.clone();
    now.data.make_path_absolute();
    let changed = changed_keys(&saved, &now);
    if !changed.is_empty() {
        return Earlier::Unusable(format!(
            "it was trained with other settings ({})",
            changed.join(", ")
        ));
    }
    match run.result() {
        Ok(Some(_)) => return Earlier::Finished,
        Ok(None) => {}
        Err(e) => return Earlier::Unusable(e.to_string()),
    }
    match run.checkpoint_state("last") {
        // Killed after its last step's checkpoint, before its result: nothing to continue.
        Some(state) if state.step >= config.train.max_iters && !state.pending_eval => {
            Earlier::Unusable("it trained all its steps but stopped before its result".into())
        }
        Some(state) => Earlier::Stopped(state.step),
        None => Earlier::Unusable("it stopped before its first checkpoint".into()),
    }
}

/// The config keys (`section.key`) whose values differ between `a` and `b`.
fn changed_keys(a: &RunConfig, b: &RunConfig) -> Vec<String> {
    fn flat(prefix: &str, v: serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k
                    } else {
                        format!("{prefix}.{k}")
                    };
                    flat(&key, v, out);
                }
            }
            v => out.push((prefix.to_string(), v)),
        }
    }
    let to_flat = |c: &RunConfig| {
        let mut out = Vec::new();
        flat(
            "",
            serde_json::to_value(c).expect("a config serialises"),
            &mut out,
        );
        out.into_iter()
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let (a, b) = (to_flat(a), to_flat(b));
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

/// Trains `config` into `dir`, or with `--resume` reuses or continues what an earlier lab
/// left there ([`Earlier`]). A stop request ends it with [`LabError::Interrupted`]; once it
/// is done, [`between_runs`].
fn train_run(config: RunConfig, dir: PathBuf, runs: Runs<'_>) -> Result<RunDone, LabError> {
    let done = train_run_with(config, dir.clone(), runs, None, Vec::new())?;
    between_runs(&dir, runs)?;
    Ok(done)
}

/// [`train_run`] with an init hook and observers of the lab's own (after the usual ones),
/// leaving [`between_runs`] to the caller, for what it saves of the run first.
fn train_run_with(
    config: RunConfig,
    dir: PathBuf,
    runs: Runs<'_>,
    init: Option<InitHook>,
    own: Vec<Box<dyn Observer>>,
) -> Result<RunDone, LabError> {
    let found = if runs.resume {
        earlier(&dir, &config)
    } else {
        Earlier::Nothing
    };
    let shown = dir.display();
    match &found {
        Earlier::Nothing => {}
        Earlier::Finished => headlab_train::log_line!("{shown}: finished before: kept"),
        Earlier::Stopped(step) => {
            headlab_train::log_line!("{shown}: stopped at step {step}: continuing from there")
        }
        Earlier::Unusable(why) => {
            headlab_train::log_line!("{shown}: {why}: training it again from the start")
        }
    }
    let reused = found == Earlier::Finished;
    if !reused {
        let options = TrainOptions {
            config,
            out: dir.clone(),
            force: true,
            resume: matches!(found, Earlier::Stopped(_)),
            resume_sets: Vec::new(),
            print_sample: false,
            init,
            name_in_progress: true,
        };
        let mut observers = (runs.observers)();
        observers.extend(own);
        let interrupted = |step, run| LabError::Interrupted {
            what: runs.what,
            step,
            run,
            resume: runs.resume_command.to_string(),
        };
        match train(options, &mut observers) {
            // Stopped during the loss over the val split after the last step: the run is
            // complete and saved (a resumed lab keeps it), the lab stops here.
            Ok(summary) if summary.stopped => {
                return Err(interrupted(summary.result.steps, summary.run));
            }
            Ok(_) => {}
            Err(TrainError::Interrupted { step, run }) => return Err(interrupted(step, run)),
            Err(TrainError::Diverged {
                step,
                what,
                value,
                lr,
                ..
            }) => {
                return Err(LabError::Diverged {
                    who: format!("the lab's run {}", dir.display()),
                    step,
                    what,
                    value,
                    lr,
                    fix: "Lower its learning rate (--set train.lr=...) or raise \
                          train.warmup_iters, and start the lab again with --force",
                });
            }
            // The lab continues the run, with its own observers: say the lab's command.
            Err(TrainError::DiskFull { run, cause, .. }) => {
                return Err(LabError::DiskFull {
                    what: runs.what,
                    run,
                    cause,
                    resume: runs.resume_command.to_string(),
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
    done(&dir, reused)
}

/// Once the run in `dir` and what the lab saves of it are on disk: from here a stop request
/// ends the process at once with [`LabError::Between`]'s line, and one that came since the
/// run ended is that error.
fn between_runs(dir: &Path, runs: Runs<'_>) -> Result<(), LabError> {
    let between = LabError::Between {
        what: runs.what,
        out: dir.parent().unwrap_or(dir).to_path_buf(),
        resume: runs.resume_command.to_string(),
    };
    headlab_train::stop::nothing_at_stake(between.to_string());
    if headlab_train::stop::requested() {
        return Err(between);
    }
    headlab_train::stop::test_point(format_args!("lab:done"));
    Ok(())
}

/// The val loss and training seconds of the finished run in `dir`, `reused` or trained now.
fn done(dir: &Path, reused: bool) -> Result<RunDone, LabError> {
    let run = RunDir::open(dir).map_err(OpenError::from)?;
    let result = run.result().map_err(OpenError::from)?.ok_or_else(|| {
        OpenError::from(RunError::NotARun {
            path: dir.to_path_buf(),
            why: "it has no result.json: it did not finish".into(),
        })
    })?;
    let seconds = run.checkpoint_state("last").map_or(0.0, |s| s.elapsed_s);
    Ok(RunDone {
        val_loss: result.val_loss,
        seconds,
        reused,
    })
}

/// The best checkpoint of a finished run on its own backend, with its data.
fn open(dir: &Path) -> Result<(Trained, Device, Dataset), LabError> {
    let (run, trained, device) = open_trained(dir, None, "best")?;
    let data = load_dataset(&run, &trained.config, trained.tokenizer.clone())?;
    Ok((trained, device, data))
}

/// The files of a one-run lab beside its run (`OUT/run`): the lab's head table (`heads.csv`,
/// `heads.json`, `attention.png`, `heads.html`, titled `title`), the run's page with that
/// table as the run's, and `files` copied up from the run.
fn publish_run(
    out: &Path,
    title: &str,
    table: &HeadReport,
    files: &[&str],
) -> Result<(), LabError> {
    write_head_report(out, title, table, None)?;
    let run = out.join("run");
    write_head_report(&run.join("heads"), "headlab lab run", table, None)?;
    report_run(&run)?;
    for file in files {
        let from = run.join(file);
        std::fs::copy(&from, out.join(file)).map_err(|source| LabError::File {
            action: "copy",
            path: from,
            source,
        })?;
    }
    Ok(())
}

/// Writes `text` to `path`.
fn write(path: &Path, text: &str) -> Result<(), LabError> {
    std::fs::write(path, text).map_err(|source| LabError::File {
        action: "write",
        path: path.to_path_buf(),
        source,
    })
}

/// Writes the lab's `summary.md` into `out` and returns it.
fn write_summary(out: &Path, summary: String) -> Result<String, LabError> {
    write(&out.join("summary.md"), &summary)?;
    Ok(summary)
}

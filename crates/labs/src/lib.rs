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
pub mod symmetry;

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use headlab_data::{DataError, Dataset, TokenizerError};
use headlab_heads::HeadReport;
use headlab_report::{ReportError, report_run, write_head_report};
use headlab_train::config::{ConfigError, RunConfig};
use headlab_train::run::{OpenError, Trained, open_trained};
use headlab_train::trainer::{Observer, TrainError, TrainOptions, load_dataset, train};
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

/// A lab's shipped config (embedded, so `headlab lab` works from any folder) with the user's
/// `--set`s applied, validated. `name` is the file it came from, for error messages.
pub fn lab_config(toml: &str, name: &str, sets: &[String]) -> Result<RunConfig, LabError> {
    let mut config = RunConfig::from_toml_str(toml, name)?;
    config.apply_sets(sets)?;
    config.validate().map_err(ConfigError::from)?;
    Ok(config)
}

/// Trains `config` into `dir` (replacing it); returns its final val loss.
fn train_run(config: RunConfig, dir: PathBuf, observers: Observers<'_>) -> Result<f64, LabError> {
    let options = TrainOptions {
        config,
        out: dir,
        force: true,
        resume: false,
        resume_sets: Vec::new(),
        print_sample: false,
        init: None,
    };
    Ok(train(options, &mut observers())?.val_loss)
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
    write_head_report(out, title, table)?;
    let run = out.join("run");
    write_head_report(&run.join("heads"), "headlab lab run", table)?;
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

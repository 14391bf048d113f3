//! What several commands share: the built-in config, run names, opening a trained run, and
//! the observers of a training run.

use std::path::{Path, PathBuf};

use anyhow::Result;
use burn::tensor::Device;
use clap::ValueEnum;
use headlab_heads::HeadTracker;
use headlab_kernels::BackendKind;
use headlab_report::RunPlots;
use headlab_train::config::RunConfig;
use headlab_train::run::{RunDir, Trained, open_trained};
use headlab_train::trainer::Observer;

/// The built-in default run, embedded so `headlab train` works from any folder.
pub const DEFAULT_CONFIG: &str = include_str!("../../../configs/default.toml");

/// A config file, or the built-in default, with the name its runs are called by.
pub fn load_config(path: Option<&Path>) -> Result<(RunConfig, String)> {
    Ok(match path {
        Some(path) => {
            let name = path
                .file_stem()
                .map_or("run".into(), |s| s.to_string_lossy().into_owned());
            (RunConfig::load(path)?, name)
        }
        None => (
            RunConfig::from_toml_str(DEFAULT_CONFIG, "built-in configs/default.toml")?,
            "default".into(),
        ),
    })
}

/// `runs/<name>`, or `runs/<name>-2`, `-3`, ... when taken: without `--out`, a new run never
/// collides with an old one (and never overwrites it).
pub fn fresh_run_dir(name: &str) -> PathBuf {
    let base = Path::new("runs");
    let mut dir = base.join(name);
    let mut n = 2;
    while dir.exists() {
        dir = base.join(format!("{name}-{n}"));
        n += 1;
    }
    dir
}

/// Which checkpoint of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Checkpoint {
    /// Lowest val loss.
    Best,
    /// Most recent.
    Last,
}

impl Checkpoint {
    pub fn name(self) -> &'static str {
        match self {
            Checkpoint::Best => "best",
            Checkpoint::Last => "last",
        }
    }
}

/// Where a command that reads a trained run loads it: the backend and the checkpoint.
#[derive(Debug, clap::Args)]
pub struct OnRun {
    /// Backend to run on: flex, flex-burn, ndarray or wgpu (default: the run's own
    /// train.backend).
    #[arg(long, short)]
    pub backend: Option<String>,
    /// Checkpoint to use.
    #[arg(long, value_enum, default_value_t = Checkpoint::Best)]
    pub checkpoint: Checkpoint,
}

/// A run's model from `checkpoint` on `backend` (`None`: the run's own `train.backend`), with
/// its config and tokenizer.
pub fn open_run(
    dir: &Path,
    backend: Option<&str>,
    checkpoint: Checkpoint,
) -> Result<(RunDir, Trained, Device)> {
    let backend: Option<BackendKind> = backend.map(str::parse).transpose()?;
    Ok(open_trained(dir, backend, checkpoint.name())?)
}

/// What watches every training run: head tracking (when its config asks for it), then the
/// plots drawn from the files it and the loop write.
pub fn observers() -> Vec<Box<dyn Observer>> {
    vec![Box::new(HeadTracker::new()), Box::new(RunPlots::new())]
}

/// The value parser of every unsigned flag: clap takes `-1` for a flag, not a value, and
/// otherwise says only "invalid digit"; this names the range instead.
pub fn whole_number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.parse().map_err(|_| {
        let digits = text.trim();
        let why = if digits.starts_with('-') {
            "is negative"
        } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            "is too large"
        } else {
            "is not a whole number"
        };
        format!("{text} {why}: give a whole number of 0 or more, such as 1 or 1337")
    })
}

/// The value parser of a count that must be 1 or more (`patch --top`): 0 would ask for
/// nothing, and print an empty list.
pub fn at_least_one(text: &str) -> Result<usize, String> {
    match whole_number::<usize>(text)? {
        0 => Err(format!("{text} asks for nothing: give 1 or more")),
        n => Ok(n),
    }
}

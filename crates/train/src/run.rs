//! A run directory: resolved config, tokenizer, metrics, plots and checkpoints.
//!
//! ```text
//! RUN/
//!   config.toml      the resolved config (every key, after --set)
//!   tokenizer.json   the vocabulary the checkpoints were trained with
//!   metrics.csv      step,split,loss,lr,tokens_per_s,elapsed_s,...,train_s
//!   loss.png         train and val curves
//!   sample.txt       the final model's sample
//!   result.json      steps, compute, training seconds, final and full-val-split losses
//!   report.html      the run's page: losses, head scores and maps through training, a sample
//!   last/            newest checkpoint: model.bpk, optim.safetensors, state.json, manifest.json
//!   best/            checkpoint with the lowest val loss so far
//! ```
//!
//! Nothing is lost to a crash:
//!
//! - a new run directory is assembled under a temporary name and renamed into place, so it
//!   appears with its config and tokenizer or not at all;
//! - a checkpoint is written into a temporary folder, every file is fsynced, and the folder is
//!   renamed into place, so a crash leaves either the old checkpoint or the new one, never half
//!   of one (a crash between the two renames leaves the old one as `.NAME.old`, which loading
//!   falls back to);
//! - `manifest.json` records the size and SHA-256 of every checkpoint file and the model
//!   config it was saved from (loading verifies both and names the file or key that differs),
//!   and the backend and adapter the weights were trained on.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use headlab_model::{Gpt, GptConfig, WeightsError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::config::{ConfigError, RunConfig};
use crate::optim::{OptimStateError, Optimizer, OptimizerConfig};
use headlab_data::{Tokenizer, TokenizerError};

/// Progress saved with every checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Iterations completed; training resumes at this iteration.
    pub step: usize,
    /// Lowest val loss seen at an evaluation, if any.
    pub best_val_loss: Option<f64>,
    /// Wall time spent training before this checkpoint, in seconds.
    pub elapsed_s: f64,
    /// Of that, the seconds in training steps: evaluations, checkpoints and observers left
    /// out (0 in checkpoints from before it was kept).
    #[serde(default)]
    pub train_s: f64,
    /// Stopped during the evaluation at `step`: a resumed run evaluates there first. Left out
    /// of state.json when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending_eval: bool,
}

/// The start of `config.toml`'s note of a run trained under MPI ([`RunDir::note_world_size`]).
pub const WORLD_NOTE: &str = "# world size: trained by ";

/// `result.json`: what a finished run reached and what it cost, for comparing runs and for
/// record files (`cargo xtask speedrun`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Optimiser steps taken.
    pub steps: usize,
    /// Training tokens those steps read (`steps * batch_size * block_size * grad_accum`).
    pub tokens: u64,
    /// [`GptConfig::flops_per_token`](headlab_model::GptConfig::flops_per_token):
    /// `6 N + 12 L d T`.
    pub flops_per_token: f64,
    /// `flops_per_token * tokens`: the run's model compute.
    pub compute_flops: f64,
    /// Seconds in training steps (evaluations, checkpoints and observers left out).
    pub train_s: f64,
    /// The last evaluation's val loss, by the estimator below.
    pub val_loss: f64,
    /// The last evaluation's train loss.
    pub train_loss: f64,
    /// How `val_loss` and `train_loss` were estimated.
    pub estimator: String,
    /// The loss of the val split (its first `train.final_eval_tokens` tokens) in
    /// non-overlapping windows of the block size; `None` when the split is too short, the
    /// key is 0, or a stop request cut it short.
    pub val_full_loss: Option<f64>,
    /// Tokens `val_full_loss` averages.
    pub val_full_tokens: usize,
    /// Tokens in the val split: `val_full_loss` covers all of it when `val_full_tokens` is
    /// one less (the first token is context only). 0 in results from before it was kept.
    #[serde(default)]
    pub val_split_tokens: usize,
    /// The window both losses were measured in (`model.block_size`).
    pub block_size: usize,
    /// The ranks that trained it together under MPI ([`crate::world`]) in its last session;
    /// 1, and left out of result.json, for one process.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub world_size: usize,
    /// Of `train_s`, the seconds this session spent averaging gradients across the ranks
    /// (rank 0's wait included); left out for one process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange_s: Option<f64>,
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

/// The mark of a run, or of a lab's folder, that a process is using: `.NAME.training` beside
/// `dir`, holding that process's id under an exclusive file lock ([`mark_training`]). It lives
/// beside the folder, not in it, so that `--force` can replace the folder while the mark holds.
/// A folder named only by `.` (or `x/..`) is named by its real path's last component.
pub fn mark_path(dir: &Path) -> PathBuf {
    if dir.file_name().is_none()
        && let Ok(real) = fs::canonicalize(dir)
        && real.file_name().is_some()
    {
        return sibling(&real, "training");
    }
    sibling(dir, "training")
}

/// Holds the mark of [`mark_training`]; dropped, it removes the mark and releases its lock:
/// training (or the lab) ended, one way or another. A killed process leaves the file behind,
/// unlocked, and the next [`mark_training`] takes it over.
#[derive(Debug)]
pub struct TrainingMark {
    path: PathBuf,
    file: fs::File,
}

impl TrainingMark {
    /// The mark's file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TrainingMark {
    fn drop(&mut self) {
        // Removed while still locked (and only if the path is still this file): a process
        // that opened it meanwhile finds, once it holds the lock, that the path names
        // another file or none, and opens again.
        if same_file(&self.file, &self.path) {
            let _ = fs::remove_file(&self.path);
        }
        let _ = self.file.unlock();
    }
}

/// How long [`mark_training`] keeps trying a mark that is locked: a reader
/// ([`mark_holder`]) holds it for an instant, a process that trains for the whole run.
const MARK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(300);

/// Marks `dir` (a run, or a lab's folder) as in use by this process until the mark is
/// dropped, in one atomic step: the exclusive lock on [`mark_path`] is taken or refused
/// ([`RunError::InUse`], naming the process that holds it). The lock ends with the process,
/// so a mark left by a killed process never blocks. `dir`'s parent is created if missing.
pub fn mark_training(dir: &Path) -> Result<TrainingMark, RunError> {
    let path = mark_path(dir);
    let parent = parent_of(&path);
    fs::create_dir_all(&parent).map_err(io(&parent))?;
    let started = std::time::Instant::now();
    loop {
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) if started.elapsed() < MARK_PATIENCE => {
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(RunError::InUse {
                    dir: dir.to_path_buf(),
                    pid: read_pid(&mut file),
                });
            }
            // A filesystem without file locks: the mark is written, unenforced.
            Err(fs::TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
                crate::log_line!(
                    "warning: {} cannot be locked on this filesystem ({e}): a second process \
                     on {} is not refused here",
                    path.display(),
                    dir.display()
                );
            }
            Err(fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
        if !same_file(&file, &path) {
            // The holder removed it as we opened it: take the mark anew.
            continue;
        }
        use std::io::{Seek, Write};
        file.set_len(0).map_err(io(&path))?;
        file.rewind().map_err(io(&path))?;
        writeln!(file, "{}", std::process::id()).map_err(io(&path))?;
        return Ok(TrainingMark { path, file });
    }
}

/// The process id a locked mark holds. Its holder writes it just after taking the lock,
/// over whatever a killed process left there, so a reader that comes in between waits for
/// an id of a live process (where `/proc` tells; a second at most).
fn read_pid(file: &mut fs::File) -> Option<u32> {
    use std::io::{Read, Seek};
    let proc = Path::new("/proc");
    let alive = |pid: u32| !proc.is_dir() || proc.join(pid.to_string()).exists();
    for _ in 0..200 {
        let mut text = String::new();
        if file.rewind().is_ok()
            && file.read_to_string(&mut text).is_ok()
            && let Ok(pid) = text.trim().parse()
            && alive(pid)
        {
            return Some(pid);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    None
}

/// Whether `path` still names the open `file` (not removed or replaced since it was opened).
fn same_file(file: &fs::File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        path.exists()
    }
}

/// Who holds a mark: its process id, `None` where it could not be read.
pub type Holder = Option<u32>;

/// The other process that holds `dir`'s mark now ([`mark_training`]). A mark left by a killed
/// process holds no lock and names nobody; this process's own (a lab's, while it trains a run
/// in its folder) is no other process's.
pub fn mark_holder(dir: &Path) -> Option<Holder> {
    let path = mark_path(dir);
    let mut file = fs::OpenOptions::new().read(true).open(&path).ok()?;
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            None
        }
        Err(fs::TryLockError::WouldBlock) => match read_pid(&mut file) {
            Some(pid) if pid == std::process::id() => None,
            pid => Some(pid),
        },
        Err(fs::TryLockError::Error(_)) => None,
    }
}

/// "process N", or "another process" when its id could not be read.
pub fn holder_name(holder: Holder) -> String {
    holder.map_or("another process".to_string(), |pid| {
        format!("process {pid}")
    })
}

/// How to stop the holder: `kill -INT N`, where its id is known.
pub fn stop_advice(holder: Holder) -> String {
    holder.map_or("stop it first".to_string(), |pid| {
        format!("stop it first (kill -INT {pid} stops it at a checkpoint)")
    })
}

/// The file a finished run's [`RunResult`] is written to.
pub const RESULT_FILE: &str = "result.json";

/// The checksum file of a checkpoint.
pub const MANIFEST: &str = "manifest.json";

/// The files of a checkpoint, each listed in its manifest.
pub const CHECKPOINT_FILES: [&str; 3] = ["model.bpk", "optim.safetensors", "state.json"];

/// `manifest.json`: what a checkpoint holds, to verify it before loading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Version of this layout.
    pub format: u32,
    /// Training step of the checkpoint.
    pub step: usize,
    /// The model config the weights were saved from (`GptConfig` as JSON).
    pub model: serde_json::Value,
    /// Size and SHA-256 of each file, by name.
    pub files: BTreeMap<String, FileDigest>,
    /// Where the weights were trained (absent in checkpoints made before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trained_on: Option<TrainedOn>,
}

/// The backend and adapter a checkpoint was trained on: a resumed run may change backends,
/// so each checkpoint records its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainedOn {
    /// The backend's name (`flex`, `wgpu`, ...).
    pub backend: String,
    /// The adapter, where the backend names one (wgpu on lavapipe: `llvmpipe (LLVM 15.0.6,
    /// 256 bits)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
}

/// A trained model with what it was trained with (the CLI opens runs into this).
#[derive(Debug)]
pub struct Trained {
    /// The run's config.
    pub config: RunConfig,
    /// The run's tokenizer.
    pub tokenizer: Tokenizer,
    /// The checkpoint's model.
    pub model: Gpt,
}

/// Size and checksum of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    /// Length in bytes.
    pub bytes: u64,
    /// SHA-256, lowercase hex.
    pub sha256: String,
}

/// A run directory that cannot be used.
#[derive(Debug, Error)]
pub enum RunError {
    /// Another process holds the mark of a run or lab folder ([`mark_training`]).
    #[error(
        "{} is in use by {} now; wait for it to finish, or {} and then continue it with \
         --resume",
        .dir.display(), holder_name(*.pid), stop_advice(*.pid)
    )]
    InUse {
        /// The run or lab folder.
        dir: PathBuf,
        /// The process holding it, once it wrote its id.
        pid: Holder,
    },
    /// `--out` names a folder that exists.
    #[error(
        "run directory {0} already exists; choose another --out, or pass --force to \
         overwrite it, or --resume {0} to continue it"
    )]
    Exists(PathBuf),
    /// The training text is not what the run was trained on.
    #[error(
        "the data of {} has changed since it was trained: {what} has SHA-256 {now}, the run \
         recorded {recorded} in data.json; {}",
        run.display(),
        if what.starts_with("built-in") {
            "this headlab generates another text for the run's [data] settings, so numbers \
             measured now are not on the run's own text"
        } else {
            "the file was edited on disk; to measure the run on its own text, restore the \
             original file there"
        }
    )]
    DataChanged {
        /// The run.
        run: PathBuf,
        /// The text's description (a file, or a built-in corpus).
        what: String,
        /// The digest in `data.json`.
        recorded: String,
        /// The digest now.
        now: String,
    },
    /// The folder is missing or not a run.
    #[error("{path} is not a headlab run directory: {why}")]
    NotARun {
        /// The folder.
        path: PathBuf,
        /// What is missing.
        why: String,
    },
    /// Filesystem failure.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The saved config does not parse.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The saved tokenizer does not load.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The saved weights do not load.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// The saved optimizer state does not load.
    #[error(transparent)]
    Optim(#[from] OptimStateError),
    /// The state file is corrupt.
    #[error("checkpoint state {path} is corrupt: {message}")]
    State {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A checkpoint without a readable manifest.
    #[error(
        "checkpoint {dir} cannot be verified: its {MANIFEST} {why}. A checkpoint written by \
         headlab always has one, so this one is damaged or was not made by `headlab train`; \
         use the run's other checkpoint (--checkpoint {}) or train again",
        other_checkpoint(dir)
    )]
    Manifest {
        /// The checkpoint folder.
        dir: PathBuf,
        /// What is wrong with the manifest.
        why: String,
    },
    /// A checkpoint file that differs from what its manifest recorded.
    #[error(
        "checkpoint file {file} is damaged: {why}, which does not match what {manifest} \
         recorded when the checkpoint was written (the file was truncated or changed since). \
         Restore it from a backup, or use the run's other checkpoint: --checkpoint {} for \
         sample and eval; to resume from `best`, copy it over `last` first",
        other_checkpoint(file.parent().unwrap_or(file))
    )]
    Corrupt {
        /// The damaged file.
        file: PathBuf,
        /// The manifest that recorded it.
        manifest: PathBuf,
        /// Size or checksum, found against expected.
        why: String,
    },
    /// A checkpoint saved by a model with another shape than the config asks for.
    #[error(
        "checkpoint {dir} was saved by a different model than {config} describes: {}. Load it \
         with the config it was saved with (drop the --set that changes it, or restore {config})",
        describe_diffs(.diffs)
    )]
    ConfigMismatch {
        /// The checkpoint folder.
        dir: PathBuf,
        /// The run's config file.
        config: PathBuf,
        /// (key, value in the checkpoint, value in the config).
        diffs: Vec<(String, String, String)>,
    },
}

fn describe_diffs(diffs: &[(String, String, String)]) -> String {
    diffs
        .iter()
        .map(|(key, saved, now)| {
            format!("{key} is {saved} in the checkpoint but {now} in the config")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A checkpoint's files and manifest, written and synced into the folder `tmp`.
fn write_checkpoint_files(
    tmp: &Path,
    model: &Gpt,
    optim: &Optimizer,
    state: &TrainState,
    trained_on: &TrainedOn,
) -> Result<(), RunError> {
    model.save_weights(&tmp.join("model.bpk"))?;
    optim.save(&tmp.join("optim.safetensors"))?;
    let state_path = tmp.join("state.json");
    let json = serde_json::to_string_pretty(state).expect("state serialises");
    fs::write(&state_path, json).map_err(io(&state_path))?;
    let mut files = BTreeMap::new();
    for file in CHECKPOINT_FILES {
        let path = tmp.join(file);
        sync(&path)?;
        files.insert(file.to_string(), digest(&path)?);
    }
    let manifest = Manifest {
        format: 1,
        step: state.step,
        model: serde_json::to_value(&model.config).expect("model config serialises"),
        files,
        trained_on: Some(trained_on.clone()),
    };
    let manifest_path = tmp.join(MANIFEST);
    let json = serde_json::to_string_pretty(&manifest).expect("manifest serialises");
    fs::write(&manifest_path, json + "\n").map_err(io(&manifest_path))?;
    sync(&manifest_path)?;
    sync_dir(tmp);
    Ok(())
}

/// Test hook, compiled only with the `test-hooks` feature (the end-to-end tests turn it on;
/// a normal build ignores the variable): with `HEADLAB_TEST_PAUSE=NAME:STAGE@STEP` in the
/// environment, the process announces `headlab-test: paused at NAME:STAGE@STEP` on stderr
/// and sleeps when it reaches that point of writing checkpoint NAME, so tests can kill it at
/// a known moment. Stages: `written` (files in the temporary folder, not yet renamed) and
/// `swapped` (the old checkpoint moved aside, the new one not yet in place).
#[cfg(feature = "test-hooks")]
fn pause_point(name: &str, stage: &str, step: usize) {
    static WANTED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let wanted = WANTED.get_or_init(|| std::env::var("HEADLAB_TEST_PAUSE").ok());
    let here = format!("{name}:{stage}@{step}");
    if wanted.as_deref() == Some(here.as_str()) {
        crate::log_line!("headlab-test: paused at {here}");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
fn pause_point(_name: &str, _stage: &str, _step: usize) {}

/// Flushes a file or folder to disk.
fn sync(path: &Path) -> Result<(), RunError> {
    fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(path))
}

/// Flushes a folder's entries (renames) to disk; not every platform can open a folder for
/// that, so failure is ignored.
fn sync_dir(path: &Path) {
    let _ = fs::File::open(path).and_then(|f| f.sync_all());
}

/// The folder holding `path`, `.` for a bare file name.
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `dir/.NAME.SUFFIX` beside `path`.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned());
    parent_of(path).join(format!(".{name}.{suffix}"))
}

/// Replaces `path` with `bytes` atomically: a temporary file beside it, fsynced, renamed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    let tmp = sibling(path, "tmp");
    fs::write(&tmp, bytes).map_err(io(&tmp))?;
    sync(&tmp)?;
    fs::rename(&tmp, path).map_err(io(path))?;
    sync_dir(&parent_of(path));
    Ok(())
}

/// The text the final model generated at the end of `headlab train`.
pub const SAMPLE_FILE: &str = "sample.txt";

/// In a run made by `headlab import`: where its weights came from (headlab-interop writes it).
pub const IMPORT_FILE: &str = "import.json";

/// What a run records of its training text, to notice when it changes: `data.json`.
pub const DATA_FILE: &str = "data.json";

/// `data.json`'s text for `text`: its length and SHA-256.
fn data_record(text: &str) -> String {
    serde_json::json!({ "chars": text.chars().count(), "sha256": sha256(text) }).to_string() + "\n"
}

fn sha256(text: &str) -> String {
    format!("{:x}", Sha256::digest(text.as_bytes()))
}

/// Size and SHA-256 of a file.
fn digest(path: &Path) -> Result<FileDigest, RunError> {
    let bytes = fs::read(path).map_err(io(path))?;
    Ok(FileDigest {
        bytes: bytes.len() as u64,
        sha256: format!("{:x}", Sha256::digest(&bytes)),
    })
}

/// Paths inside a run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// The folder.
    pub root: PathBuf,
}

impl RunDir {
    /// Creates a new, empty run directory; an existing one is an error unless `force`.
    pub fn create(root: &Path, force: bool) -> Result<Self, RunError> {
        if root.exists() {
            if !force {
                return Err(RunError::Exists(root.to_path_buf()));
            }
            fs::remove_dir_all(root).map_err(io(root))?;
        }
        fs::create_dir_all(root).map_err(io(root))?;
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// Creates a run directory holding `config` and `tokenizer`, atomically: it is assembled
    /// under a temporary name beside `root` and renamed into place, so a crash never leaves a
    /// run directory without its config or tokenizer. An existing `root` is an error unless
    /// `force`, which replaces it. `text`, the training text, is recorded in `data.json`
    /// (an imported model has none).
    pub fn create_with(
        root: &Path,
        force: bool,
        config: &RunConfig,
        tokenizer: &Tokenizer,
        text: Option<&str>,
    ) -> Result<Self, RunError> {
        if root.exists() && !force {
            return Err(RunError::Exists(root.to_path_buf()));
        }
        let toml = config.to_toml_string()?;
        let parent = parent_of(root);
        fs::create_dir_all(&parent).map_err(io(&parent))?;
        let tmp = sibling(root, "creating");
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
        }
        fs::create_dir(&tmp).map_err(io(&tmp))?;
        let staged = Self { root: tmp.clone() };
        let written = (|| {
            fs::write(staged.config_path(), toml).map_err(io(&staged.config_path()))?;
            if let Some(text) = text {
                let data_path = staged.root.join(DATA_FILE);
                fs::write(&data_path, data_record(text)).map_err(io(&data_path))?;
            }
            tokenizer.save(staged.tokenizer_path())?;
            sync(&staged.config_path())?;
            sync(&staged.tokenizer_path())?;
            if root.exists() {
                fs::remove_dir_all(root).map_err(io(root))?;
            }
            fs::rename(&tmp, root).map_err(io(root))
        })();
        if let Err(e) = written {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e);
        }
        sync_dir(&parent);
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// Opens an existing run directory, checking it has a config and a tokenizer.
    pub fn open(root: &Path) -> Result<Self, RunError> {
        let run = Self {
            root: root.to_path_buf(),
        };
        if root.is_file() {
            let folder = root
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or("the run folder".into(), |p| p.display().to_string());
            return Err(RunError::NotARun {
                path: root.to_path_buf(),
                why: format!(
                    "it is a file; give the run folder that `headlab train` wrote (here \
                     perhaps {folder})"
                ),
            });
        }
        if !root.is_dir() {
            return Err(RunError::NotARun {
                path: root.to_path_buf(),
                why: "no such directory (give the folder `headlab train` wrote, e.g. \
                      runs/default)"
                    .into(),
            });
        }
        // `RUN/last` or `RUN/best`: a checkpoint, not a run.
        if root.join(MANIFEST).is_file()
            && let Some(parent) = root.parent().filter(|p| p.join("config.toml").is_file())
        {
            let name = root
                .file_name()
                .map_or("last".into(), |n| n.to_string_lossy());
            return Err(RunError::NotARun {
                path: root.to_path_buf(),
                why: format!(
                    "it is a checkpoint folder of the run {0}; give the run and pick the \
                     checkpoint: {0} --checkpoint {name}",
                    parent.display()
                ),
            });
        }
        for (file, what) in [
            (run.config_path(), "config.toml"),
            (run.tokenizer_path(), "tokenizer.json"),
        ] {
            if !file.is_file() {
                return Err(RunError::NotARun {
                    path: root.to_path_buf(),
                    why: format!("{what} is missing (was it made by `headlab train`?)"),
                });
            }
        }
        Ok(run)
    }

    /// Errors when `text` (described by `what`) is not the text the run was trained on.
    /// Runs made before `data.json` existed are not checked.
    pub fn check_data(&self, text: &str, what: &str) -> Result<(), RunError> {
        let path = self.root.join(DATA_FILE);
        let Ok(recorded) = fs::read_to_string(&path) else {
            return Ok(());
        };
        let recorded: serde_json::Value =
            serde_json::from_str(&recorded).map_err(|e| RunError::State {
                path: path.clone(),
                message: e.to_string(),
            })?;
        let (recorded, now) = (
            recorded["sha256"].as_str().unwrap_or_default(),
            sha256(text),
        );
        if recorded == now {
            return Ok(());
        }
        Err(RunError::DataChanged {
            run: self.root.clone(),
            what: what.to_string(),
            recorded: recorded.to_string(),
            now,
        })
    }

    /// Records `text` in `data.json` as the run's own, after a resume chose a new one.
    pub fn record_data(&self, text: &str) -> Result<(), RunError> {
        write_atomic(&self.root.join(DATA_FILE), data_record(text).as_bytes())
    }

    /// `config.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.toml")
    }
    /// `tokenizer.json`.
    pub fn tokenizer_path(&self) -> PathBuf {
        self.root.join("tokenizer.json")
    }
    /// `metrics.csv`.
    pub fn metrics_path(&self) -> PathBuf {
        self.root.join("metrics.csv")
    }
    /// `loss.png`.
    pub fn loss_png(&self) -> PathBuf {
        self.root.join("loss.png")
    }
    /// A checkpoint folder: `last` or `best`.
    pub fn checkpoint(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// The saved config.
    pub fn config(&self) -> Result<RunConfig, RunError> {
        Ok(RunConfig::load(self.config_path())?)
    }

    /// Replaces the saved config, atomically.
    pub fn save_config(&self, config: &RunConfig) -> Result<(), RunError> {
        write_atomic(&self.config_path(), config.to_toml_string()?.as_bytes())
    }

    /// Notes in `config.toml`'s first line that `size` MPI ranks train the run from step
    /// `step` (a comment: the config's numbers do not depend on it, and any size may resume).
    pub fn note_world_size(&self, size: usize, step: usize) -> Result<(), RunError> {
        let path = self.config_path();
        let text = fs::read_to_string(&path).map_err(|source| RunError::Io {
            path: path.clone(),
            source,
        })?;
        let body = match text.strip_prefix(WORLD_NOTE) {
            Some(rest) => rest.split_once('\n').map_or("", |(_, body)| body),
            None => &text,
        };
        let note = format!("{WORLD_NOTE}{size} MPI ranks from step {step}\n");
        write_atomic(&path, (note + body).as_bytes())
    }

    /// Writes `result.json`, atomically.
    pub fn write_result(&self, result: &RunResult) -> Result<(), RunError> {
        let json = serde_json::to_string_pretty(result).expect("result serialises") + "\n";
        write_atomic(&self.root.join(RESULT_FILE), json.as_bytes())
    }

    /// `result.json`, which a run writes once it has trained to its last step; `None` before.
    pub fn result(&self) -> Result<Option<RunResult>, RunError> {
        let path = self.root.join(RESULT_FILE);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(RunError::Io { path, source }),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| RunError::NotARun {
                path: self.root.clone(),
                why: format!("its {RESULT_FILE} does not parse ({e})"),
            })
    }

    /// The saved tokenizer.
    pub fn tokenizer(&self) -> Result<Tokenizer, RunError> {
        Ok(Tokenizer::load(self.tokenizer_path())?)
    }

    /// Writes model, optimizer, state and manifest as checkpoint `name`, atomically.
    pub fn save_checkpoint(
        &self,
        name: &str,
        model: &Gpt,
        optim: &Optimizer,
        state: &TrainState,
        trained_on: &TrainedOn,
    ) -> Result<(), RunError> {
        let tmp = self.root.join(format!(".{name}.tmp"));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
        }
        // Not `create_dir_all`: a run folder removed under the run stays removed.
        fs::create_dir(&tmp).map_err(io(&tmp))?;
        let written = write_checkpoint_files(&tmp, model, optim, state, trained_on);
        if written.is_err() {
            // A full disk must not keep the partial files: they hold the space it needs.
            let _ = fs::remove_dir_all(&tmp);
        }
        written?;
        pause_point(name, "written", state.step);
        crate::stop::test_point(format_args!("{name}:written@{}", state.step));

        let target = self.checkpoint(name);
        let old = self.root.join(format!(".{name}.old"));
        if target.exists() {
            if old.exists() {
                fs::remove_dir_all(&old).map_err(io(&old))?;
            }
            fs::rename(&target, &old).map_err(io(&target))?;
            sync_dir(&self.root);
            pause_point(name, "swapped", state.step);
        }
        fs::rename(&tmp, &target).map_err(io(&tmp))?;
        sync_dir(&self.root);
        if old.exists() {
            fs::remove_dir_all(&old).map_err(io(&old))?;
        }
        Ok(())
    }

    /// The folder of checkpoint `name`, or the previous one if a crash interrupted the swap.
    /// Only complete checkpoints are ever renamed to these names.
    fn checkpoint_dir(&self, name: &str) -> Result<PathBuf, RunError> {
        let target = self.checkpoint(name);
        let old = self.root.join(format!(".{name}.old"));
        if target.is_dir() {
            Ok(target)
        } else if old.is_dir() {
            Ok(old)
        } else {
            Err(RunError::NotARun {
                path: self.root.clone(),
                why: format!("it has no `{name}` checkpoint"),
            })
        }
    }

    /// The step of the `last` checkpoint, as its `state.json` says: where a stopped run
    /// stopped (its evaluations may end earlier). `None` when there is no readable one.
    pub fn last_step(&self) -> Option<usize> {
        self.checkpoint_state("last").map(|s| s.step)
    }

    /// The `state.json` of checkpoint `name`, `None` when there is no readable one.
    pub fn checkpoint_state(&self, name: &str) -> Option<TrainState> {
        let dir = self.checkpoint_dir(name).ok()?;
        let text = fs::read_to_string(dir.join("state.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Whether the run was made by `headlab import` (its weights came from elsewhere; until a
    /// `--resume` gives it `data.path`, it has no text).
    pub fn is_imported(&self) -> bool {
        self.root.join(IMPORT_FILE).is_file()
    }

    /// Another process training this run now, if any ([`mark_holder`]).
    pub fn training_pid(&self) -> Option<Holder> {
        mark_holder(&self.root)
    }

    /// Whether checkpoint `name` exists.
    pub fn has_checkpoint(&self, name: &str) -> bool {
        self.checkpoint_dir(name).is_ok()
    }

    /// Checks every file of checkpoint `name` against its manifest, returning the folder and
    /// the manifest.
    pub fn verify_checkpoint(&self, name: &str) -> Result<(PathBuf, Manifest), RunError> {
        let dir = self.checkpoint_dir(name)?;
        let manifest_path = dir.join(MANIFEST);
        let bad = |why: String| RunError::Manifest {
            dir: dir.clone(),
            why,
        };
        let text = match fs::read_to_string(&manifest_path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(bad("is missing".into()));
            }
            Err(e) => return Err(bad(format!("cannot be read ({e})"))),
        };
        let manifest: Manifest =
            serde_json::from_str(&text).map_err(|e| bad(format!("is not valid ({e})")))?;
        for file in CHECKPOINT_FILES {
            let path = dir.join(file);
            let Some(expected) = manifest.files.get(file) else {
                return Err(bad(format!("does not list {file}")));
            };
            let corrupt = |why: String| RunError::Corrupt {
                file: path.clone(),
                manifest: manifest_path.clone(),
                why,
            };
            let found = match digest(&path) {
                Ok(found) => found,
                Err(RunError::Io { source, .. }) => {
                    return Err(corrupt(format!("it cannot be read ({source})")));
                }
                Err(e) => return Err(e),
            };
            if found.bytes != expected.bytes {
                return Err(corrupt(format!(
                    "it has {} bytes where {} were written",
                    found.bytes, expected.bytes
                )));
            }
            if found.sha256 != expected.sha256 {
                return Err(corrupt(format!(
                    "its SHA-256 is {} where {} was recorded",
                    found.sha256, expected.sha256
                )));
            }
        }
        Ok((dir, manifest))
    }

    /// Errors unless checkpoint `name` was saved by a model built from `config`.
    fn check_model_config(
        &self,
        dir: &Path,
        manifest: &Manifest,
        config: &GptConfig,
    ) -> Result<(), RunError> {
        let now = serde_json::to_value(config).expect("model config serialises");
        let diffs = config_diffs(&manifest.model, &now);
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(RunError::ConfigMismatch {
                dir: dir.to_path_buf(),
                config: self.config_path(),
                diffs,
            })
        }
    }

    /// Loads checkpoint `name` into a model built from `config` on `device`, after verifying
    /// its checksums and that it was saved from the same model config.
    pub fn load_model(
        &self,
        name: &str,
        config: &GptConfig,
        device: &Device,
    ) -> Result<(Gpt, TrainState), RunError> {
        let (dir, manifest) = self.verify_checkpoint(name)?;
        self.check_model_config(&dir, &manifest, config)?;
        let state_path = dir.join("state.json");
        let text = fs::read_to_string(&state_path).map_err(io(&state_path))?;
        let state: TrainState = serde_json::from_str(&text).map_err(|e| RunError::State {
            path: state_path.clone(),
            message: e.to_string(),
        })?;
        let model = Gpt::new(config, device).map_err(|e| RunError::NotARun {
            path: self.root.clone(),
            why: format!("its config.toml does not build a model: {e}"),
        })?;
        let model = model.load_weights(&dir.join("model.bpk"))?;
        Ok((model, state))
    }

    /// Loads the optimizer state of checkpoint `name`, after verifying its checksums.
    pub fn load_optim(
        &self,
        name: &str,
        config: OptimizerConfig,
        device: &Device,
    ) -> Result<Optimizer, RunError> {
        let (dir, _) = self.verify_checkpoint(name)?;
        Ok(Optimizer::load(
            config,
            &dir.join("optim.safetensors"),
            device,
        )?)
    }
}

/// The model keys whose values differ between a saved and a current `GptConfig` (as JSON),
/// with defaults made explicit. Dropout is left out: it changes no weight.
fn config_diffs(
    saved: &serde_json::Value,
    now: &serde_json::Value,
) -> Vec<(String, String, String)> {
    let effective = |v: &serde_json::Value| -> BTreeMap<String, serde_json::Value> {
        let mut map: BTreeMap<String, serde_json::Value> = v
            .as_object()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let get = |map: &BTreeMap<String, serde_json::Value>, k: &str| {
            map.get(k).and_then(|v| v.as_u64())
        };
        if map.get("n_kv_heads").is_none_or(|v| v.is_null())
            && let Some(h) = get(&map, "n_heads")
        {
            map.insert("n_kv_heads".into(), h.into());
        }
        if map.get("d_ff").is_none_or(|v| v.is_null())
            && let Some(d) = get(&map, "d_model")
        {
            map.insert("d_ff".into(), (4 * d).into());
        }
        map.remove("dropout");
        map
    };
    // A default left unset on both sides follows the key it derives from, which is listed.
    let unset = |v: &serde_json::Value, k: &str| v.get(k).is_none_or(|v| v.is_null());
    let implied: Vec<&str> = ["n_kv_heads", "d_ff"]
        .into_iter()
        .filter(|k| unset(saved, k) && unset(now, k))
        .collect();
    let (saved, now) = (effective(saved), effective(now));
    let keys: std::collections::BTreeSet<&String> = saved.keys().chain(now.keys()).collect();
    let show = |v: Option<&serde_json::Value>| v.map_or("unset".to_string(), |v| v.to_string());
    keys.into_iter()
        .filter(|k| saved.get(*k) != now.get(*k) && !implied.contains(&k.as_str()))
        .map(|k| {
            let key = if k == "vocab_size" {
                "the vocabulary size (tokenizer.json)".to_string()
            } else {
                format!("model.{k}")
            };
            (key, show(saved.get(k)), show(now.get(k)))
        })
        .collect()
}

/// Why a trained run could not be opened.
#[derive(Debug, Error)]
pub enum OpenError {
    /// The run directory, its config or its tokenizer.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The backend.
    #[error(transparent)]
    Backend(#[from] headlab_kernels::BackendError),
    /// The checkpoint.
    #[error("loading the {name} checkpoint of {}: {source}", dir.display())]
    Checkpoint {
        /// `best` or `last`.
        name: String,
        /// The run.
        dir: PathBuf,
        /// What went wrong (boxed: a `RunError` is large).
        source: Box<RunError>,
    },
}

/// Opens the run in `dir` and loads its checkpoint `name` on `backend` (`None`: the run's own
/// `train.backend`): what every command and lab that reads a trained run starts from. The
/// run's files are checked before a backend starts.
pub fn open_trained(
    dir: &Path,
    backend: Option<headlab_kernels::BackendKind>,
    name: &str,
) -> Result<(RunDir, Trained, Device), OpenError> {
    let run = RunDir::open(dir)?;
    let config = run.config()?;
    let tokenizer = run.tokenizer()?;
    let backend = match backend {
        Some(backend) => backend,
        None => config.train.backend.parse()?,
    };
    let device = backend.device()?;
    let gpt = config.model.clone().with_vocab_size(tokenizer.vocab_size());
    // A run stopped between evaluations has a `best` older than its `last`, perhaps from
    // step 0: say which model answers.
    if name == "best"
        && let (Some(best), Some(last)) =
            (run.checkpoint_state("best"), run.checkpoint_state("last"))
        && last.step > best.step
    {
        let loss = best
            .best_val_loss
            .map_or(String::new(), |l| format!(", val loss {l:.4}"));
        crate::log_line!(
            "note: using checkpoint best (step {}{loss}); the run's last checkpoint is at \
             step {}: --checkpoint last uses it",
            best.step,
            last.step
        );
    }
    let (model, _) =
        run.load_model(name, &gpt, &device)
            .map_err(|source| OpenError::Checkpoint {
                name: name.to_string(),
                dir: dir.to_path_buf(),
                source: Box::new(source),
            })?;
    let trained = Trained {
        config,
        tokenizer,
        model,
    };
    Ok((run, trained, device))
}

/// The checkpoint a damaged one's error points to: `best` for `last`, `last` otherwise.
fn other_checkpoint(dir: &Path) -> &'static str {
    if dir.file_name().is_some_and(|n| n == "last") {
        "best"
    } else {
        "last"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Of many takers of one mark at the same instant, exactly one gets it and the others
    /// are refused naming its holder; once it is dropped the mark is gone and can be taken
    /// again; a mark file left by a killed process (no lock) is taken over. (Writing the
    /// process id with `fs::write`, as the mark was made before, let every taker through.)
    #[test]
    fn one_taker_of_a_mark_wins_and_the_others_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        for _ in 0..20 {
            let barrier = std::sync::Barrier::new(8);
            let results: Vec<Result<TrainingMark, RunError>> = std::thread::scope(|s| {
                let takers: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            mark_training(&dir)
                        })
                    })
                    .collect();
                takers.into_iter().map(|t| t.join().unwrap()).collect()
            });
            let won = results.iter().filter(|r| r.is_ok()).count();
            assert_eq!(won, 1, "{results:?}");
            for r in &results {
                if let Err(e) = r {
                    assert!(
                        matches!(e, RunError::InUse { pid: Some(p), .. } if *p == std::process::id()),
                        "{e}"
                    );
                }
            }
            // This process's own mark is no other process's.
            assert_eq!(mark_holder(&dir), None);
            drop(results);
            assert!(!mark_path(&dir).exists());
            assert_eq!(mark_holder(&dir), None);
        }
        // Left by a process that is gone: the file holds an id, no lock.
        fs::write(mark_path(&dir), "4194304\n").unwrap();
        assert_eq!(mark_holder(&dir), None);
        let mark = mark_training(&dir).unwrap();
        assert_eq!(
            fs::read_to_string(mark.path()).unwrap(),
            format!("{}\n", std::process::id())
        );
    }

    #[test]
    fn config_diffs_name_keys_and_apply_defaults() {
        let saved = json!({"vocab_size": 26, "d_model": 32, "n_heads": 2, "n_kv_heads": null,
                           "d_ff": null, "dropout": 0.0});
        let same = json!({"vocab_size": 26, "d_model": 32, "n_heads": 2, "n_kv_heads": 2,
                          "d_ff": 128, "dropout": 0.2});
        assert!(config_diffs(&saved, &same).is_empty());
        let other = json!({"vocab_size": 27, "d_model": 64, "n_heads": 2, "n_kv_heads": null,
                           "d_ff": null, "dropout": 0.0});
        let diffs = config_diffs(&saved, &other);
        let keys: Vec<&str> = diffs.iter().map(|d| d.0.as_str()).collect();
        // d_ff is unset on both sides: its change follows d_model's.
        assert_eq!(
            keys,
            ["model.d_model", "the vocabulary size (tokenizer.json)"]
        );
        assert_eq!(diffs[0], ("model.d_model".into(), "32".into(), "64".into()));
        let explicit = json!({"vocab_size": 26, "d_model": 32, "n_heads": 2, "n_kv_heads": 1,
                              "d_ff": 128, "dropout": 0.0});
        let keys: Vec<String> = config_diffs(&saved, &explicit)
            .into_iter()
            .map(|d| d.0)
            .collect();
        assert_eq!(keys, ["model.n_kv_heads"]);
        let msg = describe_diffs(&diffs[..1]);
        assert_eq!(
            msg,
            "model.d_model is 32 in the checkpoint but 64 in the config"
        );
    }

    #[test]
    fn write_atomic_replaces_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f.txt"]);
    }
}

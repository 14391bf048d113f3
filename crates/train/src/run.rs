//! A run directory: resolved config, tokenizer, metrics, plots and checkpoints.
//!
//! ```text
//! RUN/
//!   config.toml      the resolved config (every key, after --set)
//!   tokenizer.json   the vocabulary the checkpoints were trained with
//!   metrics.csv      step,split,loss,lr,tokens_per_s,elapsed_s
//!   loss.png         train and val curves
//!   last/            newest checkpoint: model.bpk, optim.safetensors, state.json
//!   best/            checkpoint with the lowest val loss so far
//! ```
//!
//! A checkpoint is written into a temporary folder and renamed into place, so a crash
//! leaves either the old checkpoint or the new one, never half of one.

use std::fs;
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use headlab_model::{Gpt, GptConfig, WeightsError};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::config::{ConfigError, RunConfig};
use crate::optim::{AdamW, AdamWConfig, OptimStateError};
use crate::tokenizer::{Tokenizer, TokenizerError};

/// Progress saved with every checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Iterations completed; training resumes at this iteration.
    pub step: usize,
    /// Lowest val loss seen at an evaluation, if any.
    pub best_val_loss: Option<f64>,
    /// Wall time spent training before this checkpoint, in seconds.
    pub elapsed_s: f64,
}

/// A run directory that cannot be used.
#[derive(Debug, Error)]
pub enum RunError {
    /// `--out` names a folder that exists.
    #[error(
        "run directory {0} already exists; choose another --out, or pass --force to \
         overwrite it, or --resume {0} to continue it"
    )]
    Exists(PathBuf),
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
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Paths inside a run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// The folder.
    pub root: PathBuf,
}

impl RunDir {
    /// Creates a new run directory; an existing one is an error unless `force`.
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

    /// Opens an existing run directory, checking it has a config and a tokenizer.
    pub fn open(root: &Path) -> Result<Self, RunError> {
        let run = Self {
            root: root.to_path_buf(),
        };
        if !root.is_dir() {
            return Err(RunError::NotARun {
                path: root.to_path_buf(),
                why: "no such directory".into(),
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

    /// The saved tokenizer.
    pub fn tokenizer(&self) -> Result<Tokenizer, RunError> {
        Ok(Tokenizer::load(self.tokenizer_path())?)
    }

    /// Writes model, optimizer and state as checkpoint `name`, atomically.
    pub fn save_checkpoint(
        &self,
        name: &str,
        model: &Gpt,
        optim: &AdamW,
        state: &TrainState,
    ) -> Result<(), RunError> {
        let tmp = self.root.join(format!(".{name}.tmp"));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
        }
        fs::create_dir_all(&tmp).map_err(io(&tmp))?;
        model.save_weights(&tmp.join("model.bpk"))?;
        optim.save(&tmp.join("optim.safetensors"))?;
        let state_path = tmp.join("state.json");
        let json = serde_json::to_string_pretty(state).expect("state serialises");
        fs::write(&state_path, json).map_err(io(&state_path))?;
        for file in ["model.bpk", "optim.safetensors", "state.json"] {
            let path = tmp.join(file);
            fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(io(&path))?;
        }
        let target = self.checkpoint(name);
        let old = self.root.join(format!(".{name}.old"));
        if target.exists() {
            if old.exists() {
                fs::remove_dir_all(&old).map_err(io(&old))?;
            }
            fs::rename(&target, &old).map_err(io(&target))?;
        }
        fs::rename(&tmp, &target).map_err(io(&tmp))?;
        if old.exists() {
            fs::remove_dir_all(&old).map_err(io(&old))?;
        }
        Ok(())
    }

    /// The folder of checkpoint `name`, or the previous one if a crash interrupted the swap.
    fn checkpoint_dir(&self, name: &str) -> Result<PathBuf, RunError> {
        let target = self.checkpoint(name);
        let old = self.root.join(format!(".{name}.old"));
        if target.join("state.json").is_file() {
            Ok(target)
        } else if old.join("state.json").is_file() {
            Ok(old)
        } else {
            Err(RunError::NotARun {
                path: self.root.clone(),
                why: format!("it has no `{name}` checkpoint"),
            })
        }
    }

    /// Whether checkpoint `name` exists.
    pub fn has_checkpoint(&self, name: &str) -> bool {
        self.checkpoint_dir(name).is_ok()
    }

    /// Loads checkpoint `name` into a model built from `config` on `device`.
    pub fn load_model(
        &self,
        name: &str,
        config: &GptConfig,
        device: &Device,
    ) -> Result<(Gpt, TrainState), RunError> {
        let dir = self.checkpoint_dir(name)?;
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

    /// Loads the optimizer state of checkpoint `name`.
    pub fn load_optim(
        &self,
        name: &str,
        config: AdamWConfig,
        device: &Device,
    ) -> Result<AdamW, RunError> {
        let dir = self.checkpoint_dir(name)?;
        Ok(AdamW::load(config, &dir.join("optim.safetensors"), device)?)
    }
}

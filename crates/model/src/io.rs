//! Saving and loading weights, in Burn's native burnpack format or in safetensors.
//!
//! Tensor names are the module paths (`blocks.0.attn.q_proj.weight`), the same in both
//! formats, so a safetensors file reads naturally from Python.

use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::store::{ApplyError, ApplyResult, BurnpackStore, ModuleSnapshot, SafetensorsStore};
use burn::tensor::{Bool, Int, Tensor};
use thiserror::Error;

use crate::gpt::Gpt;

/// File format of a weights file, chosen by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightsFormat {
    /// Burn's native format (`.bpk`).
    Burnpack,
    /// safetensors (`.safetensors`).
    Safetensors,
}

impl WeightsFormat {
    /// `.safetensors` is safetensors; anything else is burnpack.
    pub fn of(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("safetensors") => Self::Safetensors,
            _ => Self::Burnpack,
        }
    }
}

/// A weights file that could not be written or applied.
#[derive(Debug, Error)]
pub enum WeightsError {
    /// Writing failed.
    #[error("cannot write weights to {path}: {message}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What the store said.
        message: String,
    },
    /// The file is missing, truncated or not a weights file.
    #[error("cannot read weights from {path}: {message} (is it a complete {format:?} file?)")]
    Read {
        /// The file.
        path: PathBuf,
        /// Its expected format.
        format: WeightsFormat,
        /// What the store said.
        message: String,
    },
    /// A tensor exists in both but with different shapes.
    #[error(
        "weights in {path} do not fit this model: tensor {tensor} has shape {found:?} in the \
         file but {expected:?} in the model; load them with the config they were saved with"
    )]
    ShapeMismatch {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// Shape in the model.
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
    /// Tensors missing from the file, or extra in it.
    #[error(
        "weights in {path} do not fit this model: missing {missing:?}, unexpected {unused:?}; \
         load them with the config they were saved with"
    )]
    Layout {
        /// The file.
        path: PathBuf,
        /// Needed by the model, absent in the file.
        missing: Vec<String>,
        /// In the file, unknown to the model.
        unused: Vec<String>,
    },
    /// Any other per-tensor failure.
    #[error("weights in {path}: {message}")]
    Apply {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// Gives every parameter the id of its path in the model (`blocks.0.attn.c_attn.weight`),
/// FNV-1a hashed: the same model gets the same ids in every process.
#[derive(Default)]
struct NamedIds {
    path: Vec<String>,
}

impl NamedIds {
    fn id(&self) -> ParamId {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.path.join(".").bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        ParamId::from(h)
    }
}

impl ModuleMapper for NamedIds {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, mut param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        param.id = self.id();
        param
    }

    fn map_int<const D: usize>(
        &mut self,
        mut param: Param<Tensor<D, Int>>,
    ) -> Param<Tensor<D, Int>> {
        param.id = self.id();
        param
    }

    fn map_bool<const D: usize>(
        &mut self,
        mut param: Param<Tensor<D, Bool>>,
    ) -> Param<Tensor<D, Bool>> {
        param.id = self.id();
        param
    }
}

impl Gpt {
    /// Writes the weights to `path` (format from the extension), replacing any file there.
    pub fn save_weights(&self, path: &Path) -> Result<(), WeightsError> {
        let write_err = |message: String| WeightsError::Write {
            path: path.to_path_buf(),
            message,
        };
        // Burnpack keeps each parameter's id, which Burn draws at random: ids from the
        // parameters' names make one model's file the same bytes wherever it is saved.
        let named = self.clone().map(&mut NamedIds::default());
        match WeightsFormat::of(path) {
            WeightsFormat::Burnpack => named
                .save_into(&mut BurnpackStore::from_file(path).overwrite(true))
                .map_err(|e| write_err(e.to_string())),
            WeightsFormat::Safetensors => self
                .save_into(&mut SafetensorsStore::from_file(path).overwrite(true))
                .map_err(|e| write_err(e.to_string())),
        }
    }

    /// Loads weights saved by [`save_weights`](Self::save_weights) into this model, which
    /// must have been built with the same config.
    pub fn load_weights(mut self, path: &Path) -> Result<Self, WeightsError> {
        let format = WeightsFormat::of(path);
        let read_err = |message: String| WeightsError::Read {
            path: path.to_path_buf(),
            format,
            message,
        };
        if !path.is_file() {
            return Err(read_err("no such file".into()));
        }
        let result = match format {
            WeightsFormat::Burnpack => {
                let mut store = BurnpackStore::from_file(path)
                    .validate(false)
                    .allow_partial(true);
                self.load_from(&mut store)
                    .map_err(|e| read_err(e.to_string()))?
            }
            WeightsFormat::Safetensors => {
                let mut store = SafetensorsStore::from_file(path)
                    .validate(false)
                    .allow_partial(true);
                self.load_from(&mut store)
                    .map_err(|e| read_err(e.to_string()))?
            }
        };
        check_applied(path, result)?;
        Ok(self)
    }
}

/// Turns an incomplete or mismatched load into an error naming the tensor.
fn check_applied(path: &Path, result: ApplyResult) -> Result<(), WeightsError> {
    if let Some(error) = result.errors.into_iter().next() {
        return Err(match error {
            ApplyError::ShapeMismatch {
                path: tensor,
                expected,
                found,
            } => WeightsError::ShapeMismatch {
                path: path.to_path_buf(),
                tensor,
                expected: expected.to_vec(),
                found: found.to_vec(),
            },
            other => WeightsError::Apply {
                path: path.to_path_buf(),
                message: format!("{other:?}"),
            },
        });
    }
    if !result.missing.is_empty() || !result.unused.is_empty() {
        return Err(WeightsError::Layout {
            path: path.to_path_buf(),
            missing: result.missing.into_iter().map(|(name, _)| name).collect(),
            unused: result.unused,
        });
    }
    Ok(())
}

//! The run configuration: a TOML file with `[model]`, `[train]` and `[data]` sections,
//! overridable key by key with `--set section.key=value`.
//!
//! Every key has a default, so a file only lists what differs; unknown keys are errors
//! (a typo must not silently train with the default). The resolved configuration is
//! written into each run directory so a run can be reproduced from it alone.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeOwned, Visitor};
use serde::{Deserialize, Serialize};

/// The `[data]` section, as the data crate defines it.
pub use headlab_data::{DataConfig, DataConfigError, DataSource};
/// The `[model]` section is the model's own config.
pub use headlab_model::{GptConfig, GptConfigError, Norm, Positional};

/// `[train]`. Defaults follow nanoGPT's CPU recipe for shakespeare_char.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Sequences per optimiser step (per micro-batch with `grad_accum`). Default 24.
    pub batch_size: usize,
    /// Optimiser steps. Default 2000.
    pub max_iters: usize,
    /// Peak learning rate after warm-up. Default 4e-3.
    pub lr: f64,
    /// Floor of the cosine decay. Default 2e-4.
    pub min_lr: f64,
    /// Linear warm-up steps. Default 50.
    pub warmup_iters: usize,
    /// Step at which the cosine decay reaches `min_lr`. Default: none, meaning `max_iters`.
    pub lr_decay_iters: Option<usize>,
    /// AdamW beta1. Default 0.9.
    pub beta1: f64,
    /// AdamW beta2; 0.99 suits small batches (nanoGPT). Default 0.99.
    pub beta2: f64,
    /// AdamW decoupled weight decay. Default 0.1.
    pub weight_decay: f64,
    /// Clip the global gradient norm to this; 0 turns clipping off. Default 1.0.
    pub grad_clip: f64,
    /// Micro-batches accumulated per step. Default 1.
    pub grad_accum: usize,
    /// Steps between evaluations of train/val loss. Default 500.
    pub eval_interval: usize,
    /// Batches averaged per evaluation. Default 20.
    pub eval_iters: usize,
    /// Steps between log lines. Default 10.
    pub log_interval: usize,
    /// Seed of initialisation, batch sampling and built-in corpora. Default 1337.
    pub seed: u64,
    /// Tokens sampled after training; 0 skips sampling. Default 300.
    pub sample_tokens: usize,
    /// Temperature of that sample (below 1 sharpens, as nanoGPT's `sample.py` samples at
    /// 0.8). Default 1.0.
    pub sample_temperature: f64,
    /// Record per-head attention statistics every this many steps; 0 is off. Default 100.
    pub track_heads_every: usize,
    /// On the built-in grammar corpus: sentences sampled at each evaluation and parsed, for
    /// the shares that are well-formed and that agree (`metrics.csv`); 0 is off. Default 200.
    pub grammar_sentences: usize,
    /// Compute backend name. Default `flex`.
    pub backend: String,
    /// What the linear layers' products take as operands: `f32`, or `bf16` (rounded to
    /// bfloat16 with f32 accumulation, on `vdpbf16ps`: flex on a CPU with AVX512-BF16).
    /// Weights, gradients, the optimizer's state, norms, softmax, attention and the loss stay
    /// f32 either way. Default `f32`.
    pub precision: Precision,
    /// `adamw` for every parameter, or `muon`: Muon for the matrices inside the blocks and
    /// AdamW for embeddings, head and gains (the modded-nanogpt speedrun). Default `adamw`.
    pub optimizer: OptimizerKind,
    /// Muon's peak rate; it follows the schedule as `lr` does. Default 0.02.
    pub muon_lr: f64,
    /// Muon's Nesterov momentum. Default 0.95.
    pub muon_momentum: f64,
    /// Decoupled weight decay of Muon's matrices: each step scales them by `1 - muon_lr_t *
    /// muon_weight_decay` before the update (`weight_decay` is AdamW's and reaches only the
    /// parameters AdamW updates). Default 0: off.
    pub muon_weight_decay: f64,
    /// The learning-rate schedule after warm-up: `cosine` decay to `min_lr` by
    /// `lr_decay_iters` (nanoGPT), or `wsd`, warmup-stable-decay: `lr` until the last
    /// `cooldown_fraction` of `max_iters`, then linearly down to `min_lr` (Hägele et al. 2024,
    /// "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations"; the
    /// modded-nanogpt speedrun). Default `cosine`.
    pub schedule: Schedule,
    /// Share of `max_iters` the `wsd` schedule spends decaying. Default 0.2.
    pub cooldown_fraction: f64,
    /// Tokens, from the start of the val split, whose loss a finished run measures in
    /// windows of `block_size` (`result.json`'s `val_full_loss`); 0 skips it. Default
    /// 1,000,000: the whole val split of every shipped config (tiny-shakespeare's has 111,540
    /// chars) in seconds, and a bounded wait on a large text.
    pub final_eval_tokens: usize,
}

/// `train.optimizer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// AdamW for every parameter.
    #[default]
    Adamw,
    /// Muon for the blocks' matrices, AdamW for the rest.
    Muon,
}

/// `train.precision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f32 products.
    #[default]
    F32,
    /// bf16 operands, f32 accumulation.
    Bf16,
}

impl Precision {
    /// The kernels' setting.
    pub fn kernels(self) -> headlab_kernels::Precision {
        match self {
            Precision::F32 => headlab_kernels::Precision::F32,
            Precision::Bf16 => headlab_kernels::Precision::Bf16,
        }
    }
}

/// `train.schedule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// Half-cosine decay to `min_lr` at `lr_decay_iters` (nanoGPT's `get_lr`).
    #[default]
    Cosine,
    /// Warmup, stable, then a linear cooldown over the last `cooldown_fraction` of the run.
    Wsd,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            batch_size: 24,
            max_iters: 2000,
            lr: 4e-3,
            min_lr: 2e-4,
            warmup_iters: 50,
            lr_decay_iters: None,
            beta1: 0.9,
            beta2: 0.99,
            weight_decay: 0.1,
            grad_clip: 1.0,
            grad_accum: 1,
            eval_interval: 500,
            eval_iters: 20,
            log_interval: 10,
            seed: 1337,
            sample_tokens: 300,
            sample_temperature: 1.0,
            track_heads_every: 100,
            grammar_sentences: 200,
            backend: "flex".to_string(),
            precision: Precision::F32,
            optimizer: OptimizerKind::Adamw,
            muon_lr: 0.02,
            muon_momentum: 0.95,
            muon_weight_decay: 0.0,
            schedule: Schedule::Cosine,
            cooldown_fraction: 0.2,
            final_eval_tokens: 1_000_000,
        }
    }
}

impl TrainConfig {
    /// `lr_decay_iters` after applying the default (`max_iters`).
    pub fn decay_iters(&self) -> usize {
        self.lr_decay_iters.unwrap_or(self.max_iters)
    }

    /// Settings that train but not as meant, one `warning:` line each. A warm-up as long as
    /// the run is warned about rather than refused: a quick `--set train.max_iters=20` on a
    /// recipe that warms up for 100 steps is a fair smoke test, only not a real run.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let default = TrainConfig::default();
        if self.warmup_iters >= self.max_iters {
            out.push(format!(
                "warning: train.warmup_iters = {} is not shorter than the run (train.max_iters = \
                 {}): the rate climbs towards train.lr = {} but ends at {:.2e}, never reaching \
                 it; set train.warmup_iters below {} (the default run warms up for {} of {} \
                 steps)",
                self.warmup_iters,
                self.max_iters,
                self.lr,
                self.lr_at(self.max_iters - 1),
                self.max_iters,
                default.warmup_iters,
                default.max_iters
            ));
        } else if self.schedule == Schedule::Cosine
            && let Some(decay) = self.lr_decay_iters
            && self.warmup_iters >= decay
        {
            out.push(format!(
                "warning: train.warmup_iters = {} is not shorter than train.lr_decay_iters = \
                 {decay}: the rate climbs to train.lr, then drops straight to train.min_lr with \
                 no decay between; set train.lr_decay_iters above {}",
                self.warmup_iters, self.warmup_iters
            ));
        }
        out
    }

    /// What a resume's `--set`s change besides the schedule ([`crate::schedule::schedule_move`]),
    /// as `warning:` lines: keys that change the batches drawn from `step` on (each step's
    /// batch comes from `(train.seed, step)` at the run's batch size, so the run will match no
    /// uninterrupted one), and warnings of [`TrainConfig::warnings`] the `--set`s brought.
    pub fn resume_warnings(&self, saved: &TrainConfig, step: usize) -> Vec<String> {
        let mut out = Vec::new();
        for (key, old, new) in [
            (
                "batch_size",
                saved.batch_size as u64,
                self.batch_size as u64,
            ),
            (
                "grad_accum",
                saved.grad_accum as u64,
                self.grad_accum as u64,
            ),
            ("seed", saved.seed, self.seed),
        ] {
            // At step 0 no batch has been drawn yet: nothing to match.
            if old != new && step > 0 {
                out.push(format!(
                    "warning: train.{key} is {new} (was {old}) from step {step} on: the batches \
                     drawn from here differ from an uninterrupted run's, so this run will match \
                     neither value trained throughout; resume without --set train.{key} to \
                     continue the run as it was"
                ));
            }
        }
        let before = saved.warnings();
        out.extend(self.warnings().into_iter().filter(|w| !before.contains(w)));
        out
    }
}

/// A whole run configuration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// `[model]`: the decoder's shape (`vocab_size` comes from the tokenizer).
    pub model: GptConfig,
    /// `[train]`: optimiser, schedule, evaluation, backend.
    pub train: TrainConfig,
    /// `[data]`: the text and its tokenizer.
    pub data: DataConfig,
}

/// Errors from reading, overriding or writing a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "cannot read config file {}: {source}; check the --config path (the shipped configs \
         are in configs/, e.g. configs/default.toml)",
        path.display()
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "invalid config {source_name}: {}{}",
        .source.to_string().trim_end(), hint_line(.hint)
    )]
    Parse {
        source_name: String,
        /// Boxed: toml's error is large and would bloat every `Result` here.
        source: Box<toml::de::Error>,
        hint: Option<String>,
    },
    #[error("--set {arg:?}: expected key=value, e.g. train.lr=3e-4")]
    SetSyntax { arg: String },
    #[error(
        "--set {arg:?}: keys are section.key, e.g. train.lr=3e-4{}",
        hint_suffix(.hint)
    )]
    SetBareKey { arg: String, hint: Option<String> },
    #[error("--set {arg:?}: unknown section {section:?}; valid sections: model, train, data")]
    SetUnknownSection { arg: String, section: String },
    #[error(
        "--set {arg:?}: unknown key {key:?} in [{section}]; valid keys: {}{}",
        .valid.join(", "), hint_suffix(.hint)
    )]
    SetUnknownKey {
        arg: String,
        section: String,
        key: String,
        valid: Vec<&'static str>,
        hint: Option<String>,
    },
    #[error("--set {arg:?}: wrong type for {key}: {message}{}", current_suffix(.current))]
    SetWrongType {
        arg: String,
        key: String,
        message: String,
        current: Option<String>,
    },
    #[error("cannot write the config as TOML: {0}")]
    Serialize(#[from] toml::ser::Error),
    #[error(transparent)]
    Invalid(#[from] ValidationError),
}

fn hint_suffix(hint: &Option<String>) -> String {
    hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
}

fn hint_line(hint: &Option<String>) -> String {
    hint.as_ref()
        .map(|h| format!("\nhint: {h}"))
        .unwrap_or_default()
}

fn current_suffix(current: &Option<String>) -> String {
    current
        .as_ref()
        .map(|c| format!(" (current value: {c})"))
        .unwrap_or_default()
}

/// A configuration that parses but cannot be trained. Every message starts with the
/// offending key and says how to fix it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValidationError {
    #[error("{field} is 0 but must be at least 1 (default {default})")]
    Zero {
        field: &'static str,
        /// The built-in default, or the key it follows.
        default: String,
    },
    #[error("{field} = {value} is out of range: it must be {expected}")]
    OutOfRange {
        field: &'static str,
        value: f64,
        expected: &'static str,
    },
    #[error(
        "train.min_lr = {min_lr} is above train.lr = {lr}; the schedule decays from lr down to \
         min_lr, so set train.min_lr to at most {lr} (typically lr / 10)"
    )]
    MinLrAboveLr { min_lr: f64, lr: f64 },
    #[error("train.precision = \"bf16\" {why}; leave it at \"f32\" (the default) here")]
    Bf16 { why: String },
    /// The `[model]` section.
    #[error(transparent)]
    Model(#[from] GptConfigError),
    /// The `[data]` section.
    #[error(transparent)]
    Data(#[from] DataConfigError),
}

/// Where a config file's relative `data.path` points: the folder headlab runs in first (as
/// `--set data.path=...` is read), then the config file's folder and each folder above it,
/// so `configs/x.toml` with `path = "datasets/..."` finds the repository's `datasets/`. The
/// first that holds the file wins; when none does, the path is left as written and the error
/// that reads it names it.
pub fn resolve_data_path(path: &Path, config_file: &Path, cwd: &Path) -> PathBuf {
    if path.is_absolute() || cwd.join(path).exists() {
        return path.to_path_buf();
    }
    let folder = cwd.join(config_file.parent().unwrap_or(Path::new("")));
    folder
        .ancestors()
        .map(|dir| dir.join(path))
        .find(|candidate| candidate.is_file())
        // Found through the config's folder, `cfg/../x.txt` is printed and saved as `x.txt`'s
        // own path.
        .map(|found| std::fs::canonicalize(&found).unwrap_or(found))
        .unwrap_or_else(|| path.to_path_buf())
}

impl RunConfig {
    /// Parses TOML; `source_name` (usually the file name) prefixes errors, which carry
    /// line and column from the TOML parser and, for misspelt keys, a suggestion.
    pub fn from_toml_str(s: &str, source_name: &str) -> Result<Self, ConfigError> {
        toml::from_str(s).map_err(|source: toml::de::Error| ConfigError::Parse {
            source_name: source_name.to_string(),
            hint: unknown_field_hint(source.message()),
            source: Box::new(source),
        })
    }

    /// Reads and parses a config file (not validated: apply `--set`s, then validate). A
    /// relative `data.path` is resolved by [`resolve_data_path`], so a shipped config finds
    /// its text from any folder of the repository.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config = Self::from_toml_str(&text, &path.display().to_string())?;
        if let (Some(data), Ok(cwd)) = (&config.data.path, std::env::current_dir()) {
            config.data.path = Some(resolve_data_path(data, path, &cwd));
        }
        Ok(config)
    }

    /// The configuration as TOML, for `config.toml` in a run directory. Unset optional
    /// keys are left out, which reads back as unset.
    pub fn to_toml_string(&self) -> Result<String, ConfigError> {
        Ok(toml::to_string_pretty(self)?)
    }

    /// Applies one `section.key=value` override. The value is read as a TOML value
    /// (`3e-4`, `true`, `"x"`) and otherwise as a bare string (`rope`, `data/x.txt`), then
    /// the whole config is deserialised again, so types are checked exactly as in files.
    /// Setting `data.path` unsets `data.builtin` and vice versa.
    pub fn apply_set(&mut self, assignment: &str) -> Result<(), ConfigError> {
        let arg = assignment.to_string();
        let (key, raw) = assignment
            .split_once('=')
            .ok_or_else(|| ConfigError::SetSyntax { arg: arg.clone() })?;
        let (key, raw) = (key.trim(), raw.trim());
        if key.is_empty() {
            return Err(ConfigError::SetSyntax { arg });
        }
        let Some((section, field)) = key.split_once('.') else {
            let hint = SECTIONS
                .iter()
                .find(|s| section_fields(s).is_some_and(|f| f.contains(&key)))
                .map(|s| format!("did you mean {s}.{key}?"));
            return Err(ConfigError::SetBareKey { arg, hint });
        };
        let valid = section_fields(section).ok_or_else(|| ConfigError::SetUnknownSection {
            arg: arg.clone(),
            section: section.to_string(),
        })?;
        if !valid.contains(&field) {
            return Err(ConfigError::SetUnknownKey {
                hint: closest(field, valid).map(|k| format!("did you mean {section}.{k}?")),
                arg,
                section: section.to_string(),
                key: field.to_string(),
                valid: valid.to_vec(),
            });
        }

        let mut root = toml::Value::try_from(&*self)?;
        let current = root
            .get(section)
            .and_then(|t| t.get(field))
            .map(|v| v.to_string());
        let parsed = parse_value(raw);
        let fallback = (!parsed.is_str()).then(|| toml::Value::String(raw.to_string()));
        let result = with_key(&mut root, section, field, parsed).try_into::<RunConfig>();
        let result = match (result, fallback) {
            // `data.path=2024.txt` or `data.path=1.5`: a value TOML reads as a number may
            // still be meant as a string.
            (Err(e), Some(s)) => with_key(&mut root, section, field, s)
                .try_into::<RunConfig>()
                .map_err(|_| e),
            (r, _) => r,
        };
        *self = result.map_err(|e| ConfigError::SetWrongType {
            arg,
            key: key.to_string(),
            message: e.message().to_string(),
            current,
        })?;
        Ok(())
    }

    /// Applies overrides in order, stopping at the first error.
    pub fn apply_sets<S: AsRef<str>>(&mut self, assignments: &[S]) -> Result<(), ConfigError> {
        assignments
            .iter()
            .try_for_each(|a| self.apply_set(a.as_ref()))
    }

    /// Checks everything that would otherwise fail (or silently misbehave) mid-run: each
    /// section with its own rules, then what spans sections.
    // Over 80 lines on purpose: one check per key in the order of the file, each a few lines.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let (m, t) = (&self.model, &self.train);
        if m.vocab_size != 0 {
            return Err(GptConfigError::VocabSizeInConfig(m.vocab_size).into());
        }
        m.validate_section()?;
        // The head probes need a token and two copies of at least one more.
        if t.track_heads_every > 0 && m.block_size < 3 {
            return Err(ValidationError::OutOfRange {
                field: "model.block_size",
                value: m.block_size as f64,
                expected: "at least 3 when train.track_heads_every > 0 (or set train.track_heads_every = 0)",
            });
        }
        t.validate()?;
        self.data.validate()?;
        Ok(())
    }
}

impl TrainConfig {
    /// Checks the `[train]` keys on their own.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let (t, d) = (self, TrainConfig::default());
        // The defaults quoted are the built-in ones, read from `TrainConfig::default`.
        let zero_checks: [(&'static str, Option<usize>, String); 7] = [
            (
                "train.batch_size",
                Some(t.batch_size),
                d.batch_size.to_string(),
            ),
            (
                "train.max_iters",
                Some(t.max_iters),
                d.max_iters.to_string(),
            ),
            (
                "train.lr_decay_iters",
                t.lr_decay_iters,
                "train.max_iters".into(),
            ),
            (
                "train.grad_accum",
                Some(t.grad_accum),
                d.grad_accum.to_string(),
            ),
            (
                "train.eval_interval",
                Some(t.eval_interval),
                d.eval_interval.to_string(),
            ),
            (
                "train.eval_iters",
                Some(t.eval_iters),
                d.eval_iters.to_string(),
            ),
            (
                "train.log_interval",
                Some(t.log_interval),
                d.log_interval.to_string(),
            ),
        ];
        for (field, value, default) in zero_checks {
            if value == Some(0) {
                return Err(ValidationError::Zero { field, default });
            }
        }
        let range_checks: [(&'static str, f64, bool, &'static str); 11] = [
            (
                "train.lr",
                t.lr,
                t.lr.is_finite() && t.lr > 0.0,
                "greater than 0 (e.g. 1e-3)",
            ),
            (
                "train.min_lr",
                t.min_lr,
                t.min_lr.is_finite() && t.min_lr >= 0.0,
                "at least 0 (e.g. train.lr / 10)",
            ),
            (
                "train.beta1",
                t.beta1,
                (0.0..1.0).contains(&t.beta1),
                "in [0, 1) (e.g. 0.9)",
            ),
            (
                "train.beta2",
                t.beta2,
                (0.0..1.0).contains(&t.beta2),
                "in [0, 1) (e.g. 0.99)",
            ),
            (
                "train.weight_decay",
                t.weight_decay,
                t.weight_decay.is_finite() && t.weight_decay >= 0.0,
                "at least 0 (e.g. 0.1)",
            ),
            (
                "train.grad_clip",
                t.grad_clip,
                t.grad_clip.is_finite() && t.grad_clip >= 0.0,
                "at least 0 (0 turns clipping off)",
            ),
            (
                "train.sample_temperature",
                t.sample_temperature,
                t.sample_temperature.is_finite() && t.sample_temperature > 0.0,
                "greater than 0 (e.g. 0.8)",
            ),
            (
                "train.muon_lr",
                t.muon_lr,
                t.muon_lr.is_finite() && t.muon_lr > 0.0,
                "greater than 0 (e.g. 0.02)",
            ),
            (
                "train.muon_momentum",
                t.muon_momentum,
                (0.0..1.0).contains(&t.muon_momentum),
                "in [0, 1) (e.g. 0.95)",
            ),
            (
                "train.muon_weight_decay",
                t.muon_weight_decay,
                t.muon_weight_decay.is_finite() && t.muon_weight_decay >= 0.0,
                "at least 0 (0 turns it off)",
            ),
            (
                "train.cooldown_fraction",
                t.cooldown_fraction,
                t.cooldown_fraction > 0.0 && t.cooldown_fraction <= 1.0,
                "in (0, 1] (e.g. 0.2)",
            ),
        ];
        for (field, value, ok, expected) in range_checks {
            if !ok {
                return Err(ValidationError::OutOfRange {
                    field,
                    value,
                    expected,
                });
            }
        }
        if t.min_lr > t.lr {
            return Err(ValidationError::MinLrAboveLr {
                min_lr: t.min_lr,
                lr: t.lr,
            });
        }
        // Only headlab's own kernels have the bf16 products; on another backend the key
        // would be silently ignored.
        if t.precision == Precision::Bf16 && t.backend != "flex" {
            return Err(ValidationError::Bf16 {
                why: format!(
                    "runs on headlab's kernels, train.backend = \"flex\", not \"{}\"",
                    t.backend
                ),
            });
        }
        Ok(())
    }

    /// Refuses `bf16` on a CPU without the instructions it runs on: a plain loop would
    /// compute the same numbers several times slower than f32.
    pub fn check_precision_here(&self) -> Result<(), ValidationError> {
        if self.precision == Precision::Bf16 && !headlab_kernels::bf16::supported() {
            return Err(ValidationError::Bf16 {
                why: "needs AVX512-BF16 (vdpbf16ps), which this CPU lacks (Zen 4 and later, \
                      Intel Sapphire Rapids and later have it)"
                    .into(),
            });
        }
        Ok(())
    }
}

const SECTIONS: [&str; 3] = ["model", "train", "data"];

/// The keys of a section, read from the serde derive so they never drift from the types.
pub fn section_fields(section: &str) -> Option<&'static [&'static str]> {
    match section {
        "model" => Some(model_fields()),
        "train" => Some(struct_fields::<TrainConfig>()),
        "data" => Some(struct_fields::<DataConfig>()),
        _ => None,
    }
}

/// The `[model]` keys: the model config's fields but `vocab_size`, which the tokenizer sets.
fn model_fields() -> &'static [&'static str] {
    static FIELDS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    FIELDS.get_or_init(|| {
        struct_fields::<GptConfig>()
            .iter()
            .copied()
            .filter(|&f| f != "vocab_size")
            .collect()
    })
}

/// Parses `raw` as a TOML value, or takes it as a string when it is not one (bare words
/// like `rope` or paths).
fn parse_value(raw: &str) -> toml::Value {
    match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) if t.len() == 1 => t.remove("v").unwrap_or(toml::Value::String(raw.into())),
        _ => toml::Value::String(raw.to_string()),
    }
}

/// Sets `root[section][field] = value`; setting one data source removes the other.
fn with_key(root: &mut toml::Value, section: &str, field: &str, value: toml::Value) -> toml::Value {
    if let Some(table) = root.get_mut(section).and_then(|t| t.as_table_mut()) {
        table.insert(field.to_string(), value);
        let other_source = match (section, field) {
            ("data", "path") => Some("builtin"),
            ("data", "builtin") => Some("path"),
            _ => None,
        };
        if let Some(other) = other_source {
            table.remove(other);
        }
    }
    root.clone()
}

/// "did you mean" for serde's "unknown field `x`, expected one of `a`, `b`" messages.
fn unknown_field_hint(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let candidates: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    closest(unknown, &candidates).map(|c| format!("did you mean `{c}`?"))
}

/// The candidate within edit distance 2 (or a third of the word) of `word`, if any.
fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(2);
    candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Field names of a `#[derive(Deserialize)]` struct: serde hands them to
/// `deserialize_struct`, which this deserializer records and then bails out of.
fn struct_fields<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldNames(&mut fields));
    fields
}

struct FieldNames<'a>(&'a mut &'static [&'static str]);

#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field names recorded")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Stop
    }
}

impl<'de> de::Deserializer<'de> for FieldNames<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        *self.0 = fields;
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use headlab_data::{BuiltinCorpus, TokenizerKind};

    use super::*;

    fn configs_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs")
    }

    #[test]
    fn a_relative_data_path_is_found_from_the_run_folder_then_beside_the_config_and_above() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let data = repo.join("datasets/t/input.txt");
        std::fs::create_dir_all(data.parent().unwrap()).unwrap();
        std::fs::create_dir_all(repo.join("configs/deep")).unwrap();
        std::fs::write(&data, "text").unwrap();
        let rel = Path::new("datasets/t/input.txt");
        let config = Path::new("configs/deep/x.toml");
        // From the repository root: the folder headlab runs in holds it.
        assert_eq!(resolve_data_path(rel, config, &repo), rel);
        // From elsewhere, with the config named relative to there: found above the config.
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let config_from_elsewhere = Path::new("../repo/configs/deep/x.toml");
        let found = resolve_data_path(rel, config_from_elsewhere, &elsewhere);
        assert_eq!(
            std::fs::canonicalize(found).unwrap(),
            std::fs::canonicalize(&data).unwrap()
        );
        // The run folder wins over the config's when both hold the path.
        let own = elsewhere.join(rel);
        std::fs::create_dir_all(own.parent().unwrap()).unwrap();
        std::fs::write(&own, "mine").unwrap();
        assert_eq!(
            resolve_data_path(rel, config_from_elsewhere, &elsewhere),
            rel
        );
        // Nowhere: left as written, for the reader's error to name.
        let missing = Path::new("datasets/none.txt");
        assert_eq!(resolve_data_path(missing, config, &repo), missing);
        // Absolute paths are never moved.
        assert_eq!(resolve_data_path(&data, config, &elsewhere), data);
    }

    fn set(assignment: &str) -> Result<RunConfig, ConfigError> {
        let mut c = RunConfig::default();
        c.apply_set(assignment)?;
        Ok(c)
    }

    #[test]
    fn shipped_configs_parse_and_validate() {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(configs_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let c = RunConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
                c.validate()
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                names.push(path.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        names.sort();
        assert!(names.contains(&"default.toml".to_string()), "{names:?}");
        assert!(
            names.contains(&"shakespeare-char-cpu.toml".to_string()),
            "{names:?}"
        );
    }

    /// A warm-up as long as the run is warned about with the key, the rate it ends at
    /// (10/5001 of lr: the ramp is lr (it + 1) / (warmup + 1)) and the fix; the shipped
    /// configs and the default raise nothing.
    #[test]
    fn a_warmup_as_long_as_the_run_is_warned_about_with_the_fix() {
        let t = TrainConfig {
            warmup_iters: 5000,
            max_iters: 10,
            lr: 4e-3,
            ..Default::default()
        };
        assert_eq!(
            t.warnings(),
            [format!(
                "warning: train.warmup_iters = 5000 is not shorter than the run (train.max_iters \
                 = 10): the rate climbs towards train.lr = 0.004 but ends at {:.2e}, never \
                 reaching it; set train.warmup_iters below 10 (the default run warms up for 50 \
                 of 2000 steps)",
                4e-3 * 10.0 / 5001.0
            )]
        );
        let decay = TrainConfig {
            warmup_iters: 300,
            lr_decay_iters: Some(200),
            max_iters: 1000,
            ..Default::default()
        };
        let lines = decay.warnings();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("train.lr_decay_iters = 200"), "{lines:?}");
        assert!(TrainConfig::default().warnings().is_empty());
        for entry in std::fs::read_dir(configs_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let c = RunConfig::load(&path).unwrap();
                assert!(c.train.warnings().is_empty(), "{}", path.display());
            }
        }
    }

    /// A resume that changes the batch size, accumulation or seed is told that the batches
    /// differ from there on, naming the key and the step; one that changes neither, or
    /// starts at step 0 (an import), hears nothing, and a warm-up warning is repeated only
    /// when the `--set`s brought it.
    #[test]
    fn a_resume_that_changes_the_batches_names_the_key() {
        let saved = TrainConfig::default();
        assert!(saved.resume_warnings(&saved, 100).is_empty());
        let fine_tune = TrainConfig {
            batch_size: 2,
            ..saved.clone()
        };
        assert!(fine_tune.resume_warnings(&saved, 0).is_empty());
        let longer = TrainConfig {
            max_iters: 4000,
            ..saved.clone()
        };
        assert!(longer.resume_warnings(&saved, 100).is_empty());
        let smaller = TrainConfig {
            batch_size: 8,
            ..saved.clone()
        };
        let lines = smaller.resume_warnings(&saved, 100);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("warning: train.batch_size is 8 (was 24) from step 100 on"),
            "{lines:?}"
        );
        assert!(
            lines[0].contains("differ from an uninterrupted run's"),
            "{lines:?}"
        );
        let warmup = TrainConfig {
            warmup_iters: 3000,
            ..saved.clone()
        };
        let lines = warmup.resume_warnings(&saved, 100);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("train.warmup_iters = 3000"), "{lines:?}");
    }

    /// A data path found through the config's folder is the file's own path, without the
    /// `cfg/..` it was found through.
    #[test]
    fn a_data_path_found_beside_the_config_is_printed_normalised() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir_all(work.join("cfg")).unwrap();
        std::fs::write(work.join("x.txt"), "text").unwrap();
        let found = resolve_data_path(Path::new("../x.txt"), Path::new("cfg/x.toml"), &work);
        assert_eq!(found, std::fs::canonicalize(work.join("x.txt")).unwrap());
        assert!(
            !found
                .components()
                .any(|c| c == std::path::Component::ParentDir),
            "{}",
            found.display()
        );
    }

    #[test]
    fn shakespeare_config_is_nanogpt_cpu_recipe() {
        let c = RunConfig::load(configs_dir().join("shakespeare-char-cpu.toml")).unwrap();
        let (m, t) = (&c.model, &c.train);
        assert_eq!(
            (m.n_layers, m.n_heads, m.d_model, m.block_size),
            (4, 4, 128, 64)
        );
        assert_eq!(m.dropout, 0.0);
        assert_eq!(
            (t.batch_size, t.max_iters, t.decay_iters()),
            (12, 2000, 2000)
        );
        assert_eq!((t.lr, t.min_lr, t.warmup_iters), (1e-3, 1e-4, 100));
        assert_eq!(
            (t.beta1, t.beta2, t.weight_decay, t.grad_clip),
            (0.9, 0.99, 0.1, 1.0)
        );
        assert_eq!(t.eval_iters, 200);
        // Tests run in crates/train: the relative path is found above the config, in the
        // repository's datasets/.
        let DataSource::File(path) = c.data.source().unwrap() else {
            panic!("a file source")
        };
        assert!(
            path.ends_with("datasets/tinyshakespeare/input.txt"),
            "{path:?}"
        );
        assert!(path.is_file(), "{path:?}");
    }

    #[test]
    fn empty_file_is_the_documented_default() {
        let c = RunConfig::from_toml_str("", "empty").unwrap();
        assert_eq!(c, RunConfig::default());
        // One default: configs/default.toml (what bare `headlab train` runs) spells out the
        // same values, so a config with only some sections gets that run's other sections.
        let shipped = RunConfig::load(configs_dir().join("default.toml")).unwrap();
        assert_eq!(shipped, c);
        let (m, t, d) = (&c.model, &c.train, &c.data);
        assert_eq!(
            (m.block_size, m.d_model, m.n_layers, m.n_heads),
            (64, 128, 2, 4)
        );
        assert_eq!((m.kv_heads(), m.mlp_width(), m.d_k()), (4, 512, 32));
        assert!(m.bias && m.tie_embeddings && !m.attn_only);
        assert_eq!((m.positional, m.norm), (Positional::Learned, Norm::Pre));
        assert_eq!(
            (t.batch_size, t.max_iters, t.lr, t.min_lr),
            (24, 2000, 4e-3, 2e-4)
        );
        assert_eq!(
            (t.warmup_iters, t.decay_iters(), t.grad_accum),
            (50, 2000, 1)
        );
        assert_eq!(
            (t.eval_interval, t.eval_iters, t.log_interval),
            (500, 20, 10)
        );
        assert_eq!(
            (
                t.seed,
                t.sample_tokens,
                t.track_heads_every,
                t.grammar_sentences
            ),
            (1337, 300, 100, 200)
        );
        assert_eq!(t.backend, "flex");
        assert_eq!(
            d.source().unwrap(),
            DataSource::Builtin(BuiltinCorpus::Grammar)
        );
        assert_eq!(
            (d.builtin_chars, d.val_fraction, d.induction_len),
            (1_000_000, 0.1, 16)
        );
        assert_eq!(d.tokenizer, TokenizerKind::Word);
        c.validate().unwrap();
    }

    #[test]
    fn data_table_with_path_only_has_no_builtin() {
        let c = RunConfig::from_toml_str("[data]\npath = \"x.txt\"\n", "t").unwrap();
        assert_eq!(c.data.source().unwrap(), DataSource::File("x.txt".into()));
        let c = RunConfig::from_toml_str("[data]\ntokenizer = \"byte\"\n", "t").unwrap();
        assert_eq!(
            c.validate(),
            Err(ValidationError::Data(DataConfigError::NoDataSource))
        );
    }

    #[test]
    fn toml_round_trip() {
        let mut c = RunConfig::default();
        c.apply_sets(&[
            "model.n_kv_heads=2",
            "model.positional=rope",
            "train.lr=3e-4",
            "data.path=some/file.txt",
            "data.tokenizer=byte",
        ])
        .unwrap();
        for original in [RunConfig::default(), c] {
            let text = original.to_toml_string().unwrap();
            let back = RunConfig::from_toml_str(&text, "round trip").unwrap();
            assert_eq!(back, original, "{text}");
        }
    }

    #[test]
    fn parse_errors_have_position_and_valid_keys() {
        let err = RunConfig::from_toml_str("[train]\nlr = 1e-3\nlrr = 2\n", "my.toml").unwrap_err();
        let msg = err.to_string();
        for part in [
            "my.toml",
            "line 3",
            "column 1",
            "lrr",
            "min_lr",
            "batch_size",
            "hint: did you mean `lr`?",
        ] {
            assert!(msg.contains(part), "{part:?} missing from {msg}");
        }
        let msg = RunConfig::from_toml_str("[modle]\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("modle") && msg.contains("`model`"), "{msg}");
        let msg = RunConfig::from_toml_str("[model]\nd_model = \"big\"\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("line 2") && msg.contains("usize"), "{msg}");
        let msg = RunConfig::from_toml_str("[model\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("x.toml") && msg.contains("line 1"), "{msg}");
        let msg = RunConfig::load("/nonexistent/headlab.toml")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("/nonexistent/headlab.toml"), "{msg}");
    }

    #[test]
    fn set_overrides_with_types() {
        let c = set("train.lr=3e-4").unwrap();
        assert_eq!(c.train.lr, 3e-4);
        assert_eq!(set("train.lr = 1").unwrap().train.lr, 1.0);
        assert_eq!(set("model.n_layers=6").unwrap().model.n_layers, 6);
        assert_eq!(set("model.n_kv_heads=2").unwrap().model.kv_heads(), 2);
        assert!(!set("model.bias=false").unwrap().model.bias);
        assert_eq!(set("model.norm=post").unwrap().model.norm, Norm::Post);
        assert_eq!(
            set("model.positional=\"rope\"").unwrap().model.positional,
            Positional::Rope
        );
        assert_eq!(set("train.backend=wgpu").unwrap().train.backend, "wgpu");
        assert_eq!(
            set("data.tokenizer=byte").unwrap().data.tokenizer,
            TokenizerKind::Byte
        );
        // A path TOML would read as a number is still a path.
        assert_eq!(
            set("data.path=2024").unwrap().data.path,
            Some("2024".into())
        );
        // Setting one data source replaces the other.
        let c = set("data.path=../shared/datasets/tinyshakespeare/input.txt").unwrap();
        assert_eq!(c.data.builtin, None);
        c.validate().unwrap();
        let mut c = c;
        c.apply_set("data.builtin=copy").unwrap();
        assert_eq!(
            c.data.source().unwrap(),
            DataSource::Builtin(BuiltinCorpus::Copy)
        );
        // Other keys are untouched.
        assert_eq!(c.model, RunConfig::default().model);
    }

    #[test]
    fn set_errors() {
        let msg = set("train.lr").unwrap_err().to_string();
        assert!(
            msg.contains("expected key=value, e.g. train.lr=3e-4"),
            "{msg}"
        );
        assert!(matches!(set("=3"), Err(ConfigError::SetSyntax { .. })));

        let msg = set("lr=3e-4").unwrap_err().to_string();
        assert!(msg.contains("did you mean train.lr?"), "{msg}");

        let msg = set("optim.lr=3e-4").unwrap_err().to_string();
        assert!(
            msg.contains("\"optim\"") && msg.contains("model, train, data"),
            "{msg}"
        );

        let err = set("train.lrr=3e-4").unwrap_err();
        let msg = err.to_string();
        for part in [
            "\"lrr\"",
            "[train]",
            "min_lr",
            "batch_size",
            "backend",
            "did you mean train.lr?",
        ] {
            assert!(msg.contains(part), "{part:?} missing from {msg}");
        }
        // The key list comes from the struct: every field of TrainConfig.
        let ConfigError::SetUnknownKey { valid, .. } = err else {
            panic!("wrong variant")
        };
        assert_eq!(valid.len(), 28);
        assert_eq!(section_fields("model").unwrap().len(), 20);
        assert_eq!(section_fields("data").unwrap().len(), 7);
        assert!(matches!(
            set("train.lr.x=1"),
            Err(ConfigError::SetUnknownKey { .. })
        ));

        // train.precision: f32 or bf16, bf16 on flex only.
        assert_eq!(
            set("train.precision=bf16").unwrap().train.precision,
            Precision::Bf16
        );
        let msg = set("train.precision=fp16").unwrap_err().to_string();
        assert!(
            msg.contains("train.precision") && msg.contains("bf16"),
            "{msg}"
        );
        let mut bf16_wgpu = RunConfig::default();
        bf16_wgpu.train.precision = Precision::Bf16;
        bf16_wgpu.train.backend = "wgpu".into();
        let msg = bf16_wgpu.validate().unwrap_err().to_string();
        assert!(
            msg.contains("train.backend = \"flex\", not \"wgpu\"") && msg.contains("\"f32\""),
            "{msg}"
        );

        let msg = set("train.lr=fast").unwrap_err().to_string();
        for part in ["train.lr", "\"fast\"", "f64", "current value: 0.004"] {
            assert!(msg.contains(part), "{part:?} missing from {msg}");
        }
        let msg = set("train.batch_size=1.5").unwrap_err().to_string();
        assert!(
            msg.contains("usize") && msg.contains("current value: 24"),
            "{msg}"
        );
        let msg = set("train.batch_size=-1").unwrap_err().to_string();
        assert!(msg.contains("usize"), "{msg}");
        let msg = set("model.positional=alibi").unwrap_err().to_string();
        assert!(msg.contains("alibi") && msg.contains("rope"), "{msg}");
        let msg = set("model.bias=maybe").unwrap_err().to_string();
        assert!(msg.contains("boolean"), "{msg}");
        // A failed set leaves the config unchanged.
        let mut c = RunConfig::default();
        assert!(c.apply_set("train.max_iters=lots").is_err());
        assert_eq!(c, RunConfig::default());
    }

    #[test]
    fn every_validation_error_names_its_field() {
        // (override that breaks it, overrides applied first, field the message must name)
        let cases = [
            ("model.block_size=0", "", "model.block_size"),
            ("model.d_model=0", "", "model.d_model"),
            ("model.n_layers=0", "", "model.n_layers"),
            ("model.n_heads=0", "", "model.n_heads"),
            ("model.n_kv_heads=0", "", "model.n_kv_heads"),
            ("model.d_ff=0", "", "model.d_ff"),
            ("train.batch_size=0", "", "train.batch_size"),
            ("train.max_iters=0", "", "train.max_iters"),
            ("train.lr_decay_iters=0", "", "train.lr_decay_iters"),
            ("train.grad_accum=0", "", "train.grad_accum"),
            ("train.eval_interval=0", "", "train.eval_interval"),
            ("train.eval_iters=0", "", "train.eval_iters"),
            ("train.log_interval=0", "", "train.log_interval"),
            ("data.builtin_chars=0", "", "data.builtin_chars"),
            ("data.induction_len=0", "", "data.induction_len"),
            ("model.d_model=130", "", "model.d_model = 130"),
            ("model.n_kv_heads=3", "", "model.n_kv_heads = 3"),
            (
                "model.positional=rope",
                "model.d_model=132;model.n_heads=12",
                "model.positional",
            ),
            ("model.dropout=1.0", "", "model.dropout"),
            ("model.dropout=-0.1", "", "model.dropout"),
            ("train.lr=0", "", "train.lr"),
            ("train.lr=-1e-3", "", "train.lr"),
            ("train.lr=nan", "", "train.lr"),
            ("train.min_lr=-1", "", "train.min_lr"),
            ("train.min_lr=0.01", "", "train.min_lr"),
            ("train.beta1=1", "", "train.beta1"),
            ("train.beta2=1.5", "", "train.beta2"),
            ("train.weight_decay=-0.1", "", "train.weight_decay"),
            (
                "train.muon_weight_decay=-0.1",
                "",
                "train.muon_weight_decay",
            ),
            ("train.grad_clip=-1", "", "train.grad_clip"),
            ("data.val_fraction=0", "", "data.val_fraction"),
            ("data.val_fraction=1", "", "data.val_fraction"),
            ("data.builtin=grammer", "", "data.builtin"),
            (
                "data.vocab_size=255",
                "data.tokenizer=bpe",
                "data.vocab_size",
            ),
            (
                "data.tokenizer=bpe",
                "data.vocab_size=70000",
                "data.vocab_size",
            ),
        ];
        for (bad, before, field) in cases {
            let mut c = RunConfig::default();
            let before: Vec<&str> = before.split(';').filter(|s| !s.is_empty()).collect();
            c.apply_sets(&before).unwrap();
            c.validate()
                .unwrap_or_else(|e| panic!("{before:?} alone: {e}"));
            c.apply_set(bad).unwrap();
            let msg = c.validate().expect_err(bad).to_string();
            assert!(
                msg.starts_with(field),
                "{bad}: {msg:?} does not start with {field:?}"
            );
        }

        let mut c = RunConfig::default();
        c.data.path = Some("x.txt".into());
        let msg = c.validate().unwrap_err().to_string();
        assert!(
            msg.contains("data.path") && msg.contains("data.builtin"),
            "{msg}"
        );
        c.data.path = None;
        c.data.builtin = None;
        let msg = c.validate().unwrap_err().to_string();
        assert!(
            msg.contains("data.path") && msg.contains("data.builtin"),
            "{msg}"
        );
    }

    #[test]
    fn validation_suggests_fixes() {
        let c = set("model.d_model=130").unwrap();
        let err = c.validate().unwrap_err();
        assert_eq!(
            err,
            ValidationError::Model(GptConfigError::HeadsDoNotDivide {
                d_model: 130,
                n_heads: 4,
                head_choices: vec![2, 5],
                d_model_choices: vec![128, 132],
            })
        );
        let msg = err.to_string();
        assert!(
            msg.contains("model.n_heads = 2 or 5") && msg.contains("(128 or 132)"),
            "{msg}"
        );

        let mut c = RunConfig::default();
        c.apply_sets(&["model.n_heads=8", "model.n_kv_heads=3"])
            .unwrap();
        let msg = c.validate().unwrap_err().to_string();
        assert!(msg.contains("model.n_kv_heads = 1, 2, 4 or 8"), "{msg}");

        let mut c = RunConfig::default();
        c.apply_sets(&[
            "model.positional=rope",
            "model.d_model=66",
            "model.n_heads=6",
        ])
        .unwrap();
        let msg = c.validate().unwrap_err().to_string();
        assert!(msg.contains("66 / 6 = 11"), "{msg}");
        // An even head dimension is fine with rope.
        c.apply_set("model.n_heads=3").unwrap();
        c.validate().unwrap();

        let msg = set("train.min_lr=0.01")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(msg.contains("0.01") && msg.contains("0.004"), "{msg}");
    }

    #[test]
    fn helpers() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(closest("n_head", &["n_heads", "n_layers"]), Some("n_heads"));
        assert_eq!(closest("zzz", &["n_heads", "n_layers"]), None);
    }

    #[test]
    fn the_shipped_bpe_recipe_is_the_char_recipe_with_bpe_tokens() {
        let configs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        let char = RunConfig::load(configs.join("shakespeare-char-cpu.toml")).unwrap();
        let bpe = RunConfig::load(configs.join("shakespeare-bpe-cpu.toml")).unwrap();
        bpe.validate().unwrap();
        assert_eq!(bpe.model, char.model);
        assert_eq!(bpe.train, char.train);
        assert_eq!(bpe.data.source().unwrap(), char.data.source().unwrap());
        assert_eq!(bpe.data.val_fraction, char.data.val_fraction);
        assert_eq!(
            (bpe.data.tokenizer, bpe.data.vocab_size),
            (headlab_data::TokenizerKind::Bpe, 1024)
        );
    }
}

/// Properties over random input: `--set` gives an error or a change, never a panic; every valid
/// random config builds a model whose forward pass has the documented shapes.
#[cfg(test)]
mod props {
    use proptest::prelude::*;

    use burn::tensor::{Device, Int, Tensor, TensorData};
    use headlab_kernels::to_host;
    use headlab_model::{ForwardOptions, Gpt};

    use super::{Norm, Positional, RunConfig};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

            /// Arbitrary `--set` arguments, and arbitrary values for real keys: an error or a change,
            /// never a panic; a failed `--set` leaves the config as it was.
            #[test]
            fn set_never_panics(
                arg in any::<String>(),
                key in prop::sample::select(vec![
                    "model.d_model", "model.n_kv_heads", "model.positional", "model.dropout",
                    "train.lr", "train.max_iters", "train.backend", "data.path", "data.builtin",
                    "data.tokenizer", "model", "train.", ".lr", "",
                ]),
                value in any::<String>(),
            ) {
                for assignment in [arg, format!("{key}={value}")] {
                    let mut config = RunConfig::default();
                    if config.apply_set(&assignment).is_err() {
                        prop_assert_eq!(&config, &RunConfig::default());
                    } else {
                        // Whatever was accepted validates or says why, and serialises.
                        let _ = config.validate();
                        prop_assert!(config.to_toml_string().is_ok());
                    }
                }
            }
    }

    /// A random valid `[model]` section (sizes kept small so the forward pass is quick).
    fn valid_model() -> impl Strategy<Value = (RunConfig, usize, usize, usize)> {
        (
            1usize..=4,                    // n_heads
            1usize..=6,                    // d_k
            1usize..=3,                    // n_layers
            1usize..=12,                   // block_size
            prop::option::of(1usize..=40), // d_ff
            any::<prop::sample::Index>(),  // n_kv_heads: a divisor of n_heads
            0usize..3,                     // positional
            any::<bool>(),                 // post-norm
            any::<(bool, bool, bool)>(),   // bias, tie_embeddings, attn_only
            2usize..40,                    // vocab
            1usize..=3,                    // batch
            any::<prop::sample::Index>(),  // t <= block_size
        )
            .prop_map(
                |(heads, d_k, layers, block, d_ff, kv, pos, post, flags, vocab, b, t)| {
                    let positional = [
                        Positional::Learned,
                        Positional::Sinusoidal,
                        Positional::Rope,
                    ][pos];
                    // rope rotates pairs of a head's dimensions; sinusoidal pairs of d_model's.
                    let d_k = if positional == Positional::Rope {
                        2 * d_k
                    } else {
                        d_k
                    };
                    let d_model = heads * d_k;
                    let d_model = if positional == Positional::Sinusoidal && d_model % 2 == 1 {
                        2 * d_model
                    } else {
                        d_model
                    };
                    let divisors: Vec<usize> = (1..=heads).filter(|k| heads % k == 0).collect();
                    let mut config = RunConfig::default();
                    // Head tracking (on by default) needs block_size >= 3; these are model shapes.
                    config.train.track_heads_every = 0;
                    let m = &mut config.model;
                    m.n_heads = heads;
                    m.d_model = d_model;
                    m.n_layers = layers;
                    m.block_size = block;
                    m.d_ff = d_ff;
                    m.n_kv_heads = Some(divisors[kv.index(divisors.len())]);
                    m.positional = positional;
                    m.norm = if post { Norm::Post } else { Norm::Pre };
                    (m.bias, m.tie_embeddings, m.attn_only) = flags;
                    (config, vocab, b, 1 + t.index(block))
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// `tokens [b, t] -> logits [b, t, vocab]`, and one `[b, n_heads, t, t]` attention map
        /// per layer whose rows are causal distributions.
        #[test]
        fn valid_configs_build_models_with_the_documented_shapes(
            (config, vocab, b, t) in valid_model(),
            seed in any::<u64>(),
        ) {
            prop_assert!(config.validate().is_ok(), "{:?}", config.validate());
            let gpt = config.model.clone().with_vocab_size(vocab);
            prop_assert!(gpt.validate().is_ok(), "{:?}", gpt.validate());
            let device = Device::flex();
            device.seed(seed);
            let model = Gpt::new(&gpt, &device).unwrap();
            let ids: Vec<i64> = (0..b * t).map(|i| ((i as u64 * 7 + seed) % vocab as u64) as i64).collect();
            let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [b, t]), &device);
            prop_assert_eq!(model.forward(tokens.clone()).dims(), [b, t, vocab]);
            let out = model.forward_with(
                tokens,
                ForwardOptions { return_weights: true, ..ForwardOptions::default() },
            );
            prop_assert_eq!(out.logits.dims(), [b, t, vocab]);
            prop_assert_eq!(out.weights.len(), config.model.n_layers);
            for w in &out.weights {
                prop_assert_eq!(w.dims(), [b, config.model.n_heads, t, t]);
                let w: Vec<f32> = to_host(w.clone());
                for (row, probs) in w.chunks(t).enumerate() {
                    let query = row % t;
                    let total: f32 = probs.iter().sum();
                    prop_assert!((total - 1.0).abs() < 1e-4, "row sums to {}", total);
                    prop_assert!(probs[query + 1..].iter().all(|&p| p == 0.0), "not causal");
                }
            }
            let logits: Vec<f32> = to_host(out.logits.clone());
            prop_assert!(logits.iter().all(|x| x.is_finite()));
        }
    }
}

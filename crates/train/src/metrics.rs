//! `metrics.csv`: one row per evaluation split and per logged step, written as training
//! goes and read back by resumed runs and by plots.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::run::{RunError, write_atomic};

/// `metrics.csv` could not be written.
#[derive(Debug, Error)]
pub enum MetricsError {
    /// Creating or appending.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Rewriting it atomically.
    #[error(transparent)]
    Rewrite(#[from] RunError),
}

fn write_error(path: &Path) -> impl FnOnce(std::io::Error) -> MetricsError + '_ {
    move |source| MetricsError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// Header of `metrics.csv`.
pub const METRICS_HEADER: &str = "step,split,loss,lr,tokens_per_s,elapsed_s,bpc\n";

/// The losses recorded in a `metrics.csv`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LossHistory {
    /// `(step, evaluated train loss, evaluated val loss)`.
    pub evals: Vec<(usize, f64, f64)>,
    /// `(step, training batch loss)` at each logged step.
    pub iters: Vec<(usize, f64)>,
    /// `(step, learning rate)` at every step with a row, in step order.
    pub lr: Vec<(usize, f64)>,
}

/// Reads the losses of a `metrics.csv`; a missing file or a damaged row reads as nothing.
pub fn read_losses(path: &Path) -> LossHistory {
    let mut history = LossHistory::default();
    let Ok(text) = std::fs::read_to_string(path) else {
        return history;
    };
    let mut train = std::collections::BTreeMap::new();
    let mut val = std::collections::BTreeMap::new();
    let mut lr = std::collections::BTreeMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (Some(step), Some(loss)) = (
            f.first().and_then(|s| s.parse().ok()),
            f.get(2).and_then(|s| s.parse().ok()),
        ) else {
            continue;
        };
        if let Some(rate) = f.get(3).and_then(|s| s.parse::<f64>().ok()) {
            lr.insert(step, rate);
        }
        match f.get(1) {
            Some(&"iter") => history.iters.push((step, loss)),
            Some(&"train") => drop(train.insert(step, loss)),
            Some(&"val") => drop(val.insert(step, loss)),
            _ => {}
        }
    }
    for (step, t) in train {
        if let Some(&v) = val.get(&step) {
            history.evals.push((step, t, v));
        }
    }
    history.lr = lr.into_iter().collect();
    history
}

/// One row of `metrics.csv`.
pub(crate) struct Metric<'a> {
    pub(crate) step: usize,
    pub(crate) split: &'a str,
    pub(crate) loss: f64,
    pub(crate) lr: f64,
    pub(crate) tokens_per_s: f64,
    pub(crate) elapsed_s: f64,
    /// `loss` in bits per character of the split's text (comparable across tokenizers).
    pub(crate) bpc: f64,
}

pub(crate) struct Metrics {
    path: PathBuf,
}

impl Metrics {
    /// Starts `metrics.csv` afresh, or appends to the existing one of a resumed run.
    pub(crate) fn open(path: PathBuf, fresh: bool) -> Result<Self, MetricsError> {
        if fresh || !path.exists() {
            std::fs::write(&path, METRICS_HEADER).map_err(write_error(&path))?;
        }
        Ok(Self { path })
    }

    /// Drops rows past `step` (left by a run killed after its last checkpoint).
    pub(crate) fn truncate_after(&mut self, step: usize) -> Result<(), MetricsError> {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        let columns = text.lines().next().map_or(0, |h| h.split(',').count());
        let mut kept: Vec<&str> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            // A row cut short by a crash has fewer columns.
            let keep = i == 0
                || line.split(',').count() == columns
                    && line
                        .split(',')
                        .next()
                        .and_then(|s| s.parse::<usize>().ok())
                        .is_some_and(|s| s <= step);
            if keep {
                kept.push(line);
            }
        }
        let mut out = kept.join("\n");
        out.push('\n');
        write_atomic(&self.path, out.as_bytes())?;
        Ok(())
    }

    pub(crate) fn write(&self, m: Metric<'_>) -> Result<(), MetricsError> {
        let mut f = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(write_error(&self.path))?;
        writeln!(
            f,
            "{},{},{:.6},{:.6e},{:.1},{:.3},{:.6}",
            m.step, m.split, m.loss, m.lr, m.tokens_per_s, m.elapsed_s, m.bpc
        )
        .map_err(write_error(&self.path))
    }
}

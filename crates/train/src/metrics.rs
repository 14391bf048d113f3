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

/// Header of `metrics.csv`. `well_formed` and `agreeing` are the shares of sampled sentences
/// that parse and that agree, on the val rows of a grammar run; empty elsewhere. `elapsed_s`
/// is the wall time since the run started; `train_s` is the part of it spent in training
/// steps (evaluations, checkpoints and observers left out), the time a speed claim counts.
pub const METRICS_HEADER: &str =
    "step,split,loss,lr,tokens_per_s,elapsed_s,bpc,well_formed,agreeing,train_s\n";

/// Earlier headers, and the empty columns a resumed run's rows under them get.
const OLD_HEADERS: [(&str, &str); 2] = [
    ("step,split,loss,lr,tokens_per_s,elapsed_s,bpc\n", ",,,"),
    (
        "step,split,loss,lr,tokens_per_s,elapsed_s,bpc,well_formed,agreeing\n",
        ",",
    ),
];

/// The losses recorded in a `metrics.csv`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LossHistory {
    /// `(step, evaluated train loss, evaluated val loss)`.
    pub evals: Vec<(usize, f64, f64)>,
    /// `(step, training batch loss)` at each logged step.
    pub iters: Vec<(usize, f64)>,
    /// `(step, learning rate)` at every step with a row, in step order.
    pub lr: Vec<(usize, f64)>,
    /// `(step, well-formed share, agreeing share)` of a grammar run's evaluations.
    pub grammar: Vec<(usize, f64, f64)>,
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
        let share = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok());
        if let (Some(w), Some(a)) = (share(7), share(8)) {
            history.grammar.push((step, w, a));
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
    /// Seconds in training steps so far.
    pub(crate) train_s: f64,
    /// `loss` in bits per character of the split's text (comparable across tokenizers).
    pub(crate) bpc: f64,
    /// Shares of sampled sentences well-formed and agreeing (grammar runs' val rows).
    pub(crate) grammar: Option<(f64, f64)>,
}

pub(crate) struct Metrics {
    path: PathBuf,
}

impl Metrics {
    /// Starts `metrics.csv` afresh, or appends to the existing one of a resumed run.
    pub(crate) fn open(path: PathBuf, fresh: bool) -> Result<Self, MetricsError> {
        if fresh || !path.exists() {
            std::fs::write(&path, METRICS_HEADER).map_err(write_error(&path))?;
        } else if let Ok(text) = std::fs::read_to_string(&path)
            && let Some((rows, pad)) = OLD_HEADERS
                .iter()
                .find_map(|(header, pad)| Some((text.strip_prefix(header)?, pad)))
        {
            let padded: String = rows.lines().map(|l| format!("{l}{pad}\n")).collect();
            write_atomic(&path, (METRICS_HEADER.to_string() + &padded).as_bytes())?;
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
        let grammar = m
            .grammar
            .map_or(",".to_string(), |(w, a)| format!("{w:.4},{a:.4}"));
        writeln!(
            f,
            "{},{},{:.6},{:.6e},{:.1},{:.3},{:.6},{grammar},{:.3}",
            m.step, m.split, m.loss, m.lr, m.tokens_per_s, m.elapsed_s, m.bpc, m.train_s
        )
        .map_err(write_error(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run made before the grammar and train_s columns resumes into a file with them: its
    /// old rows get empty ones (so truncating after a crash keeps them), and read back as
    /// before.
    #[test]
    fn an_old_metrics_file_gains_the_grammar_and_train_s_columns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.csv");
        let header = OLD_HEADERS[0].0;
        let old = format!("{header}0,train,3.3,1e-4,0.0,1.0,4.7\n0,val,3.2,1e-4,0.0,1.0,4.6\n");
        std::fs::write(&path, old).unwrap();
        let mut m = Metrics::open(path.clone(), false).unwrap();
        m.write(Metric {
            step: 10,
            split: "val",
            loss: 2.0,
            lr: 1e-3,
            tokens_per_s: 0.0,
            elapsed_s: 2.0,
            train_s: 1.5,
            bpc: 2.9,
            grammar: Some((0.5, 0.25)),
        })
        .unwrap();
        m.truncate_after(10).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], METRICS_HEADER.trim_end());
        assert_eq!(lines[2], "0,val,3.2,1e-4,0.0,1.0,4.6,,,");
        assert!(lines[3].ends_with(",0.5000,0.2500,1.500"), "{text}");
        let read = read_losses(&path);
        assert_eq!(read.evals, [(0, 3.3, 3.2)]);
        assert_eq!(read.grammar, [(10, 0.5, 0.25)]);

        // A file with the grammar columns but not train_s gains one empty column.
        let header = OLD_HEADERS[1].0;
        std::fs::write(&path, format!("{header}0,val,3.2,1e-4,0.0,1.0,4.6,,\n")).unwrap();
        Metrics::open(path.clone(), false).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            format!("{METRICS_HEADER}0,val,3.2,1e-4,0.0,1.0,4.6,,,\n")
        );
    }
}

//! `loss.png`: a run's training and validation loss against step, read from `metrics.csv`.

use std::path::Path;

use headlab_train::metrics::LossHistory;

use crate::ReportError;
use crate::plot::{Series, line_chart};

/// Draws the per-step batch losses (faint) and the evaluated train and val losses.
pub fn loss_png(losses: &LossHistory, path: &Path) -> Result<(), ReportError> {
    let series = vec![
        Series {
            label: "train (batch)".into(),
            points: losses.iters.iter().map(|&(s, l)| (s as f64, l)).collect(),
            faint: true,
        },
        Series {
            label: "train".into(),
            points: losses
                .evals
                .iter()
                .map(|&(s, t, _)| (s as f64, t))
                .collect(),
            faint: false,
        },
        Series {
            label: "val".into(),
            points: losses
                .evals
                .iter()
                .map(|&(s, _, v)| (s as f64, v))
                .collect(),
            faint: false,
        },
    ];
    line_chart(path, "loss", "step", "cross-entropy (nats/token)", &series)
}

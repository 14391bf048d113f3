//! A pruning's files in one folder, as `headlab prune` and `lab syntax` leave them:
//! `prune.csv`, `prune.json` (what the run's page draws), `summary.txt`, `prune.png` (val loss
//! by heads removed) and, on a grammar run, `agreement.png`.

use std::path::Path;

use headlab_heads::prune_report::{prune_csv, prune_json, summary};
use headlab_heads::pruning::{Order, PruneCurve, PruneStep};

use crate::ReportError;
use crate::plot::{Series, line_chart};

/// Writes `curves`' files into `dir` (made if missing) and returns the summary.
pub fn write_pruning(dir: &Path, curves: &[PruneCurve]) -> Result<String, ReportError> {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|source| ReportError::Write { path, source })
    };
    std::fs::create_dir_all(dir).map_err(|source| ReportError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    write("prune.csv", &prune_csv(curves))?;
    write("prune.json", &prune_json(curves).to_string())?;
    let text = summary(curves);
    write("summary.txt", &text)?;
    line_chart(
        &dir.join("prune.png"),
        "val loss as heads are removed, by order of removal",
        "heads removed",
        "val loss",
        &pruning_series(curves, &|s| Some(s.val_loss)),
    )?;
    if curves.iter().any(|c| c.steps[0].agreement.is_some()) {
        line_chart(
            &dir.join("agreement.png"),
            "forced-choice agreement as heads are removed (0.5 is chance)",
            "heads removed",
            "agreement",
            &pruning_series(curves, &|s| s.agreement),
        )?;
    }
    Ok(text)
}

/// One series per curve of `value` against heads removed, labelled by its order; the random
/// orders faint, as baselines.
fn pruning_series(curves: &[PruneCurve], value: &dyn Fn(&PruneStep) -> Option<f64>) -> Vec<Series> {
    curves
        .iter()
        .map(|c| Series {
            label: c.order.name(),
            points: c
                .steps
                .iter()
                .enumerate()
                .filter_map(|(k, s)| value(s).map(|v| (k as f64, v)))
                .collect(),
            faint: matches!(c.order, Order::Random(_)),
        })
        .collect()
}

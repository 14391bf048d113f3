//! Shared drawing: PNG charts (plotters, with an embedded font), the attention explorer page,
//! the run page, markdown and CSV tables. The labs and the comparison draw their own pages
//! with these pieces.
//!
//! - [`plot`]: line charts; [`loss`]: `loss.png`; [`score_chart`]: `heads.png`, head scores
//!   over training.
//! - [`explorer`]: the attention-map grid (`attention.png`) and the explorer page
//!   (`heads.html`).
//! - [`head_table`]: a checkpoint's head table as files and as terminal text.
//! - [`heatmap`]: a grid of values in [0, 1] with labelled rows and columns.
//! - [`observer`]: the plots of a run, redrawn while it trains.
//! - [`run_report`]: a run's page (`report.html`), with training time as a slider.
//! - [`page`]: a static page in the run page's style, pictures embedded (`compare.html`).
//!
//! It draws data that the other crates compute and never computes any itself.

pub mod circuit;
pub mod explorer;
pub mod head_table;
pub mod heatmap;
pub mod loss;
pub mod observer;
pub mod page;
pub mod plot;
pub mod pruning;
pub mod run_report;
pub mod score_chart;

use std::path::{Path, PathBuf};

pub use head_table::{to_table, write_head_report};
pub use observer::RunPlots;
pub use run_report::{PATCH_FILE, REPORT_FILE, RunReport, report_run, write_run_report};

/// A file that could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Plotting failed.
    #[error("cannot draw {}: {message}", path.display())]
    Draw {
        /// The picture.
        path: PathBuf,
        /// plotters' message.
        message: String,
    },
    /// A run's file could not be read.
    #[error("cannot read {}: {message}", path.display())]
    Read {
        /// The file or run.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// Writing failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl ReportError {
    fn draw(path: &Path, e: &dyn std::fmt::Display) -> Self {
        Self::Draw {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }

    fn write(path: &Path, source: std::io::Error) -> Self {
        Self::Write {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Writes `text` to `path`, naming the file when that fails.
pub fn write(path: &Path, text: impl AsRef<[u8]>) -> Result<(), ReportError> {
    std::fs::write(path, text).map_err(|e| ReportError::write(path, e))
}

//! Every picture, page and table headlab writes: PNG charts (plotters, with an embedded
//! font), the attention explorer page, markdown and CSV tables.
//!
//! - [`plot`]: line charts; [`loss`]: `loss.png`; [`history`]: `heads.png`.
//! - [`maps`]: the attention-map grid (`attention.png`) and the explorer page (`heads.html`).
//! - [`heads`]: a checkpoint's head table as files and as terminal text.
//! - [`observer`]: the plots of a run, redrawn while it trains.
//! - [`run_report`]: a run's page (`report.html`), with training time as a slider.
//!
//! It draws data that the other crates compute and never computes any itself; only the CLI
//! depends on it.

pub mod heads;
pub mod history;
pub mod loss;
pub mod maps;
pub mod observer;
pub mod plot;
pub mod run_report;

use std::path::{Path, PathBuf};

pub use heads::{to_table, write_head_report};
pub use observer::RunPlots;
pub use run_report::{REPORT_FILE, RunReport, report_run, write_run_report};

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

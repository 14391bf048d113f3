//! The pictures of a run, redrawn while it trains: `loss.png` after every evaluation and
//! `heads.png` after every head-tracking step.

use std::path::PathBuf;

use burn::tensor::Device;
use headlab_heads::{HISTORY_FILE, HeadHistory};
use headlab_model::Gpt;
use headlab_train::metrics::read_losses;
use headlab_train::run::RunDir;
use headlab_train::trainer::{Observer, ObserverError, RunStart};

use crate::loss::loss_png;
use crate::score_chart::history_png;

/// Redraws a run's plots from its own files. Put it after the head tracker among the
/// observers, so `head_history.csv` is written before it is drawn.
#[derive(Debug, Default)]
pub struct RunPlots {
    track_every: usize,
    root: PathBuf,
}

impl RunPlots {
    /// Plots for the run the loop will start.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Observer for RunPlots {
    fn start(&mut self, start: &RunStart<'_>) -> Result<(), ObserverError> {
        self.track_every = start.config.train.track_heads_every;
        self.root = start.run.root.clone();
        Ok(())
    }

    fn evaluated(&mut self, run: &RunDir, _step: usize) -> Result<(), ObserverError> {
        loss_png(&read_losses(&run.metrics_path()), &run.loss_png())?;
        Ok(())
    }

    fn at_step(&mut self, step: usize, _: &Gpt, _: &Device) -> Result<(), ObserverError> {
        if self.track_every == 0 || !step.is_multiple_of(self.track_every) {
            return Ok(());
        }
        let csv = self.root.join(HISTORY_FILE);
        let text = std::fs::read_to_string(&csv).map_err(|e| format!("{}: {e}", csv.display()))?;
        history_png(
            &HeadHistory::parse(&text, step),
            &self.root.join("heads.png"),
        )?;
        Ok(())
    }
}

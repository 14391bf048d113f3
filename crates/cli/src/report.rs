//! `headlab report`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use headlab_report::{RunReport, report_run};

/// `headlab report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A run directory made by `headlab train`.
    pub run: PathBuf,
}

/// Runs `headlab report`.
pub fn run(args: ReportArgs) -> Result<()> {
    let report = report_run(&args.run)?;
    tell(&report);
    Ok(())
}

/// Says what the page lacks and where it is.
pub fn tell(report: &RunReport) {
    for note in &report.notes {
        eprintln!("report: {note}");
    }
    eprintln!(
        "wrote {} ({} KB; open it in a browser)",
        report.path.display(),
        report.bytes.div_ceil(1024)
    );
}

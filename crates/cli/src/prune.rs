//! `headlab prune`: heads removed one at a time in order of importance, against reverse and
//! random orders ([`headlab_heads::pruning`]).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use headlab_heads::pruning::{PruneError, prune_run};
use headlab_report::pruning::write_pruning;
use headlab_report::report_run;
use headlab_train::trainer::load_dataset;

use crate::common::{OnRun, open_run, whole_number};

/// `headlab prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// A run directory made by `headlab train`.
    pub run: PathBuf,
    /// Seeds of the random orders, the baseline (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3", allow_negative_numbers = true, value_parser = whole_number::<u64>)]
    pub seeds: Vec<u64>,
    /// Where to write prune.csv, prune.json, prune.png (and agreement.png on a grammar run)
    /// and summary.txt (default: RUN/prune, which the run's page, report.html, shows).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// The backend and checkpoint to load.
    #[command(flatten)]
    pub on: OnRun,
}

/// Runs `headlab prune`.
pub fn run(args: PruneArgs) -> Result<()> {
    let (run, trained, device) =
        open_run(&args.run, args.on.backend.as_deref(), args.on.checkpoint)?;
    let (config, tokenizer, model) = (trained.config, trained.tokenizer, trained.model);
    let (n_layers, n_heads) = (model.config.n_layers, model.config.n_heads);
    if n_layers * n_heads < 2 {
        return Err(PruneError::OneHead { n_layers, n_heads }.into());
    }
    let data = load_dataset(&run, &config, tokenizer.clone())
        .context("pruning measures the loss on the run's val split")?;
    let curves = prune_run(&model, &config, &data, &tokenizer, &args.seeds, &device)?;
    let out = args.out.clone().unwrap_or_else(|| run.root.join("prune"));
    let text = write_pruning(&out, &curves)?;
    print!("{text}");
    eprintln!(
        "wrote prune.csv, prune.json, prune.png and summary.txt in {}",
        out.display()
    );
    // The run's page shows the curves kept in RUN/prune.
    if out == run.root.join("prune") {
        let page = report_run(&run.root)?;
        eprintln!("updated {}", page.path.display());
    }
    Ok(())
}

//! `headlab report`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use headlab_data::StreamDecoder;
use headlab_model::Sampling;
use headlab_report::run_report::{BESIDE_FILE, Beside};
use headlab_report::{RunReport, report_run};
use headlab_train::run::RunDir;

use crate::common::{Checkpoint, open_run};

/// `headlab report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A run directory made by `headlab train`.
    pub run: PathBuf,
    /// Another run (e.g. the recipe's) whose last model is sampled as this run's sample was,
    /// from the same prompt with the same tokens, temperature and seed; the page shows both
    /// side by side (kept in RUN/beside.json).
    #[arg(long)]
    pub beside: Option<PathBuf>,
}

/// Runs `headlab report`.
pub fn run(args: ReportArgs) -> Result<()> {
    if let Some(other) = &args.beside {
        write_beside(&args.run, other)?;
    }
    let report = report_run(&args.run)?;
    tell(&report);
    Ok(())
}

/// Samples `other`'s last model with `run`'s sampling settings (the trainer's prompt, a
/// newline) into `run/beside.json`.
fn write_beside(run: &Path, other: &Path) -> Result<()> {
    let config = RunDir::open(run)?.config()?;
    let t = &config.train;
    if t.sample_tokens == 0 {
        bail!(
            "--beside: {} samples no text (train.sample_tokens = 0), so there is nothing to set \
             another run's sample beside",
            run.display()
        );
    }
    let (_, trained, _) = open_run(other, None, Checkpoint::Last)?;
    let prompt = "\n";
    let ids = trained
        .tokenizer
        .encode(prompt)
        .with_context(|| format!("--beside {}: encoding the prompt", other.display()))?;
    let sampling = Sampling {
        seed: t.seed,
        temperature: t.sample_temperature as f32,
        ..Sampling::default()
    };
    let mut stream = StreamDecoder::new();
    let mut sample = String::new();
    trained
        .model
        .generate(&ids, t.sample_tokens, &sampling, |token| {
            sample.push_str(&stream.push(&trained.tokenizer.decode_token_bytes(&[token])));
        })?;
    sample.push_str(&stream.finish());
    let beside = Beside {
        run: other.display().to_string(),
        sample,
        prompt: prompt.into(),
        tokens: t.sample_tokens,
        temperature: t.sample_temperature,
        seed: t.seed,
    };
    let path = run.join(BESIDE_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(&beside)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

/// Says what the page lacks and where it is.
pub fn tell(report: &RunReport) {
    for note in &report.notes {
        headlab_train::log_line!("report: {note}");
    }
    headlab_train::log_line!(
        "wrote {} ({} KB; open it in a browser)",
        report.path.display(),
        report.bytes.div_ceil(1024)
    );
}

//! `headlab heads`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use headlab_data::{Split, read_text};
use headlab_heads::{HeadReport, Probe, head_report};
use headlab_report::{to_table, write_head_report};
use headlab_train::trainer::load_dataset;

use crate::common::{OnRun, open_run};

/// `headlab heads`.
#[derive(Debug, Args)]
pub struct HeadsArgs {
    /// A run directory made by `headlab train`.
    pub run: PathBuf,
    /// Text whose attention maps are drawn (default: the start of the val split).
    #[arg(long, conflicts_with = "file")]
    pub text: Option<String>,
    /// Read that text from a file.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Where to write heads.csv, heads.json, composition.csv, detector.csv, attention.png and
    /// heads.html (default: RUN/heads).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// The backend and checkpoint to load.
    #[command(flatten)]
    pub on: OnRun,
}

/// Runs `headlab heads`.
pub fn run(args: HeadsArgs) -> Result<()> {
    let (out, report) = write(&args)?;
    print!("{}", to_table(&report.rows));
    eprintln!(
        "wrote {0}/heads.csv, heads.json, composition.csv, detector.csv, attention.png and \
         heads.html (open it in a browser)",
        out.display()
    );
    Ok(())
}

/// The head table of the run `args` name: where it was written, and what it holds.
pub fn write(args: &HeadsArgs) -> Result<(PathBuf, HeadReport)> {
    let (run, trained, device) =
        open_run(&args.run, args.on.backend.as_deref(), args.on.checkpoint)?;
    let (config, tokenizer, model) = (trained.config, trained.tokenizer, trained.model);
    let text = match (&args.text, &args.file) {
        (Some(text), _) => Some(text.clone()),
        (None, Some(path)) => Some(read_text(path).context("--file")?),
        (None, None) => None,
    };
    // With a text of its own the analysis can go on without the run's data (moved or gone):
    // everything but ablation and importance, which need held-out batches.
    let data = match load_dataset(&run, &config, tokenizer.clone()) {
        Ok(data) => Some(data),
        Err(e) if text.is_some() => {
            // An imported model never had training text here; anything else lost its data.
            let why = if run.is_imported() && config.data.source().is_err() {
                "this run was imported and has no training text".to_string()
            } else {
                e.to_string()
            };
            eprintln!(
                "note: {why}; going on without the run's data: the maps and pattern scores use \
                 your text and random sequences, ablation and importance are skipped (NaN)"
            );
            None
        }
        Err(e) => {
            return Err(anyhow::Error::new(e)).context(
                "the head table needs the run's data for its held-out batches; give --text or \
                 --file to analyse heads on a text of your own without it",
            );
        }
    };
    let block = config.model.block_size;
    if block < 3 {
        bail!(
            "head analysis needs model.block_size >= 3 (a token and two copies of another); this run has {block}"
        );
    }
    let map_ids = match (&text, &data) {
        (Some(text), _) => {
            let ids = tokenizer
                .encode(text)
                .context("encoding the text for the attention maps")?;
            if ids.len() < 2 {
                bail!("the text has {} tokens; give at least 2", ids.len());
            }
            if ids.len() > block {
                eprintln!(
                    "note: the text has {} tokens; the maps show its first {block} \
                     (model.block_size, the longest context the model has)",
                    ids.len()
                );
            }
            ids[..ids.len().min(block)].to_vec()
        }
        (None, Some(data)) => data.tokens(Split::Val)[..block.min(32)].to_vec(),
        (None, None) => bail!("no text and no data to analyse heads on"),
    };
    let probe = match &data {
        Some(data) => Probe::new(
            data,
            block,
            tokenizer.vocab_size(),
            text.as_ref().map(|_| map_ids.clone()),
            config.train.seed,
        )?,
        None => Probe::from_text(
            block,
            tokenizer.vocab_size(),
            map_ids.clone(),
            config.train.seed,
        ),
    };
    let out = args.out.clone().unwrap_or_else(|| run.root.join("heads"));
    let title = format!("headlab heads: {}", run.root.display());
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let report = head_report(&model, &tokenizer, &probe, &map_ids, &device);
    write_head_report(&out, &title, &report)?;
    Ok((out, report))
}

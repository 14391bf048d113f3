//! `headlab export`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use headlab_train::hf::export_gpt2;
use headlab_train::run::open_trained;

/// `headlab export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(subcommand)]
    pub format: ExportFormat,
}

/// The formats a run can be written in.
#[derive(Debug, Subcommand)]
pub enum ExportFormat {
    /// A Hugging Face GPT-2 folder (config.json, model.safetensors, tokenizer.json) that
    /// `transformers`' `GPT2LMHeadModel.from_pretrained(DIR)` and TransformerLens load.
    Hf {
        /// A run directory made by `headlab train`.
        run: PathBuf,
        /// The folder to write; must be new or empty.
        #[arg(long)]
        out: PathBuf,
        /// The checkpoint: `last` or `best`.
        #[arg(long, default_value = "last")]
        checkpoint: String,
    },
}

/// Runs `headlab export`.
pub fn run(args: ExportArgs) -> Result<()> {
    match args.format {
        ExportFormat::Hf {
            run,
            out,
            checkpoint,
        } => {
            let (_, trained, _) = open_trained(&run, None, &checkpoint)
                .with_context(|| format!("opening {}", run.display()))?;
            export_gpt2(&trained.model, &trained.tokenizer, &out)?;
            eprintln!(
                "wrote {} (config.json, model.safetensors, tokenizer.json): load it with \
                 transformers.GPT2LMHeadModel.from_pretrained(\"{}\")",
                out.display(),
                out.display()
            );
            Ok(())
        }
    }
}

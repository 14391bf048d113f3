//! `headlab export`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use headlab_interop::export_gpt2;
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
    /// A Hugging Face GPT-2 folder (config.json, model.safetensors, tokenizer.json and
    /// tokenizer_config.json) that transformers' `AutoModelForCausalLM`, `AutoTokenizer`
    /// and `pipeline`, and TransformerLens, load.
    Hf {
        /// A run directory made by `headlab train`.
        run: PathBuf,
        /// The folder to write; must be new or empty, unless --force.
        #[arg(long)]
        out: PathBuf,
        /// Replace a previous export in --out (a folder holding only the files an export
        /// writes; anything else there is refused, never deleted).
        #[arg(long)]
        force: bool,
        /// The checkpoint: `last` or `best`.
        #[arg(long, default_value = "last")]
        checkpoint: String,
        /// Backend that reads the weights (default flex: the weights are the same on every
        /// backend, so a run trained on wgpu exports without a GPU).
        #[arg(long, short, default_value = "flex")]
        backend: String,
    },
}

/// Runs `headlab export`.
pub fn run(args: ExportArgs) -> Result<()> {
    match args.format {
        ExportFormat::Hf {
            run,
            out,
            force,
            checkpoint,
            backend,
        } => {
            let (_, trained, _) = open_trained(&run, Some(backend.parse()?), &checkpoint)
                .with_context(|| format!("opening {}", run.display()))?;
            export_gpt2(&trained.model, &trained.tokenizer, &out, force)?;
            eprintln!(
                "wrote {} (config.json, model.safetensors, tokenizer.json, \
                 tokenizer_config.json): load it with transformers' \
                 AutoModelForCausalLM.from_pretrained(\"{}\") and AutoTokenizer",
                out.display(),
                out.display()
            );
            Ok(())
        }
    }
}

//! `headlab import`: a model trained elsewhere as a run directory.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use headlab_interop::{Imported, read_gpt2_folder, read_nanogpt};
use headlab_kernels::BackendKind;

use crate::common::fresh_run_dir;

/// `headlab import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(subcommand)]
    pub format: ImportFormat,
}

/// The formats a model can be read from.
#[derive(Debug, Subcommand)]
pub enum ImportFormat {
    /// A Hugging Face GPT-2-family folder: config.json, model.safetensors and tokenizer.json
    /// (or vocab.json + merges.txt). `.bin` pickles are refused: convert them to safetensors.
    Hf {
        /// The folder.
        dir: PathBuf,
        #[command(flatten)]
        out: OutArgs,
    },
    /// A nanoGPT checkpoint (`out/ckpt.pt` of its train.py), read without running any of its
    /// pickled code.
    Nanogpt {
        /// The checkpoint.
        ckpt: PathBuf,
        /// The char vocabulary: the `meta.pkl` of the dataset it was trained on (default: a
        /// meta.pkl beside the checkpoint).
        #[arg(long)]
        meta: Option<PathBuf>,
        /// A tokenizer instead of `meta.pkl`: a tokenizer.json, or a folder with one or with
        /// vocab.json + merges.txt (GPT-2's BPE for checkpoints trained on it).
        #[arg(long, conflicts_with = "meta")]
        tokenizer: Option<PathBuf>,
        #[command(flatten)]
        out: OutArgs,
    },
}

/// Where the run goes and what it runs on.
#[derive(Debug, Args)]
pub struct OutArgs {
    /// The run directory to create (default: runs/import-<name>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The run's `train.backend`: where `sample`, `heads` and fine-tuning run by default.
    #[arg(long, default_value = "flex")]
    backend: String,
    /// Replace the run in --out (a headlab run or an empty folder; anything else is refused,
    /// never deleted). The old run stays until the new one is read and checked.
    #[arg(long)]
    force: bool,
}

/// Runs `headlab import`.
pub fn run(args: ImportArgs) -> Result<()> {
    let (imported, out, name) = match args.format {
        ImportFormat::Hf { dir, out } => (read_gpt2_folder(&dir)?, out, stem(&dir)),
        ImportFormat::Nanogpt {
            ckpt,
            meta,
            tokenizer,
            out,
        } => (
            read_nanogpt(&ckpt, meta.as_deref(), tokenizer.as_deref())?,
            out,
            ckpt.parent().map_or("nanogpt".into(), stem),
        ),
    };
    write(&imported, &out, &name)
}

fn stem(path: &Path) -> String {
    std::fs::canonicalize(path)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".into())
}

fn write(imported: &Imported, args: &OutArgs, name: &str) -> Result<()> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| fresh_run_dir(&format!("import-{name}")));
    let empty = std::fs::read_dir(&out).is_ok_and(|mut d| d.next().is_none());
    if out.exists() && !args.force {
        bail!(
            "{} already exists; pass a new --out, or --force to replace the run there (nothing \
             was written)",
            out.display()
        );
    }
    if out.exists() && !empty && !out.join("config.toml").is_file() {
        bail!(
            "{} exists and is not a headlab run (no config.toml): --force replaces only a run, so \
             pass a new --out (nothing was written)",
            out.display()
        );
    }
    let backend: BackendKind = args.backend.parse()?;
    let device = backend.device()?;
    let model = imported.build(&device)?;
    let run = imported
        .write_run(&model, &out, &args.backend, args.force)
        .with_context(|| format!("writing the run {}", out.display()))?;
    let c = &imported.config;
    eprintln!(
        "imported {} layers x {} heads (d_model {}, d_k {}, vocab {}, context {}) into {}",
        c.n_layers,
        c.n_heads,
        c.d_model,
        c.d_model / c.n_heads,
        c.vocab_size,
        c.block_size,
        run.root.display()
    );
    // Dropout only acts while training: say what the imported rate does here.
    if c.dropout > 0.0 {
        eprintln!(
            "note: the model's dropout is {} (model.dropout in {}): headlab applies it only \
             while fine-tuning (`headlab train --resume`), never in sample, eval, heads, lens \
             or patch; add --set model.dropout=0 when fine-tuning to train without it",
            c.dropout,
            run.root.join("config.toml").display()
        );
    }
    let dir = run.root.display();
    eprintln!(
        "next: `headlab heads {dir} --text \"...\"` for its head table, `headlab sample {dir}`, \
         `headlab eval {dir} --file FILE`, or fine-tune with `headlab train --resume {dir} \
         --set data.path=FILE`"
    );
    Ok(())
}

//! `headlab compare`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use headlab_compare::{
    Candidate, Comparison, FLEX_BF16, compare_markdown, compare_on, write_compare,
};
use headlab_kernels::BackendKind;
use headlab_train::run::RunDir;

use crate::common::{fresh_run_dir, load_config, whole_number};

/// `headlab compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// A TOML run config (default: the built-in configs/default.toml).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Override a config key (repeatable), e.g. --set model.d_model=32.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Backends to compare, comma-separated; each is checked against an f64 ground truth,
    /// and the later losses against the first's. flex-burn is flex with headlab's kernels off;
    /// flex-bf16 is flex with the linear layers in bf16 (train.precision = "bf16", on CPUs
    /// with AVX512-BF16), its bounds allowing for bf16's rounding.
    #[arg(
        long,
        short,
        value_delimiter = ',',
        default_value = "flex,flex-burn,ndarray,wgpu"
    )]
    pub backends: Vec<String>,
    /// Training steps on each backend.
    #[arg(long, default_value_t = 20, allow_negative_numbers = true, value_parser = whole_number::<usize>)]
    pub steps: usize,
    /// Start every backend from these weights instead of a fresh initialisation: a weights
    /// file of the config's model, e.g. a run's last/model.bpk, whose attention is
    /// sharper than at initialisation.
    #[arg(long, value_name = "FILE")]
    pub init: Option<PathBuf>,
    /// Compare on a trained or imported run: its config, tokenizer and `last` weights
    /// (`--init` picks others; an imported run needs `--set data.path=FILE`).
    #[arg(long, value_name = "RUN", conflicts_with = "config")]
    pub run: Option<PathBuf>,
    /// Output directory (default: runs/compare-<config name>, or -2, -3, ... when taken).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Overwrite the output directory if it exists.
    #[arg(long)]
    pub force: bool,
}

/// Runs `headlab compare`.
pub fn run(args: CompareArgs) -> Result<()> {
    let (mut config, name, tokenizer, init) = match &args.run {
        Some(dir) => {
            let run = RunDir::open(dir)?;
            let name = dir
                .file_name()
                .map_or("run".into(), |n| n.to_string_lossy().into_owned());
            let init = args
                .init
                .clone()
                .unwrap_or_else(|| run.checkpoint("last").join("model.bpk"));
            (run.config()?, name, Some(run.tokenizer()?), Some(init))
        }
        None => {
            let (config, name) = load_config(args.config.as_deref())?;
            (config, name, None, args.init.clone())
        }
    };
    let mut backends: Vec<Option<BackendKind>> = Vec::new();
    for b in &args.backends {
        // flex-bf16 is a precision on flex, not a backend of its own.
        let backend = match b.as_str() {
            FLEX_BF16 => None,
            b => Some(
                b.parse::<BackendKind>()
                    .map_err(|e| anyhow::anyhow!("{e}, or flex-bf16"))?,
            ),
        };
        if backends.contains(&backend) {
            bail!("--backends lists {b} twice");
        }
        backends.push(backend);
    }
    if backends.is_empty() {
        bail!("--backends is empty: give one or more of flex, flex-burn, ndarray, wgpu, flex-bf16");
    }
    config.apply_sets(&args.set)?;
    let out = match &args.out {
        Some(out) => {
            if out.exists() && !args.force {
                bail!(
                    "{} already exists; choose another --out or pass --force",
                    out.display()
                );
            }
            out.clone()
        }
        None => fresh_run_dir(&format!("compare-{name}")),
    };
    let comparison = Comparison {
        config,
        steps: args.steps,
        out: &out,
        init_from: init.as_deref(),
        tokenizer,
    };
    let report = compare_on(comparison, || {
        backends
            .iter()
            .map(|b| b.map_or_else(Candidate::flex_bf16, Candidate::of))
            .collect()
    })?;
    write_compare(&report, &out)?;
    print!("{}", compare_markdown(&report));
    eprintln!(
        "wrote {0}/compare.html (open it in a browser), compare.md, compare.json, compare.png \
         and compare-gap.png",
        out.display()
    );
    let bad = report.disagreeing();
    if !bad.is_empty() {
        let first = bad
            .iter()
            .map(|b| format!("{}: {}", b.backend, b.failures.join("; ")))
            .collect::<Vec<_>>()
            .join("\n  ");
        bail!(
            "{} fail the comparison (see {}):\n  {first}",
            bad.iter()
                .map(|b| b.backend.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            out.join("compare.md").display()
        );
    }
    Ok(())
}

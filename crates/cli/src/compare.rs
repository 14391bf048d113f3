//! `headlab compare`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use headlab_report::{compare_markdown, write_compare};
use headlab_train::backend::Backend;
use headlab_train::compare::compare;

use crate::common::{fresh_run_dir, load_config};

/// `headlab compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// A TOML run config (default: the built-in configs/default.toml).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Override a config key (repeatable), e.g. --set model.d_model=32.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Backends to compare, comma-separated; the first is the reference.
    #[arg(long, value_delimiter = ',', default_value = "flex,ndarray,wgpu")]
    pub backends: Vec<String>,
    /// Training steps on each backend.
    #[arg(long, default_value_t = 20)]
    pub steps: usize,
    /// Output directory (default: runs/compare-<config name>, or -2, -3, ... when taken).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Overwrite the output directory if it exists.
    #[arg(long)]
    pub force: bool,
}

/// Runs `headlab compare`.
pub fn run(args: CompareArgs) -> Result<()> {
    let (mut config, name) = load_config(args.config.as_deref())?;
    let mut backends = Vec::new();
    for b in &args.backends {
        let backend: Backend = b.parse()?;
        if backends.contains(&backend) {
            bail!("--backends lists {backend} twice");
        }
        backends.push(backend);
    }
    if backends.is_empty() {
        bail!("--backends is empty: give one or more of flex, ndarray, wgpu");
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
    let report = compare(config, &backends, args.steps, &out)?;
    write_compare(&report, &out)?;
    print!("{}", compare_markdown(&report));
    eprintln!(
        "wrote {0}/compare.md, compare.json, compare.png and compare-gap.png",
        out.display()
    );
    let bad = report.disagreeing();
    if !bad.is_empty() {
        bail!(
            "{} disagree with {} beyond the f32 rounding tolerance (see {})",
            bad.iter()
                .map(|b| b.backend.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            report.reference,
            out.join("compare.md").display()
        );
    }
    Ok(())
}

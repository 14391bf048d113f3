//! `headlab lab <name>`: experiments on head specialisation that anyone can rerun.
//!
//! - `induction`: a 2-layer attention-only model on the induction corpus forms the
//!   previous-token -> induction circuit of Olsson et al. 2022, with a visible phase change.
//! - `heads`: equal d_model and parameter count with 1..64 heads, several seeds, on a task
//!   that needs two lookups at once (the `lookup` corpus).
//! - `ambiguity`: on the `attach` corpus, where "with" and "and" look when what "with"
//!   attaches to decides the number of the last verb.
//!
//! Each lab writes its runs, pictures and a `summary.md` into its output directory. The
//! experiments are `headlab_heads::lab`'s; the summaries `headlab_report::labs`'s.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use headlab_heads::HeadReport;
use headlab_heads::lab;
use headlab_report::labs::{
    ambiguity_summary, heads_csv, heads_png, heads_summary, induction_summary,
};
use headlab_report::{REPORT_FILE, report_run, write_head_report};
use headlab_train::backend::Backend;
use headlab_train::config::RunConfig;

use crate::common::observers;

/// The shipped lab configs, embedded so `headlab lab` works from any folder.
pub const INDUCTION_CONFIG: &str = include_str!("../../../configs/lab-induction.toml");
/// See [`INDUCTION_CONFIG`].
pub const HEADS_CONFIG: &str = include_str!("../../../configs/lab-heads.toml");
/// See [`INDUCTION_CONFIG`].
pub const AMBIGUITY_CONFIG: &str = include_str!("../../../configs/lab-ambiguity.toml");

/// Which experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LabName {
    /// The induction-head phase change.
    Induction,
    /// One head vs many at equal parameters.
    Heads,
    /// Prepositional-phrase attachment.
    Ambiguity,
}

/// `headlab lab`.
#[derive(Debug, Args)]
pub struct LabArgs {
    /// The experiment.
    #[arg(value_enum)]
    pub name: LabName,
    /// Output directory (default: runs/lab-<name>).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Overwrite the output directory if it exists.
    #[arg(long)]
    pub force: bool,
    /// Override a config key of the lab's runs (repeatable), e.g. --set train.max_iters=300.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Backend of the lab's runs: flex, flex-burn, ndarray or wgpu (overrides train.backend).
    #[arg(long, short)]
    pub backend: Option<String>,
    /// Seeds for `lab heads` (comma-separated; default 1,2,3).
    #[arg(long, value_delimiter = ',')]
    pub seeds: Option<Vec<u64>>,
    /// Head counts for `lab heads` (comma-separated; default 1,2,4,8,16,32,64).
    #[arg(long, value_delimiter = ',')]
    pub heads: Option<Vec<usize>>,
}

impl LabArgs {
    /// `--set`s with `--backend` as one more.
    fn sets(&self) -> Result<Vec<String>> {
        let mut sets = self.set.clone();
        if let Some(backend) = &self.backend {
            backend.parse::<Backend>()?;
            sets.push(format!("train.backend={backend}"));
        }
        Ok(sets)
    }
}

/// Runs the lab.
pub fn run(args: LabArgs) -> Result<()> {
    let name = match args.name {
        LabName::Induction => "induction",
        LabName::Heads => "heads",
        LabName::Ambiguity => "ambiguity",
    };
    if args.name != LabName::Heads && (args.seeds.is_some() || args.heads.is_some()) {
        bail!("--seeds and --heads are for `lab heads`; `lab {name}` takes --set train.seed=N");
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("runs").join(format!("lab-{name}")));
    if out.exists() {
        if !args.force {
            bail!(
                "{} already exists; choose another --out or pass --force",
                out.display()
            );
        }
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    let sets = args.sets()?;
    let reproduce = command_line();
    let summary = match args.name {
        LabName::Induction => {
            let config = config(INDUCTION_CONFIG, "configs/lab-induction.toml", &sets)?;
            let lab = lab::induction(config, &out, &observers)?;
            write_head_report(&out, "headlab lab induction", &lab.report)?;
            run_page(&out, &lab.report)?;
            for file in ["heads.png", "loss.png", REPORT_FILE] {
                std::fs::copy(out.join("run").join(file), out.join(file))
                    .with_context(|| format!("copying {file}"))?;
            }
            induction_summary(&lab, &reproduce)
        }
        LabName::Heads => {
            let base = config(HEADS_CONFIG, "configs/lab-heads.toml", &sets)?;
            let seeds = args.seeds.clone().unwrap_or_else(|| vec![1, 2, 3]);
            let counts = args
                .heads
                .clone()
                .unwrap_or_else(|| vec![1, 2, 4, 8, 16, 32, 64]);
            let lab = lab::heads(base, seeds, &counts, &out, &observers)?;
            for c in &lab.counts {
                for seed in &lab.seeds {
                    let run = out.join(format!("h{}-s{seed}", c.n_heads));
                    report_run(&run)?;
                }
            }
            std::fs::write(out.join("val_loss.csv"), heads_csv(&lab))
                .context("writing val_loss.csv")?;
            heads_png(&lab, &out.join("heads.png"))?;
            heads_summary(&lab, &reproduce)
        }
        LabName::Ambiguity => {
            let config = config(AMBIGUITY_CONFIG, "configs/lab-ambiguity.toml", &sets)?;
            let lab = lab::ambiguity(config, &out, &observers)?;
            write_head_report(&out, "headlab lab ambiguity", &lab.report)?;
            run_page(&out, &lab.report)?;
            std::fs::copy(out.join("run").join(REPORT_FILE), out.join(REPORT_FILE))
                .with_context(|| format!("copying {REPORT_FILE}"))?;
            ambiguity_summary(&lab, &reproduce)
        }
    };
    std::fs::write(out.join("summary.md"), &summary).context("writing summary.md")?;
    println!("{summary}");
    eprintln!("wrote {}", out.join("summary.md").display());
    Ok(())
}

/// The page of a lab's run (`OUT/run/report.html`), with the lab's head table as the run's.
fn run_page(out: &Path, table: &HeadReport) -> Result<()> {
    let run = out.join("run");
    write_head_report(&run.join("heads"), "headlab lab run", table)?;
    report_run(&run)?;
    Ok(())
}

fn config(base: &str, name: &str, sets: &[String]) -> Result<RunConfig> {
    let mut config = RunConfig::from_toml_str(base, name)?;
    config.apply_sets(sets)?;
    config.validate()?;
    Ok(config)
}

/// The command as typed, for the summary's "Reproduce" line: `headlab` and its arguments, each
/// quoted for a POSIX shell where it needs to be.
fn command_line() -> String {
    let quote = |a: String| {
        let plain = a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c));
        if plain && !a.is_empty() {
            a
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    std::iter::once("headlab".to_string())
        .chain(std::env::args().skip(1).map(quote))
        .collect::<Vec<_>>()
        .join(" ")
}

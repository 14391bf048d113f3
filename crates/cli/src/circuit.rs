//! `headlab circuit`: find the edges that carry a task ([`headlab_heads::discovery`]).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use headlab_heads::discovery::{DEFAULT_THRESHOLD, Method, discover};
use headlab_heads::discovery_report::{circuit_csv, circuit_summary};
use headlab_report::circuit::circuit_svg;

use crate::common::{OnRun, open_run, whole_number};
use crate::patch::task;

/// `--method`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum MethodArg {
    /// Automatic circuit discovery (Conmy et al. 2023): try to corrupt every edge, from the
    /// logits back; one forward pass per edge.
    Acdc,
    /// Edge attribution patching (Syed et al. 2023): score every edge from one backward pass,
    /// keep the top ones until the metric is recovered.
    Eap,
}

/// `headlab circuit`.
#[derive(Debug, Args)]
pub struct CircuitArgs {
    /// A run directory made by `headlab train` or `headlab import`.
    pub run: PathBuf,
    /// The prompt whose answer is known.
    #[arg(long)]
    pub clean: String,
    /// The same prompt with something changed, of the same length in tokens.
    #[arg(long)]
    pub corrupted: String,
    /// The clean prompt's next token (one token of the run's vocabulary).
    #[arg(long)]
    pub answer: String,
    /// Measure `logit(answer) - logit(versus)`; without it, the answer's log-probability.
    #[arg(long)]
    pub versus: Option<String>,
    /// How the circuit is searched for.
    #[arg(long, value_enum, default_value = "acdc")]
    pub method: MethodArg,
    /// A share of the clean-minus-corrupted gap: ACDC leaves an edge out when corrupting it
    /// moves the metric by less; EAP keeps the fewest top edges that leave the metric within
    /// it of the whole model's.
    #[arg(long, default_value_t = DEFAULT_THRESHOLD, allow_negative_numbers = true)]
    pub threshold: f64,
    /// The most edges ACDC may try (one forward pass each).
    #[arg(long, default_value_t = 5000, value_parser = whole_number::<usize>)]
    pub max_edges: usize,
    /// Where to write circuit.csv, circuit.svg and summary.txt (default: RUN/circuit).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// The backend and checkpoint to load.
    #[command(flatten)]
    pub on: OnRun,
}

/// Runs `headlab circuit`.
pub fn run(args: CircuitArgs) -> Result<()> {
    let (run, trained, device) =
        open_run(&args.run, args.on.backend.as_deref(), args.on.checkpoint)?;
    let (clean, corrupted, metric) = task(
        &trained.tokenizer,
        (&args.clean, &args.corrupted),
        &args.answer,
        args.versus.as_deref(),
    )?;
    let method = match args.method {
        MethodArg::Acdc => Method::Acdc,
        MethodArg::Eap => Method::Eap,
    };
    let model = &trained.model;
    let found = discover(
        model,
        &clean,
        &corrupted,
        metric,
        method,
        args.threshold,
        args.max_edges,
        &device,
    )?;
    let out = args.out.clone().unwrap_or_else(|| run.root.join("circuit"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let c = &model.config;
    let mlp = model.blocks.iter().all(|b| b.mlp.is_some());
    let text = circuit_summary(&found);
    for (name, body) in [
        ("circuit.csv", circuit_csv(&found)),
        (
            "circuit.svg",
            circuit_svg(&found, c.n_layers, c.n_heads, mlp),
        ),
        ("summary.txt", text.clone()),
    ] {
        let path = out.join(name);
        std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))?;
    }
    print!("{text}");
    eprintln!(
        "wrote circuit.csv, circuit.svg and summary.txt in {}",
        out.display()
    );
    Ok(())
}

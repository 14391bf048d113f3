//! `headlab circuit`: find the edges that carry a task ([`headlab_heads::discovery`]).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use headlab_heads::discovery::{DEFAULT_THRESHOLD, Method, discover, induction_task};
use headlab_heads::discovery_report::{circuit_csv, circuit_summary, small_gap};
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

/// `--task`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TaskArg {
    /// A random run of the run's tokens written twice, against the same with the first copy
    /// replaced: the answer is the token the first copy had next (an induction head's task;
    /// `lab induction`'s model).
    Induction,
    /// The grammar's agreement across an attractor: "the man near the cats" against "the men
    /// near the cats", " sleeps" against " sleep" (or, on characters, "s" against "." after
    /// " sleep").
    Agreement,
}

/// `--task agreement`'s prompts: a plural attractor between the subject and its verb, the
/// subject's number the only difference.
const AGREEMENT: (&str, &str) = ("the man near the cats", "the men near the cats");

/// `headlab circuit`.
#[derive(Debug, Args)]
pub struct CircuitArgs {
    /// A run directory made by `headlab train` or `headlab import`.
    pub run: PathBuf,
    /// A built-in task in place of --clean, --corrupted, --answer and --versus.
    #[arg(long, value_enum, conflicts_with_all = ["clean", "corrupted", "answer", "versus"])]
    pub task: Option<TaskArg>,
    /// The prompt whose answer is known.
    #[arg(long, required_unless_present = "task")]
    pub clean: Option<String>,
    /// The same prompt with something changed, of the same length in tokens.
    #[arg(long, required_unless_present = "task")]
    pub corrupted: Option<String>,
    /// The clean prompt's next token (one token of the run's vocabulary).
    #[arg(long, required_unless_present = "task")]
    pub answer: Option<String>,
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
    let tokenizer = &trained.tokenizer;
    let (clean, corrupted, metric) =
        match (args.task, &args.clean, &args.corrupted, &args.answer) {
            (Some(TaskArg::Induction), ..) => {
                let c = &trained.model.config;
                let unknown: Vec<u32> = tokenizer.unknown_id().into_iter().collect();
                induction_task(c.vocab_size, c.block_size, &unknown)?
            }
            (Some(TaskArg::Agreement), ..) => {
                let (clean, corrupted) = AGREEMENT;
                // One token a word, or one a letter: the verb's ending is the answer.
                task(tokenizer, AGREEMENT, " sleeps", Some(" sleep")).or_else(|_| {
                let (clean, corrupted) = (format!("{clean} sleep"), format!("{corrupted} sleep"));
                task(tokenizer, (&clean, &corrupted), "s", Some("."))
            }).context(
                "--task agreement asks the grammar corpus's words (\"the man near the cats\" \
                 and \" sleeps\"); this run's vocabulary lacks them: give --clean, --corrupted \
                 and --answer",
            )?
            }
            (None, Some(clean), Some(corrupted), Some(answer)) => task(
                tokenizer,
                (clean, corrupted),
                answer,
                args.versus.as_deref(),
            )?,
            _ => anyhow::bail!("give --task, or --clean, --corrupted and --answer"),
        };
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
    let shown = |ids: &[u32]| format!("{:?}", tokenizer.decode(ids));
    let scored = match metric {
        headlab_heads::Metric::LogitDiff { answer, versus } => {
            format!("logit({}) - logit({})", shown(&[answer]), shown(&[versus]))
        }
        headlab_heads::Metric::LogProb { answer } => format!("log p({})", shown(&[answer])),
    };
    // As patch warns: shares of a gap under a nat are shares of noise.
    let warning = small_gap(&found);
    if let Some(w) = &warning {
        eprintln!("warning: {w}");
    }
    let text = format!(
        "task: clean {}, corrupted {}, scored by {scored} after the last token\n{}{}",
        shown(&clean),
        shown(&corrupted),
        warning.map_or(String::new(), |w| format!("warning: {w}\n")),
        circuit_summary(&found)
    );
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

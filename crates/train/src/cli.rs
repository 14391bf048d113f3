//! The `headlab` command line: argument parsing and one function per command.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use headlab_model::Sampling;

use crate::backend::Backend;
use crate::config::RunConfig;
use crate::data::{Split, read_text};
use crate::run::RunDir;
use crate::tokenizer::StreamDecoder;
use crate::trainer::{TrainOptions, batch_tensors, load_dataset, model_config, train};

/// The built-in default run, embedded so `headlab train` works from any folder.
pub const DEFAULT_CONFIG: &str = include_str!("../../../configs/default.toml");

/// Train small GPT-style language models and watch their attention heads specialise.
#[derive(Debug, Parser)]
#[command(name = "headlab", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train a model. With no arguments: the built-in default config on the built-in grammar
    /// corpus (about two minutes on 2 CPU cores), ending with a generated sample.
    Train(TrainArgs),
    /// Generate text from a trained run, streaming tokens as they come.
    Sample(SampleArgs),
    /// Loss, bits per character and perplexity of a trained run on its val or train split, or
    /// on a text file.
    Eval(EvalArgs),
    /// What each attention head does: scores, labels, ablations, maps and an HTML explorer.
    Heads(HeadsArgs),
    /// Rerunnable experiments on head specialisation: induction, heads, ambiguity.
    Lab(crate::lab::LabArgs),
    /// The same model, seed and batches on several backends: step-0 logit difference,
    /// per-step losses against an f32-rounding tolerance, time per phase and peak memory.
    /// Writes compare.md, compare.json, compare.png and compare-gap.png. Exits with 2 if
    /// backends disagree.
    Compare(crate::compare::CompareArgs),
}

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
    /// Where to write heads.csv, heads.json, attention.png and heads.html (default: RUN/heads).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Backend to run on.
    #[arg(long, default_value = "flex")]
    pub backend: String,
    /// Checkpoint to use.
    #[arg(long, value_enum, default_value_t = Checkpoint::Best)]
    pub checkpoint: Checkpoint,
}

/// `headlab train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// TOML config with [model], [train] and [data] (default: the built-in configs/default.toml).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Override a config key, e.g. --set train.lr=3e-4 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Backend: flex, ndarray or wgpu (overrides train.backend).
    #[arg(long)]
    pub backend: Option<String>,
    /// Run directory to create (default: runs/<config name>, or runs/<config name>-N if taken).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Continue the run in this directory from its last checkpoint.
    /// `--set` still applies, e.g. `--set train.max_iters=4000` to train longer.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "out", "force", "seed"])]
    pub resume: Option<PathBuf>,
    /// Overwrite the run directory if it exists.
    #[arg(long)]
    pub force: bool,
    /// Random seed (overrides train.seed).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// `headlab sample`.
#[derive(Debug, Args)]
pub struct SampleArgs {
    /// A run directory made by `headlab train`.
    pub run: PathBuf,
    /// Text to continue (default: a newline).
    #[arg(long, default_value = "\n")]
    pub prompt: String,
    /// Tokens to generate per sample.
    #[arg(long, default_value_t = 300)]
    pub max_new_tokens: usize,
    /// Softmax temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// Keep only the k most likely tokens.
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches p.
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Number of samples.
    #[arg(long, default_value_t = 1)]
    pub num_samples: usize,
    /// Sampling seed.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Backend to run on.
    #[arg(long, default_value = "flex")]
    pub backend: String,
    /// Checkpoint to use.
    #[arg(long, value_enum, default_value_t = Checkpoint::Best)]
    pub checkpoint: Checkpoint,
}

/// Which checkpoint of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Checkpoint {
    /// Lowest val loss.
    Best,
    /// Most recent.
    Last,
}

impl Checkpoint {
    fn name(self) -> &'static str {
        match self {
            Checkpoint::Best => "best",
            Checkpoint::Last => "last",
        }
    }
}

/// `headlab eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// A run directory made by `headlab train`.
    pub run: PathBuf,
    /// Split of the run's own data.
    #[arg(long, value_enum, default_value_t = SplitArg::Val, conflicts_with = "file")]
    pub split: SplitArg,
    /// Evaluate on this UTF-8 text file instead.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Backend to run on.
    #[arg(long, default_value = "flex")]
    pub backend: String,
    /// Checkpoint to use.
    #[arg(long, value_enum, default_value_t = Checkpoint::Best)]
    pub checkpoint: Checkpoint,
}

/// A data split on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SplitArg {
    /// The last 10% (by default) of the text.
    Val,
    /// The first 90%.
    Train,
}

/// Resolves the config of `headlab train` from the file, `--set`, `--backend` and `--seed`.
pub fn resolve_config(args: &TrainArgs) -> Result<(RunConfig, String)> {
    let (mut config, name) = match &args.config {
        Some(path) => {
            let name = path
                .file_stem()
                .map_or("run".into(), |s| s.to_string_lossy().into_owned());
            (RunConfig::load(path)?, name)
        }
        None => (
            RunConfig::from_toml_str(DEFAULT_CONFIG, "built-in configs/default.toml")?,
            "default".into(),
        ),
    };
    config.apply_sets(&args.set)?;
    if let Some(backend) = &args.backend {
        backend.parse::<Backend>()?;
        config.train.backend = backend.clone();
    }
    if let Some(seed) = args.seed {
        config.train.seed = seed;
    }
    Ok((config, name))
}

/// `runs/<name>`, or `runs/<name>-2`, `-3`, ... when taken: without `--out`, a new run never
/// collides with an old one (and never overwrites it).
pub(crate) fn fresh_run_dir(name: &str) -> PathBuf {
    let base = Path::new("runs");
    let mut dir = base.join(name);
    let mut n = 2;
    while dir.exists() {
        dir = base.join(format!("{name}-{n}"));
        n += 1;
    }
    dir
}

/// Runs `headlab train`.
pub fn cmd_train(args: TrainArgs) -> Result<()> {
    let options = match &args.resume {
        Some(dir) => TrainOptions {
            config: RunConfig::default(),
            out: dir.clone(),
            force: false,
            resume: true,
            resume_sets: args.set.clone(),
            print_sample: true,
        },
        None => {
            let (config, name) = resolve_config(&args)?;
            TrainOptions {
                config,
                out: args.out.clone().unwrap_or_else(|| fresh_run_dir(&name)),
                force: args.force,
                resume: false,
                resume_sets: Vec::new(),
                print_sample: true,
            }
        }
    };
    let summary = train(options)?;
    eprintln!(
        "done: train loss {:.4}, val loss {:.4}; run saved in {} (see loss.png, metrics.csv; \
         `headlab sample {}` for more text)",
        summary.train_loss,
        summary.val_loss,
        summary.run.display(),
        summary.run.display()
    );
    Ok(())
}

/// A run's model on a backend, with its tokenizer and config.
fn open_run(
    dir: &Path,
    backend: &str,
    checkpoint: Checkpoint,
) -> Result<(
    RunDir,
    RunConfig,
    crate::tokenizer::Tokenizer,
    headlab_model::Gpt,
    burn::tensor::Device,
)> {
    let backend: Backend = backend.parse()?;
    let run = RunDir::open(dir)?;
    let config = run.config()?;
    let tokenizer = run.tokenizer()?;
    let device = backend.device()?;
    let gpt = model_config(&config, tokenizer.vocab_size());
    let (model, _) = run
        .load_model(checkpoint.name(), &gpt, &device)
        .with_context(|| {
            format!(
                "loading the {} checkpoint of {}",
                checkpoint.name(),
                dir.display()
            )
        })?;
    Ok((run, config, tokenizer, model, device))
}

/// Runs `headlab sample`.
pub fn cmd_sample(args: SampleArgs) -> Result<()> {
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    };
    sampling.validate().map_err(|e| {
        use headlab_model::GenerateError as G;
        let option = match e {
            G::Temperature(_) => "--temperature",
            G::TopK => "--top-k",
            G::TopP(_) => "--top-p",
            _ => "sampling option",
        };
        anyhow::anyhow!("{option}: {e}")
    })?;
    let (_, _, tokenizer, model, _) = open_run(&args.run, &args.backend, args.checkpoint)?;
    let prompt = tokenizer
        .encode(&args.prompt)
        .context("encoding --prompt")?;
    if prompt.is_empty() {
        bail!("--prompt is empty: give at least one character");
    }
    let mut stdout = std::io::stdout();
    for i in 0..args.num_samples {
        if args.num_samples > 1 {
            println!("--- sample {} ---", i + 1);
        }
        print!("{}", args.prompt);
        let mut stream = StreamDecoder::new();
        let s = Sampling {
            seed: sampling.seed.wrapping_add(i as u64),
            ..sampling
        };
        model.generate(&prompt, args.max_new_tokens, &s, |token| {
            print!("{}", stream.push(&tokenizer.decode_token_bytes(&[token])));
            let _ = stdout.flush();
        })?;
        println!("{}", stream.finish());
    }
    Ok(())
}

/// Runs `headlab eval`: mean loss over every full window of the text, perplexity = e^loss,
/// and bits per character (total nats / characters predicted / ln 2), which compares across
/// tokenizers.
pub fn cmd_eval(args: EvalArgs) -> Result<()> {
    let (_, config, tokenizer, model, device) =
        open_run(&args.run, &args.backend, args.checkpoint)?;
    let (tokens, what) = match &args.file {
        Some(path) => {
            let text = read_text(path)?;
            (
                tokenizer
                    .encode(&text)
                    .with_context(|| format!("encoding {}", path.display()))?,
                path.display().to_string(),
            )
        }
        None => {
            let data = load_dataset(&config, tokenizer.clone())?;
            let split = match args.split {
                SplitArg::Val => Split::Val,
                SplitArg::Train => Split::Train,
            };
            (data.tokens(split).to_vec(), format!("{split} split"))
        }
    };
    let t = config.model.block_size;
    if tokens.len() < 2 {
        bail!("{what} has {} tokens; eval needs at least 2", tokens.len());
    }
    let (nats, count) = eval_tokens(&model, &tokens, t, &device);
    let loss = nats / count as f64;
    // The first token is context only: bits per character covers the predicted ones.
    let chars = tokenizer.char_count(&tokens[1..]);
    let bpc = crate::data::bits_per_char(nats, chars);
    println!(
        "{what}: {count} tokens, loss {loss:.4} nats/token, {bpc:.4} bits/char over {chars} \
         chars, perplexity {:.3}",
        loss.exp()
    );
    Ok(())
}

/// Total next-token loss (nats) and count over `tokens`, in non-overlapping windows of at
/// most `t` tokens (each window starts fresh, as in training).
pub fn eval_tokens(
    model: &headlab_model::Gpt,
    tokens: &[u32],
    t: usize,
    device: &burn::tensor::Device,
) -> (f64, usize) {
    let mut nats = 0.0;
    let mut count = 0;
    let mut start = 0;
    while start + 1 < tokens.len() {
        let len = t.min(tokens.len() - 1 - start);
        let (x, y) = (
            &tokens[start..start + len],
            &tokens[start + 1..start + 1 + len],
        );
        let (x, y) = batch_tensors(x, y, 1, len, device);
        let loss: f32 = headlab_model::cross_entropy(model.forward(x), y, None).into_scalar();
        nats += loss as f64 * len as f64;
        count += len;
        start += len;
    }
    (nats, count)
}

/// Runs `headlab heads`.
pub fn cmd_heads(args: HeadsArgs) -> Result<()> {
    let (run, config, tokenizer, model, device) =
        open_run(&args.run, &args.backend, args.checkpoint)?;
    let data = load_dataset(&config, tokenizer.clone())?;
    let text = match (&args.text, &args.file) {
        (Some(text), _) => Some(text.clone()),
        (None, Some(path)) => Some(read_text(path)?),
        (None, None) => None,
    };
    let block = config.model.block_size;
    if block < 3 {
        bail!(
            "head analysis needs model.block_size >= 3 (a token and two copies of another); this run has {block}"
        );
    }
    let map_ids = match &text {
        Some(text) => {
            let ids = tokenizer
                .encode(text)
                .context("encoding the text for the attention maps")?;
            if ids.len() < 2 {
                bail!("the text has {} tokens; give at least 2", ids.len());
            }
            ids[..ids.len().min(block)].to_vec()
        }
        None => data.tokens(Split::Val)[..block.min(32)].to_vec(),
    };
    let probe = crate::heads::Probe::new(
        &data,
        block,
        tokenizer.vocab_size(),
        text.as_ref().map(|_| map_ids.clone()),
        config.train.seed,
    )?;
    let out = args.out.clone().unwrap_or_else(|| run.root.join("heads"));
    let title = format!("headlab heads: {}", run.root.display());
    let report =
        crate::heads::write_report(&out, &title, &model, &tokenizer, &probe, &map_ids, &device)
            .map_err(anyhow::Error::msg)?;
    print!("{}", report.table);
    eprintln!(
        "wrote {0}/heads.csv, heads.json, attention.png and heads.html (open it in a browser)",
        out.display()
    );
    Ok(())
}

/// Parses arguments and runs the command.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train(args) => cmd_train(args),
        Command::Sample(args) => cmd_sample(args),
        Command::Eval(args) => cmd_eval(args),
        Command::Heads(args) => cmd_heads(args),
        Command::Lab(args) => crate::lab::run(args),
        Command::Compare(args) => {
            let (config, name) = match &args.config {
                Some(path) => (
                    RunConfig::load(path)?,
                    path.file_stem()
                        .map_or("run".into(), |s| s.to_string_lossy().into_owned()),
                ),
                None => (
                    RunConfig::from_toml_str(DEFAULT_CONFIG, "built-in configs/default.toml")?,
                    "default".to_string(),
                ),
            };
            crate::compare::cmd_compare(args, config, &name)
        }
    }
}

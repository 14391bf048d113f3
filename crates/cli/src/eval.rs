//! `headlab eval`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use headlab_data::{Split, bits_per_char, read_text};
use headlab_train::eval::LossSum;
use headlab_train::grammar::{grammaticality, is_grammar_run};
use headlab_train::trainer::load_dataset;

use crate::common::{OnRun, open_run};

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
    /// The backend and checkpoint to load.
    #[command(flatten)]
    pub on: OnRun,
}

/// A data split on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SplitArg {
    /// The last 10% (by default) of the text.
    Val,
    /// The first 90%.
    Train,
}

/// Runs `headlab eval`: mean loss over every full window of the text, perplexity = e^loss,
/// and bits per character (total nats / characters predicted / ln 2), which compares across
/// tokenizers.
pub fn run(args: EvalArgs) -> Result<()> {
    let (run, trained, device) =
        open_run(&args.run, args.on.backend.as_deref(), args.on.checkpoint)?;
    let (config, tokenizer, model) = (trained.config, trained.tokenizer, trained.model);
    let (tokens, what) = match &args.file {
        Some(path) => {
            let text = read_text(path).context("--file")?;
            (
                tokenizer
                    .encode(&text)
                    .with_context(|| format!("encoding {}", path.display()))?,
                path.display().to_string(),
            )
        }
        None => {
            if run.is_imported() && config.data.source().is_err() {
                bail!(
                    "{} was imported and has no training text to split: measure it on a text \
                     with --file FILE",
                    run.root.display()
                );
            }
            let data = load_dataset(&run, &config, tokenizer.clone()).context(
                "eval reads the split from the run's own text: restore it, or give --file FILE \
                 to measure the run on another text",
            )?;
            let split = match args.split {
                SplitArg::Val => Split::Val,
                SplitArg::Train => Split::Train,
            };
            (
                data.tokens(split).to_vec(0..data.len(split)),
                format!("{split} split"),
            )
        }
    };
    let t = config.model.block_size;
    if tokens.len() < 2 {
        bail!("{what} has {} tokens; eval needs at least 2", tokens.len());
    }
    let LossSum {
        nats,
        tokens: count,
    } = LossSum::of_tokens(&model, &tokens, t, &device);
    let loss = nats / count as f64;
    // The first token is context only: bits per character covers the predicted ones.
    let chars = tokenizer.char_count(&tokens[1..]);
    let bpc = bits_per_char(nats, chars);
    println!(
        "{what}: {count} tokens, loss {loss:.4} nats/token, {bpc:.4} bits/char over {chars} \
         chars, perplexity {:.3}",
        loss.exp()
    );
    // A model of the grammar corpus is also judged by what it writes.
    let n = config.train.grammar_sentences;
    if args.file.is_none()
        && is_grammar_run(&config)
        && let Some(g) = grammaticality(&model, &tokenizer, n, config.train.seed)
    {
        println!(
            "grammar: of {} sampled sentences {:.1}% well-formed, {:.1}% agreeing \
             (train.grammar_sentences sets how many)",
            g.sentences,
            100.0 * g.well_formed,
            100.0 * g.agreeing
        );
    }
    Ok(())
}

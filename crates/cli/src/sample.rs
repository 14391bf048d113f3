//! `headlab sample`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use headlab_data::StreamDecoder;
use headlab_model::Sampling;

use crate::common::{OnRun, open_run, whole_number};

/// `headlab sample`.
#[derive(Debug, Args)]
pub struct SampleArgs {
    /// A run directory made by `headlab train`.
    pub run: PathBuf,
    /// Text to continue (default: a newline).
    #[arg(long, default_value = "\n")]
    pub prompt: String,
    /// Tokens to generate per sample.
    #[arg(long, default_value_t = 300, allow_negative_numbers = true, value_parser = whole_number::<usize>)]
    pub max_new_tokens: usize,
    /// Softmax temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Keep only the k most likely tokens.
    #[arg(long, allow_negative_numbers = true, value_parser = whole_number::<usize>)]
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches p.
    #[arg(long, allow_negative_numbers = true)]
    pub top_p: Option<f32>,
    /// Number of samples.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = whole_number::<usize>)]
    pub num_samples: usize,
    /// Sampling seed.
    #[arg(long, default_value_t = 1337, allow_negative_numbers = true, value_parser = whole_number::<u64>)]
    pub seed: u64,
    /// The backend and checkpoint to load.
    #[command(flatten)]
    pub on: OnRun,
}

/// Runs `headlab sample`.
pub fn run(args: SampleArgs) -> Result<()> {
    if args.num_samples == 0 {
        bail!("--num-samples is 0: nothing would be sampled; give 1 or more (default 1)");
    }
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
    let (_, trained, _) = open_run(&args.run, args.on.backend.as_deref(), args.on.checkpoint)?;
    let (tokenizer, model) = (trained.tokenizer, trained.model);
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

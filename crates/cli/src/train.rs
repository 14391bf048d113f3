//! `headlab train`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use headlab_kernels::BackendKind;
use headlab_train::config::RunConfig;
use headlab_train::grammar::percent;
use headlab_train::trainer::{TrainOptions, train};

use headlab_report::report_run;

use crate::common::{Checkpoint, OnRun, fresh_run_dir, load_config, observers, whole_number};
use crate::heads::HeadsArgs;

/// `headlab train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// TOML config with [model], [train] and [data] (default: the built-in configs/default.toml).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Override a config key, e.g. --set train.lr=3e-4 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Backend: flex, flex-burn (flex on Burn's own ops), ndarray or wgpu (overrides
    /// train.backend).
    #[arg(long, short)]
    pub backend: Option<String>,
    /// Run directory to create (default: runs/<config name>, or runs/<config name>-N if taken).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Continue the run in this directory from its last checkpoint.
    /// `--set` and `--backend` still apply, e.g. `--set train.max_iters=4000` to train longer.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "out", "force", "seed"])]
    pub resume: Option<PathBuf>,
    /// Overwrite the run directory if it exists.
    #[arg(long)]
    pub force: bool,
    /// Random seed (overrides train.seed).
    #[arg(long, allow_negative_numbers = true, value_parser = whole_number::<u64>)]
    pub seed: Option<u64>,
}

/// Resolves the config of `headlab train` from the file, `--set`, `--backend` and `--seed`.
pub fn resolve_config(args: &TrainArgs) -> Result<(RunConfig, String)> {
    let (mut config, mut name) = load_config(args.config.as_deref())?;
    config.apply_sets(&args.set)?;
    // Without a config file, a run on the user's own text is named after that text.
    if let (None, Some(path)) = (&args.config, &config.data.path)
        && let Some(stem) = path.file_stem()
    {
        name = stem.to_string_lossy().into_owned();
    }
    if let Some(backend) = &args.backend {
        backend.parse::<BackendKind>()?;
        config.train.backend = backend.clone();
    }
    if let Some(seed) = args.seed {
        config.train.seed = seed;
    }
    Ok((config, name))
}

/// Runs `headlab train`.
pub fn run(args: TrainArgs) -> Result<()> {
    let options = match &args.resume {
        Some(dir) => {
            let mut resume_sets = args.set.clone();
            if let Some(backend) = &args.backend {
                backend.parse::<BackendKind>()?;
                resume_sets.push(format!("train.backend={backend}"));
            }
            TrainOptions {
                config: RunConfig::default(),
                out: dir.clone(),
                force: false,
                resume: true,
                resume_sets,
                print_sample: true,
                init: None,
                name_in_progress: false,
            }
        }
        None => {
            let (config, name) = resolve_config(&args)?;
            // Only a config that will train: a bad one gets its one error line and no more.
            if config.validate().is_ok() {
                for line in config.train.warnings() {
                    headlab_train::log_line!("{line}");
                }
            }
            TrainOptions {
                config,
                out: args.out.clone().unwrap_or_else(|| fresh_run_dir(&name)),
                force: args.force,
                resume: false,
                resume_sets: Vec::new(),
                print_sample: true,
                init: None,
                name_in_progress: false,
            }
        }
    };
    let summary = train(options, &mut observers())?;
    let run = summary.run.display();
    // The checkpoints and results are saved: a stop request from here on ends at once.
    headlab_train::stop::nothing_at_stake(format!(
        "interrupted after training: the run is complete and saved in {run}; `headlab heads \
         {run}` makes its head table, `headlab report {run}` its page"
    ));
    let grammar = summary.grammar.map_or(String::new(), |g| {
        format!(
            "; of {} sampled sentences {} well-formed, {} agreeing",
            g.sentences,
            percent(g.well_formed),
            percent(g.agreeing)
        )
    });
    headlab_train::log_line!(
        "done: train loss {:.4}, val loss {:.4}{grammar}; run saved in {} (`headlab sample {}` \
         for more text)",
        summary.train_loss,
        summary.val_loss,
        summary.run.display(),
        summary.run.display()
    );
    let r = &summary.result;
    let full = r.val_full_loss.map_or(String::new(), |loss| {
        let what = if r.val_full_tokens + 1 >= r.val_split_tokens {
            format!("the whole val split ({} tokens", r.val_full_tokens)
        } else {
            format!(
                "the val split's first {} of {} tokens (train.final_eval_tokens",
                r.val_full_tokens, r.val_split_tokens
            )
        };
        format!("; {what}, windows of {}): {loss:.4}", r.block_size)
    });
    headlab_train::log_line!(
        "compute: {:.2} TFLOP (6N + 12LdT = {:.2} MFLOP per token, {} tokens) in {:.1} s of \
         training steps{full}",
        r.compute_flops / 1e12,
        r.flops_per_token / 1e6,
        r.tokens,
        r.train_s
    );
    if let Some(exchange) = r.exchange_s {
        headlab_train::log_line!(
            "data parallel: {} ranks; {exchange:.1} s of the {:.1} s in steps averaging \
             gradients ({:.0}%)",
            r.world_size,
            r.train_s,
            100.0 * exchange / r.train_s.max(1e-9)
        );
    }
    if summary.stopped {
        crate::report::tell(&report_run(&summary.run)?);
        return Err(headlab_train::TrainError::InterruptedAfterTraining {
            step: r.steps,
            run: summary.run.clone(),
        }
        .into());
    }
    // The final model's head table, then the page that shows it with the rest of the run.
    headlab_train::stop::test_point(format_args!("heads"));
    let heads = HeadsArgs {
        run: summary.run.clone(),
        text: None,
        file: None,
        out: None,
        on: OnRun {
            backend: None,
            checkpoint: Checkpoint::Last,
        },
    };
    match crate::heads::write(&heads, Some(summary.dataset)) {
        Ok((_, _, Some(syntax))) => {
            headlab_train::log_line!(
                "{}",
                headlab_heads::syntax_report::block(&syntax).trim_end()
            )
        }
        Ok(_) => {}
        Err(e) => headlab_train::log_line!("note: the head table was not made: {e:#}"),
    }
    crate::report::tell(&report_run(&summary.run)?);
    Ok(())
}

//! Training: the run config, run directories and checkpoints, one optimizer step, the loop,
//! held-out evaluation.
//!
//! - [`config`]: the TOML run config ([`RunConfig`]: `[model]`, `[train]`, `[data]`) and
//!   `--set` overrides.
//! - [`run`]: run directories, checkpoints with manifests; [`stop`]: Ctrl-C and SIGTERM.
//! - [`optim`], [`schedule`]: Optimizer and the learning rate.
//! - [`step`]: one optimizer step (its learning rate, micro-batches, clipping, AdamW), the one
//!   that `headlab compare` and the f64 truth take too.
//! - [`eval`]: loss on held-out text; [`grammar`]: how well a grammar run writes grammar.
//! - [`metrics`]: the `metrics.csv` file.
//! - [`world`], [`parallel`]: data parallelism under MPI (the `mpi` feature): ranks, shards,
//!   the gradients' all-reduce.
//! - [`trainer`]: the loop, with [`trainer::Observer`]s for everything it does not own
//!   (head tracking, plots).
//!
//! This crate returns data and writes only what a run needs to resume (config, tokenizer,
//! checkpoints, metrics); it must not depend on head analysis, reports or the CLI.

/// `eprintln!` that never panics: when stderr's reader went away (`headlab train 2>&1 | head`)
/// the line is dropped and the run goes on to its checkpoint, where `eprintln!` would end it.
#[macro_export]
macro_rules! log_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod config;
pub mod eval;
pub mod grammar;
pub mod metrics;
pub mod optim;
pub mod parallel;
pub mod run;
pub mod schedule;
pub mod step;
pub mod stop;
pub mod trainer;
pub mod world;

pub use config::RunConfig;
pub use run::RunDir;
pub use trainer::{Observer, TrainError, TrainOptions, TrainSummary, train};

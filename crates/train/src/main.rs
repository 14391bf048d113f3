//! `headlab`: a thin binary over the `headlab_train` library.

use std::process::ExitCode;

use clap::Parser;
use headlab_train::cli::{Cli, run};
use headlab_train::trainer::TrainError;

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            // 3: training diverged (a checkpoint is kept); 2: bad input of any kind.
            match error.downcast_ref::<TrainError>() {
                Some(TrainError::Diverged { .. }) => ExitCode::from(3),
                _ => ExitCode::from(2),
            }
        }
    }
}

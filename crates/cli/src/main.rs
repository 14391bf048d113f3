//! `headlab`: the command line over headlab's libraries, one module per command. Errors
//! are `anyhow` here and typed in the libraries.
//!
//! Exit codes: 0 success; 2 bad input of any kind (config, data, run directory, checkpoint,
//! backend, options), with a message naming what is wrong and how to fix it, or a backend that
//! fails `headlab compare`; 3 training diverged, in a run or a lab (a run's last good
//! checkpoint is kept); 130 (SIGINT, Ctrl-C) or 143 (SIGTERM): stopped by that signal, with
//! what it had saved (a run's checkpoint to resume from, a lab's finished runs, `lab
//! grokking`'s results so far).
//! Other commands end quietly when their output's reader goes away (`| head`), as Unix tools
//! do.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use headlab_labs::LabError;
use headlab_train::trainer::TrainError;

mod circuit;
mod common;
mod compare;
mod eval;
mod export;
mod heads;
mod import;
mod lab;
mod lens;
mod patch;
mod prune;
mod report;
mod sample;
mod slurm;
mod sweep;
mod train;

/// Train small GPT-style language models and watch their attention heads specialise.
#[derive(Debug, Parser)]
#[command(name = "headlab", version, about, long_about = None)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Train a model. With no arguments: the built-in default config on the built-in grammar
    /// corpus (about a minute on 2 cores; the README's first section has today's time and
    /// its CPU), ending with a generated sample, its grammaticality and the run's page,
    /// report.html.
    Train(train::TrainArgs),
    /// Generate text from a trained run, streaming tokens as they come.
    Sample(sample::SampleArgs),
    /// Loss, bits per character and perplexity of a trained run on its val or train split, or
    /// on a text file.
    Eval(eval::EvalArgs),
    /// What each attention head does: scores, labels, ablations, maps and an HTML explorer.
    Heads(heads::HeadsArgs),
    /// The logit lens: what the model would predict after each layer (and after each
    /// attention), read through its final LayerNorm and LM head, with the loss on the text at
    /// every stage. Writes lens.csv and lens.png.
    Lens(lens::LensArgs),
    /// Activation patching: run a clean and a corrupted prompt of the same length, put each
    /// of the clean run's activations (the stream entering each block, each attention and MLP
    /// output at each position, each head's output) into the corrupted run, and measure how
    /// much of the clean answer comes back. Writes patch.csv and one PNG per site.
    Patch(patch::PatchArgs),
    /// Find the circuit of a task: the edges of the model's graph (each sender's write into
    /// each head's Q, K or V input, each MLP, the logits) without which the clean prompt's
    /// answer falls back to the corrupted one's, by ACDC or edge attribution patching. Writes
    /// circuit.csv, circuit.svg and summary.txt.
    Circuit(circuit::CircuitArgs),
    /// One run per point of a grid of settings (--grid model.n_heads=1,2,4 --grid
    /// train.seed=1,2), here or as a Slurm job array, resumable, ending with a results table
    /// and page (results.csv, results.md, results.html).
    Sweep(sweep::SweepArgs),
    /// Remove heads one at a time in order of gradient importance, recomputed after each
    /// removal (Michel et al. 2019), and in reverse and random orders as baselines: the val
    /// loss (and on a grammar run forced-choice agreement) after each removal. Writes
    /// prune.csv, prune.png and summary.txt.
    Prune(prune::PruneArgs),
    /// A run's page, report.html: losses, every head's scores and attention map through
    /// training on a step slider, the head table and a sample. `train` writes it at the end;
    /// this redraws it, e.g. for a run that was stopped.
    Report(report::ReportArgs),
    /// Rerunnable experiments on head specialisation: induction, heads, ambiguity, symmetry,
    /// syntax, relations, grokking.
    Lab(lab::LabArgs),
    /// The same model, seed and batches on several backends, each against an f64 ground truth
    /// (every sublayer, the losses, the gradients) within a bound from f32 rounding, with time
    /// per phase and peak memory. Writes compare.html, compare.md, compare.json, compare.png and
    /// compare-gap.png. Exits with 2 if a backend fails, naming where.
    Compare(compare::CompareArgs),
    /// Write a trained run in another tool's format: `export hf RUN --out DIR` for Hugging
    /// Face's GPT-2 (transformers, TransformerLens).
    Export(export::ExportArgs),
    /// Read a model trained elsewhere (a Hugging Face GPT-2 folder, a nanoGPT checkpoint)
    /// into a run directory, to sample from, evaluate, analyse its heads or fine-tune.
    Import(import::ImportArgs),
}

/// Runs the command, on the thread that will make the MPI calls when `train` runs under a
/// launcher ([`headlab_train::world`]).
fn run(cli: Cli) -> Result<()> {
    start_world(&cli)?;
    let world = headlab_train::world::get();
    let done = if world.is_root() {
        let done = run_command(cli);
        headlab_train::parallel::release(world);
        done
    } else {
        follow(world)
    };
    headlab_train::world::finish();
    done
}

/// A rank other than 0 of an MPI launch: its share of every run rank 0 trains, whatever
/// command rank 0 runs. What rank 0 reports too (a divergence, a drift, a stop) ends it
/// quietly with rank 0's exit code.
fn follow(world: &headlab_train::world::World) -> Result<()> {
    match headlab_train::trainer::follow() {
        Ok(()) => Ok(()),
        Err(e) if e.follower_should_print() => {
            Err(anyhow::Error::new(e).context(format!("rank {}", world.rank())))
        }
        Err(e) => {
            let code = match e {
                TrainError::Diverged { .. } => 3,
                TrainError::Interrupted { .. } => headlab_train::stop::exit_code(),
                _ => 2,
            };
            Err(Told(code).into())
        }
    }
}

/// An error already told by another rank (rank 0 speaks for the run): exit with this code,
/// printing nothing.
#[derive(Debug)]
pub struct Told(pub u8);

impl std::fmt::Display for Told {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "told by rank 0 (exit {})", self.0)
    }
}

impl std::error::Error for Told {}

/// Under `mpirun` or `srun` with several ranks: MPI for `headlab train`, a refusal for the
/// other commands (they run as one process). Only rank 0 prints the refusal.
fn start_world(cli: &Cli) -> Result<()> {
    use headlab_train::world::{init, launch_from};
    let Some(launch) = launch_from(|k| std::env::var(k).ok()).filter(|l| l.size > 1) else {
        return Ok(());
    };
    let refusal = match &cli.command {
        Command::Train(_) | Command::Sweep(sweep::SweepArgs { point: Some(_), .. }) => match init()
        {
            Ok(world) => {
                // From here rank 0 speaks for the run: a signal ends the others silently
                // until they train.
                if !world.is_root() {
                    headlab_train::stop::nothing_at_stake(String::new());
                }
                return Ok(());
            }
            Err(e) => anyhow::Error::new(e),
        },
        _ => anyhow::anyhow!(
            "only `headlab train` (and a sweep's task, `headlab sweep DIR --point K`) runs as \
             several ranks ({}): the other commands run as one process; run this one without \
             mpirun or srun",
            launch.by
        ),
    };
    if launch.rank == 0 {
        Err(refusal)
    } else {
        Err(Told(2).into())
    }
}

fn run_command(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train(args) => train::run(args),
        Command::Sample(args) => sample::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Heads(args) => heads::run(args),
        Command::Lens(args) => lens::run(args),
        Command::Patch(args) => patch::run(args),
        Command::Circuit(args) => circuit::run(args),
        Command::Sweep(args) => sweep::run(args),
        Command::Prune(args) => prune::run(args),
        Command::Report(args) => report::run(args),
        Command::Lab(args) => lab::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Export(args) => export::run(args),
        Command::Import(args) => import::run(args),
    }
}

/// glibc's malloc hands large tensor buffers back to the OS and faults them in again at the
/// next step (measured in bench/NOTES.md); mimalloc reuses them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    quiet_mesa();
    quiet_panics();
    let cli = Cli::parse();
    match cli.command {
        Command::Train(_) => catch_stop_requests("save a checkpoint", "the checkpoint is"),
        // A lab trains for minutes: like training, it keeps SIGPIPE ignored, so a log reader
        // that goes away (`headlab lab heads 2>&1 | head`) costs lines, not the lab's runs;
        // and a stop request ends its training as it ends a run's (grokking's loop keeps no
        // checkpoint: it writes what it has).
        Command::Lab(ref lab) if matches!(lab.name, lab::LabName::Grokking { .. }) => {
            catch_stop_requests("write what the lab has", "its files are")
        }
        Command::Lab(_) => catch_stop_requests("save a checkpoint", "the checkpoint is"),
        // A sweep trains like a lab, run after run.
        Command::Sweep(_) => catch_stop_requests("save a checkpoint", "the checkpoint is"),
        _ => quiet_broken_pipe(),
    }
    match headlab_kernels::on_compute_pool(|| run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.downcast_ref::<Told>().is_some() => {
            ExitCode::from(error.downcast_ref::<Told>().map_or(2, |t| t.0))
        }
        Err(error)
            if matches!(
                error.downcast_ref(),
                Some(
                    LabError::Interrupted { .. } | LabError::Between { .. } | LabError::Cut { .. }
                )
            ) =>
        {
            eprintln!("{error}");
            ExitCode::from(headlab_train::stop::exit_code())
        }
        Err(error) if matches!(error.downcast_ref(), Some(LabError::Diverged { .. })) => {
            eprintln!("error: {}", message(&error));
            ExitCode::from(3)
        }
        Err(error) => match error.downcast_ref::<TrainError>() {
            Some(
                interrupted @ (TrainError::Interrupted { .. }
                | TrainError::InterruptedAfterTraining { .. }),
            ) => {
                eprintln!("{interrupted}");
                ExitCode::from(headlab_train::stop::exit_code())
            }
            Some(TrainError::Diverged { .. }) => {
                eprintln!("error: {}", message(&error));
                ExitCode::from(3)
            }
            _ => {
                eprintln!("error: {}", message(&error));
                ExitCode::from(2)
            }
        },
    }
}

/// The error and its causes, each cause once: most messages already quote their source
/// (`cannot read X: No such file`), and repeating it would bury the fix they end with.
fn message(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(cause.trim()) {
            text = format!("{text}: {cause}");
        }
    }
    text
}

/// Mesa's Vulkan drivers (lavapipe among them) print "XDG_RUNTIME_DIR is invalid or not set"
/// four times when wgpu starts without one, as in a container, a CI job or under sudo. Where
/// it is unset or not a folder, point it at a private one (mode 0700, as Mesa requires) first.
#[cfg(unix)]
#[allow(unsafe_code)]
fn quiet_mesa() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let set = std::env::var_os("XDG_RUNTIME_DIR");
    if set.is_some_and(|dir| std::path::Path::new(&dir).is_dir()) {
        return;
    }
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("headlab-runtime-{uid}"));
    let private = std::fs::Permissions::from_mode(0o700);
    if std::fs::create_dir_all(&dir).is_err() || std::fs::set_permissions(&dir, private).is_err() {
        return;
    }
    // SAFETY: the first call in `main`, before any other thread exists, so nothing reads the
    // environment while it changes.
    unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
}

#[cfg(not(unix))]
fn quiet_mesa() {}

/// A panic is a bug in headlab, never the user's input (that gets an `error:` message): say
/// so in one line, without Rust's backtrace note, unless RUST_BACKTRACE asks for the details.
fn quiet_panics() {
    if std::env::var_os("RUST_BACKTRACE").is_some() {
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown cause".into());
        let at = info
            .location()
            .map(|l| format!(" ({}:{})", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "error: internal error in headlab: {what}{at}. This is a bug, not a problem with \
             your input; please report it with the command you ran (set RUST_BACKTRACE=1 for \
             the details)"
        );
    }));
}

/// SIGINT (Ctrl-C) and SIGTERM ask training to stop after its step and `save` (a checkpoint
/// of the step it prints), however often they arrive (`timeout` signals the child and then its
/// group; supervisors repeat SIGTERM); see `headlab_train::stop`. `saving` names what is being
/// saved when a request repeats. Ctrl-\ (SIGQUIT) still quits at once.
fn catch_stop_requests(save: &'static str, saving: &'static str) {
    use headlab_train::stop::{Requested, request};
    use signal_hook::consts::{SIGINT, SIGTERM};
    use signal_hook::iterator::Signals;

    let mut signals = match Signals::new([SIGINT, SIGTERM]) {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("warning: Ctrl-C will stop training at once; it cannot {save} ({e})");
            return;
        }
    };
    std::thread::spawn(move || {
        let mut first = None;
        for signal in signals.forever() {
            let name = if signal == SIGTERM {
                "SIGTERM"
            } else {
                "Ctrl-C"
            };
            match request(signal) {
                Requested::First => {
                    first = Some(std::time::Instant::now());
                    eprintln!(
                        "\n{name}: stopping after this step to {save} (Ctrl-\\ quits at once \
                         without saving)"
                    );
                }
                // A repeat within a second is the same request delivered twice.
                Requested::Again if first.is_some_and(|t| t.elapsed().as_secs_f64() > 1.0) => {
                    eprintln!("\n{name}: still stopping: {saving} being saved");
                }
                Requested::Again => {}
            }
        }
    });
}

/// Rust ignores SIGPIPE, so printing to a reader that went away (`headlab sample ... | head`)
/// is an error at every `print!`. Outside training and labs (which must get to their
/// checkpoints and print with care), the default action is what a Unix tool does: end quietly.
#[cfg(unix)]
#[allow(unsafe_code)]
fn quiet_broken_pipe() {
    // SAFETY: called from `main` before any other thread starts; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn quiet_broken_pipe() {}

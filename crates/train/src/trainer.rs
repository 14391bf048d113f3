//! The training loop, top to bottom: data, model, AdamW with warm-up and cosine decay,
//! global-norm clipping, gradient accumulation, periodic evaluation, checkpoints, and a sample
//! at the end.
//!
//! Every random choice is derived from `(train.seed, iteration)`: the batch windows and the
//! device RNG (dropout) are re-seeded at each iteration, so a resumed run draws exactly what
//! an uninterrupted one would have.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::Device;
use headlab_data::tokenizer::TokenizerKind;
use headlab_data::{DataConfig, DataError, Dataset, Split, StreamDecoder, Tokenizer, load_text};
use headlab_model::{Gpt, GptConfig, GptConfigError, Sampling};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use thiserror::Error;

use crate::config::{ConfigError, RunConfig, TrainConfig, ValidationError};
use crate::eval::estimate_loss_unless_stopped;
use crate::grammar::{Grammaticality, grammaticality, is_grammar_run, percent};
use crate::metrics::{Metric, Metrics};
use crate::optim::Optimizer;
use crate::parallel::{ParallelError, check_in_step, stop_line};
use crate::run::{RunDir, RunError, RunResult, TrainState, TrainedOn, TrainingMark, mark_training};
use crate::step::{Team, take_step};
use crate::world::{ShardError, World};
use headlab_kernels::memory::KeepFreedPages;
use headlab_kernels::{BackendError, BackendKind};

/// Why training stopped early.
#[derive(Debug, Error)]
pub enum TrainError {
    /// The config file or an override.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A step that the ranks of an MPI launch cannot share equally.
    #[error(transparent)]
    Shard(#[from] ShardError),
    /// The ranks of an MPI launch stopped together.
    #[error(transparent)]
    Parallel(#[from] ParallelError),
    /// A backend that cannot train under MPI.
    #[error(
        "train.backend = {backend} cannot train under MPI ({size} ranks): its ranks would share \
         one adapter, and every step would read its gradients back to the host; use \
         train.backend = flex (or ndarray, flex-burn), or run wgpu as one process"
    )]
    NotParallel {
        /// The backend.
        backend: BackendKind,
        /// The world size.
        size: usize,
    },
    /// A config value that cannot work.
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// The model config.
    #[error(transparent)]
    Model(#[from] GptConfigError),
    /// The data.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The run directory or a checkpoint.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The backend.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A non-finite loss or gradient.
    #[error(
        "training diverged at step {step}: the {what} is {value} (lr {lr:.3e}). The last good \
         checkpoint is kept in {checkpoint}; lower train.lr or raise train.warmup_iters and \
         start again, or continue from that checkpoint with --resume and a lower \
         --set train.lr=..."
    )]
    Diverged {
        /// Iteration.
        step: usize,
        /// "loss" or "gradient norm".
        what: &'static str,
        /// The value.
        value: f64,
        /// Learning rate at that step.
        lr: f64,
        /// Where the last good checkpoint is.
        checkpoint: String,
    },
    /// Writing `metrics.csv`.
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    /// An observer (head tracking, plots) failed.
    #[error(transparent)]
    Observer(ObserverError),
    /// Writing the final sample.
    #[error("cannot write {}: {source}", path.display())]
    Sample {
        /// `sample.txt` in the run.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `--resume` or `--force` of a run another process is using now: training it, or a
    /// lab measuring it in the lab's folder.
    #[error(
        "{} is in use by {} now ({}); wait for it to finish, or {} and then resume",
        .run.display(),
        crate::run::holder_name(*.pid),
        if .marked == .run { "training it" } else { "a lab measuring it" },
        crate::run::stop_advice(*.pid),
    )]
    StillTraining {
        /// The run directory.
        run: PathBuf,
        /// The process using it.
        pid: crate::run::Holder,
        /// The folder whose mark names that process: the run's, or its lab's.
        marked: PathBuf,
    },
    /// `--resume` of a run that has already reached `train.max_iters`.
    #[error(
        "{} is already at step {step} and train.max_iters is {max_iters}: nothing to do, \
         nothing written. To train further, resume with a larger max_iters: headlab train \
         --resume {} --set train.max_iters={}",
        .run.display(), .run.display(), .step * 2
    )]
    AlreadyDone {
        /// The step of its last checkpoint.
        step: usize,
        /// The config's `train.max_iters`.
        max_iters: usize,
        /// The run directory.
        run: PathBuf,
    },
    /// `--resume` with a `--set` the saved model cannot follow.
    #[error(
        "--resume cannot change {key}: {} was trained with {saved}, and its model's embedding \
         has one row per token of the tokenizer.json it saved; resume without \
         --set {key}={now}, or start a new run with it",
        .run.display()
    )]
    ResumeChange {
        /// The run directory.
        run: PathBuf,
        /// The config key.
        key: &'static str,
        /// Its saved value.
        saved: String,
        /// The value asked for.
        now: String,
    },
    /// `--resume` of an imported run without a text to train on.
    #[error(
        "{} was imported and has no training text; give it one: headlab train --resume {} \
         --set data.path=FILE (or --set data.builtin=NAME)",
        .run.display(), .run.display()
    )]
    NoText {
        /// The run directory.
        run: PathBuf,
    },
    /// The disk filled up: no partial checkpoint is left, the intact one is named.
    #[error(
        "the disk holding {} is full ({cause}). {}",
        .run.display(),
        match (.intact, .created) {
            (Some(step), _) => format!(
                "No partial checkpoint is left; {} (step {step}) is intact. Free some space, \
                 then continue with: headlab train --resume {}",
                .run.join("last").display(), .run.display()
            ),
            (None, true) => "No checkpoint was saved yet. Free some space, then train again \
                             with --force (it replaces what this run left)".into(),
            (None, false) => "Nothing was written. Free some space and run the command \
                              again".into(),
        }
    )]
    DiskFull {
        /// The run directory.
        run: PathBuf,
        /// What could not be written.
        cause: String,
        /// The step of the intact `last` checkpoint, if any.
        intact: Option<usize>,
        /// Whether this training had made the run's folder.
        created: bool,
    },
    /// The run's folder was removed while it trained: nothing is written in its place.
    #[error(
        "the run's folder {} was removed while it trained ({cause}); training stopped and \
         wrote nothing in its place. To have the run, train it again",
        .run.display()
    )]
    RunGone {
        /// The run directory.
        run: PathBuf,
        /// What failed to be written there.
        cause: String,
    },
    /// SIGINT (Ctrl-C): stopped at the end of a step with the `last` checkpoint saved there.
    #[error(
        "interrupted at step {step}; the last checkpoint is saved in {}; resume with: \
         headlab train --resume {}",
        .run.join("last").display(), .run.display()
    )]
    Interrupted {
        /// The step the run stopped at (and the checkpoint holds).
        step: usize,
        /// The run directory.
        run: PathBuf,
    },
    /// A stop request after the last step, while the val split's loss was measured.
    #[error(
        "interrupted after the last step ({step}): the run is complete and saved in {}, \
         without its loss over the val split (headlab eval {} measures it) and its head \
         table (headlab heads {})",
        .run.display(), .run.display(), .run.display()
    )]
    InterruptedAfterTraining {
        /// The run's last step.
        step: usize,
        /// The run directory.
        run: PathBuf,
    },
}

/// What `headlab train` was asked to do.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// The resolved config.
    pub config: RunConfig,
    /// Where the run goes.
    pub out: PathBuf,
    /// Replace an existing run directory.
    pub force: bool,
    /// Continue the run in `out` from its last checkpoint (the config comes from there).
    pub resume: bool,
    /// `--set` overrides applied to a resumed run's saved config.
    pub resume_sets: Vec<String>,
    /// Print the final sample to stdout.
    pub print_sample: bool,
    /// A fresh run's weights made from the seeded initialisation (a lab's controlled
    /// start); `None` trains the initialisation as it is. Ignored when resuming.
    pub init: Option<InitHook>,
    /// Progress lines in a log name the run (`RUN: step ...`): a lab trains many in one log.
    pub name_in_progress: bool,
}

/// Turns a freshly initialised model into the one a run starts from.
#[derive(Clone)]
pub struct InitHook(pub std::sync::Arc<dyn Fn(Gpt) -> Gpt + Send + Sync>);

impl std::fmt::Debug for InitHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InitHook")
    }
}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    /// The run directory.
    pub run: PathBuf,
    /// Final estimates.
    pub train_loss: f64,
    /// Final val loss.
    pub val_loss: f64,
    /// The sample printed at the end.
    pub sample: String,
    /// A grammar run's last measured grammaticality.
    pub grammar: Option<Grammaticality>,
    /// Compute, time and the full val split's loss, as `result.json` records them.
    pub result: RunResult,
    /// A stop request came after the last step, during the loss over the val split: the run
    /// is complete and saved, that loss is missing.
    pub stopped: bool,
    /// The run's data, for analysis after training without reading its text again.
    pub dataset: Dataset,
    /// The run's mark ([`crate::run::mark_training`]), held while any clone of the summary
    /// lives: what the caller does after training (the head table, the page) reads the
    /// run's checkpoints, which a second process must not replace meanwhile.
    pub mark: Option<std::sync::Arc<TrainingMark>>,
}

impl RunResult {
    /// The finished run's numbers: the last evaluation's losses, the compute of every step
    /// taken, the seconds in steps, and the loss of the val split up to
    /// `train.final_eval_tokens` (left out when a stop request cuts it short: the flag).
    fn measure(
        model: &Gpt,
        data: &Dataset,
        tc: &TrainConfig,
        lp: &Loop<'_>,
        device: &burn::tensor::Device,
    ) -> (Self, bool) {
        let t = model.config.block_size;
        let tokens = (lp.state.step * tc.batch_size * t * tc.grad_accum) as u64;
        let full = match tc.final_eval_tokens {
            0 => Ok(None),
            max => {
                lp.bar.suspend(|| {
                    crate::log_line!(
                        "measuring the loss over {} tokens of the val split \
                         (train.final_eval_tokens)",
                        data.len(Split::Val).saturating_sub(1).min(max)
                    )
                });
                crate::eval::LossSum::of_split(model, data, Split::Val, max, device)
            }
        };
        // A request during the sample, or with no loss to measure, stops here all the same.
        let stopped = full.is_err() || crate::stop::requested();
        let full = full.ok().flatten();
        let result = RunResult {
            steps: lp.state.step,
            tokens,
            flops_per_token: model.config.flops_per_token(),
            compute_flops: model.config.flops_per_token() * tokens as f64,
            train_s: lp.state.train_s,
            val_loss: lp.last_losses.1,
            train_loss: lp.last_losses.0,
            estimator: format!(
                "{} batches of {} random windows of {t} tokens per split, the same windows at \
                 every evaluation (train.eval_iters, train.batch_size, model.block_size)",
                tc.eval_iters, tc.batch_size
            ),
            val_full_loss: full.map(|f| f.mean()),
            val_full_tokens: full.map_or(0, |f| f.tokens),
            val_split_tokens: data.len(Split::Val),
            block_size: t,
            world_size: crate::world::get().size(),
            exchange_s: (crate::world::get().size() > 1).then_some(lp.exchange_s),
        };
        (result, stopped)
    }
}

/// The dataset of `run` (whose config is `config`), tokenized with its saved tokenizer. A text
/// that is not the one the run was trained on gets a warning: resuming on new text is
/// allowed, but numbers from it are not the run's.
pub fn load_dataset(
    run: &RunDir,
    config: &RunConfig,
    tokenizer: Tokenizer,
) -> Result<Dataset, TrainError> {
    let (text, description) = load_text(&config.data, config.train.seed)?;
    match run.check_data(&text, &description) {
        Err(changed @ RunError::DataChanged { .. }) => crate::log_line!("warning: {changed}"),
        other => other?,
    }
    Ok(Dataset::with_tokenizer(
        &text,
        tokenizer,
        config.data.val_fraction,
        description,
    )?)
}

fn progress_bar(total: usize, start: usize) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30.cyan/blue} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_position(start as u64);
    bar
}

/// What observers learn when the loop starts: the resolved run, before its first step.
#[derive(Debug)]
pub struct RunStart<'a> {
    /// The run directory.
    pub run: &'a RunDir,
    /// The run's config (a resumed run's saved one, with its `--set`s).
    pub config: &'a RunConfig,
    /// The model config, vocabulary size included.
    pub model: &'a GptConfig,
    /// The run's data.
    pub dataset: &'a Dataset,
    /// The step training starts at: 0, or a resumed run's checkpoint step.
    pub step: usize,
    /// Whether the run continues from a checkpoint.
    pub resumed: bool,
}

/// An observer's failure; it stops training with its message.
pub type ObserverError = Box<dyn std::error::Error + Send + Sync>;

/// Watches a training run from the training thread, between steps: head tracking and plots
/// hook in here, so the loop knows nothing of them. Every method defaults to doing nothing.
pub trait Observer {
    /// Once, after the run, its data and its model are resolved.
    fn start(&mut self, _start: &RunStart<'_>) -> Result<(), ObserverError> {
        Ok(())
    }
    /// After the evaluation at `step` was written to `metrics.csv` and checkpointed.
    fn evaluated(&mut self, _run: &RunDir, _step: usize) -> Result<(), ObserverError> {
        Ok(())
    }
    /// Before the update at `step`, with the model as it is there (training mode: call
    /// `valid()` for inference) and the inference device. A resumed run does not repeat
    /// this at the step it resumes from.
    fn at_step(
        &mut self,
        _step: usize,
        _model: &Gpt,
        _device: &Device,
    ) -> Result<(), ObserverError> {
        Ok(())
    }
    /// The gradients of step `step` (summed over its micro-batches, before clipping), as the
    /// update is about to apply them to `model`.
    fn gradients(
        &mut self,
        _step: usize,
        _model: &Gpt,
        _grads: &GradientsParams,
    ) -> Result<(), ObserverError> {
        Ok(())
    }
}

fn observer_error(e: ObserverError) -> TrainError {
    TrainError::Observer(e)
}

/// Trains as `options` say, writing everything into the run directory and telling each of
/// `observers` what happens.
pub fn train(
    options: TrainOptions,
    observers: &mut [Box<dyn Observer>],
) -> Result<TrainSummary, TrainError> {
    let run = options.out.clone();
    let run = run.to_path_buf();
    // The run's mark is held until its failure, if any, is explained below.
    let (resolved, mark) = resolve_run(&options).map_err(|e| explain_failure(e, &run, false))?;
    let backend: BackendKind = resolved.1.train.backend.parse()?;
    let precision = resolved.1.train.precision.kernels();
    let mut summary = headlab_kernels::with_kernels(backend.kernels(), || {
        headlab_kernels::with_precision(precision, || {
            train_resolved(resolved, backend, options, observers)
        })
    })
    .map_err(|e| explain_failure(e, &run, true))?;
    summary.mark = Some(std::sync::Arc::new(mark));
    Ok(summary)
}

/// A rank other than 0 of an MPI launch ([`crate::world`]): the share of every run rank 0
/// trains, until it says no run follows ([`crate::parallel::await_ready`]). Each run's
/// config, data and starting point are read from its folder (rank 0's, on a file system they
/// share); this rank writes nothing. What ends a run, rank 0 reports; this rank's error says
/// only what rank 0 cannot know ([`TrainError::follower_should_print`]).
pub fn follow() -> Result<(), TrainError> {
    let world = crate::world::get();
    while let Some(ready) = crate::parallel::await_ready(world) {
        follow_run(world, &ready)?;
    }
    Ok(())
}

/// One run of [`follow`].
fn follow_run(world: &World, ready: &crate::parallel::Ready) -> Result<(), TrainError> {
    let run = RunDir::open(&ready.run)?;
    let config = run.config()?;
    let tc = config.train.clone();
    let saved = (ready.start > 0).then_some(ready.start);
    crate::stop::nothing_at_stake(stop_line(world, &run.root, saved));
    let dataset = load_dataset(&run, &config, run.tokenizer()?)?;
    let gpt = config
        .model
        .clone()
        .with_vocab_size(dataset.tokenizer().vocab_size());
    let backend: BackendKind = tc.backend.parse()?;
    let precision = tc.precision.kernels();
    headlab_kernels::with_kernels(backend.kernels(), || {
        headlab_kernels::with_precision(precision, || {
            let device = backend.device()?.autodiff();
            let _keep_pages = KeepFreedPages::new();
            // A lab's init hook is not carried over: sweeps and `train` have none.
            let (mut model, mut optim, state) =
                starting_point(&run, ready.resuming, &gpt, &tc, &device, None)?;
            let team = Team::of(world, &tc)?;
            check_in_step(&model, world, state.step)?;
            let resumed_at = (ready.resuming && !state.pending_eval).then_some(state.step);
            let bar = ProgressBar::hidden();
            let mut it = state.step;
            loop {
                if resumed_at != Some(it) && is_eval_step(&tc, it) {
                    check_in_step(&model, world, it)?;
                    crate::stop::nothing_at_stake(stop_line(world, &run.root, Some(it)));
                }
                if it >= tc.max_iters {
                    // Silent again until the next run.
                    crate::stop::nothing_at_stake(String::new());
                    return Ok(());
                }
                // The averaged loss and norm are rank 0's: it diverges at the same step.
                let check = |_: &Gpt, g: &crate::step::StepGradients, lr| {
                    let values = [("loss", g.loss), ("gradient norm", g.norm)];
                    ensure_finite(&bar, &run, it, &values, it, lr)
                };
                (model, _) = take_step(
                    model, &mut optim, &dataset, &tc, it, &device, false, &team, check,
                )?;
                it += 1;
            }
        })
    })
}

impl TrainError {
    /// Whether a rank other than 0 prints this error: not when rank 0 prints the same (a run
    /// that diverged or drifted apart, a refusal before training), only when it is this
    /// rank's own (a run folder it cannot read).
    pub fn follower_should_print(&self) -> bool {
        !matches!(
            self,
            TrainError::Diverged { .. } | TrainError::Parallel(_) | TrainError::Interrupted { .. }
        )
    }
}

/// Says what a failed write of `run` means when the disk is full ([`TrainError::DiskFull`])
/// or, once the run existed (`created`), when its folder was removed under it
/// ([`TrainError::RunGone`]); any other error as it is. A failed checkpoint has removed its
/// own partial files ([`RunDir::save_checkpoint`]).
fn explain_failure(e: TrainError, run: &Path, created: bool) -> TrainError {
    if matches!(
        e,
        TrainError::Interrupted { .. } | TrainError::Diverged { .. }
    ) {
        return e;
    }
    if created && !run.is_dir() {
        return TrainError::RunGone {
            run: run.to_path_buf(),
            cause: e.to_string(),
        };
    }
    if !is_disk_full(&e) {
        return e;
    }
    // Before this training made its folder, what is there is another run's (`--force`).
    let intact = created
        .then(|| RunDir::open(run).ok()?.checkpoint_state("last"))
        .flatten()
        .map(|s| s.step);
    TrainError::DiskFull {
        run: run.to_path_buf(),
        cause: e.to_string(),
        intact,
        created,
    }
}

/// Whether `e` comes from a write that found the disk full (ENOSPC, or a quota), in its chain
/// of sources or, where a library kept only the message, in its text.
fn is_disk_full(e: &TrainError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            )
        {
            return true;
        }
        source = err.source();
    }
    let text = e.to_string();
    text.contains("No space left on device") || text.contains("os error 28")
}

/// [`train`] once the run, its config and its data are resolved.
// Over 80 lines on purpose: the loop's setup and the loop, in the order a run takes them; each step is a method of TrainLoop.
fn train_resolved(
    (run, config, dataset, saved, new_text): Resolved,
    backend: BackendKind,
    options: TrainOptions,
    observers: &mut [Box<dyn Observer>],
) -> Result<TrainSummary, TrainError> {
    let tc = config.train.clone();
    let gpt_config = config
        .model
        .clone()
        .with_vocab_size(dataset.tokenizer().vocab_size());
    let device = backend.device()?.autodiff();
    let _keep_pages = KeepFreedPages::new();
    // From here on a stop request ends in a checkpoint instead of ending the process.
    crate::stop::at_stake();

    // A run killed before its first checkpoint starts again from step 0.
    let resuming = options.resume && run.has_checkpoint("last");
    if options.resume && !resuming {
        crate::log_line!(
            "note: {} has no checkpoint (it was stopped before its first one was saved): \
             training starts again from step 0 with the run's config",
            run.root.display()
        );
    }
    let init = options.init.as_ref();
    let (mut model, optim, state) =
        starting_point(&run, resuming, &gpt_config, &tc, &device, init)?;
    // A run stopped during its last evaluation still has that evaluation and its end to do.
    let unfinished_end = state.pending_eval && state.step == tc.max_iters;
    if resuming && state.step >= tc.max_iters && !unfinished_end {
        return Err(TrainError::AlreadyDone {
            step: state.step,
            max_iters: tc.max_iters,
            run: run.root.clone(),
        });
    }
    if resuming {
        warn_if_schedule_moves(&saved.train, &tc, state.step);
    }
    if options.resume && !options.resume_sets.is_empty() {
        run.save_config(&config)?;
        if let Some(text) = &new_text {
            run.record_data(text)?;
        }
    }
    let mut metrics = Metrics::open(run.metrics_path(), !resuming)?;
    if resuming {
        metrics.truncate_after(state.step)?;
    }
    let start = RunStart {
        run: &run,
        config: &config,
        model: &gpt_config,
        dataset: &dataset,
        step: state.step,
        resumed: resuming,
    };
    for observer in observers.iter_mut() {
        observer.start(&start).map_err(observer_error)?;
    }
    announce(&model, &run, backend, &device, &dataset, resuming);
    let world = crate::world::get();
    let team = Team::of(world, &tc)?;
    if world.size() > 1 {
        announce_world(world, &team, &model, &tc);
        run.note_world_size(world.size(), state.step)?;
    }
    let trained_on = TrainedOn {
        backend: backend.to_string(),
        adapter: headlab_kernels::adapter_name(&device),
    };
    let mut lp = Loop {
        trained_on,
        grammar_sentences: if is_grammar_run(&config) {
            tc.grammar_sentences
        } else {
            0
        },
        grammar: None,
        eval_device: device.clone().inner(),
        device,
        bar: progress_bar(tc.max_iters, state.step),
        started: Instant::now() - std::time::Duration::from_secs_f64(state.elapsed_s),
        resumed_at: (resuming && !state.pending_eval).then_some(state.step),
        last_losses: (f64::NAN, f64::NAN),
        window: (Instant::now(), 0),
        last_line: (!std::io::IsTerminal::is_terminal(&std::io::stderr())).then(Instant::now),
        progress_prefix: if options.name_in_progress {
            format!("{}: ", run.root.display())
        } else {
            String::new()
        },
        run: &run,
        train: &tc,
        team,
        exchange_s: 0.0,
        dataset: &dataset,
        metrics,
        optim,
        state,
        observers,
    };
    let mut it = lp.state.step;
    let parallel = world.size() > 1;
    if parallel {
        // The others read the run from here on; rank 0 changes it only at checkpoints.
        crate::parallel::send_ready(world, it, &run.root, resuming);
        check_in_step(&model, world, it)?;
        let saved = resuming.then_some(it);
        crate::stop::nothing_at_stake(stop_line(world, &run.root, saved));
    }
    loop {
        let lr = tc.lr_at(it);
        let at_eval = is_eval_step(&tc, it);
        if lp.resumed_at != Some(it) {
            if at_eval {
                // While rank 0 evaluates and saves, no other rank waits on it mid-exchange: a
                // stop request ends in a checkpoint, as for one process.
                if parallel {
                    crate::stop::at_stake();
                }
                lp.evaluate(&model, it, lr)?;
                if parallel {
                    check_in_step(&model, world, it)?;
                    crate::stop::nothing_at_stake(stop_line(world, &run.root, Some(it)));
                }
            }
            for observer in lp.observers.iter_mut() {
                observer
                    .at_step(it, &model, &lp.eval_device)
                    .map_err(observer_error)?;
            }
        }
        if it >= tc.max_iters {
            break;
        }
        lp.stop_if_interrupted(&model, it)?;
        model = lp.step(model, it)?;
        it += 1;
    }
    lp.bar.finish_and_clear();
    if parallel {
        crate::parallel::run_done();
        crate::stop::at_stake();
    }

    // Sample from the final model.
    let sample = sample_text(
        &model.valid(),
        dataset.tokenizer(),
        &dataset,
        tc.sample_tokens,
        (tc.seed, tc.sample_temperature),
        options.print_sample,
    );
    let sample_path = run.root.join(crate::run::SAMPLE_FILE);
    std::fs::write(&sample_path, &sample).map_err(|source| TrainError::Sample {
        path: sample_path.clone(),
        source,
    })?;
    let (result, stopped) = RunResult::measure(&model.valid(), &dataset, &tc, &lp, &lp.eval_device);
    run.write_result(&result)?;
    let (train_loss, val_loss) = lp.last_losses;
    let grammar = lp.grammar;
    drop(lp);
    Ok(TrainSummary {
        run: run.root.clone(),
        train_loss,
        val_loss,
        grammar,
        sample,
        result,
        stopped,
        dataset,
        mark: None,
    })
}

/// What a resume's `--set`s change from the step it resumes at: the learning rate (naming
/// the key that moved it; extending a run stretches its cosine unless `train.lr_decay_iters`
/// is set), the batches it draws, a warm-up that outlasts the run.
fn warn_if_schedule_moves(saved: &TrainConfig, now: &TrainConfig, step: usize) {
    let lines = crate::schedule::schedule_move(saved, now, step)
        .into_iter()
        .chain(now.resume_warnings(saved, step));
    for line in lines {
        crate::log_line!("{line}");
    }
}

/// The line that opens a run's log: model size, where it goes, the data.
fn announce(
    model: &Gpt,
    run: &RunDir,
    backend: BackendKind,
    device: &Device,
    dataset: &Dataset,
    resuming: bool,
) {
    crate::log_line!(
        "headlab: {} parameters ({} without embeddings), {} on {}, data: {} ({} train / {} val tokens, vocab {})",
        model.num_params(),
        model.config.param_count(false),
        run.root.display(),
        backend,
        dataset.description(),
        dataset.len(Split::Train),
        dataset.len(Split::Val),
        dataset.tokenizer().vocab_size(),
    );
    if let Some(share) = dataset.unknown_share(Split::Val).filter(|&s| s > 0.0) {
        crate::log_line!(
            "note: {:.2}% of the val split's words are not in the training split's vocabulary \
             (each is the unknown word <unk>, and its loss counts)",
            100.0 * share
        );
    }
    if let Some(adapter) = headlab_kernels::adapter_name(device) {
        crate::log_line!("{backend}: adapter {adapter}");
    }
    // `train` runs the whole run inside the config's precision.
    if headlab_kernels::precision() == headlab_kernels::Precision::Bf16 {
        crate::log_line!(
            "{backend}: the linear layers' products in bf16 (train.precision), everything else \
             in f32"
        );
    }
    if backend == BackendKind::Wgpu && !resuming {
        crate::log_line!(
            "wgpu: the first step compiles and tunes its kernels (seconds to a minute)"
        );
    }
}

/// Whether step `it` of a run evaluates (and checkpoints) before its update.
fn is_eval_step(tc: &TrainConfig, it: usize) -> bool {
    it.is_multiple_of(tc.eval_interval.max(1)) || it == tc.max_iters
}

/// The start line's second half under MPI: the ranks, each one's share, the bytes exchanged.
fn announce_world(world: &World, team: &Team<'_>, model: &Gpt, tc: &TrainConfig) {
    let shard = &team.shard;
    let share = if shard.split > 1 {
        format!(
            "{} of each micro-batch's {} rows",
            shard.rows.len(),
            tc.batch_size
        )
    } else {
        format!(
            "{} of each step's {} micro-batches",
            shard.micro.len(),
            tc.grad_accum
        )
    };
    crate::log_line!(
        "data parallel: {} ranks (MPI), each computes {share}; the gradients are averaged in \
         one all-reduce of {:.2} MB per step; rank 0 evaluates and writes",
        world.size(),
        crate::parallel::exchange_bytes(model) as f64 / 1e6
    );
}

/// What [`resolve_run`] finds: the run, its config, its data, the config as saved before, and
/// the text a resumed run's `--set` chose instead of its own (recorded in `data.json` once the
/// checkpoint has loaded).
type Resolved = (RunDir, RunConfig, Dataset, RunConfig, Option<String>);

/// The run of `options` with its config and data, everything checked, and its mark
/// ([`crate::run::mark_training`]), held while it trains: a fresh directory
/// (created only once nothing can fail), or an existing one with its saved config and
/// `--set`s (saved once the checkpoint has loaded).
// Over 80 lines on purpose: a fresh, resumed or forced run: three short branches that share their checks.
fn resolve_run(options: &TrainOptions) -> Result<(Resolved, TrainingMark), TrainError> {
    // Two processes on one run would interleave their checkpoints, and --force would
    // remove the folder under the other; so would a lab measuring it in its folder.
    let lab = || {
        // `--out x` is in the current folder, which may be a lab's.
        let folder = options.out.parent().map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })?;
        crate::run::mark_holder(folder).map(|pid| (pid, folder.to_path_buf()))
    };
    if let Some((pid, marked)) = RunDir::open(&options.out)
        .ok()
        .filter(|_| options.resume || options.force)
        .and_then(|run| {
            run.training_pid()
                .map(|pid| (pid, run.root.clone()))
                .or_else(lab)
        })
    {
        return Err(TrainError::StillTraining {
            run: options.out.clone(),
            pid,
            marked,
        });
    }
    // Taken in one step, before anything in the folder changes: of two processes started
    // together on one run, one trains and the other is refused, its folder untouched.
    let claim = |pid| TrainError::StillTraining {
        run: options.out.clone(),
        pid,
        marked: options.out.clone(),
    };
    let (resolved, mark) = if options.resume {
        let run = RunDir::open(&options.out)?;
        let mark = mark_training(&options.out).map_err(|e| match e {
            RunError::InUse { pid, .. } => claim(pid),
            e => e.into(),
        })?;
        let saved = run.config()?;
        let mut config = saved.clone();
        if !options.resume_sets.is_empty() {
            config.apply_sets(&options.resume_sets)?;
            config.validate()?;
        }
        check_world(&config.train)?;
        // A new text file is recorded absolutely, as a fresh run's is, so the run works from
        // any folder.
        if config.data.path != saved.data.path {
            config.data.make_path_absolute();
        }
        check_tokenizer_kept(&run, &saved, &config)?;
        if run.is_imported() && config.data.source().is_err() {
            return Err(TrainError::NoText {
                run: run.root.clone(),
            });
        }
        let changes = text_changes(&saved, &config);
        if changes.is_empty() {
            let dataset = load_dataset(&run, &config, run.tokenizer()?)?;
            ((run, config, dataset, saved, None), mark)
        } else {
            let (text, description) = load_text(&config.data, config.train.seed)?;
            Dataset::check_text(&text, &description)?;
            // The user's own `--set` chose another text: say so, not that a file changed (an
            // imported run never had one).
            if saved.data.source().is_ok() {
                crate::log_line!(
                    "warning: your --set changes the run's text ({}): training continues on \
                     the new text with the run's tokenizer, and the losses from here on are \
                     measured on it",
                    changes.join(", ")
                );
            }
            let dataset = Dataset::with_tokenizer(
                &text,
                run.tokenizer()?,
                config.data.val_fraction,
                description,
            )?;
            ((run, config, dataset, saved, Some(text)), mark)
        }
    } else {
        if options.out.exists() && !options.force {
            return Err(RunError::Exists(options.out.clone()).into());
        }
        options.config.validate()?;
        check_world(&options.config.train)?;
        let mut config = options.config.clone();
        let d = &config.data;
        let (text, description) = load_text(d, config.train.seed)?;
        crate::stop::test_point(format_args!("prepare"));
        let dataset = Dataset::build(
            &text,
            d.tokenizer,
            d.vocab_size,
            d.val_fraction,
            description,
        )?;
        let tokens = dataset.tokenizer().vocab_size();
        if d.tokenizer == TokenizerKind::Bpe && tokens < d.vocab_size {
            crate::log_line!(
                "note: BPE stopped at {tokens} tokens of the {} asked (data.vocab_size): the \
                 training split has no pair left to merge (each word is one token); the \
                 model's vocabulary is {tokens}",
                d.vocab_size
            );
        }
        check_fits(&config, &dataset)?;
        config.train.backend.parse::<BackendKind>()?.device()?;
        config.train.check_precision_here()?;
        // The run must work from any folder: it records where its text is, absolutely.
        config.data.make_path_absolute();
        let tokenizer = dataset.tokenizer();
        crate::stop::at_stake();
        let mark = mark_training(&options.out).map_err(|e| match e {
            RunError::InUse { pid, .. } => claim(pid),
            e => e.into(),
        })?;
        crate::stop::test_point(format_args!("claimed"));
        let run =
            RunDir::create_with(&options.out, options.force, &config, tokenizer, Some(&text))?;
        ((run, config.clone(), dataset, config, None), mark)
    };
    let (run, config, dataset, saved, new_text) = resolved;
    check_fits(&config, &dataset)?;
    Ok(((run, config, dataset, saved, new_text), mark))
}

/// Refuses a config that the ranks of an MPI launch cannot share: a step that does not
/// split equally, a backend that cannot take part. One process takes any.
fn check_world(train: &TrainConfig) -> Result<(), TrainError> {
    let world = crate::world::get();
    if world.size() <= 1 {
        return Ok(());
    }
    Team::of(world, train)?;
    let backend: BackendKind = train.backend.parse()?;
    if backend == BackendKind::Wgpu {
        return Err(TrainError::NotParallel {
            backend,
            size: world.size(),
        });
    }
    Ok(())
}

/// Refuses a `--set` on resume that would make the config disagree with the run's saved
/// tokenizer: the tokenizer kind, or a BPE vocabulary's size.
fn check_tokenizer_kept(
    run: &RunDir,
    saved: &RunConfig,
    now: &RunConfig,
) -> Result<(), TrainError> {
    let (old, new) = (&saved.data, &now.data);
    let change = |key, saved: String, now: String| TrainError::ResumeChange {
        run: run.root.clone(),
        key,
        saved: format!("{key} = {saved}"),
        now,
    };
    if old.tokenizer != new.tokenizer {
        return Err(change(
            "data.tokenizer",
            old.tokenizer.to_string(),
            new.tokenizer.to_string(),
        ));
    }
    if new.tokenizer == TokenizerKind::Bpe && old.vocab_size != new.vocab_size {
        return Err(change(
            "data.vocab_size",
            old.vocab_size.to_string(),
            new.vocab_size.to_string(),
        ));
    }
    Ok(())
}

/// The keys that choose the text, as "key: old -> new", where they differ: `[data]`'s, and
/// the seed a built-in corpus is generated from.
fn text_changes(saved: &RunConfig, now: &RunConfig) -> Vec<String> {
    let (old, new) = (&saved.data, &now.data);
    let show = |v: Option<String>| v.unwrap_or_else(|| "unset".into());
    let path = |d: &DataConfig| d.path.as_ref().map(|p| p.display().to_string());
    let builtin = new.path.is_none() && new.builtin.is_some();
    let seed = |c: &RunConfig| builtin.then(|| c.train.seed.to_string());
    [
        ("data.path", path(old), path(new)),
        ("data.builtin", old.builtin.clone(), new.builtin.clone()),
        (
            "data.builtin_chars",
            Some(old.builtin_chars.to_string()),
            Some(new.builtin_chars.to_string()),
        ),
        (
            "data.induction_len",
            Some(old.induction_len.to_string()),
            Some(new.induction_len.to_string()),
        ),
        ("train.seed", seed(saved), seed(now)),
    ]
    .into_iter()
    .filter(|(_, a, b)| a != b)
    .map(|(key, a, b)| format!("{key}: {} -> {}", show(a), show(b)))
    .collect()
}

/// The data has a window for the model's context, and the model builds with its vocabulary.
fn check_fits(config: &RunConfig, dataset: &Dataset) -> Result<(), TrainError> {
    dataset.check_block_size(config.model.block_size)?;
    let vocab_size = dataset.tokenizer().vocab_size();
    config
        .model
        .clone()
        .with_vocab_size(vocab_size)
        .validate()?;
    Ok(())
}

/// The model, optimizer and state to start from: the `last` checkpoint of a resumed run, or
/// a fresh initialisation seeded with `train.seed`.
fn starting_point(
    run: &RunDir,
    resuming: bool,
    gpt: &GptConfig,
    tc: &TrainConfig,
    device: &Device,
    init: Option<&InitHook>,
) -> Result<(Gpt, Optimizer, TrainState), TrainError> {
    if resuming {
        let (model, state) = run.load_model("last", gpt, device)?;
        let optim = run.load_optim("last", crate::step::optimizer_config(tc), device)?;
        return Ok((model, optim, state));
    }
    device.seed(tc.seed);
    let model = Gpt::new(gpt, device)?;
    let model = match init {
        Some(hook) => (hook.0)(model),
        None => model,
    };
    let state = TrainState {
        step: 0,
        best_val_loss: None,
        elapsed_s: 0.0,
        train_s: 0.0,
        pending_eval: false,
    };
    Ok((
        model,
        Optimizer::new(crate::step::optimizer_config(tc)),
        state,
    ))
}

/// What the training loop carries from step to step, besides the model.
struct Loop<'a> {
    run: &'a RunDir,
    train: &'a TrainConfig,
    /// The ranks sharing each step, and this one's part.
    team: Team<'static>,
    /// Seconds this session's steps spent averaging gradients across the ranks.
    exchange_s: f64,
    dataset: &'a Dataset,
    device: Device,
    eval_device: Device,
    optim: Optimizer,
    state: TrainState,
    /// Recorded in every checkpoint's manifest.
    trained_on: TrainedOn,
    /// Sentences sampled at each evaluation of a grammar run (0: not one, or off).
    grammar_sentences: usize,
    /// The latest evaluation's grammaticality.
    grammar: Option<Grammaticality>,
    metrics: Metrics,
    observers: &'a mut [Box<dyn Observer>],
    bar: ProgressBar,
    started: Instant,
    /// The step a resumed run starts from: its evaluation and observers already ran.
    resumed_at: Option<usize>,
    /// The latest evaluation's train and val loss.
    last_losses: (f64, f64),
    /// Since when, and over how many steps, the logged tokens/s is measured.
    window: (Instant, usize),
    /// With stderr not a terminal (a log, a CI job), where the bar draws nothing: when the
    /// last progress line was printed.
    last_line: Option<Instant>,
    /// What each progress line starts with: the run, in a lab ([`TrainOptions`]).
    progress_prefix: String,
}

impl Loop<'_> {
    /// Evaluates at step `it`, writes the losses, saves the checkpoints, tells the observers.
    /// A stop request between its batches saves `last` at `it` marked for evaluation, so the
    /// resumed run evaluates there first.
    fn evaluate(&mut self, model: &Gpt, it: usize, lr: f64) -> Result<(), TrainError> {
        let (tc, data) = (self.train, self.dataset);
        let valid = model.valid();
        let batches = (tc.eval_iters, tc.batch_size);
        self.bar.set_message(format!("evaluating at step {it}"));
        let loss = |split| {
            estimate_loss_unless_stopped(&valid, data, split, batches, tc.seed, &self.eval_device)
        };
        let Some(tr) = loss(Split::Train)? else {
            return self.stop_in_evaluation(model, it);
        };
        crate::stop::test_point(format_args!("eval@{it}"));
        let Some(va) = loss(Split::Val)? else {
            return self.stop_in_evaluation(model, it);
        };
        // A diverged model is never saved over the last good checkpoint.
        ensure_finite(
            &self.bar,
            self.run,
            self.state.step,
            &[("train loss", tr), ("val loss", va)],
            it,
            lr,
        )?;
        if crate::stop::requested() {
            return self.stop_in_evaluation(model, it);
        }
        self.last_losses = (tr, va);
        self.grammar = grammaticality(&valid, data.tokenizer(), self.grammar_sentences, tc.seed);
        let elapsed = self.started.elapsed().as_secs_f64();
        for (split, loss) in [(Split::Train, tr), (Split::Val, va)] {
            self.metrics.write(Metric {
                step: it,
                split: split.name(),
                bpc: data.bits_per_char(split, loss),
                loss,
                lr,
                tokens_per_s: 0.0,
                elapsed_s: elapsed,
                train_s: self.state.train_s,
                grammar: self
                    .grammar
                    .filter(|_| split == Split::Val)
                    .map(|g| (g.well_formed, g.agreeing)),
            })?;
        }
        let grammar = self.grammar.map_or(String::new(), |g| {
            format!(
                ", {} of {} sampled sentences well-formed, {} agreeing",
                percent(g.well_formed),
                g.sentences,
                percent(g.agreeing)
            )
        });
        self.bar.suspend(|| {
            crate::log_line!("step {it:>6}: train loss {tr:.4}, val loss {va:.4}{grammar}")
        });
        self.state.step = it;
        self.state.elapsed_s = elapsed;
        self.state.pending_eval = false;
        let improved = self.state.best_val_loss.is_none_or(|best| va < best);
        // `best` first: a crash between the two leaves `last` older, and the resumed run
        // redoes (and re-saves) this step exactly.
        if improved {
            self.state.best_val_loss = Some(va);
            self.run
                .save_checkpoint("best", model, &self.optim, &self.state, &self.trained_on)?;
        }
        self.run
            .save_checkpoint("last", model, &self.optim, &self.state, &self.trained_on)?;
        for observer in self.observers.iter_mut() {
            observer.evaluated(self.run, it).map_err(observer_error)?;
        }
        Ok(())
    }

    /// A stop request: stop between steps, with a checkpoint at step `it` to resume from.
    fn stop_if_interrupted(&mut self, model: &Gpt, it: usize) -> Result<(), TrainError> {
        if !crate::stop::requested() {
            return Ok(());
        }
        if self.state.step != it {
            self.save_stopped(model, it, false)?;
        }
        self.stopped(it)
    }

    /// A stop request during the evaluation at step `it`: `last` is saved there, marked so
    /// that the resumed run evaluates first.
    fn stop_in_evaluation(&mut self, model: &Gpt, it: usize) -> Result<(), TrainError> {
        if !(self.state.step == it && self.state.pending_eval) {
            self.save_stopped(model, it, true)?;
        }
        self.stopped(it)
    }

    fn save_stopped(
        &mut self,
        model: &Gpt,
        it: usize,
        pending_eval: bool,
    ) -> Result<(), TrainError> {
        self.state.step = it;
        self.state.pending_eval = pending_eval;
        self.state.elapsed_s = self.started.elapsed().as_secs_f64();
        self.run
            .save_checkpoint("last", model, &self.optim, &self.state, &self.trained_on)?;
        Ok(())
    }

    fn stopped(&self, it: usize) -> Result<(), TrainError> {
        self.bar.abandon();
        Err(TrainError::Interrupted {
            step: it,
            run: self.run.root.clone(),
        })
    }

    /// Step `it`: the step with a divergence check before its update, then the log line.
    fn step(&mut self, model: Gpt, it: usize) -> Result<Gpt, TrainError> {
        let started = Instant::now();
        let tc = self.train;
        let (bar, run, saved) = (&self.bar, self.run, self.state.step);
        let observers = &mut self.observers;
        let (model, step) = take_step(
            model,
            &mut self.optim,
            self.dataset,
            tc,
            it,
            &self.device,
            false,
            &self.team,
            |m, g, lr| {
                let values = [("loss", g.loss), ("gradient norm", g.norm)];
                ensure_finite(bar, run, saved, &values, it, lr)?;
                crate::stop::test_point(format_args!("step@{it}"));
                for observer in observers.iter_mut() {
                    observer
                        .gradients(it, m, &g.grads)
                        .map_err(observer_error)?;
                }
                Ok::<_, TrainError>(())
            },
        )?;
        let (lr, step) = (step.lr, step.gradients);
        self.state.train_s += started.elapsed().as_secs_f64();
        self.exchange_s += step.exchange_s;
        let tokens = (tc.batch_size * model.config.block_size * tc.grad_accum) as f64;
        self.window.1 += 1;
        let seconds = self.window.0.elapsed().as_secs_f64().max(1e-9);
        let tokens_per_s = self.window.1 as f64 * tokens / seconds;
        if (it + 1).is_multiple_of(tc.log_interval.max(1)) {
            self.metrics.write(Metric {
                step: it + 1,
                split: "iter",
                bpc: self.dataset.bits_per_char(Split::Train, step.loss),
                grammar: None,
                loss: step.loss,
                lr,
                tokens_per_s,
                elapsed_s: self.started.elapsed().as_secs_f64(),
                train_s: self.state.train_s,
            })?;
            self.window = (Instant::now(), 0);
        }
        self.bar.set_position(it as u64 + 1);
        let loss = step.loss;
        let message = format!("loss {loss:.4} lr {lr:.2e} {tokens_per_s:.0} tok/s");
        if let Some(last) = &mut self.last_line
            && last.elapsed() >= progress_line_every()
        {
            *last = Instant::now();
            let elapsed = self.started.elapsed().as_secs_f64();
            crate::log_line!(
                "{}step {}/{}: {message}, {elapsed:.0} s",
                self.progress_prefix,
                it + 1,
                tc.max_iters
            );
        }
        self.bar.set_message(message);
        Ok(model)
    }
}

/// How often a run whose stderr is not a terminal prints a progress line between evaluations.
const PROGRESS_LINE_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

/// [`PROGRESS_LINE_EVERY`]; with the `test-hooks` feature, `HEADLAB_TEST_PROGRESS_EVERY_MS`
/// sets it, so a test sees the lines without waiting 15 s for each. Loops of their own (`lab
/// grokking`) print at the same pace.
pub fn progress_line_every() -> std::time::Duration {
    #[cfg(feature = "test-hooks")]
    if let Some(ms) = std::env::var("HEADLAB_TEST_PROGRESS_EVERY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return std::time::Duration::from_millis(ms);
    }
    PROGRESS_LINE_EVERY
}

/// Stops a run whose loss or gradient went non-finite at step `step`: the first non-finite of
/// `values` as an error that names the last good checkpoint (`last`, at step `saved`).
fn ensure_finite(
    bar: &ProgressBar,
    run: &RunDir,
    saved: usize,
    values: &[(&'static str, f64)],
    step: usize,
    lr: f64,
) -> Result<(), TrainError> {
    let Some(&(what, value)) = values.iter().find(|(_, v)| !v.is_finite()) else {
        return Ok(());
    };
    bar.abandon();
    Err(TrainError::Diverged {
        step,
        what,
        value,
        lr,
        checkpoint: format!("{} (step {saved})", run.checkpoint("last").display()),
    })
}

/// Generates `n` tokens after a newline (or the first val token when the vocabulary has no
/// newline), printing them as they come when `print` is set.
fn sample_text(
    model: &Gpt,
    tokenizer: &Tokenizer,
    data: &Dataset,
    n: usize,
    (seed, temperature): (u64, f64),
    print: bool,
) -> String {
    let prompt = tokenizer
        .encode("\n")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| data.tokens(Split::Val).to_vec(0..1));
    let sampling = Sampling {
        seed,
        temperature: temperature as f32,
        ..Sampling::default()
    };
    let mut stream = StreamDecoder::new();
    let mut text = String::new();
    // Printing stops quietly if stdout's reader went away (`| head`): the run still saves
    // its sample and results.
    let mut stdout = print.then(std::io::stdout);
    let mut show = |piece: &str| {
        if let Some(out) = &mut stdout
            && write!(out, "{piece}").and_then(|()| out.flush()).is_err()
        {
            stdout = None;
        }
    };
    show("--- sample ---\n");
    let result = model.generate(&prompt, n, &sampling, |token| {
        let piece = stream.push(&tokenizer.decode_token_bytes(&[token]));
        show(&piece);
        text.push_str(&piece);
    });
    let rest = stream.finish();
    text.push_str(&rest);
    show(&format!("{rest}\n"));
    if result.is_err() {
        text.clear();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::f64::consts::PI;

    use super::*;

    /// nanoGPT's `get_lr`, written out again: linear warm-up over `warmup` steps to `lr`, then a
    /// half cosine to `min_lr` at `decay`.
    fn nanogpt_lr(it: usize, lr: f64, min_lr: f64, warmup: usize, decay: usize) -> f64 {
        if it < warmup {
            lr * (it + 1) as f64 / (warmup + 1) as f64
        } else if it > decay {
            min_lr
        } else {
            let ratio = (it - warmup) as f64 / (decay - warmup) as f64;
            min_lr + 0.5 * (1.0 + (PI * ratio).cos()) * (lr - min_lr)
        }
    }

    /// The loop takes step `it` at the schedule's rate for `it` and logs it on the row of
    /// step `it + 1`; it evaluates every `eval_interval` steps and at the end.
    #[test]
    fn the_loop_logs_each_steps_rate_and_evaluates_on_its_interval() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = RunConfig::default();
        for set in [
            "model.block_size=8",
            "model.d_model=16",
            "model.n_layers=1",
            "model.n_heads=2",
            "train.batch_size=4",
            "train.max_iters=7",
            "train.warmup_iters=2",
            "train.lr=1e-2",
            "train.min_lr=1e-3",
            "train.eval_interval=3",
            "train.eval_iters=1",
            "train.log_interval=1",
            "train.sample_tokens=4",
            "train.track_heads_every=0",
            "data.builtin_chars=3000",
        ] {
            config.apply_set(set).unwrap();
        }
        let options = TrainOptions {
            config,
            out: dir.path().join("run"),
            force: false,
            resume: false,
            resume_sets: Vec::new(),
            print_sample: false,
            init: None,
            name_in_progress: false,
        };
        let summary = train(options, &mut Vec::new()).unwrap();
        let csv = std::fs::read_to_string(summary.run.join("metrics.csv")).unwrap();
        let rows: Vec<Vec<&str>> = csv
            .lines()
            .skip(1)
            .map(|l| l.split(',').collect())
            .collect();
        let steps = |split: &str| -> Vec<usize> {
            rows.iter()
                .filter(|r| r[1] == split)
                .map(|r| r[0].parse().unwrap())
                .collect()
        };
        assert_eq!(steps("iter"), (1..=7).collect::<Vec<_>>());
        assert_eq!(steps("val"), [0, 3, 6, 7]);
        for r in rows.iter().filter(|r| r[1] == "iter") {
            let step: usize = r[0].parse().unwrap();
            let logged: f64 = r[3].parse().unwrap();
            let want = nanogpt_lr(step - 1, 1e-2, 1e-3, 2, 7);
            assert!(
                (logged - want).abs() <= 1e-6 * want,
                "step {step}: lr {logged}, nanoGPT's schedule gives {want}"
            );
        }
    }

    /// A divergence names the first non-finite value and the checkpoint to go back to.
    #[test]
    fn a_non_finite_value_stops_the_run_naming_it_and_the_last_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(&dir.path().join("run"), false).unwrap();
        let bar = ProgressBar::hidden();
        let values = [
            ("loss", 2.5),
            ("gradient norm", f64::NAN),
            ("x", f64::INFINITY),
        ];
        assert!(ensure_finite(&bar, &run, 4, &values[..1], 9, 1e-3).is_ok());
        let err = ensure_finite(&bar, &run, 4, &values, 9, 1e-3).unwrap_err();
        let TrainError::Diverged {
            step,
            what,
            lr,
            checkpoint,
            ..
        } = err
        else {
            panic!("not a divergence: {err}");
        };
        assert_eq!((step, what, lr), (9, "gradient norm", 1e-3));
        assert!(checkpoint.ends_with("(step 4)"), "{checkpoint}");
        assert!(checkpoint.contains("last"), "{checkpoint}");
    }
}

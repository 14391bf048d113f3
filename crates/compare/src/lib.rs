//! `headlab compare`: one model, several backends, each against an f64 ground truth, with
//! speed and memory side by side.
//!
//! The weights are created once (on flex, from the run's seed), written to `init.safetensors`
//! and loaded on every backend, so all start from the same bits. The same model then runs once
//! in f64 on flex with Burn's ops ([`truth`]): the embedding, every sublayer's output and
//! the logits on step 0's first micro-batch, step 0's loss and gradients, and the losses of
//! steps 1 and 2 after one and two updates. Each backend takes the same `steps` training steps on the same batches
//! (those `headlab train` would draw) and its first step is set against that truth, value by
//! value, each within a bound derived from the rounding of f32 (the truth module's docs). A
//! backend fails when a value leaves its bound, or when its error is more than
//! [`BEST_RATIO`] times the best backend's on the same value; the report names the first
//! forward value that left, which is where a wrong forward kernel sits.
//!
//! `flex-burn` is flex with headlab's kernels switched off: Burn's own ops on the same device,
//! so the kernels have a witness even where wgpu has no driver.
//!
//! # The worst-case tolerance
//! After step 2 there is no truth; every loss is compared with the reference backend's (the
//! first within its bounds of the truth), within a worst-case first-order bound. A dot product of length `K` in f32 is within `K u` of
//! the exact value (relative to the sum of |terms|). A forward pass chains `S = 8 L + 2` such
//! reductions, with `K` the longest of `d_model`, `d_ff`, `block_size` and the vocabulary, and
//! each backend may sit on either side, so logits at step 0 may differ by
//! `2 S K u max(1, max |logit|)`, the loss by twice that, and the loss at step `s` by `1 + s`
//! times the loss's. Correct backends sit far inside it; it catches a different
//! initialisation or batch, not a slightly wrong kernel (that is the truth's job).

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::Device;
use burn::tensor::ExecutionError;
use headlab_data::{DataError, Dataset, Tokenizer, load_text};
use headlab_model::{Gpt, GptConfig, GptConfigError, WeightsError};
use serde::Serialize;
use thiserror::Error;

use headlab_kernels::memory;
use headlab_kernels::{BackendError, BackendKind, Precision};
use headlab_train::config::{RunConfig, ValidationError};
use headlab_train::optim::Optimizer;
use headlab_train::step::{Team, optimizer_config, step_batches, take_step};

pub mod report;
pub mod truth;

pub use report::{compare_markdown, write_compare};
pub use truth::{BEST_RATIO, Check, SAFETY, UNIT_ROUNDOFF, worst_ratio};
use truth::{Measured, TRUTH_STEPS, checks, f64_truth, forward_values, gradient_values};

/// Why a comparison could not run.
#[derive(Debug, Error)]
pub enum CompareError {
    /// `steps` was 0.
    #[error("--steps must be at least 1")]
    NoSteps,
    /// The config.
    #[error(transparent)]
    Config(#[from] ValidationError),
    /// The model config.
    #[error(transparent)]
    Model(#[from] GptConfigError),
    /// The data.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The backend that makes the shared initialisation.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// Saving or loading the shared initialisation.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// The output folder.
    #[error("cannot create {}: {source}", path.display())]
    Io {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A backend failed while running.
    #[error("running on {backend}: {source}")]
    Run {
        /// The backend.
        backend: String,
        /// What went wrong.
        source: StepsError,
    },
    /// No backend could run.
    #[error("none of the backends ({0}) is available")]
    NoneAvailable(String),
    /// `--init` names no file.
    #[error(
        "--init {}: no such file; give a weights file of this config's model, e.g. a run's \
         last/model.bpk",
        .0.display()
    )]
    InitMissing(PathBuf),
    /// The f64 ground truth could not be computed.
    #[error("computing the f64 ground truth: {0}")]
    Truth(#[source] StepsError),
}

/// Why the model's steps could not run on a device (a backend's or the f64 truth's).
#[derive(Debug, Error)]
pub enum StepsError {
    /// The model config.
    #[error(transparent)]
    Model(#[from] GptConfigError),
    /// Loading the shared initialisation.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// Drawing the batches.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The device failed while it ran the steps.
    #[error("the device failed: {0:?}")]
    Device(ExecutionError),
}

/// The worst-case tolerances of the module docs for a model config.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Tolerance {
    /// `S`: reductions chained in one forward pass.
    pub chained_reductions: usize,
    /// `K`: the longest reduction.
    pub longest_reduction: usize,
    /// `2 S K u`: relative bound on a logit difference.
    pub logits_relative: f64,
}

impl Tolerance {
    /// For a model config in f32.
    pub fn of(config: &GptConfig) -> Self {
        Self::with_precision(config, Precision::F32)
    }

    /// For a model config whose linear layers run in `precision`: in bf16 each product may
    /// also be off by its operands' two roundings, `2 * 2^-8` relative, whatever its length.
    pub fn with_precision(config: &GptConfig, precision: Precision) -> Self {
        let chained_reductions = 8 * config.n_layers + 2;
        let longest_reduction = [
            config.d_model,
            config.mlp_width(),
            config.block_size,
            config.vocab_size,
        ]
        .into_iter()
        .max()
        .unwrap_or(1);
        let per_reduction = longest_reduction as f64 * UNIT_ROUNDOFF
            + match precision {
                Precision::F32 => 0.0,
                Precision::Bf16 => 2.0 * truth::BF16_UNIT_ROUNDOFF,
            };
        Self {
            chained_reductions,
            longest_reduction,
            logits_relative: 2.0 * chained_reductions as f64 * per_reduction,
        }
    }

    /// Largest allowed |logit difference| at step 0 when the logits reach `max_abs_logit`.
    pub fn logits(&self, max_abs_logit: f64) -> f64 {
        self.logits_relative * max_abs_logit.max(1.0)
    }

    /// Largest allowed loss difference at step `step`.
    pub fn loss(&self, max_abs_logit: f64, step: usize) -> f64 {
        2.0 * self.logits(max_abs_logit) * (1 + step) as f64
    }
}

/// One backend's results.
#[derive(Debug, Clone, Serialize)]
pub struct BackendReport {
    /// Backend name.
    pub backend: String,
    /// The linear layers' precision: `f32`, or `bf16` (`flex-bf16`), whose bounds and
    /// tolerance allow for bf16's rounding.
    pub precision: String,
    /// Whether it ran.
    pub available: bool,
    /// Why it did not.
    pub reason: Option<String>,
    /// The adapter it ran on, where the backend names one (wgpu: `llvmpipe (LLVM 15.0.6, 256
    /// bits)` for lavapipe).
    pub adapter: Option<String>,
    /// Step 0 against the f64 truth: every forward value, the losses, the gradients.
    pub checks: Vec<Check>,
    /// Why the backend fails, empty when it passes: the first forward value out of its bound
    /// ("block 0 MLP: error 2.1e-4 (bound 3.0e-6)"), other values out of bound, values more
    /// than [`BEST_RATIO`] times the best backend's error, losses beyond the worst-case
    /// tolerance.
    pub failures: Vec<String>,
    /// Max |logit difference| to the reference at step 0 (0 for the reference).
    pub max_logit_diff: f64,
    /// Loss before each update, one per step.
    pub losses: Vec<f64>,
    /// Max |loss difference| to the reference over the steps, and where.
    pub max_loss_diff: f64,
    /// The step of `max_loss_diff`.
    pub max_loss_diff_step: usize,
    /// Within every bound: `failures` is empty.
    pub within_tolerance: bool,
    /// Median milliseconds per step, after the first (warm-up) step: forward with the loss.
    pub forward_ms: f64,
    /// Backward into per-parameter gradients.
    pub backward_ms: f64,
    /// Global-norm clipping and the AdamW update.
    pub optimizer_ms: f64,
    /// The first step, all phases: includes kernel compilation on wgpu.
    pub first_step_ms: f64,
    /// Peak resident memory of the process while this backend ran, above what it held before
    /// (Linux `VmHWM`; None elsewhere). Lavapipe's device memory is host memory, so it shows
    /// here too.
    pub peak_rss_mib: Option<f64>,
    /// Bytes the backend's own allocator reserved at its peak, where it reports one (wgpu).
    pub device_reserved_mib: Option<f64>,
}

/// The whole comparison, as written to `compare.json`.
#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    /// The resolved config (dropout forced to 0).
    pub config: RunConfig,
    /// Parameters in the model.
    pub params: usize,
    /// Training steps per backend.
    pub steps: usize,
    /// Batch size times block size.
    pub tokens_per_step: usize,
    /// The backend the others' losses are compared to over every step: the first within its
    /// bounds of the f64 truth, else the nearest (the smallest worst error over bound).
    pub reference: String,
    /// The tolerance model.
    pub tolerance: Tolerance,
    /// Largest |logit| of the reference at step 0 (the tolerances scale with it).
    pub max_abs_logit: f64,
    /// Allowed |logit difference| at step 0.
    pub logits_tolerance: f64,
    /// Allowed |loss difference| at the last step.
    pub final_loss_tolerance: f64,
    /// `C` of the f64 bound.
    pub safety: f64,
    /// Seconds the f64 truth took.
    pub truth_seconds: f64,
    /// Per backend, in the order asked.
    pub backends: Vec<BackendReport>,
}

impl CompareReport {
    /// Backends that ran and disagree with the reference.
    pub fn disagreeing(&self) -> Vec<&BackendReport> {
        self.backends
            .iter()
            .filter(|b| b.available && !b.within_tolerance)
            .collect()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

/// What one backend measured.
struct Run {
    precision: Precision,
    adapter: Option<String>,
    measured: Measured,
    logits: Vec<f64>,
    losses: Vec<f64>,
    phases: Vec<[f64; 3]>,
    peak_rss_mib: Option<f64>,
    device_reserved_mib: Option<f64>,
}

/// Trains `steps` steps on `device` from the weights in `init`, as `headlab train` would,
/// saying how long each took (`name`'s first step on a GPU backend compiles its kernels: up to
/// a minute on a CPU adapter, which would otherwise pass in silence).
fn run_backend(
    name: &str,
    config: &RunConfig,
    gpt: &GptConfig,
    data: &Dataset,
    init: &Path,
    device: Device,
    steps: usize,
) -> Result<Run, StepsError> {
    let tc = &config.train;
    let rss_before = memory::reset_peak_rss();
    let device = device.autodiff();
    let mut model = Gpt::new(gpt, &device)?.load_weights(init)?;

    // Step 0's forward values on its first micro-batch, without autodiff.
    let batches = step_batches(data, tc, gpt.block_size, 0)?;
    let inner = device.clone().inner();
    let (forward, max_scores) = forward_values(&model, &batches[0].0, tc.batch_size, &inner);
    let mut measured = Measured {
        forward,
        max_scores,
        ..Measured::default()
    };
    let logits = measured
        .forward
        .last()
        .map(|(_, l)| l.clone())
        .unwrap_or_default();

    let mut optim = Optimizer::new(optimizer_config(tc));
    let (mut losses, mut phases) = (Vec::new(), Vec::new());
    let mut device_reserved: Option<u64> = None;
    let team = Team::alone(tc);
    for it in 0..steps {
        let started = std::time::Instant::now();
        let (next, step) = take_step(
            model,
            &mut optim,
            data,
            tc,
            it,
            &device,
            true,
            &team,
            |m, g, _| {
                if it == 0 {
                    measured.grads = gradient_values(m, &g.grads);
                }
                Ok::<_, StepsError>(())
            },
        )?;
        model = next;
        // A device that failed while the step ran says so here.
        device.sync().map_err(StepsError::Device)?;
        if let Some(usage) = device.memory_pool_usage() {
            device_reserved = Some(device_reserved.unwrap_or(0).max(usage.bytes_reserved));
        }
        let g = &step.gradients;
        eprintln!(
            "compare: {name}: step {}/{steps}, loss {:.4}, {:.1} s",
            it + 1,
            g.loss,
            started.elapsed().as_secs_f64()
        );
        losses.push(g.loss);
        let optimizer = g.norm_s + step.update_s;
        phases.push([g.forward_s * 1e3, g.backward_s * 1e3, optimizer * 1e3]);
    }
    let peak_rss_mib = match (rss_before, memory::peak_rss()) {
        (Some(before), Some(peak)) => Some((peak - before).max(0.0)),
        _ => None,
    };
    measured.losses = losses.iter().take(TRUTH_STEPS).copied().collect();
    Ok(Run {
        precision: Precision::F32,
        adapter: headlab_kernels::adapter_name(&device),
        measured,
        logits,
        losses,
        phases,
        peak_rss_mib,
        device_reserved_mib: device_reserved.map(|b| b as f64 / (1024.0 * 1024.0)),
    })
}

/// A backend to compare: its name, its device (or why there is none), and whether headlab's
/// kernels run on it.
#[derive(Debug)]
pub struct Candidate {
    /// As the user named it.
    pub name: String,
    /// The device, or why it is not available.
    pub device: Result<Device, String>,
    /// Whether headlab's kernels run (off for `flex-burn`).
    pub kernels: bool,
    /// The linear layers' precision (bf16 for `flex-bf16`).
    pub precision: Precision,
}

/// The name of [`Candidate::flex_bf16`] in `--backends`.
pub const FLEX_BF16: &str = "flex-bf16";

impl Candidate {
    /// Looks up `backend`'s device.
    pub fn of(backend: BackendKind) -> Self {
        Self {
            name: backend.to_string(),
            device: backend.device().map_err(|e| e.to_string()),
            kernels: backend.kernels(),
            precision: Precision::F32,
        }
    }

    /// `flex-bf16`: flex with the linear layers' products in bf16 (`train.precision =
    /// "bf16"`), where the CPU has AVX512-BF16.
    pub fn flex_bf16() -> Self {
        let device = if headlab_kernels::bf16::supported() {
            BackendKind::Flex.device().map_err(|e| e.to_string())
        } else {
            Err("this CPU lacks AVX512-BF16 (vdpbf16ps), which bf16 products run on".into())
        };
        Self {
            name: FLEX_BF16.into(),
            device,
            kernels: true,
            precision: Precision::Bf16,
        }
    }
}

/// What to compare: a run config, how many training steps, where the shared initialisation
/// goes, and optionally its weights and a run's own tokenizer.
#[derive(Debug)]
pub struct Comparison<'a> {
    /// The model, data and schedule (dropout is turned off).
    pub config: RunConfig,
    /// Training steps each backend takes (at least 1).
    pub steps: usize,
    /// Receives the shared initialisation, `init.safetensors`.
    pub out: &'a Path,
    /// Weights to start from instead of a seeded initialisation.
    pub init_from: Option<&'a Path>,
    /// A run's own tokenizer (an imported model's vocabulary is not its text's characters).
    pub tokenizer: Option<Tokenizer>,
}

/// Compares `backends` (the first that runs is the reference for the worst-case tolerance);
/// the report is returned for [`write_compare`].
pub fn compare(
    comparison: Comparison<'_>,
    backends: &[BackendKind],
) -> Result<CompareReport, CompareError> {
    compare_on(comparison, || {
        backends.iter().map(|&b| Candidate::of(b)).collect()
    })
}

/// The config with dropout off (so every backend computes the same function), validated.
fn checked(mut config: RunConfig, steps: usize) -> Result<RunConfig, CompareError> {
    if steps == 0 {
        return Err(CompareError::NoSteps);
    }
    if config.model.dropout != 0.0 {
        eprintln!(
            "compare: model.dropout is {} in the config; using 0 so every backend computes the \
             same function (backends draw different dropout masks)",
            config.model.dropout
        );
        config.model.dropout = 0.0;
    }
    config.validate()?;
    Ok(config)
}

/// [`compare`] on the backends `candidates` looks up, once everything that can be checked
/// has been (a wgpu lookup probes the adapter, which takes seconds).
pub fn compare_on(
    comparison: Comparison<'_>,
    candidates: impl FnOnce() -> Vec<Candidate>,
) -> Result<CompareReport, CompareError> {
    let Comparison {
        config,
        steps,
        out,
        init_from,
        tokenizer,
    } = comparison;
    let config = checked(config, steps)?;
    if let Some(path) = init_from
        && !path.is_file()
    {
        return Err(CompareError::InitMissing(path.to_path_buf()));
    }
    let candidates = candidates();
    let (data, gpt, init) = shared_start(&config, out, init_from, tokenizer)?;
    let params = gpt.param_count(true);

    let truth_steps = steps.min(TRUTH_STEPS);
    match truth_steps {
        1 => eprintln!("compare: the f64 ground truth (step 0)"),
        n => eprintln!("compare: the f64 ground truth (the first {n} steps)"),
    }
    let start = Instant::now();
    let truth = f64_truth(&config, &gpt, &data, &init, truth_steps).map_err(CompareError::Truth)?;
    let truth_seconds = start.elapsed().as_secs_f64();
    let tokens = config.train.batch_size * gpt.block_size * config.train.grad_accum;

    let names: Vec<String> = candidates.iter().map(|c| c.name.clone()).collect();
    let mut runs: Vec<(String, Result<Run, String>)> = Vec::new();
    for candidate in candidates {
        runs.push(run_candidate(
            candidate, &config, &gpt, &data, &init, steps,
        )?);
    }
    let (reference, tolerance, max_abs_logit, reports) =
        set_against_truth(&runs, &truth, &gpt, tokens, &names)?;
    Ok(CompareReport {
        params,
        steps,
        tokens_per_step: config.train.batch_size * config.model.block_size,
        reference,
        tolerance,
        max_abs_logit,
        logits_tolerance: tolerance.logits(max_abs_logit),
        final_loss_tolerance: tolerance.loss(max_abs_logit, steps - 1),
        safety: SAFETY,
        truth_seconds,
        backends: reports,
        config,
    })
}

/// What every backend starts from: the data (with a run's own tokenizer when given: an
/// imported model's vocabulary is not its text's characters), the model config, and one
/// initialisation written to `out/init.safetensors`, made on flex and seeded as `headlab
/// train` seeds a flex run (or the weights of `init_from`, loaded before anything is written).
fn shared_start(
    config: &RunConfig,
    out: &Path,
    init_from: Option<&Path>,
    tokenizer: Option<Tokenizer>,
) -> Result<(Dataset, GptConfig, PathBuf), CompareError> {
    let data = match tokenizer {
        Some(tokenizer) => {
            let (text, description) = load_text(&config.data, config.train.seed)?;
            Dataset::with_tokenizer(&text, tokenizer, config.data.val_fraction, description)?
        }
        None => Dataset::from_config(&config.data, config.train.seed)?,
    };
    data.check_block_size(config.model.block_size)?;
    let gpt = config
        .model
        .clone()
        .with_vocab_size(data.tokenizer().vocab_size());
    gpt.validate()?;
    let host = BackendKind::Flex.device()?;
    host.seed(config.train.seed);
    let model = Gpt::new(&gpt, &host)?;
    let model = match init_from {
        Some(path) => model.load_weights(path)?,
        None => model,
    };
    std::fs::create_dir_all(out).map_err(|source| CompareError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    let init = out.join("init.safetensors");
    model.save_weights(&init)?;
    Ok((data, gpt, init))
}

/// One backend's `steps` steps, with its kernels on or off, or why it is not available.
fn run_candidate(
    candidate: Candidate,
    config: &RunConfig,
    gpt: &GptConfig,
    data: &Dataset,
    init: &Path,
    steps: usize,
) -> Result<(String, Result<Run, String>), CompareError> {
    let Candidate {
        name,
        device,
        kernels,
        precision,
    } = candidate;
    let device = match device {
        Ok(device) => device,
        Err(reason) => {
            eprintln!("compare: {name} is not available: {reason}");
            return Ok((name, Err(reason.to_string())));
        }
    };
    eprintln!("compare: {name}: {steps} steps");
    if headlab_kernels::adapter_name(&device).is_some() {
        eprintln!(
            "compare: {name}: the first step compiles and tunes its kernels (seconds on a GPU, up to a minute on a CPU adapter)"
        );
    }
    let run = headlab_kernels::with_kernels(kernels, || {
        headlab_kernels::with_precision(precision, || {
            run_backend(&name, config, gpt, data, init, device, steps)
        })
    })
    .map(|run| Run { precision, ..run })
    .map_err(|source| CompareError::Run {
        backend: name.clone(),
        source,
    })?;
    Ok((name, Ok(run)))
}

/// Every run set against the truth, and the reference for the losses after the truth's last
/// step: the first backend within its bounds of the truth, else the nearest (by its worst
/// error over bound). Returns the reference's name, the worst-case tolerance, the reference's
/// largest |logit| and one judged report per backend.
fn set_against_truth(
    runs: &[(String, Result<Run, String>)],
    truth: &Measured,
    gpt: &GptConfig,
    tokens: usize,
    names: &[String],
) -> Result<(String, Tolerance, f64, Vec<BackendReport>), CompareError> {
    let checked: Vec<Option<Vec<Check>>> = runs
        .iter()
        .map(|(_, run)| {
            run.as_ref()
                .ok()
                .map(|run| checks(&run.measured, truth, gpt, tokens, run.precision))
        })
        .collect();
    let ratios: Vec<(usize, f64)> = (0..runs.len())
        .filter_map(|i| checked[i].as_ref().map(|c| (i, worst_ratio(c))))
        .collect();
    let first_within = ratios.iter().find(|(_, w)| *w <= 1.0);
    let nearest = ratios.iter().min_by(|a, b| a.1.total_cmp(&b.1));
    let Some(&(reference, _)) = first_within.or(nearest) else {
        return Err(CompareError::NoneAvailable(names.join(", ")));
    };
    let tolerance = Tolerance::of(gpt);
    let (reference_name, reference_run) = match &runs[reference] {
        (name, Ok(run)) => (name.clone(), run),
        _ => unreachable!("the reference ran"),
    };
    let max_abs_logit = reference_run
        .logits
        .iter()
        .fold(0.0f64, |m, &v| m.max(v.abs()));
    let mut reports = Vec::new();
    for ((name, run), checks) in runs.iter().zip(checked) {
        match (run, checks) {
            (Ok(run), Some(checks)) => {
                // A bf16 run is set against the reference within bf16's tolerance.
                let tolerance = Tolerance::with_precision(gpt, run.precision);
                let agreement = agreement(reference_run, run, &tolerance, max_abs_logit);
                reports.push(backend_report(name, run, agreement, checks));
            }
            (Err(reason), _) => reports.push(unavailable(name, reason.clone())),
            (Ok(_), None) => unreachable!("every run is checked"),
        }
    }
    judge(&mut reports, gpt, max_abs_logit);
    Ok((reference_name, tolerance, max_abs_logit, reports))
}

/// Fills in every backend's `failures` and `within_tolerance`: checks out of their bound (the
/// first forward one named first, as the place a forward bug shows), checks more than
/// [`BEST_RATIO`] times the best backend's error, and losses beyond the worst-case tolerance.
fn judge(reports: &mut [BackendReport], gpt: &GptConfig, max_abs_logit: f64) {
    let ran: Vec<usize> = (0..reports.len())
        .filter(|&i| reports[i].available)
        .collect();
    // The best error among the backends of the same precision: bf16's rounding is no sign
    // of a wrong f32 kernel, nor f32's error a standard for bf16.
    let best = |c: usize, precision: &str| {
        ran.iter()
            .filter(|&&i| reports[i].precision == precision)
            .filter_map(|&i| reports[i].checks.get(c).map(|c| c.error))
            .filter(|e| !e.is_nan())
            .fold(f64::INFINITY, f64::min)
    };
    let n_checks = reports.iter().map(|r| r.checks.len()).max().unwrap_or(0);
    let bests: Vec<Vec<f64>> = ran
        .iter()
        .map(|&i| {
            (0..n_checks)
                .map(|c| best(c, &reports[i].precision))
                .collect()
        })
        .collect();
    for (bests, &i) in bests.iter().zip(&ran) {
        let r = &mut reports[i];
        let tolerance = Tolerance::with_precision(gpt, precision_named(&r.precision));
        let mut failures = Vec::new();
        let out = |c: &Check| c.ratio() > 1.0;
        let describe = |c: &Check| {
            let at = c
                .detail
                .as_ref()
                .map_or(String::new(), |d| format!(" ({d})"));
            format!(
                "{}{at}: error {:.1e} (bound {:.1e})",
                c.name, c.error, c.bound
            )
        };
        if let Some(first) = r.checks.iter().find(|c| c.forward && out(c)) {
            failures.push(format!("first out of bound: {}", describe(first)));
        }
        for c in r.checks.iter().filter(|c| !c.forward && out(c)) {
            failures.push(format!("out of bound: {}", describe(c)));
        }
        for (k, c) in r.checks.iter().enumerate() {
            let best = bests.get(k).copied().unwrap_or(f64::INFINITY);
            if !out(c) && c.error > BEST_RATIO * best && c.ratio() > 1.0 / BEST_RATIO {
                failures.push(format!(
                    "{}: {:.0}x the best backend's error ({:.1e} against {:.1e})",
                    c.name,
                    c.error / best,
                    c.error,
                    best
                ));
            }
        }
        if !r.within_tolerance {
            failures.push(format!(
                "beyond the worst-case tolerance from the reference backend: logits {:.2e} \
                 (tolerance {:.2e}), loss {:.2e} at step {} (tolerance {:.2e})",
                r.max_logit_diff,
                tolerance.logits(max_abs_logit),
                r.max_loss_diff,
                r.max_loss_diff_step,
                tolerance.loss(max_abs_logit, r.max_loss_diff_step)
            ));
        }
        r.within_tolerance = failures.is_empty();
        r.failures = failures;
    }
}

/// `f32` or `bf16`, as [`BackendReport::precision`] writes it.
fn precision_name(precision: Precision) -> &'static str {
    match precision {
        Precision::F32 => "f32",
        Precision::Bf16 => "bf16",
    }
}

fn precision_named(name: &str) -> Precision {
    if name == "bf16" {
        Precision::Bf16
    } else {
        Precision::F32
    }
}

/// The report of a backend that ran: its agreement, and its timings as medians over the
/// steps after the first (which includes kernel compilation on wgpu).
fn backend_report(
    name: &str,
    run: &Run,
    agreement: Agreement,
    checks: Vec<Check>,
) -> BackendReport {
    let skip = usize::from(run.phases.len() > 1);
    let phase = |i: usize| median(run.phases.iter().skip(skip).map(|p| p[i]).collect());
    BackendReport {
        backend: name.to_string(),
        precision: precision_name(run.precision).into(),
        available: true,
        reason: None,
        adapter: run.adapter.clone(),
        checks,
        failures: Vec::new(),
        max_logit_diff: agreement.max_logit_diff,
        losses: run.losses.clone(),
        max_loss_diff: agreement.max_loss_diff,
        max_loss_diff_step: agreement.max_loss_diff_step,
        within_tolerance: agreement.within,
        forward_ms: phase(0),
        backward_ms: phase(1),
        optimizer_ms: phase(2),
        first_step_ms: run.phases[0].iter().sum(),
        peak_rss_mib: run.peak_rss_mib,
        device_reserved_mib: run.device_reserved_mib,
    }
}

/// How one backend's run compares with the reference's.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Agreement {
    max_logit_diff: f64,
    max_loss_diff: f64,
    max_loss_diff_step: usize,
    within: bool,
}

fn agreement(reference: &Run, run: &Run, tolerance: &Tolerance, max_abs_logit: f64) -> Agreement {
    let max_logit_diff = reference
        .logits
        .iter()
        .zip(&run.logits)
        .fold(0.0f64, |m, (&a, &b)| m.max((a - b).abs()));
    // NaN compares false, so a NaN anywhere is never "within".
    let mut within = max_logit_diff <= tolerance.logits(max_abs_logit)
        && reference.logits.len() == run.logits.len()
        && reference.losses.len() == run.losses.len();
    let (mut max_loss_diff, mut max_loss_diff_step) = (0.0f64, 0);
    for (s, (a, b)) in reference.losses.iter().zip(&run.losses).enumerate() {
        let d = (a - b).abs();
        within &= d <= tolerance.loss(max_abs_logit, s);
        // A NaN gap is the largest there is.
        if d.is_nan() || d > max_loss_diff {
            (max_loss_diff, max_loss_diff_step) = (d, s);
        }
    }
    Agreement {
        max_logit_diff,
        max_loss_diff,
        max_loss_diff_step,
        within,
    }
}

fn unavailable(name: &str, reason: String) -> BackendReport {
    BackendReport {
        backend: name.to_string(),
        precision: precision_name(if name == FLEX_BF16 {
            Precision::Bf16
        } else {
            Precision::F32
        })
        .into(),
        available: false,
        reason: Some(reason),
        adapter: None,
        checks: Vec::new(),
        failures: Vec::new(),
        max_logit_diff: f64::NAN,
        losses: Vec::new(),
        max_loss_diff: f64::NAN,
        max_loss_diff_step: 0,
        within_tolerance: false,
        forward_ms: f64::NAN,
        backward_ms: f64::NAN,
        optimizer_ms: f64::NAN,
        first_step_ms: f64::NAN,
        peak_rss_mib: None,
        device_reserved_mib: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_follows_the_documented_formula() {
        let gpt = GptConfig::new(65)
            .with_n_layers(4)
            .with_d_model(128)
            .with_block_size(64);
        let tol = Tolerance::of(&gpt);
        assert_eq!(tol.chained_reductions, 34);
        assert_eq!(tol.longest_reduction, 512);
        let expected = 2.0 * 34.0 * tol.longest_reduction as f64 * 2f64.powi(-24);
        assert!((tol.logits(0.5) - expected).abs() < 1e-15);
        assert!((tol.logits(3.0) - 3.0 * expected).abs() < 1e-15);
        assert!((tol.loss(0.5, 9) - 20.0 * expected).abs() < 1e-15);
    }

    fn run(logits: Vec<f64>, losses: Vec<f64>) -> Run {
        Run {
            precision: Precision::F32,
            adapter: None,
            measured: Measured::default(),
            logits,
            losses,
            phases: Vec::new(),
            peak_rss_mib: None,
            device_reserved_mib: None,
        }
    }

    #[test]
    fn agreement_flags_gaps_beyond_the_tolerance_and_nans() {
        let gpt = GptConfig::new(16).with_n_layers(1).with_d_model(16);
        let tol = Tolerance::of(&gpt);
        let (l0, l1) = (tol.loss(1.0, 0), tol.loss(1.0, 1));
        let reference = run(vec![0.5, -1.0], vec![2.0, 1.5]);
        let close = run(vec![0.5, -1.0], vec![2.0 + 0.5 * l0, 1.5 - 0.9 * l1]);
        let a = agreement(&reference, &close, &tol, 1.0);
        assert!(a.within, "{a:?}");
        assert_eq!(a.max_loss_diff_step, 1);
        // Step 0 allows less than step 1.
        let early = run(vec![0.5, -1.0], vec![2.0 + 1.5 * l0, 1.5]);
        assert!(!agreement(&reference, &early, &tol, 1.0).within);
        let logits = run(vec![0.5 + 2.0 * tol.logits(1.0), -1.0], vec![2.0, 1.5]);
        let a = agreement(&reference, &logits, &tol, 1.0);
        assert!(!a.within && a.max_logit_diff > tol.logits(1.0), "{a:?}");
        let nan = run(vec![0.5, -1.0], vec![2.0, f64::NAN]);
        let a = agreement(&reference, &nan, &tol, 1.0);
        assert!(!a.within && a.max_loss_diff.is_nan(), "{a:?}");
        let short = run(vec![0.5, -1.0], vec![2.0]);
        assert!(!agreement(&reference, &short, &tol, 1.0).within);
    }

    #[test]
    fn a_missing_backend_is_reported_and_the_others_still_run() {
        let mut config = RunConfig::default();
        for set in [
            "model.d_model=16",
            "model.n_heads=2",
            "model.n_layers=1",
            "model.block_size=8",
            "train.batch_size=2",
            "data.builtin_chars=3000",
        ] {
            config.apply_set(set).unwrap();
        }
        let out = tempfile::tempdir().unwrap();
        let candidate = |name: &str, device: Result<Device, BackendError>, kernels| Candidate {
            name: name.to_string(),
            device: device.map_err(|e| e.to_string()),
            kernels,
            precision: Precision::F32,
        };
        #[allow(deprecated)]
        let devices = vec![
            candidate(
                "wgpu",
                Err(BackendError::NoAdapter("no adapter here".into())),
                true,
            ),
            candidate("flex", Ok(Device::flex()), true),
            candidate("flex-burn", Ok(Device::flex()), false),
            candidate("ndarray", BackendKind::Ndarray.device(), true),
        ];
        let comparison = Comparison {
            config,
            steps: 3,
            out: out.path(),
            init_from: None,
            tokenizer: None,
        };
        let report = compare_on(comparison, || devices).unwrap();
        assert_eq!(report.reference, "flex");
        let wgpu = &report.backends[0];
        let reason = wgpu.reason.as_deref().unwrap_or_default();
        assert!(
            !wgpu.available && reason.contains("no adapter here"),
            "{reason}"
        );
        assert!(
            report.backends[1..]
                .iter()
                .all(|b| b.available && b.losses.len() == 3)
        );
        assert!(report.disagreeing().is_empty());
        assert!(out.path().join("init.safetensors").is_file());
    }

    #[test]
    fn median_of_odd_and_even_lengths() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
    }
}

//! The training loop, top to bottom: data, model, AdamW with warm-up and cosine decay,
//! global-norm clipping, gradient accumulation, periodic evaluation, checkpoints, and a sample
//! at the end.
//!
//! Every random choice is derived from `(train.seed, iteration)`: the batch windows and the
//! device RNG (dropout) are re-seeded at each iteration, so a resumed run draws exactly what
//! an uninterrupted one would have.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::Module;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_model::{Gpt, GptConfig, GptConfigError, Sampling, cross_entropy};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::SeedableRng;
use rand::rngs::StdRng;
use thiserror::Error;

use crate::alloc::KeepFreedPages;
use crate::backend::{Backend, BackendError};
use crate::config::{ConfigError, DataSection, DataSource, RunConfig, ValidationError};
use crate::data::{DataError, Dataset, Split, read_text};
use crate::optim::{AdamW, AdamWConfig, global_grad_norm};
use crate::plot::{Series, line_chart};
use crate::run::{RunDir, RunError, TrainState};
use crate::schedule::lr_at;
use crate::tokenizer::Tokenizer;

/// Why training stopped early.
#[derive(Debug, Error)]
pub enum TrainError {
    /// The config file or an override.
    #[error(transparent)]
    Config(#[from] ConfigError),
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
    /// Writing metrics or plots.
    #[error("{0}")]
    Output(String),
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
}

/// The model config for a run whose tokenizer has `vocab_size` tokens.
pub fn model_config(config: &RunConfig, vocab_size: usize) -> GptConfig {
    let m = &config.model;
    GptConfig::new(vocab_size)
        .with_block_size(m.block_size)
        .with_d_model(m.d_model)
        .with_n_layers(m.n_layers)
        .with_n_heads(m.n_heads)
        .with_n_kv_heads(m.n_kv_heads)
        .with_d_ff(m.d_ff)
        .with_dropout(m.dropout)
        .with_bias(m.bias)
        .with_positional(m.positional)
        .with_norm(m.norm)
        .with_tie_embeddings(m.tie_embeddings)
        .with_attn_only(m.attn_only)
}

/// The text of `[data]`: the file, or the built-in corpus for `seed`.
pub fn load_text(data: &DataSection, seed: u64) -> Result<(String, String), TrainError> {
    Ok(match data.source()? {
        DataSource::File(path) => (read_text(&path)?, path.display().to_string()),
        DataSource::Builtin(corpus) => {
            let text = corpus.generate(seed, data.builtin_chars, data.induction_len);
            (text, format!("built-in {corpus} corpus (seed {seed})"))
        }
    })
}

/// The dataset of a run, tokenized with its saved tokenizer.
pub fn load_dataset(config: &RunConfig, tokenizer: Tokenizer) -> Result<Dataset, TrainError> {
    let (text, description) = load_text(&config.data, config.train.seed)?;
    Ok(Dataset::with_tokenizer(
        &text,
        tokenizer,
        config.data.val_fraction,
        description,
    )?)
}

/// SplitMix64: decorrelates seeds derived from `(seed, step, stream)`.
pub fn mix_seed(seed: u64, step: u64, stream: u64) -> u64 {
    let mut z = seed
        .wrapping_add(step.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The RNG stream of training batches (`mix_seed(seed, step, STREAM_BATCH)`).
pub(crate) const STREAM_BATCH: u64 = 1;
const STREAM_EVAL: u64 = 2;
const STREAM_DEVICE: u64 = 3;

/// `[b, t]` token tensors from flat row-major ids.
pub fn batch_tensors(
    x: &[u32],
    y: &[u32],
    b: usize,
    t: usize,
    device: &Device,
) -> (Tensor<2, Int>, Tensor<2, Int>) {
    let to = |v: &[u32]| {
        let ids: Vec<i64> = v.iter().map(|&i| i as i64).collect();
        Tensor::<2, Int>::from_data(TensorData::new(ids, [b, t]), device)
    };
    (to(x), to(y))
}

/// Mean loss over `iters` fixed batches of `split` (the same batches at every evaluation, so
/// curves compare like with like).
pub fn estimate_loss(
    model: &Gpt,
    data: &Dataset,
    split: Split,
    iters: usize,
    batch_size: usize,
    seed: u64,
    device: &Device,
) -> Result<f64, TrainError> {
    let t = model.config.block_size;
    let mut rng = StdRng::seed_from_u64(mix_seed(seed, split as u64, STREAM_EVAL));
    let mut total = 0.0;
    for _ in 0..iters {
        let (x, y) = data.sample_batch(split, batch_size, t, &mut rng)?;
        let (x, y) = batch_tensors(&x, &y, batch_size, t, device);
        let loss: f32 = cross_entropy(model.forward(x), y, None).into_scalar();
        total += loss as f64;
    }
    Ok(total / iters.max(1) as f64)
}

/// One row of `metrics.csv`.
struct Metric<'a> {
    step: usize,
    split: &'a str,
    loss: f64,
    lr: f64,
    tokens_per_s: f64,
    elapsed_s: f64,
    /// `loss` in bits per character of the split's text (comparable across tokenizers).
    bpc: f64,
}

struct Metrics {
    path: PathBuf,
    evals: Vec<(usize, f64, f64)>,
    iters: Vec<(usize, f64)>,
}

impl Metrics {
    fn open(path: PathBuf, fresh: bool) -> Result<Self, TrainError> {
        let mut metrics = Self {
            path,
            evals: Vec::new(),
            iters: Vec::new(),
        };
        if fresh || !metrics.path.exists() {
            std::fs::write(
                &metrics.path,
                "step,split,loss,lr,tokens_per_s,elapsed_s,bpc\n",
            )
            .map_err(|e| TrainError::Output(format!("{}: {e}", metrics.path.display())))?;
        } else {
            metrics.reload();
        }
        Ok(metrics)
    }

    /// Reads back earlier rows so a resumed run's plot shows the whole history.
    fn reload(&mut self) {
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return;
        };
        let mut train = std::collections::BTreeMap::new();
        let mut val = std::collections::BTreeMap::new();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let (Some(step), Some(loss)) = (
                f.first().and_then(|s| s.parse().ok()),
                f.get(2).and_then(|s| s.parse().ok()),
            ) else {
                continue;
            };
            match f.get(1) {
                Some(&"iter") => self.iters.push((step, loss)),
                Some(&"train") => drop(train.insert(step, loss)),
                Some(&"val") => drop(val.insert(step, loss)),
                _ => {}
            }
        }
        for (step, t) in train {
            if let Some(&v) = val.get(&step) {
                self.evals.push((step, t, v));
            }
        }
    }

    /// Drops rows past `step` (left by a run killed after its last checkpoint).
    fn truncate_after(&mut self, step: usize) -> Result<(), TrainError> {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        let columns = text.lines().next().map_or(0, |h| h.split(',').count());
        let mut kept: Vec<&str> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            // A row cut short by a crash has fewer columns.
            let keep = i == 0
                || line.split(',').count() == columns
                    && line
                        .split(',')
                        .next()
                        .and_then(|s| s.parse::<usize>().ok())
                        .is_some_and(|s| s <= step);
            if keep {
                kept.push(line);
            }
        }
        let mut out = kept.join("\n");
        out.push('\n');
        crate::run::write_atomic(&self.path, out.as_bytes())?;
        self.iters.retain(|&(s, _)| s <= step);
        self.evals.retain(|&(s, _, _)| s <= step);
        Ok(())
    }

    fn write(&mut self, m: Metric<'_>) -> Result<(), TrainError> {
        let mut f = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(|e| TrainError::Output(format!("{}: {e}", self.path.display())))?;
        writeln!(
            f,
            "{},{},{:.6},{:.6e},{:.1},{:.3},{:.6}",
            m.step, m.split, m.loss, m.lr, m.tokens_per_s, m.elapsed_s, m.bpc
        )
        .map_err(|e| TrainError::Output(format!("{}: {e}", self.path.display())))?;
        if m.split == "iter" {
            self.iters.push((m.step, m.loss));
        }
        Ok(())
    }

    fn plot(&self, path: &Path) -> Result<(), TrainError> {
        let series = vec![
            Series {
                label: "train (batch)".into(),
                points: self.iters.iter().map(|&(s, l)| (s as f64, l)).collect(),
                faint: true,
            },
            Series {
                label: "train".into(),
                points: self.evals.iter().map(|&(s, t, _)| (s as f64, t)).collect(),
                faint: false,
            },
            Series {
                label: "val".into(),
                points: self.evals.iter().map(|&(s, _, v)| (s as f64, v)).collect(),
                faint: false,
            },
        ];
        line_chart(path, "loss", "step", "cross-entropy (nats/token)", &series)
            .map_err(TrainError::Output)
    }
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

/// Trains as `options` say, writing everything into the run directory.
pub fn train(options: TrainOptions) -> Result<TrainSummary, TrainError> {
    // Resolve the run: a fresh directory, or an existing one and its saved config.
    let (run, config, dataset) = if options.resume {
        let run = RunDir::open(&options.out)?;
        let mut config = run.config()?;
        // `--set` changes are saved only once everything has loaded (below).
        if !options.resume_sets.is_empty() {
            config.apply_sets(&options.resume_sets)?;
            config.validate()?;
        }
        let tokenizer = run.tokenizer()?;
        let dataset = load_dataset(&config, tokenizer)?;
        model_config(&config, dataset.tokenizer().vocab_size()).validate()?;
        (run, config, dataset)
    } else {
        if options.out.exists() && !options.force {
            return Err(RunError::Exists(options.out.clone()).into());
        }
        options.config.validate()?;
        let config = options.config.clone();
        let dataset = Dataset::from_config(&config.data, config.train.seed)?;
        dataset.check_block_size(config.model.block_size)?;
        let gpt = model_config(&config, dataset.tokenizer().vocab_size());
        gpt.validate()?;
        let backend: Backend = config.train.backend.parse()?;
        backend.device()?;
        // Everything is checked: the run directory appears with its config and tokenizer.
        let run = RunDir::create_with(&options.out, options.force, &config, dataset.tokenizer())?;
        (run, config, dataset)
    };
    dataset.check_block_size(config.model.block_size)?;
    let tc = config.train.clone();
    let gpt_config = model_config(&config, dataset.tokenizer().vocab_size());
    let backend: Backend = tc.backend.parse()?;
    let device = backend.device()?.autodiff();
    let eval_device = device.clone().inner();
    let _keep_pages = KeepFreedPages::new();
    let adam = AdamWConfig {
        beta1: tc.beta1,
        beta2: tc.beta2,
        eps: 1e-8,
        weight_decay: tc.weight_decay,
    };

    // A run killed before its first checkpoint starts again from step 0.
    let resuming = options.resume && run.has_checkpoint("last");
    let (mut model, mut optim, mut state) = if resuming {
        let (model, state) = run.load_model("last", &gpt_config, &device)?;
        let optim = run.load_optim("last", adam, &device)?;
        (model, optim, state)
    } else {
        device.seed(tc.seed);
        let model = Gpt::new(&gpt_config, &device)?;
        let state = TrainState {
            step: 0,
            best_val_loss: None,
            elapsed_s: 0.0,
        };
        (model, AdamW::new(adam), state)
    };
    if options.resume && !options.resume_sets.is_empty() {
        run.save_config(&config)?;
    }
    let mut metrics = Metrics::open(run.metrics_path(), !resuming)?;
    if resuming {
        metrics.truncate_after(state.step)?;
    }
    let mut tracker = HeadTracker::new(&run, &dataset, &gpt_config, tc.seed, state.step, resuming)?;

    eprintln!(
        "headlab: {} parameters ({} without embeddings), {} on {}, data: {} ({} train / {} val tokens, vocab {})",
        model.num_params(),
        gpt_config.param_count(false),
        run.root.display(),
        backend,
        dataset.description(),
        dataset.len(Split::Train),
        dataset.len(Split::Val),
        dataset.tokenizer().vocab_size(),
    );

    let (b, t) = (tc.batch_size, gpt_config.block_size);
    let tokens_per_iter = (b * t * tc.grad_accum) as f64;
    let bar = progress_bar(tc.max_iters, state.step);
    let started = Instant::now() - std::time::Duration::from_secs_f64(state.elapsed_s);
    let mut window = (Instant::now(), 0usize);
    let mut last_losses = (f64::NAN, f64::NAN);
    let resumed_at = resuming.then_some(state.step);

    let evaluate = |model: &Gpt| -> Result<(f64, f64), TrainError> {
        let valid = model.valid();
        let tr = estimate_loss(
            &valid,
            &dataset,
            Split::Train,
            tc.eval_iters,
            b,
            tc.seed,
            &eval_device,
        )?;
        let va = estimate_loss(
            &valid,
            &dataset,
            Split::Val,
            tc.eval_iters,
            b,
            tc.seed,
            &eval_device,
        )?;
        Ok((tr, va))
    };

    let mut it = state.step;
    loop {
        let lr = lr_at(it, tc.lr, tc.min_lr, tc.warmup_iters, tc.decay_iters());
        let at_eval = it % tc.eval_interval.max(1) == 0 || it == tc.max_iters;
        if at_eval && resumed_at != Some(it) {
            let (tr, va) = evaluate(&model)?;
            // A diverged model is never saved over the last good checkpoint.
            let checked = ensure_finite(
                &[("train loss", tr), ("val loss", va)],
                it,
                lr,
                &run,
                state.step,
            );
            checked.inspect_err(|_| bar.abandon())?;
            last_losses = (tr, va);
            let elapsed = started.elapsed().as_secs_f64();
            for (split, loss) in [(Split::Train, tr), (Split::Val, va)] {
                metrics.write(Metric {
                    step: it,
                    split: split.name(),
                    bpc: dataset.bits_per_char(split, loss),
                    loss,
                    lr,
                    tokens_per_s: 0.0,
                    elapsed_s: elapsed,
                })?;
            }
            metrics.evals.push((it, tr, va));
            bar.suspend(|| eprintln!("step {it:>6}: train loss {tr:.4}, val loss {va:.4}"));
            state.step = it;
            state.elapsed_s = elapsed;
            let improved = state.best_val_loss.is_none_or(|best| va < best);
            if improved {
                state.best_val_loss = Some(va);
            }
            // `best` first: a crash between the two leaves `last` older, and the resumed run
            // redoes (and re-saves) this step exactly.
            if improved {
                run.save_checkpoint("best", &model, &optim, &state)?;
            }
            run.save_checkpoint("last", &model, &optim, &state)?;
            metrics.plot(&run.loss_png())?;
        }
        if tc.track_heads_every > 0 && it % tc.track_heads_every == 0 && resumed_at != Some(it) {
            tracker.record(it, &model.valid(), &eval_device)?;
        }
        if it >= tc.max_iters {
            break;
        }
        // Ctrl-C: stop between steps, with a checkpoint at this step to resume from.
        if crate::run::interrupted() {
            if state.step != it {
                state.step = it;
                state.elapsed_s = started.elapsed().as_secs_f64();
                run.save_checkpoint("last", &model, &optim, &state)?;
            }
            bar.abandon();
            return Err(TrainError::Interrupted {
                step: it,
                run: run.root.clone(),
            });
        }

        // One optimizer step over grad_accum micro-batches.
        device.seed(mix_seed(tc.seed, it as u64, STREAM_DEVICE));
        let mut rng = StdRng::seed_from_u64(mix_seed(tc.seed, it as u64, STREAM_BATCH));
        let mut accumulator = GradientsAccumulator::<Gpt>::new();
        let mut loss_sum = 0.0;
        for _ in 0..tc.grad_accum {
            let (x, y) = dataset.sample_batch(Split::Train, b, t, &mut rng)?;
            let (x, y) = batch_tensors(&x, &y, b, t, &device);
            let loss = cross_entropy(model.forward(x), y, None).div_scalar(tc.grad_accum as f64);
            loss_sum += f64::from(loss.clone().into_scalar::<f32>());
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            accumulator.accumulate(&model, grads);
        }
        let grads = accumulator.grads();
        let norm = global_grad_norm(&model, &grads);
        let checked = ensure_finite(
            &[("loss", loss_sum), ("gradient norm", norm)],
            it,
            lr,
            &run,
            state.step,
        );
        checked.inspect_err(|_| bar.abandon())?;
        let scale = if tc.grad_clip > 0.0 && norm > tc.grad_clip {
            tc.grad_clip / (norm + 1e-6)
        } else {
            1.0
        };
        model = optim.step(model, &grads, lr, scale);
        it += 1;

        window.1 += 1;
        let tokens_per_s =
            window.1 as f64 * tokens_per_iter / window.0.elapsed().as_secs_f64().max(1e-9);
        if it % tc.log_interval.max(1) == 0 {
            metrics.write(Metric {
                step: it,
                split: "iter",
                bpc: dataset.bits_per_char(Split::Train, loss_sum),
                loss: loss_sum,
                lr,
                tokens_per_s,
                elapsed_s: started.elapsed().as_secs_f64(),
            })?;
            window = (Instant::now(), 0);
        }
        bar.set_position(it as u64);
        bar.set_message(format!(
            "loss {loss_sum:.4} lr {lr:.2e} {tokens_per_s:.0} tok/s"
        ));
    }
    bar.finish_and_clear();

    // Sample from the final model.
    let tokenizer = dataset.tokenizer();
    let sample = sample_text(
        &model.valid(),
        tokenizer,
        &dataset,
        tc.sample_tokens,
        tc.seed,
        options.print_sample,
    );
    Ok(TrainSummary {
        run: run.root.clone(),
        train_loss: last_losses.0,
        val_loss: last_losses.1,
        sample,
    })
}

/// Stops a run whose loss or gradient went non-finite, naming the last good checkpoint.
fn ensure_finite(
    values: &[(&'static str, f64)],
    step: usize,
    lr: f64,
    run: &RunDir,
    checkpoint_step: usize,
) -> Result<(), TrainError> {
    match values.iter().find(|(_, v)| !v.is_finite()) {
        Some(&(what, value)) => Err(TrainError::Diverged {
            step,
            what,
            value,
            lr,
            checkpoint: format!(
                "{} (step {checkpoint_step})",
                run.checkpoint("last").display()
            ),
        }),
        None => Ok(()),
    }
}

/// Head scores on a fixed probe every `train.track_heads_every` steps: `heads.csv` and
/// `heads.png` in the run directory.
struct HeadTracker {
    probe: crate::heads::Probe,
    history: crate::heads::HeadHistory,
    csv: PathBuf,
    png: PathBuf,
}

impl HeadTracker {
    fn new(
        run: &RunDir,
        data: &Dataset,
        config: &GptConfig,
        seed: u64,
        step: usize,
        resume: bool,
    ) -> Result<Self, TrainError> {
        let probe =
            crate::heads::Probe::new(data, config.block_size, config.vocab_size, None, seed)?;
        let csv = run.root.join("heads.csv");
        let history = match std::fs::read_to_string(&csv) {
            Ok(text) if resume => crate::heads::HeadHistory::parse(&text, step),
            _ => crate::heads::HeadHistory::default(),
        };
        Ok(Self {
            probe,
            history,
            csv,
            png: run.root.join("heads.png"),
        })
    }

    fn record(&mut self, step: usize, model: &Gpt, device: &Device) -> Result<(), TrainError> {
        let (scores, repeat_loss) = crate::heads::pattern_scores(model, &self.probe, device);
        let rows = self.history.push(step, repeat_loss, scores);
        let mut text = String::from(crate::heads::HISTORY_HEADER);
        if self.history.points.len() > 1 {
            text = std::fs::read_to_string(&self.csv).unwrap_or(text);
            // Rows past `step` were left by a run killed after its last checkpoint.
            text = text
                .lines()
                .filter(|l| {
                    l.split(',')
                        .next()
                        .and_then(|s| s.parse::<usize>().ok())
                        .is_none_or(|s| s < step)
                })
                .map(|l| format!("{l}\n"))
                .collect();
        }
        text.push_str(&rows);
        std::fs::write(&self.csv, text)
            .map_err(|e| TrainError::Output(format!("{}: {e}", self.csv.display())))?;
        self.history.plot(&self.png).map_err(TrainError::Output)
    }
}

/// Generates `n` tokens after a newline (or the first val token when the vocabulary has no
/// newline), printing them as they come when `print` is set.
fn sample_text(
    model: &Gpt,
    tokenizer: &Tokenizer,
    data: &Dataset,
    n: usize,
    seed: u64,
    print: bool,
) -> String {
    let prompt = tokenizer
        .encode("\n")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| data.tokens(Split::Val)[..1].to_vec());
    let sampling = Sampling {
        seed,
        ..Sampling::default()
    };
    let mut stream = crate::tokenizer::StreamDecoder::new();
    let mut text = String::new();
    let mut stdout = std::io::stdout();
    if print {
        println!("--- sample ---");
    }
    let result = model.generate(&prompt, n, &sampling, |token| {
        let piece = stream.push(&tokenizer.decode_token_bytes(&[token]));
        if print {
            print!("{piece}");
            let _ = stdout.flush();
        }
        text.push_str(&piece);
    });
    let rest = stream.finish();
    text.push_str(&rest);
    if print {
        println!("{rest}");
    }
    if result.is_err() {
        text.clear();
    }
    text
}

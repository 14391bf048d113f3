//! `lab grokking`: a one-layer transformer on `a + b mod p` (Power et al. 2022; Nanda et al.
//! 2023) fits its training pairs first and only much later, pulled by weight decay, the pairs
//! it never saw. Full-batch AdamW on a fraction of the p² pairs; train and test loss and
//! accuracy on a log step axis, and the token embedding's Fourier spectrum at the end: the
//! generalising solution computes with a few frequencies `cos(2 pi k a / p)`.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_data::modular::{Example, check_split, equals_token, split};
use headlab_kernels::to_host;
use headlab_model::{Gpt, GptConfig, Positional};
use headlab_report::plot::{Series, bar_chart, log_chart};
use headlab_train::optim::{Optimizer, OptimizerConfig};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::{LabError, write, write_summary};

/// The lab's settings (`headlab lab grokking --help` lists them as flags).
#[derive(Debug, Clone, PartialEq)]
pub struct GrokConfig {
    /// The prime modulus. Default 53.
    pub p: u32,
    /// Share of the p² pairs trained on. Default 0.4 (fewer pairs: later or no
    /// generalisation).
    pub fraction: f64,
    /// Full-batch AdamW steps. Default 4000: the default run generalises at about step 2600.
    pub steps: usize,
    /// Learning rate. Default 1e-3 (3e-3 groks sooner, through sharp loss spikes).
    pub lr: f64,
    /// Decoupled weight decay: the pull toward small weights that makes the model generalise
    /// after it memorised. Default 1.0 (Nanda et al.).
    pub weight_decay: f64,
    /// Model width. Default 128.
    pub d_model: usize,
    /// Heads. Default 4.
    pub n_heads: usize,
    /// Seed of the split and the initial weights. Default 1337.
    pub seed: u64,
    /// Steps between evaluations (and at every power of two below it). Default 50.
    pub eval_every: usize,
}

impl Default for GrokConfig {
    fn default() -> Self {
        Self {
            p: 53,
            fraction: 0.4,
            steps: 4000,
            lr: 1e-3,
            weight_decay: 1.0,
            d_model: 128,
            n_heads: 4,
            seed: 1337,
            eval_every: 50,
        }
    }
}

impl GrokConfig {
    /// Refuses settings the lab cannot train with, naming the flag.
    pub fn check(&self) -> Result<(), LabError> {
        check_split(self.p, self.fraction)?;
        let setting = |flag, value: String, why| Err(LabError::Setting { flag, value, why });
        if self.steps == 0 {
            return setting("--steps", "0".into(), "must be at least 1");
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return setting(
                "--lr",
                self.lr.to_string(),
                "must be a positive number, e.g. 1e-3",
            );
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return setting(
                "--weight-decay",
                self.weight_decay.to_string(),
                "must be 0 or more, e.g. 1.0",
            );
        }
        Ok(())
    }
}

/// One evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GrokPoint {
    /// Steps taken.
    pub step: usize,
    /// Mean cross-entropy of the answer on the training pairs.
    pub train_loss: f64,
    /// Share of training pairs answered right (argmax).
    pub train_acc: f64,
    /// The same on the held-out pairs.
    pub test_loss: f64,
    /// See `test_loss`.
    pub test_acc: f64,
}

/// What `lab grokking` measured.
#[derive(Debug, Clone)]
pub struct GrokLab {
    /// Its settings.
    pub config: GrokConfig,
    /// Pairs trained on and held out.
    pub sizes: (usize, usize),
    /// Every evaluation.
    pub points: Vec<GrokPoint>,
    /// First evaluated step with train accuracy >= 99% (memorised).
    pub memorised_at: Option<usize>,
    /// First evaluated step with test accuracy >= 95% (generalised).
    pub generalised_at: Option<usize>,
    /// The embedding's spectrum: share of its squared norm at each frequency 1..=(p-1)/2.
    pub spectrum: Vec<f64>,
    /// Training time in seconds.
    pub seconds: f64,
    /// The step a stop request (Ctrl-C) ended training at, measured there; `None` when it
    /// ran all its steps.
    pub stopped_at: Option<usize>,
}

impl GrokLab {
    /// The steps it trained, for the summary's "within ...".
    fn within(&self) -> String {
        match self.stopped_at {
            Some(step) => format!("the {step} steps it ran before it was stopped"),
            None => format!("{} steps", self.config.steps),
        }
    }
}

/// The one-layer model: learned positions, an MLP four times as wide, untied unembedding.
pub fn model_config(c: &GrokConfig) -> GptConfig {
    GptConfig {
        vocab_size: c.p as usize + 1,
        block_size: 3,
        d_model: c.d_model,
        n_layers: 1,
        n_heads: c.n_heads,
        positional: Positional::Learned,
        tie_embeddings: false,
        ..GptConfig::default()
    }
}

/// The share of `rows`' squared norm at each frequency `k` in `1..=(p-1)/2`: the rows are a
/// function of `a` in `0..p` (`[p, d]`, row-major), transformed along `a` by a direct DFT
/// (`sum_a x_a cos(2 pi k a / p)` and `sin`), both parts' squares summed over `d`. Frequency 0
/// (the mean) is left out of the shares, so they sum to 1 for rows with zero mean.
pub fn fourier_spectrum(rows: &[f32], p: usize, d: usize) -> Vec<f64> {
    let half = (p - 1) / 2;
    let mut power = vec![0.0f64; half + 1];
    for (k, slot) in power.iter_mut().enumerate() {
        for j in 0..d {
            let (mut re, mut im) = (0.0f64, 0.0f64);
            for a in 0..p {
                let angle = std::f64::consts::TAU * (k * a % p) as f64 / p as f64;
                let x = f64::from(rows[a * d + j]);
                re += x * angle.cos();
                im += x * angle.sin();
            }
            *slot += re * re + im * im;
        }
    }
    let total: f64 = power[1..].iter().sum();
    power[1..].iter().map(|x| x / total).collect()
}

/// `[n, 3]` inputs and `[n]` answers of `examples`.
fn tensors(examples: &[Example], p: u32, device: &Device) -> (Tensor<2, Int>, Vec<u32>) {
    let eq = equals_token(p) as i64;
    let ids: Vec<i64> = examples
        .iter()
        .flat_map(|[a, b, _]| [i64::from(*a), i64::from(*b), eq])
        .collect();
    let x = Tensor::from_data(TensorData::new(ids, [examples.len(), 3]), device);
    (x, examples.iter().map(|e| e[2]).collect())
}

/// `[n, vocab]` log-probabilities after the `=`.
fn answer_log_probs(model: &Gpt, x: Tensor<2, Int>) -> Tensor<2> {
    let logits = model.forward(x);
    let [n, _, v] = logits.dims();
    // [n, 3, v] -> [n, 1, v] -> [n, v]
    log_softmax(logits.slice([0..n, 2..3, 0..v]).reshape([n, v]), 1)
}

/// Mean loss and accuracy of `log_probs` against `answers`.
fn loss_and_accuracy(log_probs: Tensor<2>, answers: &[u32]) -> (f64, f64) {
    let v = log_probs.dims()[1];
    let lp: Vec<f32> = to_host(log_probs);
    let (mut loss, mut right) = (0.0f64, 0usize);
    for (row, &c) in lp.chunks(v).zip(answers) {
        loss -= f64::from(row[c as usize]);
        let best = (0..v)
            .max_by(|&i, &j| row[i].total_cmp(&row[j]))
            .unwrap_or(0);
        right += usize::from(best == c as usize);
    }
    let n = answers.len() as f64;
    (loss / n, right as f64 / n)
}

/// Trains and measures.
pub fn grokking(config: &GrokConfig, quiet: bool) -> Result<GrokLab, LabError> {
    config.check()?;
    let (train, test) = split(config.p, config.fraction, config.seed)?;
    let device = Device::flex().autodiff();
    device.seed(config.seed);
    let mut model = Gpt::new(&model_config(config), &device).map_err(LabError::Model)?;
    let mut optim = Optimizer::new(OptimizerConfig {
        beta1: 0.9,
        beta2: 0.98,
        eps: 1e-8,
        weight_decay: config.weight_decay,
        muon: None,
    });
    let (x_train, y_train) = tensors(&train, config.p, &device);
    let (x_test, y_test) = tensors(&test, config.p, &device);
    let targets = Tensor::<1, Int>::from_data(
        TensorData::new(
            y_train.iter().map(|&c| i64::from(c)).collect::<Vec<_>>(),
            [train.len()],
        ),
        &device,
    );
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::with_draw_target(Some(config.steps as u64), ProgressDrawTarget::stderr())
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30.cyan/blue} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let evaluated = |step: usize| {
        step == config.steps || step.is_power_of_two() || step.is_multiple_of(config.eval_every)
    };
    let mut points = Vec::new();
    let mut stopped_at = None;
    let started = Instant::now();
    // In a log (stderr not a terminal), a line every 15 s in place of the bar, as `train`.
    let mut last_line =
        (!quiet && !std::io::IsTerminal::is_terminal(&std::io::stderr())).then(Instant::now);
    // From here a stop request ends the loop, measured where it stopped, and the lab writes
    // what it has.
    headlab_train::stop::at_stake();
    for step in 0..=config.steps {
        headlab_train::stop::test_point(format_args!("grok@{step}"));
        let stop = step < config.steps && headlab_train::stop::requested();
        if step == 0 || evaluated(step) || stop {
            let (train_loss, train_acc) =
                loss_and_accuracy(answer_log_probs(&model, x_train.clone()), &y_train);
            let (test_loss, test_acc) =
                loss_and_accuracy(answer_log_probs(&model, x_test.clone()), &y_test);
            let point = GrokPoint {
                step,
                train_loss,
                train_acc,
                test_loss,
                test_acc,
            };
            bar.set_message(format!(
                "train acc {:.0}% test acc {:.0}%",
                100.0 * train_acc,
                100.0 * test_acc
            ));
            // Checked where it is measured (every evaluation), which costs the loop nothing:
            // a non-finite step makes the next evaluation non-finite too.
            if let Some((what, value)) = [("train loss", train_loss), ("test loss", test_loss)]
                .into_iter()
                .find(|(_, v)| !v.is_finite())
            {
                bar.abandon();
                return Err(diverged(step, what, value, config.lr));
            }
            points.push(point);
        }
        if stop {
            stopped_at = Some(step);
        }
        if step == config.steps || stop {
            break;
        }
        let n = train.len();
        let lp = answer_log_probs(&model, x_train.clone());
        // [n, v] gathered at each answer -> [n, 1]
        let loss = lp.gather(1, targets.clone().reshape([n, 1])).mean().neg();
        if let (Some(last), Some(q)) = (&mut last_line, points.last())
            && last.elapsed() >= headlab_train::trainer::progress_line_every()
        {
            *last = Instant::now();
            headlab_train::log_line!(
                "lab grokking: step {step}/{}: train loss {:.4}, train accuracy {:.0}%, test \
                 accuracy {:.0}% (measured at step {}), {:.0} s",
                config.steps,
                q.train_loss,
                100.0 * q.train_acc,
                100.0 * q.test_acc,
                q.step,
                started.elapsed().as_secs_f64()
            );
        }
        let grads = burn::optim::GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(model, &grads, config.lr, 1.0);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let first = |f: &dyn Fn(&GrokPoint) -> bool| points.iter().find(|p| f(p)).map(|p| p.step);
    let memorised_at = first(&|p| p.train_acc >= 0.99);
    let generalised_at = first(&|p| p.test_acc >= 0.95);
    let (p, d) = (config.p as usize, config.d_model);
    let wte: Vec<f32> = to_host(model.wte.weight.val().slice([0..p, 0..d]));
    Ok(GrokLab {
        config: config.clone(),
        sizes: (train.len(), test.len()),
        points,
        memorised_at,
        generalised_at,
        spectrum: fourier_spectrum(&wte, p, d),
        seconds,
        stopped_at,
    })
}

/// The error of a loss gone non-finite at `step`.
fn diverged(step: usize, what: &'static str, value: f64, lr: f64) -> LabError {
    LabError::Diverged {
        who: "lab grokking".into(),
        step,
        what,
        value,
        lr,
        fix: "Lower --lr (the default is 1e-3) and run it again",
    }
}

/// Runs the lab into `out`: grokking.csv, grokking.png, fourier.csv, fourier.png, summary.md.
/// Stopped by a request, it writes them up to the step it stopped at and returns
/// [`LabError::Cut`].
pub fn run(out: &Path, config: &GrokConfig, reproduce: &str) -> Result<String, LabError> {
    let lab = grokking(config, false)?;
    std::fs::create_dir_all(out).map_err(|source| LabError::File {
        action: "create",
        path: out.to_path_buf(),
        source,
    })?;
    let mut csv = String::from("step,train_loss,train_acc,test_loss,test_acc\n");
    for q in &lab.points {
        let _ = writeln!(
            csv,
            "{},{:.6},{:.6},{:.6},{:.6}",
            q.step, q.train_loss, q.train_acc, q.test_loss, q.test_acc
        );
    }
    write(&out.join("grokking.csv"), &csv)?;
    let mut fourier = String::from("frequency,share\n");
    for (k, s) in lab.spectrum.iter().enumerate() {
        let _ = writeln!(fourier, "{},{s:.6}", k + 1);
    }
    write(&out.join("fourier.csv"), &fourier)?;
    // Step 0 has no place on a log axis: it is in grokking.csv.
    let by_step = |f: &dyn Fn(&GrokPoint) -> f64| -> Vec<(f64, f64)> {
        lab.points
            .iter()
            .filter(|q| q.step > 0)
            .map(|q| (q.step as f64, f(q)))
            .collect()
    };
    let series = |label: &str, points| Series {
        label: label.into(),
        points,
        faint: false,
    };
    log_chart(
        &out.join("grokking.png"),
        "a + b mod p: accuracy (memorised first, generalised later)",
        ("step (log scale)", "accuracy"),
        &[
            series("train accuracy", by_step(&|q| q.train_acc)),
            series("test accuracy", by_step(&|q| q.test_acc)),
        ],
        false,
    )?;
    log_chart(
        &out.join("loss.png"),
        "a + b mod p: loss of the answer",
        ("step (log scale)", "cross-entropy (log scale)"),
        &[
            series("train loss", by_step(&|q| q.train_loss)),
            series("test loss", by_step(&|q| q.test_loss)),
        ],
        true,
    )?;
    let bars: Vec<(f64, f64)> = lab
        .spectrum
        .iter()
        .enumerate()
        .map(|(k, s)| ((k + 1) as f64, *s))
        .collect();
    bar_chart(
        &out.join("fourier.png"),
        "token embedding: share of its norm at each frequency k (cos and sin of 2 pi k a / p)",
        ("frequency k", "share"),
        &bars,
    )?;
    let summary = write_summary(out, summary(&lab, reproduce))?;
    match lab.stopped_at {
        Some(step) => Err(LabError::Cut {
            step,
            steps: config.steps,
            out: out.to_path_buf(),
        }),
        None => Ok(summary),
    }
}

/// The frequencies that together hold `share` of the spectrum, largest first.
pub fn key_frequencies(spectrum: &[f64], share: f64) -> Vec<(usize, f64)> {
    let mut order: Vec<(usize, f64)> = spectrum
        .iter()
        .enumerate()
        .map(|(k, s)| (k + 1, *s))
        .collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut sum = 0.0;
    order
        .into_iter()
        .take_while(|(_, s)| {
            let before = sum;
            sum += s;
            before < share
        })
        .collect()
}

/// `lab grokking`'s summary page.
pub fn summary(lab: &GrokLab, reproduce: &str) -> String {
    let c = &lab.config;
    let last = lab.points.last().copied();
    let mut s = String::from("# lab grokking\n\n");
    let _ = writeln!(
        s,
        "A 1-layer transformer (d_model {}, {} heads, MLP {}) on a + b mod {} ({} pairs trained \
         on, {} held out: a train fraction of {}), full-batch AdamW at lr {} with weight decay \
         {}, {}, seed {}, in {:.0} s.\n",
        c.d_model,
        c.n_heads,
        4 * c.d_model,
        c.p,
        lab.sizes.0,
        lab.sizes.1,
        c.fraction,
        c.lr,
        c.weight_decay,
        match lab.stopped_at {
            Some(step) => format!(
                "{step} of its {} steps (a stop request ended it there: the curves end there)",
                c.steps
            ),
            None => format!("{} steps", c.steps),
        },
        c.seed,
        lab.seconds
    );
    let at = |x: Option<usize>| {
        x.map_or("never, within the steps run".to_string(), |s| {
            format!("step {s}")
        })
    };
    let _ = writeln!(
        s,
        "- **memorised** (train accuracy >= 99%): {}",
        at(lab.memorised_at)
    );
    let _ = writeln!(
        s,
        "- **generalised** (test accuracy >= 95%): {}",
        at(lab.generalised_at)
    );
    if let Some(q) = last {
        let _ = writeln!(
            s,
            "- **at the end**: train accuracy {:.1}%, test accuracy {:.1}% (train loss {:.4}, \
             test loss {:.4})",
            100.0 * q.train_acc,
            100.0 * q.test_acc,
            q.train_loss,
            q.test_loss
        );
    }
    let keys = key_frequencies(&lab.spectrum, 0.5);
    let listed: Vec<String> = keys
        .iter()
        .map(|(k, sh)| format!("{k} ({:.0}%)", 100.0 * sh))
        .collect();
    let uniform = 100.0 / lab.spectrum.len() as f64;
    let _ = writeln!(
        s,
        "- **key frequencies** of the token embedding (`fourier.csv`): {} hold half its norm, \
         against {uniform:.1}% per frequency if it were spread evenly\n",
        listed.join(", ")
    );
    match (lab.memorised_at, lab.generalised_at) {
        (Some(m), Some(g)) if g > m => {
            let _ = writeln!(
                s,
                "The model grokked: it fitted its training pairs by step {m} and the pairs it \
                 never saw only by step {g}, {:.1}x as many steps later.\n",
                g as f64 / m.max(1) as f64
            );
        }
        (Some(_), Some(g)) => {
            let _ = writeln!(
                s,
                "Train and test accuracy rose together (test >= 95% at step {g}): no delay to see at these settings.\n"
            );
        }
        (Some(m), None) => {
            let _ = writeln!(
                s,
                "The model memorised (step {m}) but did not generalise within {}{}.\n",
                lab.within(),
                if lab.stopped_at.is_some() {
                    ""
                } else {
                    ": run longer (--steps) or with more weight decay"
                }
            );
        }
        _ => {
            let _ = writeln!(
                s,
                "The model did not fit its training pairs within {}.\n",
                lab.within()
            );
        }
    }
    let _ = writeln!(
        s,
        "`grokking.png` and `loss.png` draw accuracy and loss on a log step axis; \
         `fourier.png` the embedding's spectrum.\n\nReproduce: `{reproduce}`"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows built from two known frequencies put all their norm there, in the ratio of their
    /// squared amplitudes (each cosine or sine over a full period has squared norm p/2 in its
    /// own frequency); any other frequency holds none.
    #[test]
    fn the_spectrum_finds_the_frequencies_a_signal_is_made_of() {
        let (p, d) = (53usize, 4usize);
        let mut rows = vec![0.0f32; p * d];
        for a in 0..p {
            let t = std::f64::consts::TAU * a as f64 / p as f64;
            rows[a * d] = (3.0 * (5.0 * t).cos()) as f32;
            rows[a * d + 1] = (2.0 * (5.0 * t + 1.0).sin()) as f32;
            rows[a * d + 3] = (1.0 * (17.0 * t).cos()) as f32;
        }
        let spectrum = fourier_spectrum(&rows, p, d);
        assert_eq!(spectrum.len(), 26);
        // Amplitudes 3 and 2 at k = 5, 1 at k = 17: shares 13/14 and 1/14.
        assert!((spectrum[4] - 13.0 / 14.0).abs() < 1e-5, "{spectrum:?}");
        assert!((spectrum[16] - 1.0 / 14.0).abs() < 1e-5, "{spectrum:?}");
        let rest: f64 = spectrum
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 4 && *i != 16)
            .map(|(_, s)| s)
            .sum();
        assert!(rest < 1e-9, "{spectrum:?}");
        assert_eq!(key_frequencies(&spectrum, 0.5), vec![(5, spectrum[4])]);
    }

    /// The loss and accuracy against a loop over log-probabilities written out.
    #[test]
    fn loss_and_accuracy_read_the_answers() {
        let device = Device::flex();
        let lp = [[-0.1f32, -2.0, -3.0], [-1.0, -0.5, -2.5]];
        let t = Tensor::<2>::from_data(TensorData::new(lp.concat(), [2, 3]), &device);
        let (loss, acc) = loss_and_accuracy(t, &[0, 2]);
        assert!((loss - (0.1 + 2.5) / 2.0).abs() < 1e-6);
        assert_eq!(acc, 0.5);
    }
}

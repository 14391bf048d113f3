//! `lab symmetry`: why heads differ at all. With identical initial weights every head of a
//! layer computes the same function, receives the same gradient and takes the same update, so
//! they stay identical forever; random initialisation breaks that symmetry and gradients
//! amplify the differences. The lab trains one small model from one seed several ways: every
//! head of a layer starting identical (on each CPU backend), identical plus a perturbation of
//! size eps, and the usual random start; it checks the identical heads bit for bit at every
//! tracked step and measures how long each perturbation takes to make the heads differ.
//! Separation only means something in models that learn, so each run's final val loss is set
//! against chance (ln of the vocabulary) and the summary says plainly when one did not.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};

use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::{Device, Tensor, TensorData};
use headlab_heads::{HISTORY_FILE, HeadHistory};
use headlab_kernels::{BackendKind, to_host};
use headlab_model::Gpt;
use headlab_report::ReportError;
use headlab_train::config::RunConfig;
use headlab_train::trainer::{InitHook, Observer, ObserverError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{
    LabError, RunDone, Runs, between_runs, lab_config, train_run_with, write, write_summary,
};

/// The shipped config: a small attention-only model on the grammar corpus, 800 steps of batch
/// 32, tracked every 25.
pub const CONFIG: &str = include_str!("../../../configs/lab-symmetry.toml");

/// The perturbations tried, smallest first.
pub const EPSILONS: [f64; 3] = [1e-6, 1e-4, 1e-2];

/// Two heads' scores further apart than this (on any score but the mean distance) count as
/// separated: about ten times the largest gap a perturbation of 1e-6 leaves in the first 500
/// steps, and about what a random start reaches in its first hundred.
pub const SEPARATED: f64 = 0.02;

/// A model has learned when its final val loss is at least this far below chance, ln(vocab):
/// separation says little about heads that never took a role.
pub const LEARNED_MARGIN: f64 = 0.5;

/// The standard deviation of a random start's Q/K/V weights (`GptConfig::attention`): the
/// perturbation a random start amounts to, where `symmetry.png` puts it.
pub const RANDOM_INIT_STD: f64 = 0.02;

/// How a run starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Start {
    /// Every head of a layer a copy of head 0.
    Identical,
    /// Identical, then head 1 of every layer moved by `eps` times standard normal noise.
    Perturbed(f64),
    /// The usual random initialisation.
    Random,
}

impl Start {
    fn name(self) -> String {
        match self {
            Start::Identical => "identical".into(),
            Start::Perturbed(eps) => format!("identical + {eps:.0e}"),
            Start::Random => "random".into(),
        }
    }
}

/// One run's result.
#[derive(Debug, Clone)]
pub struct SymmetryRun {
    /// How it started.
    pub start: Start,
    /// Its backend.
    pub backend: String,
    /// Tracked steps at which every head of every layer was checked against head 0.
    pub checked: usize,
    /// The first checked step at which some head's weights differed from head 0's in any bit.
    pub first_difference: Option<usize>,
    /// The first tracked step at which two heads' scores differ by more than [`SEPARATED`].
    pub separated_at: Option<usize>,
    /// Final val loss.
    pub val_loss: f64,
    /// The model's vocabulary: chance is `ln(vocab_size)`.
    pub vocab_size: usize,
}

impl SymmetryRun {
    /// Chance: the loss of a uniform guess over the vocabulary.
    pub fn chance(&self) -> f64 {
        (self.vocab_size.max(1) as f64).ln()
    }

    /// Whether the model learned: val loss [`LEARNED_MARGIN`] or more below chance.
    pub fn learned(&self) -> bool {
        self.val_loss <= self.chance() - LEARNED_MARGIN
    }
}

/// What `lab symmetry` measured.
#[derive(Debug, Clone)]
pub struct SymmetryLab {
    /// The config every run shares.
    pub config: RunConfig,
    /// The runs, in the order they were trained.
    pub runs: Vec<SymmetryRun>,
    /// Wall seconds its runs trained, over every process that trained them (`--resume`).
    pub seconds: f64,
}

/// Runs the lab into `out` with `sets` applied: one run directory per start and backend,
/// `symmetry.csv`, `symmetry.png` (steps until the heads separate against eps) and
/// `summary.md` (returned), which ends with `reproduce`.
pub fn run(
    out: &Path,
    sets: &[String],
    reproduce: &str,
    runs: Runs<'_>,
) -> Result<String, LabError> {
    let config = lab_config(CONFIG, "configs/lab-symmetry.toml", sets)?;
    let lab = symmetry(config, out, runs)?;
    write(&out.join("symmetry.csv"), &csv(&lab))?;
    plot(&lab, &out.join("symmetry.png"))?;
    write_summary(out, summary(&lab, reproduce))
}

/// The column block `[c, c + d_k)` of a `[d_in, d_out]` linear, or its rows `[r, r + d_k)`.
fn block(w: &[f32], cols: usize, d_k: usize, h: usize, by_rows: bool) -> Vec<u32> {
    if by_rows {
        w[h * d_k * cols..(h + 1) * d_k * cols]
            .iter()
            .map(|x| x.to_bits())
            .collect()
    } else {
        w.chunks(cols)
            .flat_map(|row| row[h * d_k..(h + 1) * d_k].iter().map(|x| x.to_bits()))
            .collect()
    }
}

/// Whether every head of every layer has exactly head 0's weights, bit for bit: its columns
/// of `W_Q`, `W_K`, `W_V` (and their biases) and its rows of `W_O`.
pub fn heads_identical(model: &Gpt) -> bool {
    let d_k = model.config.d_k();
    model.blocks.iter().all(|b| {
        let a = &b.attn;
        // Each matrix read to the host once: `(values, columns, head blocks are rows)`.
        let mut mats = Vec::new();
        for lin in [&a.q_proj, &a.k_proj, &a.v_proj] {
            let cols = lin.weight.dims()[1];
            mats.push((to_host::<f32, _>(lin.weight.val()), cols, false));
            if let Some(bias) = &lin.bias {
                mats.push((to_host::<f32, _>(bias.val()), cols, false));
            }
        }
        let o_cols = a.o_proj.weight.dims()[1];
        mats.push((to_host::<f32, _>(a.o_proj.weight.val()), o_cols, true));
        let parts = |h: usize| -> Vec<Vec<u32>> {
            mats.iter()
                .map(|(w, cols, rows)| block(w, *cols, d_k, h, *rows))
                .collect()
        };
        let first = parts(0);
        (1..a.n_heads).all(|h| parts(h) == first)
    })
}

/// `lin` with every head's column block a copy of head 0's (its bias too), plus `noise` times
/// standard normals (from `rng`) on head `1`'s block.
fn copy_columns(lin: &mut Linear, d_k: usize, noise: f64, rng: &mut StdRng) {
    let [rows, cols] = lin.weight.dims();
    let device = lin.weight.val().device();
    let mut w = to_host::<f32, _>(lin.weight.val());
    let heads = cols / d_k;
    for r in 0..rows {
        for h in 1..heads {
            for c in 0..d_k {
                w[r * cols + h * d_k + c] = w[r * cols + c];
                if h == 1 && noise > 0.0 {
                    w[r * cols + h * d_k + c] += (noise * standard_normal(rng)) as f32;
                }
            }
        }
    }
    lin.weight = Param::from_tensor(Tensor::from_data(TensorData::new(w, [rows, cols]), &device));
    if let Some(bias) = &lin.bias {
        let mut b = to_host::<f32, _>(bias.val());
        for h in 1..heads {
            for c in 0..d_k {
                b[h * d_k + c] = b[c];
            }
        }
        lin.bias = Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(b, [cols]),
            &device,
        )));
    }
}

fn standard_normal(rng: &mut StdRng) -> f64 {
    let (u, v): (f64, f64) = (rng.random::<f64>().max(1e-300), rng.random());
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// `model` with every head of a layer a copy of head 0 (its Q/K/V columns and biases, its
/// W_O rows), and head 1's Q/K/V columns moved by `eps` times seeded standard normals.
pub fn make_identical(mut model: Gpt, eps: f64, seed: u64) -> Gpt {
    let d_k = model.config.d_k();
    let mut rng = StdRng::seed_from_u64(seed);
    for block in model.blocks.iter_mut() {
        let a = &mut block.attn;
        for lin in [&mut a.q_proj, &mut a.k_proj, &mut a.v_proj] {
            copy_columns(lin, d_k, eps, &mut rng);
        }
        // W_O [n_heads * d_k, d]: rows of head h are copies of head 0's.
        let [rows, cols] = a.o_proj.weight.dims();
        let device = a.o_proj.weight.val().device();
        let mut o = to_host::<f32, _>(a.o_proj.weight.val());
        for r in d_k..rows {
            for c in 0..cols {
                o[r * cols + c] = o[(r % d_k) * cols + c];
            }
        }
        a.o_proj.weight =
            Param::from_tensor(Tensor::from_data(TensorData::new(o, [rows, cols]), &device));
    }
    model
}

/// What a [`Checker`] saw: steps checked, the first that differed, the vocabulary. Saved in
/// each run as [`SEEN_FILE`], so that `--resume` can reuse a finished run.
#[derive(Debug, Default, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct Seen {
    checked: usize,
    first_difference: Option<usize>,
    vocab_size: usize,
}

/// A run's [`Seen`], as JSON.
const SEEN_FILE: &str = "symmetry_checks.json";

/// The [`Seen`] saved in `run_dir`, if it is there and reads.
fn saved_seen(run_dir: &Path) -> Option<Seen> {
    let text = std::fs::read_to_string(run_dir.join(SEEN_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Checks the heads bit for bit at every tracked step, and keeps the first step they differ.
#[derive(Debug)]
struct Checker {
    every: usize,
    seen: Arc<Mutex<Seen>>,
}

impl Observer for Checker {
    fn at_step(&mut self, step: usize, model: &Gpt, _: &Device) -> Result<(), ObserverError> {
        if step.is_multiple_of(self.every) {
            let same = heads_identical(model);
            let mut seen = self.seen.lock().map_err(|e| e.to_string())?;
            seen.checked += 1;
            seen.vocab_size = model.config.vocab_size;
            if !same && seen.first_difference.is_none() {
                seen.first_difference = Some(step);
            }
        }
        Ok(())
    }
}

/// The first tracked step at which two heads of a layer differ by more than [`SEPARATED`]
/// on a score (mean distance left out: it is in tokens).
fn separated_at(history: &HeadHistory) -> Option<usize> {
    history.points.iter().find_map(|(step, _, scores)| {
        let apart = scores.iter().any(|a| {
            scores.iter().filter(|b| b.layer == a.layer).any(|b| {
                let (x, y) = (a.values(), b.values());
                [0, 1, 2, 3, 5]
                    .iter()
                    .any(|&i| (x[i] - y[i]).abs() > SEPARATED)
            })
        });
        apart.then_some(*step)
    })
}

/// The lab's runs in order: every start and the backend it trains on. The identical start
/// trains on flex and on a second CPU implementation: ndarray where this build has it (a
/// cargo feature), else flex on Burn's own ops, which shares no kernel with headlab's.
pub fn starts() -> Vec<(Start, String)> {
    let second = if BackendKind::Ndarray.built() {
        BackendKind::Ndarray
    } else {
        BackendKind::FlexBurn
    }
    .to_string();
    let mut starts = vec![
        (Start::Identical, "flex".to_string()),
        (Start::Identical, second),
    ];
    starts.extend(
        EPSILONS
            .iter()
            .map(|&e| (Start::Perturbed(e), "flex".into())),
    );
    starts.push((Start::Random, "flex".into()));
    starts
}

/// The folder name of a run: `identical-flex`, `identical-1e-6-flex`, `random-flex`.
pub fn run_name(start: Start, backend: &str) -> String {
    format!(
        "{}-{backend}",
        start.name().replace(' ', "").replace('+', "-")
    )
}

/// Trains the run named `name` ([`run_name`] of one of [`starts`]) into `dir/<name>`, with
/// its start and its checks, as the lab does; a Slurm array task trains one this way, and
/// `lab symmetry --resume` then measures them all.
pub fn train_named(
    config: &RunConfig,
    dir: &Path,
    name: &str,
    runs: Runs<'_>,
) -> Result<(), LabError> {
    let (start, backend) = starts()
        .into_iter()
        .find(|(s, b)| run_name(*s, b) == name)
        .ok_or_else(|| LabError::Setting {
            flag: "--point",
            value: name.to_string(),
            why: "is not a run of lab symmetry",
        })?;
    train_start(config, dir, start, &backend, runs)?;
    between_runs(&dir.join(name), runs)
}

/// Trains one start on `backend` into `dir/<run_name>`, or with `--resume` reuses it where
/// its checks were saved; returns the run and what its checker saw.
fn train_start(
    config: &RunConfig,
    dir: &Path,
    start: Start,
    backend: &str,
    runs: Runs<'_>,
) -> Result<(RunDone, Seen), LabError> {
    let mut cfg = config.clone();
    cfg.train.backend = backend.to_string();
    let seed = cfg.train.seed;
    let init = match start {
        Start::Identical => Some(0.0),
        Start::Perturbed(eps) => Some(eps),
        Start::Random => None,
    }
    .map(|eps| InitHook(Arc::new(move |m| make_identical(m, eps, seed))));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let every = cfg.train.track_heads_every.max(1);
    let run_dir = dir.join(run_name(start, backend));
    // A finished run is reused only with its checks; a stopped one trains again from step 0,
    // for the checker to see every step in one process.
    let kept = saved_seen(&run_dir).filter(|_| runs.resume);
    if runs.resume && kept.is_none() && run_dir.exists() {
        headlab_train::log_line!(
            "{}: no checks saved ({SEEN_FILE}): training it again from the start, for the \
             checks to see every step",
            run_dir.display()
        );
    }
    let checker = Checker {
        every,
        seen: seen.clone(),
    };
    let this_run = Runs {
        resume: kept.is_some(),
        ..runs
    };
    let done = train_run_with(
        cfg,
        run_dir.clone(),
        this_run,
        init,
        vec![Box::new(checker)],
    )?;
    let seen = match kept {
        Some(kept) if done.reused => kept,
        _ => {
            let seen = *seen.lock().expect("the checker is done");
            let json = serde_json::to_string_pretty(&seen).expect("checks serialise") + "\n";
            write(&run_dir.join(SEEN_FILE), &json)?;
            seen
        }
    };
    Ok((done, seen))
}

/// Trains every start into `dir/<start>-<backend>` and measures it.
pub fn symmetry(config: RunConfig, dir: &Path, runs: Runs<'_>) -> Result<SymmetryLab, LabError> {
    let starts = starts();
    let (mut measured, mut seconds) = (Vec::new(), 0.0);
    for (k, (start, backend)) in starts.iter().enumerate() {
        headlab_train::log_line!(
            "lab symmetry: run {}/{}: {} on {backend}",
            k + 1,
            starts.len(),
            start.name()
        );
        let (done, seen) = train_start(&config, dir, *start, backend, runs)?;
        seconds += done.seconds;
        let run_dir = dir.join(run_name(*start, backend));
        between_runs(&run_dir, runs)?;
        let path = run_dir.join(HISTORY_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| LabError::File {
            action: "read",
            path: path.clone(),
            source,
        })?;
        measured.push(SymmetryRun {
            start: *start,
            backend: backend.to_string(),
            checked: seen.checked,
            first_difference: seen.first_difference,
            separated_at: separated_at(&HeadHistory::parse(&text, usize::MAX)),
            val_loss: done.val_loss,
            vocab_size: seen.vocab_size,
        });
    }
    Ok(SymmetryLab {
        config,
        runs: measured,
        seconds,
    })
}

/// `symmetry.csv`: one row per run.
pub fn csv(lab: &SymmetryLab) -> String {
    let mut s = String::from(
        "start,backend,checked_steps,first_bit_difference,separated_at,val_loss,chance,learned\n",
    );
    for r in &lab.runs {
        let opt = |v: Option<usize>| v.map_or(String::new(), |x| x.to_string());
        let _ = writeln!(
            s,
            "{},{},{},{},{},{:.5},{:.5},{}",
            r.start.name(),
            r.backend,
            r.checked,
            opt(r.first_difference),
            opt(r.separated_at),
            r.val_loss,
            r.chance(),
            r.learned()
        );
    }
    s
}

/// `symmetry.png`: the step at which the heads separate against log10(eps), a marker at each
/// run, and the random start at the size of its weights ([`RANDOM_INIT_STD`]): random
/// initialisation is a perturbation of that size.
fn plot(lab: &SymmetryLab, path: &Path) -> Result<(), ReportError> {
    use headlab_report::plot::{Series, Style, line_chart_styled};
    let points = |random: bool| -> Vec<(f64, f64)> {
        lab.runs
            .iter()
            .filter_map(|r| match (r.start, r.separated_at) {
                (Start::Perturbed(eps), Some(step)) if !random => Some((eps.log10(), step as f64)),
                (Start::Random, Some(step)) if random => {
                    Some((RANDOM_INIT_STD.log10(), step as f64))
                }
                _ => None,
            })
            .collect()
    };
    let marked = |i: usize| Style {
        markers: true,
        ..Style::nth(i)
    };
    line_chart_styled(
        path,
        "steps until two heads' scores differ by more than 0.02",
        "log10(eps): the size of the perturbation of identical heads",
        "step",
        &[
            (
                Series {
                    label: "identical + eps".into(),
                    points: points(false),
                    faint: false,
                },
                marked(0),
            ),
            (
                Series {
                    label: format!("random start (weights' std {RANDOM_INIT_STD})"),
                    points: points(true),
                    faint: false,
                },
                marked(1),
            ),
        ],
    )
}

/// `lab symmetry`'s summary page.
pub fn summary(lab: &SymmetryLab, reproduce: &str) -> String {
    let (cfg, every) = (&lab.config, lab.config.train.track_heads_every);
    let chance = lab.runs.first().map_or(f64::NAN, SymmetryRun::chance);
    let vocab = lab.runs.first().map_or(0, |r| r.vocab_size);
    let mut s = String::from("# lab symmetry\n\n");
    let _ = writeln!(
        s,
        "A small attention-only model on the {} corpus ({} layers x {} heads, d_model {}, \
         batch {}, lr {}) trained for {} steps from seed {}, six ways, {:.0} s of training in \
         all ({} 2 minutes). Every head's weights were checked against head 0's, bit for bit, \
         every {every} steps; head scores and each head's gradient norm are in each run's \
         head_history.csv and on its report.html. Chance is ln {vocab} = {chance:.3}: a model \
         that learned ends at least {LEARNED_MARGIN} below it.\n",
        cfg.data.builtin.as_deref().unwrap_or("your"),
        cfg.model.n_layers,
        cfg.model.n_heads,
        cfg.model.d_model,
        cfg.train.batch_size,
        cfg.train.lr,
        cfg.train.max_iters,
        cfg.train.seed,
        lab.seconds,
        if lab.seconds < 120.0 { "under" } else { "over" }
    );
    let _ = writeln!(
        s,
        "| start | backend | checked steps | heads identical | heads separate (scores > {SEPARATED} \
         apart) | val loss | learned |\n|---|---|---|---|---|---|---|"
    );
    for r in &lab.runs {
        let identical = match r.first_difference {
            None => "every bit, at every checked step".to_string(),
            Some(0) => "no (from the start)".to_string(),
            Some(step) => format!("until step {step}"),
        };
        let separate = r
            .separated_at
            .map_or("never".to_string(), |st| format!("at step {st}"));
        let learned = if r.learned() {
            format!("yes, {:.2} below chance", r.chance() - r.val_loss)
        } else {
            "**NO**: at chance".to_string()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {identical} | {separate} | {:.3} | {learned} |",
            r.start.name(),
            r.backend,
            r.checked,
            r.val_loss
        );
    }
    let failed: Vec<String> = lab
        .runs
        .iter()
        .filter(|r| !r.learned())
        .map(|r| format!("{} on {}", r.start.name(), r.backend))
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(
            s,
            "\n**Warning: {} of {} models did not learn** ({}: val loss within {LEARNED_MARGIN} of \
             chance, {chance:.3}). Their heads never took a role, so when they separate says \
             little; train longer (`--set train.max_iters=...`) before reading their rows.",
            failed.len(),
            lab.runs.len(),
            failed.join(", ")
        );
    }
    let identical_held = lab
        .runs
        .iter()
        .filter(|r| r.start == Start::Identical)
        .all(|r| r.first_difference.is_none());
    s += if identical_held {
        "\nHeads that start identical stay identical, bit for bit, on every backend checked: \
         each gets the same gradient and the same update, so nothing can pull them apart. \
         "
    } else {
        "\nHeads that started identical did not stay identical on every backend (see the \
         table): that backend computes the same function differently for different heads. "
    };
    s += "A perturbation breaks the symmetry, and training amplifies it: the smaller it is, the \
          longer the heads take to separate (symmetry.png, where the random start sits at the \
          size of its weights). Random initialisation starts them apart. The gradient norms on \
          each run's page show the heads being pulled differently.\n\n";
    s += "![steps until the heads separate, against the perturbation](symmetry.png)\n\n";
    s += &format!("Reproduce: `{reproduce}`\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use headlab_model::GptConfig;

    fn model() -> Gpt {
        let device = Device::flex();
        device.seed(4);
        let config = GptConfig {
            vocab_size: 9,
            block_size: 8,
            d_model: 16,
            n_layers: 2,
            n_heads: 4,
            ..GptConfig::default()
        };
        Gpt::new(&config, &device).unwrap()
    }

    /// The summary sets each model's val loss against chance and warns, naming them, when
    /// models did not learn; with every model learned there is no warning.
    #[test]
    fn the_summary_says_which_models_learned() {
        let run = |start, val_loss| SymmetryRun {
            start,
            backend: "flex".into(),
            checked: 5,
            first_difference: None,
            separated_at: Some(100),
            val_loss,
            vocab_size: 62,
        };
        let mut lab = SymmetryLab {
            config: lab_config(CONFIG, "lab-symmetry.toml", &[]).unwrap(),
            runs: vec![run(Start::Identical, 2.31), run(Start::Random, 4.10)],
            seconds: 60.0,
        };
        let page = summary(&lab, "headlab lab symmetry");
        assert!(page.contains("Chance is ln 62 = 4.127"), "{page}");
        assert!(
            page.contains("| 2.310 | yes, 1.82 below chance |"),
            "{page}"
        );
        assert!(page.contains("| 4.100 | **NO**: at chance |"), "{page}");
        assert!(
            page.contains("**Warning: 1 of 2 models did not learn** (random on flex"),
            "{page}"
        );
        lab.runs.pop();
        assert!(!summary(&lab, "x").contains("Warning"));
    }

    /// A random model's heads differ; made identical they are equal bit for bit; one ulp on
    /// one weight of one head (or on its W_O rows) is caught; a perturbation of 1e-6 too.
    #[test]
    fn the_exact_check_catches_one_ulp() {
        let random = model();
        assert!(!heads_identical(&random));
        let same = make_identical(random, 0.0, 1);
        assert!(heads_identical(&same));
        let bump = |lin: &Linear, at: usize| -> Linear {
            let [rows, cols] = lin.weight.dims();
            let mut w = to_host::<f32, _>(lin.weight.val());
            w[at] = f32::from_bits(w[at].to_bits() + 1);
            let device = lin.weight.val().device();
            Linear {
                weight: Param::from_tensor(Tensor::from_data(
                    TensorData::new(w, [rows, cols]),
                    &device,
                )),
                bias: lin.bias.clone(),
            }
        };
        // Head 2's first Q column in layer 1 (d_k = 4: columns 8..12).
        let mut q = same.clone();
        q.blocks[1].attn.q_proj = bump(&same.blocks[1].attn.q_proj, 8);
        assert!(!heads_identical(&q));
        // Head 3's first W_O row in layer 0 (rows 12..16 of [16, 16]).
        let mut o = same.clone();
        o.blocks[0].attn.o_proj = bump(&same.blocks[0].attn.o_proj, 12 * 16);
        assert!(!heads_identical(&o));
        assert!(!heads_identical(&make_identical(model(), 1e-6, 1)));
    }
}

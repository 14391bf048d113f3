//! One training step, headlab's backends against PyTorch's modes, in interleaved rounds.
//!
//! Machine noise on these VMs drifts by ±10% from one minute to the next, so one run of each
//! side, one after the other, puts that drift into every ratio. Here every round runs each
//! column once, headlab's in a worker process of this binary and PyTorch's in
//! bench/reference/bench.py, A B C A B C ..., and the report takes a ratio per round. Both
//! sides time with the same rule ([`Rule`], `measure` in bench.py) and both step the same
//! model (bench/reference/gpt.py mirrors crates/model).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use burn::optim::GradientsParams;
use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_kernels::{BackendKind, Precision, with_precision};
use headlab_model::{Gpt, GptConfig, cross_entropy};
use headlab_train::optim::{Optimizer, OptimizerConfig, global_grad_norm};
use serde_json::{Value, json};

use crate::peak::{Isa, fma_peak};

/// A model and batch the step is timed at.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// The name bench.py knows it by.
    pub name: &'static str,
    pub n_layers: usize,
    pub n_heads: usize,
    pub d_model: usize,
    pub block_size: usize,
    pub batch: usize,
    pub vocab: usize,
}

/// The vocabulary of tiny-shakespeare's characters.
const VOCAB: usize = 65;

/// nanoGPT's CPU recipe, and its shakespeare-char GPU model (where attention and memory
/// bandwidth matter more) at a CPU-sized batch of 8: the CPU bench's shapes.
pub const SHAPES: [Shape; 2] = [
    Shape {
        name: "recipe",
        n_layers: 4,
        n_heads: 4,
        d_model: 128,
        block_size: 64,
        batch: 12,
        vocab: VOCAB,
    },
    Shape {
        name: "nanogpt-gpu",
        n_layers: 6,
        n_heads: 6,
        d_model: 384,
        block_size: 256,
        batch: 8,
        vocab: VOCAB,
    },
];

/// Shapes for a GPU (tools/gpu-check.sh): nanoGPT's shakespeare-char model at its own batch
/// of 64, GPT-2 small (124M with GPT-2's padded 50304-token vocabulary, T 1024), and a tiny
/// model for the dry run on a CPU adapter.
pub const GPU_SHAPES: [Shape; 3] = [
    Shape {
        name: "nanogpt-gpu-b64",
        n_layers: 6,
        n_heads: 6,
        d_model: 384,
        block_size: 256,
        batch: 64,
        vocab: VOCAB,
    },
    Shape {
        name: "gpt2-small",
        n_layers: 12,
        n_heads: 12,
        d_model: 768,
        block_size: 1024,
        batch: 8,
        vocab: 50304,
    },
    Shape {
        name: "tiny",
        n_layers: 1,
        n_heads: 2,
        d_model: 32,
        block_size: 16,
        batch: 2,
        vocab: VOCAB,
    },
];

impl Shape {
    pub fn by_name(name: &str) -> Option<Shape> {
        SHAPES
            .iter()
            .chain(&GPU_SHAPES)
            .copied()
            .find(|s| s.name == name)
    }

    /// Every shape's name, for error messages.
    pub fn names() -> String {
        SHAPES
            .iter()
            .chain(&GPU_SHAPES)
            .map(|s| s.name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn config(&self) -> GptConfig {
        GptConfig::new(self.vocab)
            .with_block_size(self.block_size)
            .with_d_model(self.d_model)
            .with_n_layers(self.n_layers)
            .with_n_heads(self.n_heads)
            .with_bias(false)
            .with_dropout(0.0)
    }

    pub fn describe(&self) -> String {
        format!(
            "{} layers, {} heads, d_model {}, T {}, B {}, vocab {}",
            self.n_layers, self.n_heads, self.d_model, self.block_size, self.batch, self.vocab
        )
    }

    /// nanoGPT's `estimate_mfu` count: `6 N + 12 L d T` per token, N every parameter but the
    /// position table; times the batch's tokens.
    pub fn flops_per_step(&self) -> f64 {
        self.config().flops_per_token() * (self.batch * self.block_size) as f64
    }
}

/// How a step is timed, on both sides: one untimed call, warm-up for `warm_s` and at least two
/// calls, then samples until both `measure_s` and `min_samples` are reached.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub warm_s: f64,
    pub measure_s: f64,
    pub min_samples: usize,
}

impl Rule {
    pub fn new(shape: &Shape, quick: bool) -> Self {
        match (quick, shape.name) {
            (true, _) => Self {
                warm_s: 0.1,
                measure_s: 0.3,
                min_samples: 3,
            },
            (false, "recipe") => Self {
                warm_s: 1.0,
                measure_s: 3.0,
                min_samples: 10,
            },
            (false, _) => Self {
                warm_s: 1.0,
                measure_s: 3.0,
                min_samples: 5,
            },
        }
    }

    /// The untimed first call's milliseconds (where a GPU compiles its shaders and autotunes),
    /// and per-call milliseconds of the samples after the warm-up.
    pub fn measure_first(&self, mut f: impl FnMut()) -> (f64, Vec<f64>) {
        let t0 = Instant::now();
        f();
        let first_ms = t0.elapsed().as_secs_f64() * 1e3;
        let (start, mut calls) = (Instant::now(), 0);
        while calls < 2 || start.elapsed().as_secs_f64() < self.warm_s {
            f();
            calls += 1;
        }
        let mut ms = Vec::new();
        let start = Instant::now();
        while ms.len() < self.min_samples || start.elapsed().as_secs_f64() < self.measure_s {
            let t0 = Instant::now();
            f();
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        (first_ms, ms)
    }
}

fn tokens(b: usize, t: usize, vocab: usize, seed: u64, device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = (0..b * t)
        .map(|i| ((i as u64 * 2654435761 + seed * 97) % vocab as u64) as i64)
        .collect();
    Tensor::from_data(TensorData::new(ids, [b, t]), device)
}

/// The first step's milliseconds and the step's timings on `backend`, as `headlab train` takes
/// a step: loss, backward, global norm clipped at 1, AdamW; the linear layers' products in
/// `precision` (`train.precision`).
fn time_step(
    shape: &Shape,
    backend: BackendKind,
    precision: Precision,
    rule: &Rule,
) -> Result<(f64, Vec<f64>), String> {
    let device = backend.device().map_err(|e| e.to_string())?;
    headlab_kernels::with_kernels(backend.kernels(), || {
        with_precision(precision, || {
            let ad = device.clone().autodiff();
            ad.seed(1337);
            let model = Gpt::new(&shape.config(), &ad).map_err(|e| e.to_string())?;
            let (b, t) = (shape.batch, shape.block_size);
            let v = shape.vocab;
            let (x, y) = (tokens(b, t, v, 1, &ad), tokens(b, t, v, 2, &ad));
            let mut optim = Optimizer::new(OptimizerConfig {
                beta1: 0.9,
                beta2: 0.99,
                eps: 1e-8,
                weight_decay: 0.1,
                muon: None,
            });
            let mut slot = Some(model);
            // As `headlab train` runs its loop.
            let _keep_pages = headlab_kernels::memory::KeepFreedPages::new();
            Ok(rule.measure_first(|| {
                let model = slot.take().expect("model");
                let loss = cross_entropy(model.forward(x.clone()), y.clone(), None);
                let grads = GradientsParams::from_grads(loss.backward(), &model);
                let norm = global_grad_norm(&model, &grads);
                let scale = if norm > 1.0 { 1.0 / (norm + 1e-6) } else { 1.0 };
                slot = Some(optim.step(model, &grads, 1e-3, scale));
                ad.sync().expect("device sync");
            }))
        })
    })
}

/// The column of flex with its linear products in bf16 (`train.precision = "bf16"`).
pub const FLEX_BF16: &str = "flex-bf16";

/// `headlab-bench --step-worker SHAPE`: every backend's step in this process, one after the
/// other, then with `bf16` flex's in bf16 ([`FLEX_BF16`]), as `{ "columns": { column: {
/// timing } or { error } } }`.
pub fn worker(shape: &Shape, backends: &[BackendKind], bf16: bool, quick: bool) -> Value {
    let rule = Rule::new(shape, quick);
    let mut runs: Vec<(String, BackendKind, Precision)> = backends
        .iter()
        .map(|&b| (b.to_string(), b, Precision::F32))
        .collect();
    if bf16 {
        runs.push((FLEX_BF16.into(), BackendKind::Flex, Precision::Bf16));
    }
    let mut columns = serde_json::Map::new();
    for (column, backend, precision) in runs {
        let cell = match time_step(shape, backend, precision, &rule) {
            Ok((first_ms, ms)) => {
                json!({ "timing": crate::timing(&ms), "ms": ms, "first_ms": first_ms })
            }
            Err(e) => json!({ "error": e }),
        };
        columns.insert(column, cell);
    }
    json!({ "columns": columns })
}

/// What [`compare`] runs.
pub struct Plan {
    pub shapes: Vec<Shape>,
    pub threads: Vec<usize>,
    pub rounds: usize,
    pub backends: Vec<BackendKind>,
    /// Whether headlab's columns include flex in bf16 ([`FLEX_BF16`]; where the CPU has
    /// AVX512-BF16).
    pub bf16: bool,
    /// The Python of a venv with torch; PyTorch's columns are left out without it.
    pub torch_python: Option<PathBuf>,
    pub torch_script: PathBuf,
    /// bench.py's `--device` (`cuda` on a GPU machine); its default (the CPU) when `None`.
    pub torch_device: Option<String>,
    pub quick: bool,
}

/// PyTorch's modes, each a column: eager with the default (foreach) AdamW, eager with
/// `fused=True`, and `torch.compile` of the model and loss with the fused AdamW; then the
/// last two under `torch.autocast(device, torch.bfloat16)` around the loss, what a PyTorch
/// user turns on for bf16.
pub const TORCH_MODES: [&str; 5] = ["eager", "fused", "compile", "fused-bf16", "compile-bf16"];

/// Runs a command and parses the JSON it leaves: on stdout, or in `out` when given.
fn run_json(cmd: &mut Command, out: Option<&Path>) -> Result<Value, String> {
    let output = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: String = stderr.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        return Err(format!("{cmd:?} failed ({}): {tail}", output.status));
    }
    let text = match out {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("{cmd:?} wrote no {}: {e}", path.display()))?,
        None => String::from_utf8_lossy(&output.stdout).into_owned(),
    };
    serde_json::from_str(&text).map_err(|e| format!("{cmd:?} printed no JSON: {e}"))
}

/// The interleaved comparison: for every shape and thread count, `rounds` rounds of headlab's
/// backends (a worker process with `RAYON_NUM_THREADS`) then PyTorch's modes (bench.py with
/// `--threads`). Rows are `{shape, threads, round, column, timing | error}`; the FMA peak of
/// each thread count is the MFU denominator of the f32 columns, the bf16 peak of the bf16
/// ones.
// Over 80 lines on purpose: the interleaved rounds: kept together so the round order that makes the timings fair is visible in one place.
pub fn compare(plan: &Plan, scratch: &Path) -> Value {
    let isa = Isa::detect();
    let (peak_s, peak_repeats) = if plan.quick { (0.05, 2) } else { (0.5, 5) };
    let peaks: Vec<Value> = plan
        .threads
        .iter()
        .map(|&n| {
            let gflops = fma_peak(&isa, n, peak_s, peak_repeats);
            eprintln!(
                "step: FMA peak, {n} thread(s), {}: {gflops:.1} GFLOP/s",
                isa.name
            );
            json!({ "threads": n, "gflops": gflops })
        })
        .collect();
    // The bf16 peak, where the CPU has AVX512-BF16: the denominator of bf16 columns' MFU.
    let bf16_peaks: Vec<Value> = plan
        .threads
        .iter()
        .filter_map(|&n| {
            let gflops = crate::peak::bf16_peak(n, peak_s, peak_repeats)?;
            eprintln!("step: bf16 peak (vdpbf16ps), {n} thread(s): {gflops:.1} GFLOP/s");
            Some(json!({ "threads": n, "gflops": gflops }))
        })
        .collect();
    let exe = std::env::current_exe().expect("the bench's own path");
    let backends: Vec<String> = plan.backends.iter().map(|b| b.to_string()).collect();
    // headlab's columns: the worker's backends, then flex in bf16 where asked.
    let mut columns = backends.clone();
    if plan.bf16 {
        columns.push(FLEX_BF16.into());
    }
    let mut rows = Vec::new();
    let mut torch_environment = Value::Null;
    let mut torch_parallel_info = json!({});
    let mut shapes = Vec::new();
    for shape in &plan.shapes {
        shapes.push(json!({
            "shape": shape.name, "config": shape.describe(),
            "tokens_per_step": shape.batch * shape.block_size,
            "flops_per_step": shape.flops_per_step(),
        }));
        for &threads in &plan.threads {
            for round in 1..=plan.rounds {
                let mut cells: Vec<(String, Value)> = Vec::new();
                let mut cmd = Command::new(&exe);
                cmd.arg("--step-worker")
                    .arg(shape.name)
                    .arg("--backends")
                    .arg(backends.join(","))
                    .env("RAYON_NUM_THREADS", threads.to_string());
                if plan.quick {
                    cmd.arg("--quick");
                }
                if plan.bf16 {
                    cmd.arg("--step-bf16");
                }
                match run_json(&mut cmd, None) {
                    Ok(v) => cells.extend(
                        v["columns"]
                            .as_object()
                            .into_iter()
                            .flatten()
                            .map(|(k, c)| (k.clone(), c.clone())),
                    ),
                    Err(e) => {
                        cells.extend(columns.iter().map(|b| (b.clone(), json!({ "error": e }))))
                    }
                }
                if let Some(python) = &plan.torch_python {
                    let out = scratch.join(format!("step-{}-{threads}-{round}.json", shape.name));
                    let mut py = Command::new(python);
                    py.arg(&plan.torch_script)
                        .arg("step")
                        .arg("--shape")
                        .arg(shape.name)
                        .arg("--threads")
                        .arg(threads.to_string())
                        .arg("--modes")
                        .arg(TORCH_MODES.join(","))
                        .arg("--out")
                        .arg(&out);
                    if plan.quick {
                        py.arg("--quick");
                    }
                    if let Some(device) = &plan.torch_device {
                        py.arg("--device").arg(device);
                    }
                    match run_json(&mut py, Some(&out)) {
                        Ok(v) => {
                            if torch_environment.is_null() {
                                torch_environment = v["environment"].clone();
                            }
                            // Threading is configured per call: keep each count's own.
                            torch_parallel_info[threads.to_string()] =
                                v["environment"]["parallel_info"].clone();
                            for mode in TORCH_MODES {
                                let cell = v["steps"].get(mode).cloned().unwrap_or_else(
                                    || json!({ "error": "bench.py wrote no result" }),
                                );
                                cells.push((format!("torch {mode}"), cell));
                            }
                        }
                        Err(e) => cells.extend(
                            TORCH_MODES
                                .iter()
                                .map(|m| (format!("torch {m}"), json!({ "error": e }))),
                        ),
                    }
                }
                let line: Vec<String> = cells
                    .iter()
                    .map(|(c, v)| match v["timing"]["median_ms"].as_f64() {
                        Some(ms) => format!("{c} {ms:.1} ms"),
                        None => format!("{c} failed"),
                    })
                    .collect();
                eprintln!(
                    "step {} {threads}t round {round}/{}: {}",
                    shape.name,
                    plan.rounds,
                    line.join(", ")
                );
                for (column, mut cell) in cells {
                    if let Some(obj) = cell.as_object_mut() {
                        obj.remove("ms");
                        obj.remove("traceback");
                    }
                    let mut row = json!({
                        "shape": shape.name, "threads": threads, "round": round, "column": column,
                    });
                    for (k, v) in cell.as_object().into_iter().flatten() {
                        row[k] = v.clone();
                    }
                    rows.push(row);
                }
            }
        }
    }
    json!({
        "rounds": plan.rounds,
        "threads": plan.threads,
        "fma": { "isa": isa.name, "lanes": isa.lanes, "accumulators": isa.accumulators },
        "fma_peak": peaks,
        "bf16_peak": bf16_peaks,
        "shapes": shapes,
        "rows": rows,
        "torch_environment": torch_environment,
        "torch_parallel_info": torch_parallel_info,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The FLOP count from the shapes, written out layer by layer: every weight matrix once
    /// per token forward (2 FLOPs per multiply-add), the attention products as nanoGPT counts
    /// them (all T keys), backward twice the forward; LayerNorm gains counted as weights, as
    /// `6 N` does.
    #[test]
    fn flops_per_step_follow_nanogpts_estimate() {
        for shape in SHAPES.iter().chain(&GPU_SHAPES) {
            let (l, d, t, b, v) = (
                shape.n_layers as f64,
                shape.d_model as f64,
                shape.block_size as f64,
                shape.batch as f64,
                shape.vocab as f64,
            );
            // q, k, v, o (4 d^2) and the MLP (8 d^2) per layer; two LayerNorm gains per layer
            // and the final one; the tied token table.
            let n = l * (12.0 * d * d + 2.0 * d) + d + v * d;
            let per_token = 6.0 * n + 12.0 * l * d * t;
            let expected = per_token * b * t;
            assert_eq!(shape.flops_per_step(), expected, "{}", shape.name);
        }
    }

    #[test]
    fn the_rule_takes_enough_samples_after_warming_up() {
        let rule = Rule {
            warm_s: 0.0,
            measure_s: 0.0,
            min_samples: 4,
        };
        let mut calls = 0;
        let (first, ms) = rule.measure_first(|| calls += 1);
        assert_eq!(ms.len(), 4);
        assert!(first >= 0.0);
        // One untimed call and two warm-up calls before the samples.
        assert_eq!(calls, 7);
    }
}

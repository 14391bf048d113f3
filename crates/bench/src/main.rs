//! headlab's benchmarks, run by `cargo xtask bench` (which builds, and runs the PyTorch
//! reference first when asked).
//!
//! Sections, each per backend: the matmul peak (`matmul`), the attention op alone forward
//! and forward+backward over T (`attention`), all heads batched vs the per-head loop
//! reference (`heads`), and generation with and without the KV cache (`generation`).
//! Criterion times the first three (warm-up, flat sampling, per-iteration samples kept);
//! generation is too slow per call for that and is timed by repeating whole generations.
//! Then the training step (`train_step`, [`step`]): every backend against PyTorch's modes
//! in interleaved rounds, MFU against the FMA peak ([`peak`]). Then the nanoGPT CPU recipe
//! end to end on tiny-shakespeare (`recipe`), when the text is there. Writes `<results>/<date>-<host>[-quick].json` and a markdown report beside it, with
//! headlab / PyTorch ratios when `--torch-json` gives the reference's results.
//!
//! `headlab-bench --help` lists the arguments.

use headlab_kernels::to_host;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use clap::Parser;
use criterion::{BenchmarkId, Criterion, SamplingMode};
use headlab_model::attention::reference::per_head_loop;
use headlab_model::attention::{
    AttentionOptions, MultiHeadAttentionConfig, flash_attention, fused_attention, naive_attention,
};
use headlab_model::{Decoder, Gpt, GptConfig};
// Median, min and max.
use headlab_kernels::BackendKind;
use headlab_kernels::memory;
use report::spread as stats;
use serde_json::{Value, json};

mod peak;
mod report;
mod step;

/// headlab's benchmarks (run by `cargo xtask bench`).
#[derive(Debug, Parser)]
#[command(name = "headlab-bench", version, about, long_about = None)]
struct Args {
    /// Fewer sizes and iterations: checks that every section runs, in about a minute.
    #[arg(long)]
    quick: bool,
    /// Backends to measure, comma-separated (flex-burn: flex on Burn's ops alone, headlab's
    /// kernels off).
    #[arg(long, value_delimiter = ',', default_value = "flex,ndarray")]
    backends: Vec<BackendKind>,
    /// Folder for the JSON and markdown results.
    #[arg(long, default_value = "bench/results")]
    results: PathBuf,
    /// Criterion's working folder.
    #[arg(long, default_value_os_t = std::env::temp_dir().join("headlab-criterion"))]
    criterion_dir: PathBuf,
    /// The recipe's text.
    #[arg(long, default_value = "datasets/tinyshakespeare/input.txt")]
    data: PathBuf,
    /// Iterations of the recipe (default: the recipe's own).
    #[arg(long)]
    recipe_iters: Option<usize>,
    /// The PyTorch reference's results, for headlab / PyTorch ratios.
    #[arg(long)]
    torch_json: Option<PathBuf>,
    /// The Python of a venv with torch: the training step section then runs PyTorch's
    /// columns (eager, fused AdamW, torch.compile, and the last two under bf16 autocast) in
    /// rounds alternating with headlab's.
    #[arg(long)]
    torch_python: Option<PathBuf>,
    /// The PyTorch reference's script.
    #[arg(long, default_value = "bench/reference/bench.py")]
    torch_script: PathBuf,
    /// Rounds of the training step comparison (default 3, 2 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Thread counts of the training step comparison (default: 1 and every core).
    #[arg(long, value_delimiter = ',')]
    step_threads: Vec<usize>,
    /// Shapes of the training step comparison: recipe, nanogpt-gpu (the default, recipe alone
    /// with --quick), and for a GPU nanogpt-gpu-b64, gpt2-small and tiny.
    #[arg(long, value_delimiter = ',')]
    step_shapes: Vec<String>,
    /// Only write the markdown report of an existing result JSON, beside it (after a change
    /// to the report's layout; the measurements are the file's).
    #[arg(long, value_name = "JSON")]
    render: Option<PathBuf>,
    /// Internal: time the step at this shape on --backends and print JSON (one round's
    /// headlab columns, run in a process of its own so its thread count can differ).
    #[arg(long, hide = true)]
    step_worker: Option<String>,
    /// Internal: the step worker also times flex with its linear products in bf16.
    #[arg(long, hide = true)]
    step_bf16: bool,
    /// Sections to run (all when empty): attention, heads, train_step, generation, recipe.
    /// The matmul peak always runs.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// bench.py's device for the training step's PyTorch columns: `cuda` on a GPU machine
    /// (tools/gpu-check.sh passes it where `torch.cuda.is_available()`).
    #[arg(long)]
    torch_device: Option<String>,
    /// The accelerator's published fp32 peak in GFLOP/s: the MFU denominator of the wgpu
    /// column (and of PyTorch's on `--torch-device cuda`) instead of the CPU's FMA peak.
    #[arg(long, requires = "device_peak_name")]
    device_peak_gflops: Option<f64>,
    /// Where `--device-peak-gflops` comes from, for the report (e.g. "NVIDIA H200, fp32
    /// non-tensor, spec sheet").
    #[arg(long, requires = "device_peak_gflops")]
    device_peak_name: Option<String>,
    /// The name in the result files' stem instead of the host name (`<date>-<label>`).
    #[arg(long)]
    label: Option<String>,
    /// Print the wgpu adapter headlab would use as JSON (`name`, `physical`: whether it is a
    /// card rather than a CPU or software rasterizer) and exit; exit code 3 without one.
    #[arg(long)]
    adapter: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn parse_args() -> Args {
    Args::parse()
}

/// Memory a benchmark used at its peak above what was held before it: the backend's
/// allocator where it reports one (wgpu), else the process RSS.
struct MemoryProbe {
    rss_before: Option<f64>,
}

impl MemoryProbe {
    fn start(device: &Device) -> Self {
        device.memory_cleanup();
        Self {
            rss_before: memory::reset_peak_rss(),
        }
    }

    fn peak_mib(&self, device: &Device) -> Option<f64> {
        if let Some(usage) = device.memory_pool_usage() {
            return Some(usage.bytes_reserved as f64 / (1024.0 * 1024.0));
        }
        Some((memory::peak_rss()? - self.rss_before?).max(0.0))
    }
}

/// Per-iteration times (ms) of a criterion benchmark, read from its `sample.json`.
fn samples(dir: &Path, group: &str, function: &str, param: &str) -> Vec<f64> {
    let path = dir
        .join(group)
        .join(function)
        .join(param)
        .join("new/sample.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("criterion wrote no {}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).expect("criterion sample.json");
    let iters = v["iters"].as_array().expect("iters");
    let times = v["times"].as_array().expect("times");
    iters
        .iter()
        .zip(times)
        .map(|(i, t)| t.as_f64().unwrap() / i.as_f64().unwrap() / 1e6)
        .collect()
}

/// `{median_ms, min_ms, max_ms, samples}` of per-call milliseconds.
fn timing(ms: &[f64]) -> Value {
    let (median, min, max) = stats(ms.to_vec());
    json!({ "median_ms": median, "min_ms": min, "max_ms": max, "samples": ms.len() })
}

struct Bench {
    c: Criterion,
    dir: PathBuf,
}

impl Bench {
    /// Runs `f` under criterion as `group/function/param`; returns per-iteration ms and the
    /// peak memory.
    fn run(
        &mut self,
        device: &Device,
        group: &str,
        function: &str,
        param: usize,
        mut f: impl FnMut(),
    ) -> (Vec<f64>, Option<f64>) {
        let probe = MemoryProbe::start(device);
        let mut g = self.c.benchmark_group(group);
        g.sampling_mode(SamplingMode::Flat);
        g.bench_function(BenchmarkId::new(function, param), |b| {
            b.iter(|| {
                f();
                device.sync().expect("device sync");
            })
        });
        g.finish();
        let memory = probe.peak_mib(device);
        (
            samples(&self.dir, group, function, &param.to_string()),
            memory,
        )
    }
}

fn random<const D: usize>(shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

/// The square matmul peak: Burn's `matmul` on the backend, and on the CPU backends also
/// headlab's `linear` kernel (the gemm crate on the backend's buffers), which is what the
/// training step's layers run. (MFU divides by the FMA peak of `peak.rs`, not by these.)
fn matmul(bench: &mut Bench, backend: BackendKind, device: &Device, n: usize) -> Vec<Value> {
    let a = random([n, n], device);
    let b = random([n, n], device);
    let group = format!("matmul_{backend}");
    let mut row = |kernel: &str, f: &dyn Fn()| {
        let (ms, _) = bench.run(device, &group, kernel, n, f);
        let (median, _, _) = stats(ms.clone());
        json!({
            "backend": backend.to_string(), "kernel": kernel, "n": n, "timing": timing(&ms),
            "gflops": 2.0 * (n as f64).powi(3) / (median * 1e-3) / 1e9,
        })
    };
    let mut rows = vec![row("burn", &|| {
        black_box(a.clone().matmul(b.clone()));
    })];
    if headlab_kernels::runs_on(&a) {
        rows.push(row("headlab", &|| {
            black_box(headlab_kernels::linear(a.clone(), b.clone(), None));
        }));
        // The same layer with bf16 operands (`train.precision = "bf16"`), where the CPU has
        // AVX512-BF16.
        if headlab_kernels::bf16::supported() {
            rows.push(row("headlab-bf16", &|| {
                headlab_kernels::with_precision(headlab_kernels::Precision::Bf16, || {
                    black_box(headlab_kernels::linear(a.clone(), b.clone(), None));
                })
            }));
        }
    }
    rows
}

/// The attention op alone: `naive` materialises the weights (Burn's ops, the reference),
/// `fused` is the backend's kernel (Burn runs its naive chain under autodiff, so forward only),
/// `flash` is headlab's kernel with its own backward (CPU backends; what training uses there).
fn attention(
    bench: &mut Bench,
    backend: BackendKind,
    device: &Device,
    [b, h, d_k]: [usize; 3],
    t: usize,
    backward: bool,
    kernel: &str,
) -> Value {
    let pass = if backward {
        "forward_backward"
    } else {
        "forward"
    };
    let attend = match kernel {
        "fused" => fused_attention,
        "flash" => flash_attention,
        _ => naive_attention,
    };
    let group = format!("attention_{backend}_{pass}_{kernel}_b{b}_h{h}_d{d_k}");
    let (ms, memory) = if backward {
        let ad = device.clone().autodiff();
        let q = random([b, h, t, d_k], &ad).require_grad();
        let k = random([b, h, t, d_k], &ad).require_grad();
        let v = random([b, h, t, d_k], &ad).require_grad();
        bench.run(&ad, &group, "t", t, || {
            let out = attend(q.clone(), k.clone(), v.clone(), true);
            black_box(out.sum().backward());
        })
    } else {
        let q = random([b, h, t, d_k], device);
        let k = random([b, h, t, d_k], device);
        let v = random([b, h, t, d_k], device);
        bench.run(device, &group, "t", t, || {
            black_box(attend(q.clone(), k.clone(), v.clone(), true));
        })
    };
    let (median, _, _) = stats(ms.clone());
    // Q K^T and weights V over the full [t, t] matrix (what the naive op computes); the
    // backward pass costs twice the forward.
    let fwd_flops = 4.0 * (b * h * t * t * d_k) as f64;
    let flops = if backward { 3.0 * fwd_flops } else { fwd_flops };
    json!({
        "backend": backend.to_string(), "pass": pass, "kernel": kernel,
        "b": b, "h": h, "d_k": d_k, "t": t,
        "timing": timing(&ms),
        "tokens_per_s": (b * t) as f64 / (median * 1e-3),
        "gflops": flops / (median * 1e-3) / 1e9,
        "peak_mib": memory,
    })
}

fn heads(
    bench: &mut Bench,
    backend: BackendKind,
    device: &Device,
    h: usize,
    t: usize,
) -> Vec<Value> {
    let d_model = 128;
    let mha = MultiHeadAttentionConfig::new(d_model, h)
        .with_bias(false)
        .init(device)
        .expect("valid attention config");
    let x = random([1, t, d_model], device);
    let group = format!("heads_{backend}_d{d_model}_t{t}");
    let mut rows = Vec::new();
    for mode in ["batched", "loop"] {
        let (ms, _) = bench.run(device, &group, mode, h, || match mode {
            // The naive kernel, as the loop uses: this measures batching, not the kernel.
            "batched" => {
                black_box(mha.forward_with(x.clone(), AttentionOptions::with_weights()));
            }
            _ => {
                black_box(per_head_loop(&mha, x.clone(), None, None));
            }
        });
        rows.push(json!({
            "backend": backend.to_string(), "mode": mode, "h": h, "d_k": d_model / h,
            "d_model": d_model, "t": t, "b": 1, "timing": timing(&ms),
        }));
    }
    rows
}

/// nanoGPT's CPU recipe model: 4 layers, 4 heads, d_model 128, T 64, vocab 65, no biases.
fn recipe_model(block_size: usize) -> GptConfig {
    GptConfig::new(65)
        .with_block_size(block_size)
        .with_d_model(128)
        .with_n_layers(4)
        .with_n_heads(4)
        .with_bias(false)
        .with_dropout(0.0)
}

/// Greedy generation of `new` tokens after one token, with or without the KV cache.
fn generate(model: &Gpt, new: usize, cache: bool, device: &Device) -> usize {
    let argmax = |logits: &[f32]| {
        logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as u32)
    };
    if cache {
        let mut decoder = Decoder::new(model, &[0]).expect("prompt");
        for _ in 0..new {
            let next = argmax(decoder.logits());
            decoder.push(next);
        }
        decoder.window().len()
    } else {
        let mut window = vec![0u32];
        for _ in 0..new {
            let ids: Vec<i64> = window.iter().map(|&t| t as i64).collect();
            let input =
                Tensor::<2, Int>::from_data(TensorData::new(ids, [1, window.len()]), device);
            let logits = model.forward(input);
            let [_, t, v] = logits.dims();
            let last: Vec<f32> = to_host::<f32, _>(logits.slice([0..1, t - 1..t, 0..v]));
            window.push(argmax(&last));
        }
        window.len()
    }
}

fn generation(backend: BackendKind, device: &Device, lengths: &[usize], reps: usize) -> Vec<Value> {
    let max = lengths.iter().copied().max().unwrap_or(1);
    let config = recipe_model(max + 1);
    device.seed(7);
    let model = Gpt::new(&config, device).expect("generation config");
    // Warm-up: first calls allocate and, on wgpu, compile.
    generate(&model, 8, true, device);
    generate(&model, 8, false, device);
    let mut rows = Vec::new();
    for &new in lengths {
        for cache in [true, false] {
            // Without the cache, 1024 tokens take a minute; one run is enough to see it.
            let reps = if !cache && new >= 1024 { 1 } else { reps };
            let ms: Vec<f64> = (0..reps)
                .map(|_| {
                    let start = Instant::now();
                    black_box(generate(&model, new, cache, device));
                    start.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            let (median, _, _) = stats(ms.clone());
            eprintln!("generation {backend} new={new} cache={cache}: {median:.0} ms");
            rows.push(json!({
                "backend": backend.to_string(), "new_tokens": new, "kv_cache": cache,
                "model": "recipe dims, block_size = new_tokens + 1, greedy",
                "timing": timing(&ms), "tokens_per_s": new as f64 / (median * 1e-3),
            }));
        }
    }
    rows
}

/// glibc's malloc hands large tensor buffers back to the OS and faults them in again at the
/// next step (measured in bench/NOTES.md); mimalloc reuses them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    headlab_kernels::on_compute_pool(bench);
}

/// The sizes each section measures.
struct Sizes {
    /// Sequence lengths of the attention op.
    ts: Vec<usize>,
    /// The long sequence (forward only).
    long_t: usize,
    /// Head counts of the batched-vs-loop comparison.
    hs: Vec<usize>,
    /// Its sequence length.
    head_t: usize,
    /// Generated tokens.
    gen_lengths: Vec<usize>,
    /// The matmul peak's n.
    matmul_n: usize,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                ts: vec![64, 128],
                long_t: 256,
                hs: vec![1, 4],
                head_t: 64,
                gen_lengths: vec![16],
                matmul_n: 256,
            }
        } else {
            Self {
                ts: vec![64, 128, 256, 512, 1024, 2048],
                long_t: 8192,
                hs: vec![1, 2, 4, 8, 16],
                head_t: 256,
                gen_lengths: vec![256, 1024],
                matmul_n: 1024,
            }
        }
    }
}

fn push(out: &mut Value, section: &str, v: Value) {
    out[section].as_array_mut().expect("section").push(v);
}

/// Every section on one backend, appended to `out`'s sections.
fn measure_backend(
    bench: &mut Bench,
    args: &Args,
    sizes: &Sizes,
    backend: BackendKind,
    device: &Device,
    out: &mut Value,
) {
    for row in matmul(bench, backend, device, sizes.matmul_n) {
        push(out, "matmul", row);
    }
    let runs = |section: &str| args.only.is_empty() || args.only.iter().any(|s| s == section);
    // Where headlab's flash kernel runs; elsewhere `flash` is the naive op, not measured twice.
    let cpu = backend != BackendKind::Wgpu && backend.kernels();
    for &t in sizes.ts.iter().filter(|_| runs("attention")) {
        let kernels = [
            (false, "naive"),
            (false, "fused"),
            (false, "flash"),
            (true, "naive"),
            (true, "flash"),
        ];
        for (backward, kernel) in kernels.into_iter().filter(|(_, k)| cpu || *k != "flash") {
            let row = attention(bench, backend, device, [4, 4, 32], t, backward, kernel);
            push(out, "attention", row);
        }
    }
    // The long sequence: forward only, one sequence (the naive op holds a [T, T] matrix
    // per head; the fused kernel tiles over keys where the backend has one).
    let long_kernels = ["naive", "fused", "flash"].into_iter();
    for kernel in long_kernels.filter(|k| runs("attention") && (cpu || *k != "flash")) {
        let row = attention(
            bench,
            backend,
            device,
            [1, 4, 32],
            sizes.long_t,
            false,
            kernel,
        );
        push(out, "attention", row);
    }
    for &h in sizes.hs.iter().filter(|_| runs("heads")) {
        for row in heads(bench, backend, device, h, sizes.head_t) {
            push(out, "heads", row);
        }
    }
    if runs("generation") {
        let reps = if args.quick { 2 } else { 3 };
        for row in generation(backend, device, &sizes.gen_lengths, reps) {
            push(out, "generation", row);
        }
    }
}

// Over 80 lines on purpose: the benchmark's plan in order; each section is one call, the rest is progress and arguments.
fn bench() {
    let args = parse_args();
    let quick = args.quick;
    if let Some(json_path) = &args.render {
        let text = std::fs::read_to_string(json_path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", json_path.display()));
        let out: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not a bench result: {e}", json_path.display()));
        let md_path = json_path.with_extension("md");
        std::fs::write(&md_path, report::bench_markdown(&out)).expect("writing the report");
        eprintln!("wrote {}", md_path.display());
        return;
    }
    if args.adapter {
        match headlab_kernels::wgpu_device() {
            Ok(device) => {
                let identity = device.identity();
                println!(
                    "{}",
                    json!({
                        "name": identity.as_ref().map(|i| i.name.clone()),
                        "physical": identity.as_ref().is_some_and(|i| i.physical.is_some()),
                    })
                );
            }
            Err(why) => {
                eprintln!("bench: {why}");
                std::process::exit(3);
            }
        }
        return;
    }
    if let Some(name) = &args.step_worker {
        let shape = step::Shape::by_name(name)
            .unwrap_or_else(|| panic!("--step-worker {name}: not a shape of step.rs"));
        println!(
            "{}",
            step::worker(&shape, &args.backends, args.step_bf16, quick)
        );
        return;
    }
    // Read the reference first: a bad file must not cost a finished run.
    let torch = match &args.torch_json {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            serde_json::from_str::<Value>(&text)
                .unwrap_or_else(|e| panic!("{} is not the reference's JSON: {e}", path.display()))
        }
        None => Value::Null,
    };
    let (warm, measure) = if quick {
        (Duration::from_millis(100), Duration::from_millis(300))
    } else {
        (Duration::from_secs(1), Duration::from_secs(3))
    };
    std::fs::create_dir_all(&args.criterion_dir).expect("criterion dir");
    let c = Criterion::default()
        .warm_up_time(warm)
        .measurement_time(measure)
        .sample_size(10)
        .without_plots()
        .output_directory(&args.criterion_dir);
    let mut bench = Bench {
        c,
        dir: args.criterion_dir.clone(),
    };
    let mut out = json!({
        "quick": quick,
        "threads": std::env::var("RAYON_NUM_THREADS").ok(),
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu": cpu(),
        // The exact command (`cargo xtask bench` passes its own) and what built this binary.
        "command": std::env::var("HEADLAB_BENCH_COMMAND")
            .unwrap_or_else(|_| std::env::args().collect::<Vec<_>>().join(" ")),
        "commit": std::env::var("HEADLAB_BENCH_COMMIT").ok(),
        "versions": {
            "headlab": env!("CARGO_PKG_VERSION"),
            "rustc": std::env::var("HEADLAB_BENCH_RUSTC").ok(),
            "burn": std::env::var("HEADLAB_BENCH_BURN").ok(),
        },
        "matmul": [], "attention": [], "heads": [], "generation": [],
        "unavailable": {},
    });
    if let (Some(gflops), Some(name)) = (args.device_peak_gflops, &args.device_peak_name) {
        out["device_peak"] = json!({ "gflops": gflops, "name": name });
    }
    let sizes = Sizes::new(quick);
    for &backend in &args.backends {
        match backend.device() {
            // flex-burn: the same device with headlab's kernels off, Burn's ops alone.
            Ok(device) => headlab_kernels::with_kernels(backend.kernels(), || {
                measure_backend(&mut bench, &args, &sizes, backend, &device, &mut out)
            }),
            Err(e) => {
                eprintln!("bench: {backend} is not available: {e}");
                out["unavailable"][backend.to_string()] = json!(e.to_string());
            }
        }
    }
    let runs = |section: &str| args.only.is_empty() || args.only.iter().any(|s| s == section);
    if runs("train_step") {
        out["train_step"] = step::compare(&step_plan(&args, &out), &args.criterion_dir);
        out["train_step"]["torch_device"] = json!(args.torch_device.as_deref().unwrap_or("cpu"));
    }
    let recipe_iters = match args.recipe_iters {
        _ if !args.only.is_empty() && !args.only.iter().any(|s| s == "recipe") => 0,
        Some(n) => n,
        None if quick => 200,
        None => 2000,
    };
    let first_available = args
        .backends
        .iter()
        .copied()
        .find(|b| out["unavailable"].get(b.to_string()).is_none());
    out["recipe"] = match first_available {
        Some(backend) => recipe(&args.data, recipe_iters, backend),
        None => json!({ "skipped": "no backend available" }),
    };
    out["torch"] = torch;
    let (date, host) = (today(), args.label.clone().unwrap_or_else(hostname));
    out["date"] = json!(date);
    out["host"] = json!(host);
    std::fs::create_dir_all(&args.results).expect("creating the results directory");
    let threads = out["threads"]
        .as_str()
        .map_or(String::new(), |n| format!("-t{n}"));
    let partial = if args.only.is_empty() { "" } else { "-partial" };
    let stem = format!(
        "{date}-{host}{}{threads}{partial}",
        if quick { "-quick" } else { "" }
    );
    let stem = unused_stem(&args.results, &stem);
    let json_path = args.results.join(format!("{stem}.json"));
    let md_path = args.results.join(format!("{stem}.md"));
    let text = serde_json::to_string_pretty(&out).expect("json");
    std::fs::write(&json_path, text + "\n").expect("writing the results");
    let md = report::bench_markdown(&out);
    std::fs::write(&md_path, &md).expect("writing the report");
    println!("{md}");
    eprintln!("wrote {} and {}", json_path.display(), md_path.display());
}

/// What the training step comparison runs: the available backends (and flex-burn beside
/// flex, Burn's stock ops as a floor; flex in bf16 where the CPU has AVX512-BF16), at 1
/// thread and every core.
fn step_plan(args: &Args, out: &Value) -> step::Plan {
    let mut backends: Vec<BackendKind> = args
        .backends
        .iter()
        .copied()
        .filter(|b| out["unavailable"].get(b.to_string()).is_none())
        .collect();
    if backends.contains(&BackendKind::Flex) && !backends.contains(&BackendKind::FlexBurn) {
        backends.push(BackendKind::FlexBurn);
    }
    let cores = out["cores"].as_u64().unwrap_or(1) as usize;
    let mut threads = if args.step_threads.is_empty() {
        vec![1, cores]
    } else {
        args.step_threads.clone()
    };
    threads.dedup();
    let shapes = if !args.step_shapes.is_empty() {
        args.step_shapes
            .iter()
            .map(|n| {
                step::Shape::by_name(n).unwrap_or_else(|| {
                    panic!("--step-shapes {n}: not a shape ({})", step::Shape::names())
                })
            })
            .collect()
    } else if args.quick {
        vec![step::SHAPES[0]]
    } else {
        step::SHAPES.to_vec()
    };
    step::Plan {
        shapes,
        threads,
        rounds: args.rounds.unwrap_or(if args.quick { 2 } else { 3 }),
        bf16: backends.contains(&BackendKind::Flex) && headlab_kernels::bf16::supported(),
        backends,
        torch_python: args.torch_python.clone(),
        torch_script: args.torch_script.clone(),
        torch_device: args.torch_device.clone(),
        quick: args.quick,
    }
}

/// `stem`, or `stem-2`, `stem-3`, ... whichever has neither a `.json` nor a `.md` in `dir`:
/// host names repeat (every VM here is `vm`), and a second run on one day must not overwrite
/// results a README links to.
fn unused_stem(dir: &Path, stem: &str) -> String {
    std::iter::once(stem.to_string())
        .chain((2..).map(|i| format!("{stem}-{i}")))
        .find(|s| {
            !["json", "md"]
                .iter()
                .any(|e| dir.join(format!("{s}.{e}")).exists())
        })
        .expect("an unused name")
}

/// The nanoGPT CPU recipe end to end (configs/shakespeare-char-cpu.toml) on `backend`, run
/// as `headlab train` in a process of its own, as a user would run it (in this process it
/// would inherit the allocator and thread state the microbenchmarks left behind).
fn recipe(data: &Path, iters: usize, backend: BackendKind) -> Value {
    if iters == 0 {
        return json!({ "skipped": "not asked for (--recipe-iters 0 or --only without recipe)" });
    }
    if !data.is_file() {
        let why = format!(
            "tiny-shakespeare not found at {}: see datasets/README.md for where to get it, then \
             pass --data FILE",
            data.display()
        );
        eprintln!("bench: recipe skipped: {why}");
        return json!({ "skipped": why });
    }
    let out = std::env::temp_dir().join(format!("headlab-bench-recipe-{}", std::process::id()));
    std::fs::create_dir_all(&out).expect("creating the recipe's directory");
    let config = out.join("recipe.toml");
    std::fs::write(&config, RECIPE).expect("writing the recipe config");
    let run = out.join("run");
    let headlab = std::env::current_exe()
        .expect("the bench's own path")
        .with_file_name("headlab");
    let started = Instant::now();
    match Command::new(&headlab)
        .arg("train")
        .arg("--config")
        .arg(&config)
        .arg("--backend")
        .arg(backend.to_string())
        .arg("--set")
        .arg(format!("data.path={}", data.display()))
        .arg("--set")
        .arg(format!("train.max_iters={iters}"))
        // The schedule's length follows the run's, as in bench/reference/bench.py.
        .arg("--set")
        .arg(format!("train.lr_decay_iters={iters}"))
        .arg("--out")
        .arg(&run)
        .stdout(std::process::Stdio::null())
        .status()
    {
        Ok(status) if status.success() => {}
        Ok(status) => return json!({ "skipped": format!("headlab train failed ({status})") }),
        Err(e) => return json!({ "skipped": format!("cannot run {}: {e}", headlab.display()) }),
    }
    let wall = started.elapsed().as_secs_f64();
    let metrics = std::fs::read_to_string(run.join("metrics.csv")).expect("metrics.csv");
    let rows: Vec<Vec<&str>> = metrics
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let last = |split: &str| {
        rows.iter()
            .rev()
            .find(|r| r[1] == split)
            .and_then(|r| r[2].parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // Median tokens/s of the logged windows after the first (warm-up).
    let speeds: Vec<f64> = rows
        .iter()
        .filter(|r| r[1] == "iter")
        .filter_map(|r| r[4].parse().ok())
        .skip(1)
        .collect();
    let (tok_s, _, _) = stats(speeds);
    std::fs::remove_dir_all(&out).ok();
    json!({
        "config": "configs/shakespeare-char-cpu.toml", "backend": backend.to_string(),
        "iters": iters, "val_loss": last("val"), "train_loss": last("train"),
        "val_batches": 200, "tokens_per_s": tok_s, "ms_per_iter": 12.0 * 64.0 * 1e3 / tok_s,
        "wall_s": wall,
    })
}

const RECIPE: &str = include_str!("../../../configs/shakespeare-char-cpu.toml");

/// `YYYY-MM-DD` (UTC) without a date crate: days since 1970 to a civil date (H. Hinnant).
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The CPU's model name and widest vector extension, from `/proc/cpuinfo` (Linux; "unknown"
/// elsewhere). Ratios against PyTorch depend on which SIMD kernels each side gets, so every
/// report names the CPU it ran on.
fn cpu() -> Value {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let flags = field("flags").unwrap_or_default();
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    let simd = if has("avx512f") {
        "AVX-512"
    } else if has("avx2") {
        "AVX2"
    } else {
        "no AVX2"
    };
    // The flags that decide which kernels each side picks.
    let simd_flags: Vec<&str> = [
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512dq",
        "avx512_vnni",
        "avx512_bf16",
        "amx_tile",
        "amx_bf16",
    ]
    .into_iter()
    .filter(|f| has(f))
    .collect();
    json!({
        "model": field("model name").unwrap_or_else(|| "unknown".into()),
        // A VM may name its CPU only "AMD EPYC": family and model tell Zen 4 (25, 17) from
        // Zen 5 (26, ...).
        "family": field("cpu family"),
        "model_number": field("model"),
        "simd": if flags.is_empty() { "unknown" } else { simd },
        "flags": simd_flags,
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_run_on_one_day_gets_a_new_name() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(unused_stem(dir.path(), "d-vm"), "d-vm");
        std::fs::write(dir.path().join("d-vm.json"), "{}").unwrap();
        assert_eq!(unused_stem(dir.path(), "d-vm"), "d-vm-2");
        // A report alone (its JSON deleted) still holds the name.
        std::fs::write(dir.path().join("d-vm-2.md"), "").unwrap();
        assert_eq!(unused_stem(dir.path(), "d-vm"), "d-vm-3");
    }
}

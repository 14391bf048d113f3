//! headlab's benchmarks, run by `cargo xtask bench` (which builds, and runs the PyTorch
//! reference first when asked).
//!
//! Sections, each per backend: the matmul peak (`matmul`), the attention op alone forward
//! and forward+backward over T (`attention`), all heads batched vs the per-head loop
//! reference (`heads`), one training step at nanoGPT's CPU recipe with its MFU
//! (`train_step`), and generation with and without the KV cache (`generation`).
//! Criterion times the first four (warm-up, flat sampling, per-iteration samples kept);
//! generation is too slow per call for that and is timed by repeating whole generations.
//! Then the nanoGPT CPU recipe end to end on tiny-shakespeare (`recipe`), when the text is
//! there. Writes `<results>/<date>-<host>[-quick].json` and a markdown report beside it, with
//! headlab / PyTorch ratios when `--torch-json` gives the reference's results.
//!
//! Arguments: `[--quick] [--backends flex,ndarray,wgpu] [--results DIR] [--data FILE]
//! [--recipe-iters N] [--torch-json FILE] [--criterion-dir DIR]
//! [--only attention,heads,train_step,generation,recipe]`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use burn::optim::GradientsParams;
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use criterion::{BenchmarkId, Criterion, SamplingMode};
use headlab_model::attention::reference::per_head_loop;
use headlab_model::attention::{
    AttentionOptions, MultiHeadAttentionConfig, flash_attention, fused_attention, naive_attention,
};
use headlab_model::{Decoder, Gpt, GptConfig, cross_entropy};
use headlab_train::backend::Backend;
use headlab_train::optim::{AdamW, AdamWConfig, global_grad_norm};
use headlab_train::rss;
use serde_json::{Value, json};

struct Args {
    quick: bool,
    backends: Vec<Backend>,
    results: PathBuf,
    criterion_dir: PathBuf,
    data: PathBuf,
    recipe_iters: Option<usize>,
    torch_json: Option<PathBuf>,
    /// Sections to run (all when empty); the matmul peak always runs (MFU needs it).
    only: Vec<String>,
}

fn parse_args() -> Args {
    let mut args = Args {
        quick: false,
        backends: vec![Backend::Flex, Backend::Ndarray],
        results: PathBuf::from("bench/results"),
        criterion_dir: std::env::temp_dir().join("headlab-criterion"),
        data: PathBuf::from("../shared/datasets/tinyshakespeare/input.txt"),
        recipe_iters: None,
        torch_json: None,
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => args.quick = true,
            "--backends" => {
                let list = it.next().expect("--backends needs a list");
                args.backends = list
                    .split(',')
                    .map(|b| b.parse().unwrap_or_else(|e| panic!("{e}")))
                    .collect();
            }
            "--results" => args.results = it.next().expect("--results needs a dir").into(),
            "--data" => args.data = it.next().expect("--data needs a file").into(),
            "--recipe-iters" => {
                let n = it.next().expect("--recipe-iters needs a number");
                args.recipe_iters = Some(n.parse().expect("--recipe-iters needs a number"));
            }
            "--torch-json" => args.torch_json = Some(it.next().expect("a file").into()),
            "--only" => {
                let list = it.next().expect("--only needs sections");
                args.only = list.split(',').map(str::to_string).collect();
            }
            "--criterion-dir" => {
                args.criterion_dir = it.next().expect("--criterion-dir needs a dir").into()
            }
            // `cargo bench` passes `--bench`; criterion's own filters are not used.
            _ => {}
        }
    }
    args
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
            rss_before: rss::reset_peak(),
        }
    }

    fn peak_mib(&self, device: &Device) -> Option<f64> {
        if let Some(usage) = device.memory_pool_usage() {
            return Some(usage.bytes_reserved as f64 / (1024.0 * 1024.0));
        }
        Some((rss::peak()? - self.rss_before?).max(0.0))
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

/// Median, min and max.
fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    };
    (median, v[0], v[n - 1])
}

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
/// training step's layers run. MFU is taken against the faster of the two: on ndarray the
/// kernel outruns the backend's own matmul, so its peak alone would put MFU above 100%.
fn matmul(bench: &mut Bench, backend: Backend, device: &Device, n: usize) -> Vec<Value> {
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
    }
    rows
}

/// The attention op alone: `naive` materialises the weights (Burn's ops, the reference),
/// `fused` is the backend's kernel (Burn runs its naive chain under autodiff, so forward only),
/// `flash` is headlab's kernel with its own backward (CPU backends; what training uses there).
fn attention(
    bench: &mut Bench,
    backend: Backend,
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

fn heads(bench: &mut Bench, backend: Backend, device: &Device, h: usize, t: usize) -> Vec<Value> {
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

fn tokens(b: usize, t: usize, vocab: usize, seed: u64, device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = (0..b * t)
        .map(|i| ((i as u64 * 2654435761 + seed * 97) % vocab as u64) as i64)
        .collect();
    Tensor::from_data(TensorData::new(ids, [b, t]), device)
}

fn train_step(bench: &mut Bench, backend: Backend, device: &Device, peak_gflops: f64) -> Value {
    let (b, t) = (12, 64);
    let config = recipe_model(t);
    let ad = device.clone().autodiff();
    ad.seed(1337);
    let model = Gpt::new(&config, &ad).expect("recipe config");
    let (x, y) = (tokens(b, t, 65, 1, &ad), tokens(b, t, 65, 2, &ad));
    let mut optim = AdamW::new(AdamWConfig {
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weight_decay: 0.1,
    });
    let mut slot = Some(model);
    // As `headlab train` runs its loop.
    let _keep_pages = headlab_train::alloc::KeepFreedPages::new();
    let group = format!("train_step_{backend}");
    let (ms, memory) = bench.run(&ad, &group, "b12_t", t, || {
        let model = slot.take().expect("model");
        let loss = cross_entropy(model.forward(x.clone()), y.clone(), None);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let norm = global_grad_norm(&model, &grads);
        let scale = if norm > 1.0 { 1.0 / (norm + 1e-6) } else { 1.0 };
        slot = Some(optim.step(model, &grads, 1e-3, scale));
    });
    let (median, _, _) = stats(ms.clone());
    // nanoGPT's estimate_mfu: N counts every parameter but the position table.
    let n = (config.param_count(true) - config.block_size * config.d_model) as f64;
    let flops_per_token = 6.0 * n + 12.0 * (config.n_layers * config.d_model * t) as f64;
    let achieved = flops_per_token * (b * t) as f64 / (median * 1e-3) / 1e9;
    json!({
        "backend": backend.to_string(),
        "config": "nanoGPT CPU recipe: 4 layers, 4 heads, d_model 128, T 64, B 12, vocab 65",
        "timing": timing(&ms),
        "tokens_per_s": (b * t) as f64 / (median * 1e-3),
        "flops_per_token": flops_per_token,
        "achieved_gflops": achieved,
        "matmul_peak_gflops": peak_gflops,
        "mfu": achieved / peak_gflops,
        "peak_mib": memory,
    })
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
            let last: Vec<f32> = logits
                .slice([0..1, t - 1..t, 0..v])
                .into_data()
                .try_into_vec_as::<f32>()
                .expect("logits");
            window.push(argmax(&last));
        }
        window.len()
    }
}

fn generation(backend: Backend, device: &Device, lengths: &[usize], reps: usize) -> Vec<Value> {
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
/// next step (a fifth of a training step on flex, bench/NOTES.md); mimalloc reuses them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    headlab_train::backend::on_compute_pool(bench);
}

fn bench() {
    let args = parse_args();
    let quick = args.quick;
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
    let (ts, long_t, hs, head_t, gen_lengths, matmul_n) = if quick {
        (vec![64, 128], 256, vec![1, 4], 64, vec![16], 256)
    } else {
        (
            vec![64, 128, 256, 512, 1024, 2048],
            8192,
            vec![1, 2, 4, 8, 16],
            256,
            vec![256, 1024],
            1024,
        )
    };
    let mut out = json!({
        "quick": quick,
        "threads": std::env::var("RAYON_NUM_THREADS").ok(),
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu": cpu(),
        "matmul": [], "attention": [], "heads": [], "train_step": [], "generation": [],
        "unavailable": {},
    });
    let push = |out: &mut Value, section: &str, v: Value| {
        out[section].as_array_mut().expect("section").push(v);
    };
    for &backend in &args.backends {
        let device = match backend.device() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("bench: {backend} is not available: {e}");
                out["unavailable"][backend.to_string()] = json!(e.to_string());
                continue;
            }
        };
        let peaks = matmul(&mut bench, backend, &device, matmul_n);
        let peak_gflops = peaks
            .iter()
            .filter_map(|r| r["gflops"].as_f64())
            .fold(f64::NAN, f64::max);
        for row in peaks {
            push(&mut out, "matmul", row);
        }
        let runs = |section: &str| args.only.is_empty() || args.only.iter().any(|s| s == section);
        let cpu = backend != Backend::Wgpu;
        for &t in ts.iter().filter(|_| runs("attention")) {
            let kernels = [
                (false, "naive"),
                (false, "fused"),
                (false, "flash"),
                (true, "naive"),
                (true, "flash"),
            ];
            // On wgpu `flash` is the naive op (the kernel is CPU-only): not measured twice.
            for (backward, kernel) in kernels.into_iter().filter(|(_, k)| cpu || *k != "flash") {
                let row = attention(
                    &mut bench,
                    backend,
                    &device,
                    [4, 4, 32],
                    t,
                    backward,
                    kernel,
                );
                push(&mut out, "attention", row);
            }
        }
        // The long sequence: forward only, one sequence (the naive op holds a [T, T] matrix
        // per head; the fused kernel tiles over keys where the backend has one).
        let long_kernels = ["naive", "fused", "flash"].into_iter();
        for kernel in long_kernels.filter(|k| runs("attention") && (cpu || *k != "flash")) {
            let row = attention(
                &mut bench,
                backend,
                &device,
                [1, 4, 32],
                long_t,
                false,
                kernel,
            );
            push(&mut out, "attention", row);
        }
        for &h in hs.iter().filter(|_| runs("heads")) {
            for row in heads(&mut bench, backend, &device, h, head_t) {
                push(&mut out, "heads", row);
            }
        }
        if runs("train_step") {
            let row = train_step(&mut bench, backend, &device, peak_gflops);
            push(&mut out, "train_step", row);
        }
        if runs("generation") {
            let reps = if quick { 2 } else { 3 };
            for row in generation(backend, &device, &gen_lengths, reps) {
                push(&mut out, "generation", row);
            }
        }
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
    let (date, host) = (today(), hostname());
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
    let md = markdown(&out);
    std::fs::write(&md_path, &md).expect("writing the report");
    println!("{md}");
    eprintln!("wrote {} and {}", json_path.display(), md_path.display());
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
fn recipe(data: &Path, iters: usize, backend: Backend) -> Value {
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

const RECIPE: &str = include_str!("../../../../configs/shakespeare-char-cpu.toml");

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
    json!({
        "model": field("model name").unwrap_or_else(|| "unknown".into()),
        "simd": if flags.is_empty() { "unknown" } else { simd },
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into())
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn median_ms(v: &Value) -> f64 {
    num(&v["timing"]["median_ms"])
}

/// `median (min-max)`.
fn ms_cell(v: &Value) -> String {
    let t = &v["timing"];
    format!(
        "{:.2} ({:.2}-{:.2})",
        num(&t["median_ms"]),
        num(&t["min_ms"]),
        num(&t["max_ms"])
    )
}

fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".into()
    }
}

fn rows<'a>(out: &'a Value, section: &str) -> impl Iterator<Item = &'a Value> {
    out[section].as_array().into_iter().flatten()
}

/// The report: one table per section, with PyTorch's time and headlab / PyTorch where the
/// reference ran.
fn markdown(out: &Value) -> String {
    let torch = &out["torch"];
    let has_torch = !torch.is_null();
    let mut s = format!(
        "# headlab benchmarks, {} on {}\n\n{} cores of {} ({}), RAYON_NUM_THREADS={}{}{}. Times \
         are medians of criterion's samples (min-max in brackets). Made by `cargo xtask bench{}`.\n",
        out["date"].as_str().unwrap_or("?"),
        out["host"].as_str().unwrap_or("?"),
        out["cores"],
        out["cpu"]["model"].as_str().unwrap_or("an unrecorded CPU"),
        out["cpu"]["simd"].as_str().unwrap_or("?"),
        out["threads"].as_str().unwrap_or("unset"),
        if has_torch {
            format!(
                ", PyTorch {} with {} threads{}",
                torch["torch"].as_str().unwrap_or("?"),
                torch["threads"],
                torch["cpu_capability"]
                    .as_str()
                    .map_or(String::new(), |c| format!(" (ATen's {c} kernels)"))
            )
        } else {
            String::new()
        },
        if out["quick"] == true {
            " (quick: small sizes, short runs, a harness check)"
        } else {
            ""
        },
        if out["quick"] == true { " --quick" } else { "" },
    );
    for (backend, why) in out["unavailable"].as_object().into_iter().flatten() {
        s += &format!("\n{backend} was not available: {why}\n");
    }

    let torch_peak = torch["matmul"][0]["gflops"].as_f64();
    s += "\n## Matmul peak (square f32 matmul)\n\n`burn` is the backend's `matmul`, `headlab` the kernels' `linear` (the gemm crate on the backend's buffers, what the training step's layers run). MFU below is taken against the faster of the two.\n\n| backend | kernel | n | ms | GFLOP/s |\n|---|---|---|---|---|\n";
    for r in rows(out, "matmul") {
        s += &format!(
            "| {} | {} | {} | {} | {:.1} |\n",
            r["backend"].as_str().unwrap_or("?"),
            r["kernel"].as_str().unwrap_or("burn"),
            r["n"],
            ms_cell(r),
            num(&r["gflops"])
        );
    }
    if let Some(p) = torch_peak {
        s += &format!(
            "| PyTorch | torch.matmul | {} | {} | {p:.1} |\n",
            torch["matmul"][0]["n"],
            ms_cell(&torch["matmul"][0])
        );
    }

    s += "\n## Attention op: softmax(Q K^T / sqrt(d_k) + causal mask) V\n\nPyTorch's `scaled_dot_product_attention` is fused in both directions. headlab: `naive` is Burn's ops (the reference), `fused` the backend's kernel (forward only: Burn's autodiff replaces it with the naive ops), `flash` headlab's CPU kernel with its own backward, what training uses on flex and ndarray.\n\n| backend | pass | kernel | b x h x d_k | T | ms | tokens/s | GFLOP/s | peak MiB | PyTorch SDPA ms | headlab / SDPA |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
    for r in rows(out, "attention") {
        let reference = rows(torch, "attention").find(|t| {
            t["pass"] == r["pass"] && t["t"] == r["t"] && t["b"] == r["b"] && t["h"] == r["h"]
        });
        let t_ms = reference.map_or(f64::NAN, median_ms);
        s += &format!(
            "| {} | {} | {} | {}x{}x{} | {} | {} | {:.0} | {:.1} | {} | {} | {} |\n",
            r["backend"].as_str().unwrap_or("?"),
            r["pass"].as_str().unwrap_or("?"),
            r["kernel"].as_str().unwrap_or("?"),
            r["b"],
            r["h"],
            r["d_k"],
            r["t"],
            ms_cell(r),
            num(&r["tokens_per_s"]),
            num(&r["gflops"]),
            r["peak_mib"]
                .as_f64()
                .map_or("-".into(), |m| format!("{m:.0}")),
            if t_ms.is_finite() {
                format!("{t_ms:.2}")
            } else {
                "-".into()
            },
            ratio(median_ms(r), t_ms),
        );
    }

    s += "\n## All heads in one batched matmul vs the per-head loop (b 1, d_model 128)\n\n| backend | heads | d_k | T | batched ms | loop ms | loop / batched |\n|---|---|---|---|---|---|---|\n";
    for r in rows(out, "heads").filter(|r| r["mode"] == "batched") {
        let looped = rows(out, "heads")
            .find(|l| l["mode"] == "loop" && l["backend"] == r["backend"] && l["h"] == r["h"]);
        let l_ms = looped.map_or(f64::NAN, median_ms);
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r["backend"].as_str().unwrap_or("?"),
            r["h"],
            r["d_k"],
            r["t"],
            ms_cell(r),
            looped.map_or("-".into(), ms_cell),
            ratio(l_ms, median_ms(r)),
        );
    }

    s += "\n## Training step, nanoGPT CPU recipe (4L, 4H, d 128, T 64, B 12): forward, backward, clip, AdamW\n\n| backend | ms/iter | tokens/s | GFLOP/s | MFU (of matmul peak) | PyTorch ms | headlab / PyTorch |\n|---|---|---|---|---|---|---|\n";
    for r in rows(out, "train_step") {
        let t_ms = rows(torch, "train_step").next().map_or(f64::NAN, median_ms);
        s += &format!(
            "| {} | {} | {:.0} | {:.1} | {:.1}% | {} | {} |\n",
            r["backend"].as_str().unwrap_or("?"),
            ms_cell(r),
            num(&r["tokens_per_s"]),
            num(&r["achieved_gflops"]),
            100.0 * num(&r["mfu"]),
            if t_ms.is_finite() {
                format!("{t_ms:.2}")
            } else {
                "-".into()
            },
            ratio(median_ms(r), t_ms),
        );
    }
    if let Some(t) = rows(torch, "train_step").next() {
        s += &format!(
            "| PyTorch | {} | {:.0} | {:.1} | {:.1}% | | |\n",
            ms_cell(t),
            num(&t["tokens_per_s"]),
            num(&t["achieved_gflops"]),
            100.0 * num(&t["mfu"]),
        );
    }

    s += "\n## Generation (greedy, one prompt token, recipe dims)\n\n| backend | new tokens | with KV cache tokens/s | without tokens/s | speed-up |\n|---|---|---|---|---|\n";
    for r in rows(out, "generation").filter(|r| r["kv_cache"] == true) {
        let without = rows(out, "generation").find(|w| {
            w["kv_cache"] == false
                && w["backend"] == r["backend"]
                && w["new_tokens"] == r["new_tokens"]
        });
        let w_tok = without.map_or(f64::NAN, |w| num(&w["tokens_per_s"]));
        s += &format!(
            "| {} | {} | {:.0} | {:.0} | {} |\n",
            r["backend"].as_str().unwrap_or("?"),
            r["new_tokens"],
            num(&r["tokens_per_s"]),
            w_tok,
            ratio(num(&r["tokens_per_s"]), w_tok),
        );
    }

    s += "\n## nanoGPT CPU recipe end to end (tiny-shakespeare, char)\n\n";
    let r = &out["recipe"];
    if let Some(why) = r["skipped"].as_str() {
        s += &format!("Skipped: {why}\n");
    } else {
        s += "| run | iters | val loss (200 batches) | wall ms/iter (with evaluation) | wall s |\n|---|---|---|---|---|\n";
        s += &format!(
            "| headlab {} | {} | {:.4} | {:.1} | {:.0} |\n",
            r["backend"].as_str().unwrap_or("?"),
            r["iters"],
            num(&r["val_loss"]),
            1e3 * num(&r["wall_s"]) / num(&r["iters"]),
            num(&r["wall_s"])
        );
        let t = &torch["recipe"];
        if !t.is_null() {
            s += &format!(
                "| PyTorch | {} | {:.4} | {:.1} | {:.0} |\n\nheadlab / PyTorch wall time: {}\n",
                t["iters"],
                num(&t["val_loss"]),
                1e3 * num(&t["wall_s"]) / num(&t["iters"]),
                num(&t["wall_s"]),
                ratio(num(&r["wall_s"]), num(&t["wall_s"])),
            );
        }
    }
    s
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

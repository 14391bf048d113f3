//! `cargo xtask <task>`: project automation in Rust, so it runs wherever cargo does.

use std::path::{Path, PathBuf};
use std::process::Command;

mod architecture;
mod features;
mod speedrun;
mod stats;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "xtask", about = "headlab's project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// What CI checks: formatting, clippy with warnings as errors, then the test suite.
    Ci,
    /// Benchmarks: matmul peak, attention op over T, batched heads vs a per-head loop,
    /// generation with and without the KV cache, the training step against PyTorch's modes
    /// in interleaved rounds (MFU of the FMA peak), and the recipe end to end. Writes
    /// bench/results/<date>-<host>[-quick][-tN][-partial][-2, -3, ...].json and .md.
    Bench(BenchArgs),
    /// Exports a freshly trained run with `headlab export hf` and, with --with-torch, loads it
    /// in Hugging Face transformers (tools/hf_interop.py, in the bench's venv): the tokenizer
    /// must give the text back and the loss on it must match `headlab eval`'s; then
    /// tools/check-export.py loads it by every usual route, which must agree.
    Interop(InteropArgs),
    /// Checks, on cargo's plans of both builds (units, not feature lists), that `cargo test
    /// --release --workspace` compiles again nothing of `cargo run --release -- train` but
    /// Burn's dispatch layer, which the test build's ndarray and wgpu backends change
    /// ([`features::BACKEND_CHANGES`]), and what stands on it; and that `cargo run --features
    /// wgpu,ndarray` plans the test build's units. A difference is fixed in
    /// crates/workspace-hack/Cargo.toml.
    Features,
    /// Checks that docs/architecture.md's crate diagram is the crate graph of `cargo metadata`
    /// and that no crate holds more than a quarter of the workspace's Rust lines; with
    /// --write, redraws the diagram.
    Architecture {
        /// Redraw the diagram in docs/architecture.md instead of checking it.
        #[arg(long)]
        write: bool,
    },
    /// The speedrun's record check: trains the track's config (--track short:
    /// configs/shakespeare-char-speedrun.toml; long: configs/shakespeare-char-long.toml) for
    /// seeds 1337, 1 and 2 (and, with --with-torch, the same model in PyTorch after each),
    /// prints the table row and writes bench/results/<date>-<host>-speedrun[-long][-2, ...].md
    /// with the CPU, threads and commit. `--set` trains an ablation of it.
    Speedrun(speedrun::SpeedrunArgs),
}

/// `cargo xtask interop`.
#[derive(Debug, Args)]
struct InteropArgs {
    /// Load the export in transformers (creates the venv of `bench --with-torch` on first
    /// use); without it, only the export is made.
    #[arg(long)]
    with_torch: bool,
}

/// `cargo xtask interop`: train, export, and compare headlab's loss with transformers'.
// Over 80 lines on purpose: the interop task's steps in order: train, export, load in transformers, compare.
fn interop(args: InteropArgs) -> Result<()> {
    let root = root();
    run(cargo()
        .current_dir(&root)
        .args(["build", "--release", "--workspace"]))?;
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let headlab = target.join("release/headlab");
    let scratch = std::env::temp_dir().join(format!("headlab-interop-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let (run_dir, hf_dir) = (scratch.join("run"), scratch.join("hf"));
    run(Command::new(&headlab)
        .args(["train", "--set", "train.max_iters=300", "--out"])
        .arg(&run_dir))?;
    run(Command::new(&headlab)
        .args(["export", "hf"])
        .arg(&run_dir)
        .arg("--out")
        .arg(&hf_dir))?;
    if !args.with_torch {
        eprintln!(
            "xtask: exported to {}; --with-torch loads it in transformers",
            hf_dir.display()
        );
        return Ok(());
    }
    // The run's own sample holds only characters of its vocabulary.
    let text = run_dir.join("sample.txt");
    let ours = Command::new(&headlab)
        .arg("eval")
        .arg(&run_dir)
        .arg("--file")
        .arg(&text)
        .output()?;
    if !ours.status.success() {
        bail!(
            "headlab eval failed: {}",
            String::from_utf8_lossy(&ours.stderr)
        );
    }
    let ours = String::from_utf8_lossy(&ours.stdout).into_owned();
    let loss_ours: f64 = ours
        .split("loss ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no loss in headlab eval's output: {ours}"))?;
    let python = torch_venv()?;
    let theirs = Command::new(&python)
        .current_dir(&root)
        .arg("tools/hf_interop.py")
        .arg(&hf_dir)
        .arg(&text)
        .output()?;
    if !theirs.status.success() {
        bail!(
            "tools/hf_interop.py failed: {}",
            String::from_utf8_lossy(&theirs.stderr)
        );
    }
    let theirs: serde_json::Value =
        serde_json::from_slice(&theirs.stdout).context("tools/hf_interop.py printed no JSON")?;
    let loss_theirs = theirs["loss"]
        .as_f64()
        .context("no loss from transformers")?;
    // headlab eval prints 4 decimals.
    let gap = (loss_ours - loss_theirs).abs();
    println!(
        "interop: headlab eval {loss_ours:.4}, transformers {loss_theirs:.6} nats/token over {} \
         tokens of {}: gap {gap:.1e}",
        theirs["tokens"],
        text.display()
    );
    if gap > 1.5e-4 {
        bail!("transformers' loss differs from headlab's by {gap:.2e} (> 1.5e-4)");
    }
    // Every usual route (AutoTokenizer, pipeline, TransformerLens, ...) gives one encoding
    // and one greedy text; tools/check-export.py exits non-zero otherwise.
    run(Command::new(&python)
        .current_dir(&root)
        .arg("tools/check-export.py")
        .arg(&hf_dir)
        .args(["--prompt", "the spy ", "--tokens", "24", "--out"])
        .arg(scratch.join("routes.json")))?;
    std::fs::remove_dir_all(&scratch).ok();
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

/// The workspace root of the checkout being worked on: cargo sets `CARGO_MANIFEST_DIR` when it
/// runs xtask or its tests, so a binary built in another checkout that shares the target dir
/// (and was not rebuilt, its sources being the same) still works on this one.
fn root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("..")
}

/// `cargo xtask bench`.
#[derive(Debug, Args)]
struct BenchArgs {
    /// Small sizes and short runs (a check of the harness, not a measurement).
    #[arg(long)]
    quick: bool,
    /// Backends, comma-separated.
    #[arg(long, default_value = "flex,ndarray")]
    backends: String,
    /// Threads for headlab (RAYON_NUM_THREADS) and PyTorch (default: all cores); the training
    /// step runs at --step-threads instead.
    #[arg(long)]
    threads: Option<usize>,
    /// Also run the PyTorch reference in bench/reference/ (creates a venv with torch in
    /// ~/.cache/headlab/torch-venv on first use, about 5 GB from PyPI).
    #[arg(long)]
    with_torch: bool,
    /// The tiny-shakespeare text for the recipe (default: the repository's
    /// datasets/tinyshakespeare/input.txt; the recipe is skipped, with a note, when it is
    /// absent).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Recipe iterations (default 2000, 200 with --quick; 0 skips it).
    #[arg(long)]
    recipe_iters: Option<usize>,
    /// Where the results go.
    #[arg(long, default_value = "bench/results")]
    results: PathBuf,
    /// Only these sections (comma-separated: attention, heads, train_step, generation,
    /// recipe); the matmul peak always runs.
    #[arg(long)]
    only: Option<String>,
    /// Rounds of the training step comparison (default 3, 2 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Thread counts of the training step comparison (default: 1 and every core).
    #[arg(long)]
    step_threads: Option<String>,
    /// Shapes of the training step comparison (default: recipe,nanogpt-gpu).
    #[arg(long)]
    step_shapes: Option<String>,
}

/// Builds everything, runs the PyTorch reference if asked, then `headlab-bench`.
// Over 80 lines on purpose: the bench task's steps in order: venv, PyTorch's side, headlab's side, the report.
fn bench(args: BenchArgs) -> Result<()> {
    let root = root();
    let data = args
        .data
        .unwrap_or_else(|| root.join("datasets/tinyshakespeare/input.txt"));
    let recipe_iters = args
        .recipe_iters
        .unwrap_or(if args.quick { 200 } else { 2000 });
    run(cargo()
        .current_dir(&root)
        .args(["build", "--release", "--workspace", "--all-targets"]))?;
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let scratch = std::env::temp_dir().join(format!("headlab-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;

    let mut cmd = Command::new(target.join("release/headlab-bench"));
    cmd.current_dir(&root)
        .arg("--backends")
        .arg(&args.backends)
        .arg("--results")
        .arg(&args.results)
        .arg("--data")
        .arg(&data)
        .arg("--recipe-iters")
        .arg(recipe_iters.to_string())
        .arg("--criterion-dir")
        .arg(scratch.join("criterion"));
    if args.quick {
        cmd.arg("--quick");
    }
    if let Some(only) = &args.only {
        cmd.arg("--only").arg(only);
    }
    if let Some(n) = args.rounds {
        cmd.arg("--rounds").arg(n.to_string());
    }
    if let Some(t) = &args.step_threads {
        cmd.arg("--step-threads").arg(t);
    }
    if let Some(s) = &args.step_shapes {
        cmd.arg("--step-shapes").arg(s);
    }
    if let Some(n) = args.threads {
        cmd.env("RAYON_NUM_THREADS", n.to_string());
    }
    // What the result file records: this command as typed, and what built the binaries.
    let typed: Vec<String> = std::env::args().skip(1).collect();
    cmd.env(
        "HEADLAB_BENCH_COMMAND",
        format!("cargo xtask {}", typed.join(" ")),
    );
    cmd.env("HEADLAB_BENCH_COMMIT", speedrun::commit(&root));
    if let Ok(out) = Command::new("rustc").arg("--version").output() {
        cmd.env(
            "HEADLAB_BENCH_RUSTC",
            String::from_utf8_lossy(&out.stdout).trim(),
        );
    }
    if let Some(v) = locked_version(&root, "burn") {
        cmd.env("HEADLAB_BENCH_BURN", v);
    }
    if args.with_torch {
        let python = torch_venv()?;
        let out = scratch.join("torch.json");
        let mut py = Command::new(&python);
        py.current_dir(&root)
            .arg("bench/reference/bench.py")
            .arg("--out")
            .arg(&out);
        if args.quick {
            py.arg("--quick");
        }
        if let Some(n) = args.threads {
            py.arg("--threads").arg(n.to_string());
        }
        if let Some(only) = &args.only {
            py.arg("--only").arg(only);
        }
        let recipe_asked = args
            .only
            .as_deref()
            .is_none_or(|o| o.split(',').any(|s| s == "recipe"));
        if recipe_iters > 0 && recipe_asked && data.is_file() {
            py.arg("--recipe-data")
                .arg(&data)
                .arg("--recipe-iters")
                .arg(recipe_iters.to_string());
        }
        eprintln!("xtask: running the PyTorch reference");
        run(&mut py)?;
        cmd.arg("--torch-json")
            .arg(&out)
            .arg("--torch-python")
            .arg(&python);
    }
    run(&mut cmd)?;
    std::fs::remove_dir_all(&scratch).ok();
    Ok(())
}

/// The version of `package` in Cargo.lock.
fn locked_version(root: &Path, package: &str) -> Option<String> {
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).ok()?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == format!("name = \"{package}\"") {
            let version = lines.next()?.strip_prefix("version = \"")?;
            return Some(version.trim_end_matches('"').to_string());
        }
    }
    None
}

/// The Python of a venv with torch, made on first use.
fn torch_venv() -> Result<PathBuf> {
    let home = std::env::var("HOME").context("HOME is not set")?;
    let venv = Path::new(&home).join(".cache/headlab/torch-venv");
    let python = venv.join("bin/python");
    let has_torch = |p: &Path| {
        Command::new(p)
            .args(["-c", "import torch, transformers"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if python.is_file() && has_torch(&python) {
        return Ok(python);
    }
    eprintln!(
        "xtask: creating {} with torch from PyPI (first use only; about 5 GB)",
        venv.display()
    );
    run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    run(Command::new(&python).args([
        "-m",
        "pip",
        "install",
        "-q",
        "torch",
        "numpy",
        "transformers",
        "transformer-lens",
    ]))?;
    if !has_torch(&python) {
        bail!(
            "torch did not import after installing it into {}",
            venv.display()
        );
    }
    Ok(python)
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Ci => {
            run(cargo().args(["fmt", "--all", "--", "--check"]))?;
            run(cargo().args([
                "clippy",
                "--release",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]))?;
            run(cargo().args(["test", "--release", "--workspace"]))
        }
        Task::Bench(args) => bench(args),
        Task::Interop(args) => interop(args),
        Task::Features => features::features(),
        Task::Architecture { write } => architecture_task(write),
        Task::Speedrun(args) => speedrun::speedrun(args),
    }
}

/// `cargo xtask architecture [--write]`.
fn architecture_task(write: bool) -> Result<()> {
    let root = root();
    let crates = architecture::crates(&root)?;
    if write {
        let path = root.join(architecture::DOC);
        let doc = std::fs::read_to_string(&path).context("reading docs/architecture.md")?;
        let drawn = architecture::with_diagram(&doc, &architecture::diagram(&crates)?)?;
        std::fs::write(&path, drawn).context("writing docs/architecture.md")?;
        println!("redrew the crate diagram in {}", architecture::DOC);
    }
    for (name, lines, share) in architecture::shares(&root, &crates)? {
        println!("{name:<26}{lines:>6} lines  {:>5.1}%", share * 100.0);
    }
    let problems = architecture::check(&root)?;
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    println!("the crate diagram matches cargo metadata; no crate above 25% of the lines");
    Ok(())
}

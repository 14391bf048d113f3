//! `cargo xtask <task>`: project automation in Rust, so it runs wherever cargo does.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

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
    /// Benchmarks: the nanoGPT CPU recipe end to end on tiny-shakespeare (loss and speed).
    /// Writes bench/results/<date>-<host>.json and .md.
    Bench {
        /// A short run (200 iterations) to check the harness.
        #[arg(long)]
        quick: bool,
        /// Backend to train on.
        #[arg(long, default_value = "flex")]
        backend: String,
        /// The tiny-shakespeare text (default: ../shared/datasets/tinyshakespeare/input.txt).
        #[arg(long)]
        data: Option<PathBuf>,
    },
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

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn output(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The recipe: train, then read speed and losses from the run's metrics.csv.
fn bench(quick: bool, backend: &str, data: Option<PathBuf>) -> Result<()> {
    let root = root();
    let data = data.unwrap_or_else(|| root.join("../shared/datasets/tinyshakespeare/input.txt"));
    if !data.is_file() {
        bail!(
            "tiny-shakespeare not found at {}: the recipe benchmark needs it (see datasets/README.md \
             for where to get it, then pass --data FILE)",
            data.display()
        );
    }
    run(cargo()
        .current_dir(&root)
        .args(["build", "--release", "--workspace", "--all-targets"]))?;
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let bin = target.join("release/headlab");
    let out = tempdir()?;
    let iters = if quick { 200 } else { 2000 };
    let started = Instant::now();
    let data_set = format!("data.path={}", data.display());
    let iters_set = format!("train.max_iters={iters}");
    let mut args = vec![
        "train",
        "--config",
        "configs/shakespeare-char-cpu.toml",
        "--backend",
        backend,
        "--force",
        "--set",
        &data_set,
        "--set",
        &iters_set,
        "--out",
    ];
    let run_dir = out.join("recipe");
    let run_dir_s = run_dir.display().to_string();
    args.push(&run_dir_s);
    run(Command::new(&bin).current_dir(&root).args(&args))?;
    let wall = started.elapsed().as_secs_f64();

    let metrics = std::fs::read_to_string(run_dir.join("metrics.csv"))?;
    let (mut val, mut train_loss, mut speeds) = (f64::NAN, f64::NAN, Vec::new());
    for line in metrics.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let loss: f64 = f[2].parse().unwrap_or(f64::NAN);
        match f[1] {
            "val" => val = loss,
            "train" => train_loss = loss,
            "iter" => speeds.push(f[4].parse::<f64>().unwrap_or(f64::NAN)),
            _ => {}
        }
    }
    // Median tokens/s of the logged windows, skipping the first (warm-up).
    let mut steady: Vec<f64> = speeds
        .iter()
        .skip(1)
        .copied()
        .filter(|s| s.is_finite())
        .collect();
    steady.sort_by(f64::total_cmp);
    let tok_s = steady.get(steady.len() / 2).copied().unwrap_or(f64::NAN);
    let tokens_per_iter = 12.0 * 64.0;
    let ms_iter = 1000.0 * tokens_per_iter / tok_s;
    let host = output("hostname", &[]);
    let date = output("date", &["+%Y-%m-%d"]);
    let json = format!(
        "{{\n  \"date\": \"{date}\",\n  \"host\": \"{host}\",\n  \"backend\": \"{backend}\",\n  \"recipe\": {{\n    \"config\": \"configs/shakespeare-char-cpu.toml\",\n    \"iters\": {iters},\n    \"val_loss\": {val:.4},\n    \"train_loss\": {train_loss:.4},\n    \"ms_per_iter\": {ms_iter:.1},\n    \"tokens_per_s\": {tok_s:.0},\n    \"wall_s\": {wall:.1}\n  }}\n}}\n"
    );
    let md = format!(
        "| benchmark | backend | iters | val loss (200 batches) | ms/iter (median) | tokens/s | wall |\n|---|---|---|---|---|---|---|\n| nanoGPT CPU recipe, tiny-shakespeare char | {backend} | {iters} | {val:.4} | {ms_iter:.1} | {tok_s:.0} | {wall:.0} s |\n"
    );
    let results = root.join("bench/results");
    std::fs::create_dir_all(&results)?;
    let stem = format!(
        "{date}-{host}-{backend}{}",
        if quick { "-quick" } else { "" }
    );
    std::fs::write(results.join(format!("{stem}.json")), &json)?;
    std::fs::write(results.join(format!("{stem}.md")), &md)?;
    println!("{md}\nwrote bench/results/{stem}.json and .md");
    Ok(())
}

fn tempdir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("headlab-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
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
        Task::Bench {
            quick,
            backend,
            data,
        } => bench(quick, &backend, data),
    }
}

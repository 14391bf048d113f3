//! `cargo xtask speedrun`: the speedrun's record check. Trains the config once per seed
//! (PyTorch's same model after each with --with-torch, interleaved so both see the same
//! machine state), prints the table row, and writes a record file that names the CPU, the
//! threads and the commit.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::{cargo, locked_version, root, run, stats, torch_venv};

/// A speedrun track: a config and the budgets its record is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Track {
    /// configs/shakespeare-char-speedrun.toml: val loss <= 1.60 within 12 TFLOP and 120 s.
    Short,
    /// configs/shakespeare-char-long.toml: the lowest val loss within 60 TFLOP and 600 s,
    /// set beside nanoGPT's GPU config (1.4697).
    Long,
}

impl Track {
    pub fn config(self) -> &'static str {
        match self {
            Track::Short => "configs/shakespeare-char-speedrun.toml",
            Track::Long => "configs/shakespeare-char-long.toml",
        }
    }

    /// The median val loss that the record must reach; the long track has none, it is the
    /// lowest loss the budgets allow.
    pub fn target_loss(self) -> Option<f64> {
        match self {
            Track::Short => Some(1.60),
            Track::Long => None,
        }
    }

    /// Model compute, `6 N + 12 L d T` per token as `headlab-bench` counts it.
    pub fn budget_flops(self) -> f64 {
        match self {
            Track::Short => 12e12,
            Track::Long => 60e12,
        }
    }

    /// Seconds of training steps (result.json's `train_s`), on 2 cores.
    pub fn budget_s(self) -> f64 {
        match self {
            Track::Short => 120.0,
            Track::Long => 600.0,
        }
    }

    /// Whether a median of `val` in `flops` and `train_s` seconds meets the track.
    fn holds(self, val: f64, flops: f64, train_s: f64) -> bool {
        self.target_loss().is_none_or(|t| val <= t)
            && flops <= self.budget_flops()
            && train_s <= self.budget_s()
    }

    /// As --track takes it.
    fn id(self) -> &'static str {
        match self {
            Track::Short => "short",
            Track::Long => "long",
        }
    }

    /// The record's default label.
    fn name(self) -> &'static str {
        match self {
            Track::Short => "speedrun",
            Track::Long => "long",
        }
    }
}

/// nanoGPT's shakespeare-char GPU config's val loss (6 x 384, block 256, 5000 iterations):
/// what the long track is set beside.
pub const NANOGPT_GPU_LOSS: f64 = 1.4697;

/// `cargo xtask speedrun`.
#[derive(Debug, Args)]
pub struct SpeedrunArgs {
    /// Which track: its config and budgets (default: the track whose config --config names,
    /// else short).
    #[arg(long, value_enum)]
    track: Option<Track>,
    /// The config to train (default: the track's).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Seeds, comma-separated; the record is their median.
    #[arg(long, default_value = "1337,1,2")]
    seeds: String,
    /// Config overrides, as `headlab train --set` takes them (an ablation: the config with
    /// one change removed; a variant). With --with-torch, PyTorch's side gets them too.
    #[arg(long)]
    set: Vec<String>,
    /// What the row is called in the table (default: the overrides, or the track's name:
    /// "speedrun" or "long").
    #[arg(long)]
    label: Option<String>,
    /// Threads for both sides (RAYON_NUM_THREADS, torch.set_num_threads).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Also train the same model in PyTorch (bench/reference/speedrun.py) after each seed.
    #[arg(long)]
    with_torch: bool,
    /// PyTorch's side as `torch.compile` of model and loss (its compilation counted in its
    /// training seconds, as a user waits for it), not eager.
    #[arg(long, requires = "with_torch")]
    torch_compile: bool,
    /// Where the record goes.
    #[arg(long, default_value = "bench/results")]
    results: PathBuf,
    /// Train nothing: say whether headlab's and PyTorch's seeds in this record file differ
    /// (with --against, whether its headlab seeds differ from another record's).
    #[arg(long, value_name = "RECORD")]
    compare: Option<PathBuf>,
    /// With --compare: the record whose headlab seeds --compare's are set against (a
    /// variant against the config as shipped, bf16 against f32), seed for seed where they
    /// share seeds.
    #[arg(long, value_name = "RECORD", requires = "compare")]
    against: Option<PathBuf>,
    /// Where headlab's seeds train: here, one after another, or as a Slurm job array (one task
    /// per seed, through `headlab sweep --launcher slurm` into --sweep), whose record
    /// `--collect` writes once every task is done.
    #[arg(long, value_enum, default_value = "local")]
    launcher: Launcher,
    /// The sweep folder of --launcher slurm (default runs/speedrun-<track>).
    #[arg(long, value_name = "DIR")]
    sweep: Option<PathBuf>,
    /// Slurm options for the array, passed to `headlab sweep` as they are (e.g.
    /// --slurm=--partition=debug --slurm=--time=00:10:00); each task gets --threads cores.
    #[arg(long = "slurm", value_name = "FLAG", allow_hyphen_values = true)]
    slurm: Vec<String>,
    /// Write the record of the seeds a `--launcher slurm` sweep trained in DIR (all done).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["compare", "with_torch"])]
    collect: Option<PathBuf>,
}

/// Where `cargo xtask speedrun` trains headlab's seeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Launcher {
    /// Here, one seed after another (PyTorch's after each with --with-torch).
    Local,
    /// As a Slurm job array, one task per seed; `--collect DIR` writes the record.
    Slurm,
}

impl SpeedrunArgs {
    /// --track, else the track whose config --config names, else the short one.
    fn track(&self) -> Track {
        let named = |t: &Track| {
            self.config
                .as_ref()
                .is_some_and(|c| c.file_name() == Path::new(t.config()).file_name())
        };
        self.track
            .or_else(|| [Track::Short, Track::Long].into_iter().find(named))
            .unwrap_or(Track::Short)
    }

    /// `--set KEY=VALUE` for each override, as both sides' commands take them.
    fn set_args(&self) -> impl Iterator<Item = &str> {
        self.set.iter().flat_map(|s| ["--set", s.as_str()])
    }

    fn config(&self) -> PathBuf {
        self.config
            .clone()
            .unwrap_or_else(|| self.track().config().into())
    }
}

/// One seed's numbers from a run's result.json (or the PyTorch side's JSON).
#[derive(Debug, Clone)]
struct Seed {
    seed: u64,
    val: f64,
    val_full: Option<f64>,
    train_s: f64,
    flops: f64,
}

impl Seed {
    /// The keys headlab's result.json, PyTorch's JSON and a record's seeds share: `val_loss`
    /// and `train_s` required, `val_full_loss` and `compute_flops` (headlab's only) optional.
    fn from_json(seed: u64, json: &Value, source: &str) -> Result<Seed> {
        let number = |key: &str| {
            json[key]
                .as_f64()
                .with_context(|| format!("{source}: no number at {key}"))
        };
        Ok(Seed {
            seed,
            val: number("val_loss")?,
            val_full: json["val_full_loss"].as_f64(),
            train_s: number("train_s")?,
            flops: json["compute_flops"].as_f64().unwrap_or(f64::NAN),
        })
    }
}

fn median(v: Vec<f64>) -> f64 {
    stats::median(&v)
}

/// `median (min-max)` of one column.
fn spread(seeds: &[Seed], pick: impl Fn(&Seed) -> Option<f64>, digits: usize) -> String {
    let v: Vec<f64> = seeds.iter().filter_map(pick).collect();
    if v.is_empty() {
        return "-".into();
    }
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    format!("{:.digits$} ({lo:.digits$}-{hi:.digits$})", median(v))
}

/// The CPU as /proc/cpuinfo names it, with family and model (a VM often hides the name:
/// family 25 is Zen 3/4, 26 is Zen 5).
pub fn cpu() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let name = field("model name").unwrap_or_else(|| "unknown CPU".into());
    match (field("cpu family"), field("model")) {
        (Some(f), Some(m)) => format!("{name}, family {f} model {m}"),
        _ => name,
    }
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .current_dir(root)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The commit, with `+dirty` when the tree has uncommitted changes to tracked files.
pub(crate) fn commit(root: &Path) -> String {
    let head = git(root, &["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(root, &["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|s| !s.is_empty());
    if dirty { format!("{head}+dirty") } else { head }
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn headlab_seed(root: &Path, args: &SpeedrunArgs, seed: u64, dir: &Path) -> Result<Seed> {
    let mut cmd = Command::new(headlab_binary(root));
    cmd.current_dir(root)
        .env("RAYON_NUM_THREADS", args.threads.to_string())
        .args(["train", "--force", "--seed", &seed.to_string(), "--config"])
        .arg(args.config())
        .arg("--out")
        .arg(dir)
        .args(args.set_args());
    run(&mut cmd)?;
    let path = dir.join("result.json");
    let s = Seed::from_json(seed, &read_json(&path)?, &path.display().to_string())?;
    anyhow::ensure!(
        s.flops.is_finite(),
        "{}: no number at compute_flops",
        path.display()
    );
    Ok(s)
}

/// PyTorch's side of one seed: bench/reference/speedrun.py on the same config with the same
/// `--set`s, so an ablation or a variant trains the same model on both sides.
fn torch_command(
    root: &Path,
    args: &SpeedrunArgs,
    python: &Path,
    seed: u64,
    out: &Path,
) -> Command {
    let mut cmd = Command::new(python);
    cmd.current_dir(root)
        .arg("bench/reference/speedrun.py")
        .arg("--config")
        .arg(args.config())
        .args([
            "--seed",
            &seed.to_string(),
            "--threads",
            &args.threads.to_string(),
        ])
        .args(args.torch_compile.then_some("--compile"))
        .arg("--out")
        .arg(out)
        .args(args.set_args());
    cmd
}

fn torch_seed(
    root: &Path,
    args: &SpeedrunArgs,
    python: &Path,
    seed: u64,
    out: &Path,
) -> Result<(Seed, Value)> {
    run(&mut torch_command(root, args, python, seed, out))?;
    let r = read_json(out)?;
    Ok((Seed::from_json(seed, &r, &out.display().to_string())?, r))
}

/// Whether the two sides differ, in one sentence per loss (issue 45: three seeds could not
/// say); nothing with fewer than two seeds a side. `names` says whose they are.
fn compare(ours: &[Seed], theirs: &[Seed], names: (&str, &str)) -> Vec<String> {
    let mut said = Vec::new();
    for (what, pick) in [
        (
            "val loss",
            (|s: &Seed| Some(s.val)) as fn(&Seed) -> Option<f64>,
        ),
        ("whole val split", |s: &Seed| s.val_full),
    ] {
        let a: Vec<f64> = ours.iter().filter_map(pick).collect();
        let b: Vec<f64> = theirs.iter().filter_map(pick).collect();
        if a.len() >= 2 && b.len() >= 2 {
            said.push(stats::verdict(what, names, &a, &b));
        }
    }
    said
}

/// A record file's JSON block.
fn read_record(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let json = text
        .split("```json")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .with_context(|| {
            format!(
                "{}: no ```json block: not a speedrun record",
                path.display()
            )
        })?;
    serde_json::from_str(json)
        .with_context(|| format!("{}: the json block does not parse", path.display()))
}

/// A record's seeds under `key` ("seeds": headlab's, "torch": PyTorch's).
fn record_seeds(record: &Value, key: &str) -> Vec<Seed> {
    record[key]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| Seed::from_json(s["seed"].as_u64().unwrap_or(0), s, "record").ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `--compare RECORD --against OTHER`: whether two records' headlab seeds differ (the
/// sentences of [`compare`], named by the records' labels), then seed by seed where both
/// trained the same seed; the lines to print.
fn compare_records(path: &Path, other: &Path) -> Result<Vec<String>> {
    let (a, b) = (read_record(path)?, read_record(other)?);
    let (sa, sb) = (record_seeds(&a, "seeds"), record_seeds(&b, "seeds"));
    let name = |r: &Value, p: &Path| {
        r["label"]
            .as_str()
            .map_or_else(|| p.display().to_string(), str::to_string)
    };
    let (mut na, mut nb) = (name(&a, path), name(&b, other));
    if na == nb {
        (na, nb) = (path.display().to_string(), other.display().to_string());
    }
    let said = compare(&sa, &sb, (&format!("{na}'s"), &format!("{nb}'s")));
    if said.is_empty() {
        bail!(
            "{} and {}: fewer than two seeds in one of them: record more with `cargo xtask \
             speedrun --seeds 1337,1,2,...`",
            path.display(),
            other.display()
        );
    }
    let mut lines = said;
    let pairs: Vec<(u64, f64, f64)> = sa
        .iter()
        .filter_map(|x| Some((x.seed, x.val, sb.iter().find(|y| y.seed == x.seed)?.val)))
        .collect();
    if !pairs.is_empty() {
        let lower = pairs.iter().filter(|p| p.1 < p.2).count();
        lines.push(format!(
            "\nseed by seed, val loss ({na} - {nb}); {na} lower on {lower} of {} shared seeds:",
            pairs.len()
        ));
        for (seed, x, y) in pairs {
            lines.push(format!("  {seed}: {x:.4} - {y:.4} = {:+.4}", x - y));
        }
    }
    Ok(lines)
}

/// `--compare RECORD`: the sentences of [`compare`] for a record file's seeds.
fn compare_record(path: &Path) -> Result<()> {
    let record = read_record(path)?;
    let seeds = |key: &str| record_seeds(&record, key);
    let said = compare(&seeds("seeds"), &seeds("torch"), ("headlab's", "PyTorch's"));
    if said.is_empty() {
        bail!(
            "{}: fewer than two seeds on a side: record it with `cargo xtask speedrun \
             --with-torch --seeds 1337,1,2,...` (with --track long for the long track)",
            path.display()
        );
    }
    println!("{}", said.join("\n"));
    Ok(())
}

/// The record's last line: the median against the track's goal and budgets.
fn budget_line(track: Track, val: f64, flops: f64, train_s: f64) -> String {
    let goal = match track.target_loss() {
        Some(t) => format!("goal <= {t}"),
        None => format!("nanoGPT's GPU config: {NANOGPT_GPU_LOSS}"),
    };
    format!(
        "median val {val:.4} ({goal}), {:.2} TFLOP (<= {:.0}), {train_s:.1} s of training \
         (<= {:.0}): {}",
        flops / 1e12,
        track.budget_flops() / 1e12,
        track.budget_s(),
        if track.holds(val, flops, train_s) {
            "holds"
        } else {
            "does not hold"
        }
    )
}

fn headlab_binary(root: &Path) -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"))
        .join("release/headlab")
}

/// `--launcher slurm`: headlab's seeds as one job array of `headlab sweep` into `dir` (the
/// config, its `--set`s, an axis of seeds), each task on `--threads` cores.
fn submit(root: &Path, args: &SpeedrunArgs, dir: &Path) -> Result<()> {
    if args.with_torch {
        bail!(
            "--with-torch trains PyTorch's seeds interleaved with headlab's on one machine; \
             --launcher slurm trains headlab's alone: leave out one of them"
        );
    }
    run(cargo()
        .current_dir(root)
        .args(["build", "--release", "-p", "headlab"]))?;
    let seeds = args.seeds.replace(' ', "");
    let mut cmd = Command::new(headlab_binary(root));
    cmd.current_dir(root)
        .args(["sweep", "--config"])
        .arg(args.config())
        .args(["--grid", &format!("train.seed={seeds}"), "--out"])
        .arg(dir)
        .args(["--launcher", "slurm", "--cpus-per-task"])
        .arg(args.threads.to_string())
        .args(args.set_args())
        .args(&args.slurm);
    run(&mut cmd)?;
    eprintln!(
        "once every task is done, write the record with: cargo xtask speedrun --collect {}",
        dir.display()
    );
    Ok(())
}

/// The seeds a speedrun sweep in `dir` trained (`--launcher slurm`), from its `sweep.json` and
/// each run's `result.json`; with the config, the `--set`s and the cores each task had.
struct Swept {
    config: PathBuf,
    set: Vec<String>,
    threads: usize,
    seeds: Vec<Seed>,
}

fn read_sweep(dir: &Path) -> Result<Swept> {
    let spec = read_json(&dir.join("sweep.json"))?;
    let not_ours = |why: &str| {
        anyhow::anyhow!(
            "{}: {why}: not a sweep of `cargo xtask speedrun --launcher slurm`",
            dir.display()
        )
    };
    let axes = spec["axes"].as_array().context("sweep.json has no axes")?;
    let [axis] = axes.as_slice() else {
        return Err(not_ours("it has more than one axis"));
    };
    if axis["key"] != "train.seed" {
        return Err(not_ours("its axis is not train.seed"));
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut seeds = Vec::new();
    let mut missing = Vec::new();
    for value in strings(&axis["values"]) {
        let seed: u64 = value
            .parse()
            .map_err(|_| not_ours(&format!("seed {value:?} is not a number")))?;
        let run = dir.join(format!("train.seed-{value}"));
        if !run.join("sweep-point.json").is_file() {
            missing.push(value);
            continue;
        }
        let path = run.join("result.json");
        let s = Seed::from_json(seed, &read_json(&path)?, &path.display().to_string())?;
        seeds.push(s);
    }
    if !missing.is_empty() {
        bail!(
            "{}: seeds {} are not done yet; follow them with: headlab sweep {} --status",
            dir.display(),
            missing.join(", "),
            dir.display()
        );
    }
    // The cores each task had: the array script's --cpus-per-task.
    let script = std::fs::read_to_string(dir.join("sweep.sbatch")).unwrap_or_default();
    let threads = script
        .lines()
        .find_map(|l| l.strip_prefix("#SBATCH --cpus-per-task="))
        .and_then(|n| n.trim().parse().ok())
        .with_context(|| format!("{}: no sweep.sbatch with --cpus-per-task", dir.display()))?;
    Ok(Swept {
        config: spec["base_name"]
            .as_str()
            .context("sweep.json has no base_name")?
            .into(),
        set: strings(&spec["sets"]),
        threads,
        seeds,
    })
}

/// Trains every seed (and PyTorch's side), prints the row, writes the record.
pub fn speedrun(mut args: SpeedrunArgs) -> Result<()> {
    if let Some(record) = &args.compare {
        return match &args.against {
            Some(other) => compare_records(record, other).map(|l| println!("{}", l.join("\n"))),
            None => compare_record(record),
        };
    }
    let root = root();
    if let Some(dir) = args.collect.clone() {
        let swept = read_sweep(&dir)?;
        args.config = Some(swept.config);
        args.set = swept.set;
        args.threads = swept.threads;
        args.seeds = swept
            .seeds
            .iter()
            .map(|s| s.seed.to_string())
            .collect::<Vec<_>>()
            .join(",");
        return record(&root, &args, swept.seeds, Vec::new(), Vec::new());
    }
    let seeds: Vec<u64> = args
        .seeds
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .with_context(|| format!("--seeds: {s:?} is not a seed"))
        })
        .collect::<Result<_>>()?;
    if args.launcher == Launcher::Slurm {
        let dir = args
            .sweep
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("runs/speedrun-{}", args.track().id())));
        return submit(&root, &args, &dir);
    }
    let python = args.with_torch.then(torch_venv).transpose()?;
    let scratch = std::env::temp_dir().join(format!("headlab-speedrun-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    if let Some(python) = &python {
        // A config or --set PyTorch's port cannot train fails now, not after a build and
        // headlab's first seed.
        let out = scratch.join("check.json");
        run(torch_command(&root, &args, python, seeds[0], &out).arg("--check"))?;
    }
    run(cargo()
        .current_dir(&root)
        .args(["build", "--release", "-p", "headlab"]))?;
    let (mut ours, mut theirs, mut torch_json) = (Vec::new(), Vec::new(), Vec::new());
    for &seed in &seeds {
        eprintln!("xtask speedrun: seed {seed}: headlab");
        ours.push(headlab_seed(
            &root,
            &args,
            seed,
            &scratch.join(format!("seed-{seed}")),
        )?);
        if let Some(python) = &python {
            eprintln!("xtask speedrun: seed {seed}: PyTorch");
            let out = scratch.join(format!("torch-{seed}.json"));
            let (s, json) = torch_seed(&root, &args, python, seed, &out)?;
            theirs.push(s);
            torch_json.push(json);
        }
    }
    record(&root, &args, ours, theirs, torch_json)?;
    std::fs::remove_dir_all(&scratch).ok();
    Ok(())
}

/// Prints the row of headlab's seeds (and PyTorch's), and writes the record file.
fn record(
    root: &Path,
    args: &SpeedrunArgs,
    ours: Vec<Seed>,
    theirs: Vec<Seed>,
    torch_json: Vec<Value>,
) -> Result<()> {
    let root = root.to_path_buf();
    let label = args.label.clone().unwrap_or_else(|| {
        if args.set.is_empty() {
            args.track().name().into()
        } else {
            args.set.join(", ")
        }
    });
    let val = median(ours.iter().map(|s| s.val).collect());
    let flops = ours.iter().map(|s| s.flops).fold(0.0, f64::max);
    let train_s = median(ours.iter().map(|s| s.train_s).collect());
    let track = args.track();
    let holds = track.holds(val, flops, train_s);
    let date = Command::new("date")
        .arg("+%F")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())?;
    let commit = commit(&root);
    let cpu = cpu();
    let row = |name: &str, s: &[Seed]| {
        format!(
            "| {name} | {} | {} | {} | {} |",
            spread(s, |x| Some(x.val), 4),
            spread(s, |x| x.val_full, 4),
            spread(s, |x| Some(x.train_s), 1),
            spread(s, |x| x.flops.is_finite().then_some(x.flops / 1e12), 2),
        )
    };
    let header = "| run | val loss, median (range) | whole val split | training s | TFLOP |\n|---|---|---|---|---|";
    let mut table = format!("{header}\n{}", row(&format!("headlab: {label}"), &ours));
    if !theirs.is_empty() {
        let mode = torch_json[0]["mode"].as_str().unwrap_or("?");
        let version = torch_json[0]["torch"].as_str().unwrap_or("?");
        table += &format!(
            "\n{}",
            row(&format!("PyTorch {version} ({mode}): {label}"), &theirs)
        );
    }
    // Whether the two sides differ, seed for seed's spread (issue 45: three seeds could not say).
    let comparison = compare(&ours, &theirs, ("headlab's", "PyTorch's"));
    if !comparison.is_empty() {
        table += &format!("\n\n{}", comparison.join("\n\n"));
    }
    println!("{table}");
    let verdict = budget_line(track, val, flops, train_s);
    println!("{verdict}");

    let host = Command::new("hostname")
        .arg("-s")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let dir = root.join(&args.results);
    std::fs::create_dir_all(&dir)?;
    let stem = match track {
        Track::Short => format!("{date}-{host}-speedrun"),
        Track::Long => format!("{date}-{host}-speedrun-long"),
    };
    let mut path = dir.join(format!("{stem}.md"));
    for i in 2..100 {
        if !path.exists() {
            break;
        }
        path = dir.join(format!("{stem}-{i}.md"));
    }
    let per_seed: Vec<Value> = ours
        .iter()
        .map(|s| json!({"seed": s.seed, "val_loss": s.val, "val_full_loss": s.val_full, "train_s": s.train_s, "compute_flops": s.flops}))
        .collect();
    let record = json!({
        "date": date, "cpu": cpu, "slurm_sweep": args.collect, "threads": args.threads, "commit": commit,
        "burn": locked_version(&root, "burn"), "config": args.config(), "track": track.id(), "target_loss": track.target_loss(),
        "budget_flops": track.budget_flops(), "budget_s": track.budget_s(), "set": args.set,
        "label": label, "seeds": per_seed, "median_val_loss": val, "max_compute_flops": flops,
        "median_train_s": train_s, "holds": holds, "torch": torch_json,
        "comparison": comparison,
    });
    // The command as typed, an argument with a space quoted.
    let typed: Vec<String> = std::env::args()
        .skip(1)
        .map(|a| if a.contains(' ') { format!("{a:?}") } else { a })
        .collect();
    // Seeds trained on Slurm ran on its nodes, not where the record is written.
    let (cpu_said, whereabouts) = match &args.collect {
        Some(dir) => (
            format!("collected on {cpu}"),
            format!(
                " The seeds trained as Slurm array tasks (sweep {}), on the nodes' CPUs: \
                 their logs are in its logs/.",
                dir.display()
            ),
        ),
        None => (cpu.clone(), String::new()),
    };
    let text = format!(
        "# Speedrun record: {label}\n\nMade by `cargo xtask {}` on {date}: {cpu_said}, {} \
         threads, commit {commit}, Burn {}. Seeds {}; losses by the recipe's estimator \
         (result.json's `estimator`), the whole val split in non-overlapping windows of the \
         block size.{whereabouts}\n\n{table}\n\n{verdict}\n\n```json\n{}\n```\n",
        typed.join(" "),
        args.threads,
        locked_version(&root, "burn").unwrap_or_default(),
        args.seeds,
        serde_json::to_string_pretty(&record)?
    );
    std::fs::write(&path, text)?;
    println!("wrote {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(val: f64, val_full: Option<f64>) -> Seed {
        Seed {
            seed: 0,
            val,
            val_full,
            train_s: 1.0,
            flops: f64::NAN,
        }
    }

    #[test]
    fn the_row_is_median_and_range_and_a_dash_without_values() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        let seeds = [
            seed(1.5634, None),
            seed(1.5249, Some(1.5)),
            seed(1.5510, None),
        ];
        assert_eq!(spread(&seeds, |s| Some(s.val), 4), "1.5510 (1.5249-1.5634)");
        assert_eq!(spread(&seeds, |s| s.val_full, 2), "1.50 (1.50-1.50)");
        let none = |s: &Seed| s.flops.is_finite().then_some(s.flops);
        assert_eq!(spread(&seeds, none, 2), "-");
    }

    /// Two records' headlab seeds against each other: the sentences name the labels, and
    /// the shared seeds' differences are each seed's two losses subtracted.
    #[test]
    fn two_records_compare_by_label_and_seed_for_seed() {
        let dir = std::env::temp_dir().join(format!("xtask-compare-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let record = |name: &str, label: &str, vals: &[(u64, f64)]| {
            let seeds: Vec<Value> = vals
                .iter()
                .map(|&(seed, v)| json!({ "seed": seed, "val_loss": v, "train_s": 1.0 }))
                .collect();
            let json = json!({ "label": label, "seeds": seeds });
            let path = dir.join(name);
            std::fs::write(&path, format!("# record\n\n```json\n{json:#}\n```\n")).unwrap();
            path
        };
        let a = record("a.md", "bf16", &[(1, 1.50), (2, 1.60), (3, 1.52), (9, 1.4)]);
        let b = record("b.md", "f32", &[(1, 1.51), (2, 1.55), (3, 1.53), (4, 1.5)]);
        let lines = compare_records(&a, &b).unwrap();
        assert!(
            lines[0].starts_with("val loss: bf16's median minus f32's "),
            "{lines:?}"
        );
        // No whole-val losses in these records: one sentence, then the shared seeds 1, 2, 3.
        assert!(
            lines[1].contains("bf16 lower on 2 of 3 shared seeds"),
            "{lines:?}"
        );
        assert_eq!(lines[2], "  1: 1.5000 - 1.5100 = -0.0100");
        assert_eq!(lines[3], "  2: 1.6000 - 1.5500 = +0.0500");
        assert_eq!(lines.len(), 5);
        // Two records with one label are named by their files.
        let same = record("same.md", "f32", &[(1, 1.5), (2, 1.6)]);
        let lines = compare_records(&same, &b).unwrap();
        let names = format!("{}'s median minus {}'s", same.display(), b.display());
        assert!(lines[0].contains(&names), "{lines:?}");
        let one = record("c.md", "one", &[(1, 1.5)]);
        let err = compare_records(&one, &b).unwrap_err().to_string();
        assert!(err.contains("fewer than two seeds"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn each_track_holds_its_own_budgets() {
        assert!(Track::Short.holds(1.55, 11.98e12, 119.0));
        assert!(!Track::Short.holds(1.61, 11.98e12, 119.0));
        assert!(!Track::Short.holds(1.55, 12.1e12, 119.0));
        assert!(!Track::Short.holds(1.55, 11.98e12, 121.0));
        // The long track has no loss to reach, only its budgets.
        assert!(Track::Long.holds(1.61, 59.9e12, 599.0));
        assert!(!Track::Long.holds(1.45, 60.1e12, 599.0));
        assert!(!Track::Long.holds(1.45, 59.9e12, 601.0));
        let said = budget_line(Track::Long, 1.45, 59.9e12, 599.0);
        assert!(said.contains("nanoGPT's GPU config: 1.4697"), "{said}");
        assert!(
            said.contains("(<= 60)") && said.contains("(<= 600)"),
            "{said}"
        );
    }

    #[test]
    fn pytorch_trains_the_same_overrides_and_seeds_read_every_source() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: SpeedrunArgs,
        }
        let args = Cli::parse_from([
            "speedrun",
            "--track",
            "long",
            "--with-torch",
            "--set",
            "model.d_model=128",
            "--set",
            "train.max_iters=2040",
        ])
        .args;
        let cmd = torch_command(
            Path::new("."),
            &args,
            Path::new("python"),
            7,
            Path::new("o.json"),
        );
        let argv: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let after = |flag: &str| -> Vec<&str> {
            argv.windows(2)
                .filter(|w| w[0] == flag)
                .map(|w| w[1].as_str())
                .collect()
        };
        assert_eq!(
            after("--set"),
            ["model.d_model=128", "train.max_iters=2040"]
        );
        assert_eq!(after("--config"), [Track::Long.config()]);
        assert_eq!(after("--seed"), ["7"]);

        // PyTorch's JSON has no compute_flops; a record's seed without a loss is an error.
        let torch = json!({"val_loss": 1.4584, "val_full_loss": 1.4635, "train_s": 689.0});
        let s = Seed::from_json(1337, &torch, "torch").unwrap();
        assert_eq!(
            (s.seed, s.val, s.val_full, s.train_s),
            (1337, 1.4584, Some(1.4635), 689.0)
        );
        assert!(s.flops.is_nan());
        let ours = json!({"val_loss": 1.4765, "train_s": 442.0, "compute_flops": 5.983e13});
        assert_eq!(Seed::from_json(1, &ours, "r").unwrap().flops, 5.983e13);
        let err = Seed::from_json(1, &json!({"train_s": 1.0}), "result.json").unwrap_err();
        assert_eq!(err.to_string(), "result.json: no number at val_loss");
    }

    /// `--collect` reads a Slurm speedrun sweep: the config, the `--set`s, the task's cores
    /// and each seed's result; a seed not done yet is named, with how to follow it.
    #[test]
    fn collect_reads_the_seeds_a_sweep_trained() {
        let dir = std::env::temp_dir().join(format!("xtask-collect-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let spec = json!({
            "base_name": "configs/shakespeare-char-long.toml", "base": "",
            "sets": ["model.d_model=128"],
            "axes": [{"key": "train.seed", "values": ["1337", "1", "2"]}],
        });
        std::fs::write(dir.join("sweep.json"), spec.to_string()).unwrap();
        std::fs::write(
            dir.join("sweep.sbatch"),
            "#!/bin/bash\n#SBATCH --array=0-2\n#SBATCH --cpus-per-task=2\n",
        )
        .unwrap();
        for (seed, val) in [("1337", 1.51), ("1", 1.49), ("2", 1.53)] {
            let run = dir.join(format!("train.seed-{seed}"));
            std::fs::create_dir_all(&run).unwrap();
            let result = json!({"val_loss": val, "train_s": 100.0, "compute_flops": 5e13});
            std::fs::write(run.join("result.json"), result.to_string()).unwrap();
            if seed != "2" {
                std::fs::write(run.join("sweep-point.json"), "{}").unwrap();
            }
        }
        let err = read_sweep(&dir).err().unwrap().to_string();
        assert!(
            err.contains("seeds 2 are not done yet") && err.contains("--status"),
            "{err}"
        );
        std::fs::write(dir.join("train.seed-2/sweep-point.json"), "{}").unwrap();
        let swept = read_sweep(&dir).unwrap();
        assert_eq!(swept.config, Path::new(Track::Long.config()));
        assert_eq!(swept.set, ["model.d_model=128"]);
        assert_eq!(swept.threads, 2);
        let seeds: Vec<(u64, f64)> = swept.seeds.iter().map(|s| (s.seed, s.val)).collect();
        assert_eq!(seeds, [(1337, 1.51), (1, 1.49), (2, 1.53)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_track_follows_the_config_unless_named() {
        let args = |cli: &[&str]| {
            #[derive(clap::Parser)]
            struct Cli {
                #[command(flatten)]
                args: SpeedrunArgs,
            }
            use clap::Parser;
            Cli::parse_from(std::iter::once("speedrun").chain(cli.iter().copied())).args
        };
        assert_eq!(args(&[]).track(), Track::Short);
        assert_eq!(args(&[]).config(), Path::new(Track::Short.config()));
        assert_eq!(
            args(&["--track", "long"]).config(),
            Path::new(Track::Long.config())
        );
        let long = args(&["--config", "./configs/shakespeare-char-long.toml"]);
        assert_eq!(long.track(), Track::Long);
        let other = args(&["--config", "my.toml"]);
        assert_eq!(other.track(), Track::Short);
        let named = args(&["--track", "long", "--config", "my.toml"]);
        assert_eq!(named.track(), Track::Long);
    }
}

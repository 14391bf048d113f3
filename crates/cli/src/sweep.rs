//! `headlab sweep`: one run per point of a grid of settings, on this machine or as a Slurm job
//! array ([`headlab_labs::sweep`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Args;
use headlab_labs::Runs;
use headlab_labs::sweep::{
    State, SweepSpec, collect, from_file, parse_axis, run_local, run_point, state, write_results,
};
use headlab_train::run::{RunError, mark_training};

use crate::common::{DEFAULT_CONFIG, observers, whole_number};
use crate::lab::{InUse, command_line};
use crate::slurm::{Launcher, SlurmArgs, submit, which};

/// `headlab sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// An existing sweep folder, for --status, --collect or --resubmit (a new sweep goes to
    /// --out).
    pub dir: Option<PathBuf>,
    /// The base config (default: the built-in default run). A `[sweep]` table in it gives
    /// axes (`grid = { "model.n_heads" = [1, 2, 4] }`) and the launcher's settings
    /// (`launcher`, `jobs`, `partition`, `time`, `mem`, `cpus_per_task`, `sbatch`), which
    /// flags override.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// An axis: a config key and its values (repeatable), e.g. --grid model.n_heads=1,2,4.
    #[arg(long = "grid", value_name = "KEY=V1,V2,...")]
    pub grid: Vec<String>,
    /// Override a config key of every run (repeatable), e.g. --set train.max_iters=300.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// The sweep folder (default runs/sweep).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Replace the sweep folder if it exists.
    #[arg(long)]
    pub force: bool,
    /// Continue the sweep in --out: finished runs are kept, stopped ones continue from their
    /// checkpoint; the grid must be the one it was made with.
    #[arg(long, conflicts_with = "force")]
    pub resume: bool,
    /// Where the runs train.
    #[arg(long, value_enum)]
    pub launcher: Option<Launcher>,
    /// Local: train this many runs at once, each a process of its own with the cores split
    /// between them (its log in logs/run-K.log).
    #[arg(long, value_parser = whole_number::<usize>)]
    pub jobs: Option<usize>,
    /// Slurm's settings.
    #[command(flatten)]
    pub slurm: SlurmArgs,
    /// Which runs of the sweep in DIR are done, running, pending or failed.
    #[arg(long, requires = "dir")]
    pub status: bool,
    /// Build the results table of the sweep in DIR once every run is done.
    #[arg(long, requires = "dir")]
    pub collect: bool,
    /// Submit run K (from 0) of the Slurm sweep in DIR again, alone.
    #[arg(long, requires = "dir", value_parser = whole_number::<usize>)]
    pub resubmit: Option<usize>,
    /// Train run K of the sweep in DIR (what each Slurm array task runs).
    #[arg(long, requires = "dir", hide = true, value_parser = whole_number::<usize>)]
    pub point: Option<usize>,
}

/// Runs `headlab sweep`.
pub fn run(mut args: SweepArgs) -> Result<()> {
    if let Some(dir) = &args.dir {
        let spec = SweepSpec::read(dir)?;
        if let Some(k) = args.point {
            let runs = Runs {
                observers: &observers,
                resume: true,
                resume_command: "",
            };
            run_point(dir, &spec, k, runs)?;
            return Ok(());
        }
        if args.status {
            print!("{}", status(dir, &spec));
            return Ok(());
        }
        if args.collect {
            let rows = collect(dir, &spec)?;
            print!("{}", write_results(dir, &spec, &rows)?);
            return Ok(());
        }
        if let Some(k) = args.resubmit {
            if k >= spec.points().len() {
                bail!(
                    "--resubmit {k}: the sweep has runs 0 to {}",
                    spec.points().len() - 1
                );
            }
            return submit(dir, &args.slurm, Some(k));
        }
        bail!(
            "give --status, --collect or --resubmit K with a sweep folder; a new sweep takes --grid and --out"
        );
    }
    let (base, base_name, mut axes) = match &args.config {
        Some(path) => {
            let (base, axes, options) = from_file(path)?;
            // Flags win over the file's settings.
            let launcher = match options.launcher.as_deref() {
                None | Some("local") => Launcher::Local,
                Some("slurm") => Launcher::Slurm,
                Some(other) => bail!(
                    "{}: [sweep] launcher = {other:?}: choose \"local\" or \"slurm\"",
                    path.display()
                ),
            };
            args.launcher = args.launcher.or(Some(launcher));
            args.jobs = args.jobs.or(options.jobs);
            args.slurm.cpus_per_task = args.slurm.cpus_per_task.or(options.cpus_per_task);
            args.slurm.partition = args.slurm.partition.take().or(options.partition);
            args.slurm.time = args.slurm.time.take().or(options.time);
            args.slurm.mem = args.slurm.mem.take().or(options.mem);
            let mut sbatch = options.sbatch;
            sbatch.append(&mut args.slurm.sbatch);
            args.slurm.sbatch = sbatch;
            (base, path.display().to_string(), axes)
        }
        None => (
            DEFAULT_CONFIG.to_string(),
            "built-in configs/default.toml".into(),
            Vec::new(),
        ),
    };
    for g in &args.grid {
        axes.push(parse_axis(g)?);
    }
    let spec = SweepSpec {
        base_name,
        base,
        sets: args.set.clone(),
        axes,
        names: None,
        lab: None,
    };
    let launcher = args.launcher.unwrap_or(Launcher::Local);
    let jobs = args.jobs.unwrap_or(1);
    // Every point's config is checked before anything is written or submitted.
    let points = spec.check()?;
    if launcher == Launcher::Slurm && !args.slurm.dry_run && which("sbatch").is_none() {
        bail!(
            "--launcher slurm needs sbatch, which is not on PATH: run on a Slurm login node, or \
             add --dry-run to write the script without submitting it"
        );
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("runs").join("sweep"));
    let resume_command = format!("{} --resume", command_line(&["--resume", "--force"]));
    if args.resume {
        let earlier = SweepSpec::read(&out).with_context(|| {
            format!(
                "nothing to resume in {}; to start the sweep, leave out --resume",
                out.display()
            )
        })?;
        if earlier != spec {
            bail!(
                "{} holds another sweep ({} with {}); choose another --out, or --force to replace it",
                out.display(),
                earlier.base_name,
                earlier
                    .axes
                    .iter()
                    .map(|a| format!("{}={}", a.key, a.values.join(",")))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    }
    let mark = match mark_training(&out) {
        Ok(mark) => mark,
        Err(RunError::InUse { .. }) => bail!(
            "{} is in use by another headlab process; wait for it, or stop it and continue with --resume",
            out.display()
        ),
        Err(e) => return Err(e.into()),
    };
    if out.exists() && !args.resume {
        if !args.force {
            bail!(
                "{} already exists; choose another --out, pass --force to replace it, or continue \
                 a sweep stopped there with: {resume_command}",
                out.display()
            );
        }
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    let in_use = InUse::new(&out, mark)?;
    spec.write(&out)?;
    headlab_train::log_line!(
        "sweep: {} runs into {} ({} launcher)",
        points.len(),
        out.display(),
        match launcher {
            Launcher::Local => "local",
            Launcher::Slurm => "slurm",
        }
    );
    match launcher {
        Launcher::Local if jobs > 1 => {
            run_jobs(&out, points.len(), jobs, &resume_command)?;
            let rows = collect(&out, &spec)?;
            println!("{}", write_results(&out, &spec, &rows)?);
            headlab_train::log_line!("wrote {}", out.join("results.html").display());
            Ok(())
        }
        Launcher::Local => {
            let runs = Runs {
                observers: &observers,
                resume: args.resume,
                resume_command: &resume_command,
            };
            let table = run_local(&out, &spec, runs)?;
            println!("{table}");
            headlab_train::log_line!("wrote {}", out.join("results.html").display());
            Ok(())
        }
        Launcher::Slurm => {
            drop(in_use);
            submit(&out, &args.slurm, None)?;
            if !args.slurm.dry_run {
                eprintln!(
                    "once every run is done, build the tables with: headlab sweep {} --collect",
                    out.display()
                );
            }
            Ok(())
        }
    }
}

/// Trains the `n` runs of the sweep in `dir`, `jobs` at a time, each in a process of its own
/// (`headlab sweep DIR --point K`, which keeps a finished run and continues a stopped one) with
/// `cores / jobs` threads. A stop request (Ctrl-C reaches the runs too) starts no more runs
/// and waits for the running ones to save their checkpoints.
fn run_jobs(dir: &Path, n: usize, jobs: usize, resume_command: &str) -> Result<()> {
    let exe = std::env::current_exe().context("finding the headlab binary")?;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let threads = (cores / jobs).max(1);
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    // The runs save their own checkpoints on a stop request; this process only waits for them.
    headlab_train::stop::at_stake();
    let mut next = 0;
    let mut running: Vec<(usize, std::process::Child)> = Vec::new();
    let mut failed = Vec::new();
    while next < n || !running.is_empty() {
        while next < n && running.len() < jobs && !headlab_train::stop::requested() {
            let log_path = logs.join(format!("run-{next}.log"));
            let log = std::fs::File::create(&log_path)
                .with_context(|| format!("creating {}", log_path.display()))?;
            let child = Command::new(&exe)
                .arg("sweep")
                .arg(dir)
                .args(["--point", &next.to_string()])
                .env("RAYON_NUM_THREADS", threads.to_string())
                .stdout(log.try_clone().context("the run's log")?)
                .stderr(log)
                .spawn()
                .context("starting a run of the sweep")?;
            headlab_train::log_line!(
                "sweep: run {}/{n} started ({threads} threads; log {})",
                next + 1,
                log_path.display()
            );
            running.push((next, child));
            next += 1;
        }
        if next < n && headlab_train::stop::requested() && running.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut still = Vec::new();
        for (k, mut child) in running {
            match child.try_wait().context("waiting for a run of the sweep")? {
                Some(status) if status.success() => {
                    headlab_train::log_line!("sweep: run {}/{n} done", k + 1);
                }
                Some(status) => {
                    headlab_train::log_line!(
                        "sweep: run {}/{n} ended with {status} (log {})",
                        k + 1,
                        logs.join(format!("run-{k}.log")).display()
                    );
                    failed.push(k);
                }
                None => still.push((k, child)),
            }
        }
        running = still;
    }
    if headlab_train::stop::requested() {
        return Err(headlab_labs::LabError::Between {
            out: dir.to_path_buf(),
            resume: resume_command.to_string(),
        }
        .into());
    }
    if !failed.is_empty() {
        bail!(
            "runs {failed:?} of the sweep failed (their logs are in {}); fix what they say and \
             continue with: {resume_command}",
            logs.display()
        );
    }
    Ok(())
}

/// One line per run: done, failed (with its log), running or pending (Slurm's word, when
/// the sweep was submitted and `squeue` answers), started, or not started.
fn status(dir: &Path, spec: &SweepSpec) -> String {
    let queue: Vec<(usize, String)> = std::fs::read_to_string(dir.join("slurm-job"))
        .ok()
        .and_then(|job| {
            let out = Command::new("squeue")
                .args(["-h", "-r", "-j", job.trim(), "-o", "%K %T"])
                .output()
                .ok()?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            Some(
                text.lines()
                    .filter_map(|l| {
                        let (k, s) = l.split_once(' ')?;
                        Some((k.parse().ok()?, s.to_lowercase()))
                    })
                    .collect(),
            )
        })
        .unwrap_or_default();
    let mut s = String::new();
    let (mut done, points) = (0, spec.points());
    for (k, p) in points.iter().enumerate() {
        let exit = std::fs::read_to_string(dir.join("logs").join(format!("task-{k}.exit")))
            .ok()
            .map(|t| t.trim().to_string());
        let log = dir.join("logs").join(format!("task-{k}.out"));
        let word = match (
            state(dir, p),
            exit.as_deref(),
            queue.iter().find(|q| q.0 == k),
        ) {
            (State::Done, ..) => {
                done += 1;
                "done".to_string()
            }
            (_, Some(code), _) if code != "0" => {
                format!("failed (exit {code}; log {})", log.display())
            }
            (_, _, Some((_, slurm))) => slurm.clone(),
            (State::Started, ..) => "started, not finished".into(),
            (State::NotStarted, ..) => "not started".into(),
        };
        s += &format!("{k:>3}  {:<40} {word}\n", p.name);
    }
    s += &format!("{done} of {} done\n", points.len());
    s
}

//! `headlab sweep`: one run per point of a grid of settings, on this machine or as a Slurm job
//! array ([`headlab_labs::sweep`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Args;
use headlab_labs::Runs;
use headlab_labs::sweep::{
    State, SweepSpec, collect, from_file, parse_axis, run_local, run_point, runs, state,
    write_results,
};
use headlab_train::run::{RunError, mark_training};

use crate::common::{DEFAULT_CONFIG, observers, whole_number};
use crate::lab::{InUse, command_line};
use crate::slurm::{
    Launcher, SlurmArgs, alive, ended, is_slurm_sweep, job, submit, task_list, which,
};

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
    /// Submit runs K,K,... (from 0) of the Slurm sweep in DIR again: those neither done nor
    /// still held by Slurm.
    #[arg(long, requires = "dir", value_name = "K,K,...", value_delimiter = ',',
          value_parser = whole_number::<usize>)]
    pub resubmit: Vec<usize>,
    /// Train run K of the sweep in DIR (what each Slurm array task runs).
    #[arg(long, requires = "dir", hide = true, value_parser = whole_number::<usize>)]
    pub point: Option<usize>,
}

/// Runs `headlab sweep`.
pub fn run(mut args: SweepArgs) -> Result<()> {
    if let Some(dir) = &args.dir {
        let spec = SweepSpec::read(dir)?;
        if let Some(k) = args.point {
            // What continues this run: the parent's command (local jobs), or under Slurm the
            // task submitted again.
            let resume_command = std::env::var(RESUME_ENV)
                .unwrap_or_else(|_| format!("headlab sweep {} --resubmit {k}", dir.display()));
            let runs = Runs {
                observers: &observers,
                resume: true,
                resume_command: &resume_command,
                what: "sweep",
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
        if !args.resubmit.is_empty() {
            return resubmit(dir, &spec, &args.resubmit, &args.slurm);
        }
        bail!(
            "give --status, --collect or --resubmit K with a sweep folder; a new sweep takes --grid and --out"
        );
    }
    // Slurm's flags on the command line (the config's [sweep] table may hold its own).
    let slurm_flags = args.slurm.clone();
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
    if launcher == Launcher::Local {
        slurm_flags.refuse_without_slurm()?;
    }
    let jobs = args.jobs.unwrap_or(1);
    // Every point's config is checked before anything is written or submitted.
    let points = spec.check()?;
    let configs = points
        .iter()
        .map(|p| Ok((p.name.as_str(), spec.config(p)?)))
        .collect::<Result<Vec<_>>>()?;
    args.slurm
        .check_ranks(configs.iter().map(|(name, config)| (*name, config)))?;
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
    // Tasks Slurm still holds write into this folder: never start them a second time.
    let held = alive(&out);
    if !held.is_empty() {
        bail!(
            "{}",
            held_message(&out, &held, "resuming would start them a second time")
        );
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
    let made = !out.exists();
    let in_use = InUse::new(&out, mark)?;
    spec.write(&out)?;
    // A Slurm sweep says what it submitted once sbatch took it.
    if launcher == Launcher::Local {
        headlab_train::log_line!(
            "sweep: {} into {} (local launcher)",
            runs(points.len()),
            out.display()
        );
    }
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
                what: "sweep",
            };
            let table = run_local(&out, &spec, runs)?;
            println!("{table}");
            headlab_train::log_line!("wrote {}", out.join("results.html").display());
            Ok(())
        }
        Launcher::Slurm => {
            drop(in_use);
            // A resumed sweep submits only the runs not done (none is alive: refused above).
            let only: Option<Vec<usize>> = args.resume.then(|| {
                points
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| state(&out, p) != State::Done)
                    .map(|(k, _)| k)
                    .collect()
            });
            if only.as_ref().is_some_and(Vec::is_empty) {
                eprintln!(
                    "every run of the sweep in {} is done: nothing to submit; build the tables \
                     with: headlab sweep {} --collect",
                    out.display(),
                    out.display()
                );
                return Ok(());
            }
            if let Err(e) = submit(&out, &args.slurm, only.as_deref()) {
                // A sweep this command made and could not submit leaves nothing behind.
                if made {
                    std::fs::remove_dir_all(&out)
                        .with_context(|| format!("removing {}", out.display()))?;
                    return Err(e.context(format!(
                        "nothing was submitted, and {} was removed; fix the setting and run \
                         the command again",
                        out.display()
                    )));
                }
                return Err(e.context(format!(
                    "nothing was submitted; {} is kept: fix the setting and submit it with: \
                     {resume_command}",
                    out.display()
                )));
            }
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
            // Appended to: a resumed sweep keeps what the earlier process wrote.
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .with_context(|| format!("opening {}", log_path.display()))?;
            use std::io::Write as _;
            writeln!(log, "== headlab sweep: run {next}")
                .with_context(|| format!("writing {}", log_path.display()))?;
            let child = Command::new(&exe)
                .arg("sweep")
                .arg(dir)
                .args(["--point", &next.to_string()])
                .env("RAYON_NUM_THREADS", threads.to_string())
                .env(RESUME_ENV, resume_command)
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
            what: "sweep",
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

/// Where a local sweep's `--point` processes find the command that continues the sweep.
const RESUME_ENV: &str = "HEADLAB_SWEEP_RESUME";

/// The refusal for tasks Slurm still holds, `why` saying what would go wrong.
fn held_message(dir: &Path, held: &[(usize, String)], why: &str) -> String {
    let job = job(dir).unwrap_or_default();
    let tasks: Vec<String> = held.iter().map(|(k, s)| format!("{k} {s}")).collect();
    format!(
        "Slurm job {job} still holds runs of the sweep in {} ({}); {why}. Follow them with: \
         headlab sweep {} --status, or cancel them first (scancel {job})",
        dir.display(),
        tasks.join(", "),
        dir.display()
    )
}

/// `--resubmit K,...`: the Slurm sweep's runs `tasks` again, each neither done nor held.
fn resubmit(dir: &Path, spec: &SweepSpec, tasks: &[usize], slurm: &SlurmArgs) -> Result<()> {
    let points = spec.points();
    if let Some(k) = tasks.iter().find(|&&k| k >= points.len()) {
        bail!(
            "--resubmit {k}: the sweep has runs 0 to {}",
            points.len() - 1
        );
    }
    if let Some(&k) = tasks
        .iter()
        .find(|&&k| state(dir, &points[k]) == State::Done)
    {
        bail!(
            "run {k} ({}) of the sweep in {} is done: nothing to resubmit",
            points[k].name,
            dir.display()
        );
    }
    if !is_slurm_sweep(dir) {
        bail!(
            "{} is a local sweep (it has no sweep.sbatch): its runs train here, not on Slurm; \
             continue it with the command that made it and --resume",
            dir.display()
        );
    }
    let held: Vec<(usize, String)> = alive(dir)
        .into_iter()
        .filter(|(k, _)| tasks.contains(k))
        .collect();
    if !held.is_empty() {
        bail!(
            "{}",
            held_message(dir, &held, "submitting them again would train them twice")
        );
    }
    submit(dir, slurm, Some(tasks))
}

/// The last line a task or run wrote into its log, if any.
fn last_line(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// One line per run: done, failed (with its log), pending or running (Slurm's word, when the
/// sweep was submitted and `squeue` answers), how Slurm ended it (cancelled, timeout, ...:
/// `sacct` or `scontrol`, with its log's last line), started, or not started; then the count
/// and the command that continues the runs not done.
fn status(dir: &Path, spec: &SweepSpec) -> String {
    let queue = alive(dir);
    let slurm = is_slurm_sweep(dir);
    let finished = if slurm { ended(dir) } else { Vec::new() };
    let mut s = String::new();
    let (mut done, points) = (0, spec.points());
    let mut to_continue = Vec::new();
    for (k, p) in points.iter().enumerate() {
        let exit = std::fs::read_to_string(dir.join("logs").join(format!("task-{k}.exit")))
            .ok()
            .map(|t| t.trim().to_string());
        let log = dir.join("logs").join(if slurm {
            format!("task-{k}.out")
        } else {
            format!("run-{k}.log")
        });
        let held = queue.iter().find(|q| q.0 == k);
        let word = match (state(dir, p), exit.as_deref(), held) {
            (State::Done, ..) => {
                done += 1;
                "done".to_string()
            }
            (_, _, Some((_, word))) => word.clone(),
            (_, Some(code), _) if code != "0" => {
                to_continue.push(k);
                format!("failed (exit {code}; log {})", log.display())
            }
            (state, ..) => {
                to_continue.push(k);
                let base = match state {
                    State::Started => "started, not finished",
                    _ => "not started",
                };
                match finished.iter().find(|f| f.0 == k) {
                    Some((_, how)) if how != "completed" => {
                        let said = last_line(&log)
                            .map(|l| format!("; its log ends: {l}"))
                            .unwrap_or_default();
                        format!("{how} by Slurm, {base}{said}")
                    }
                    _ => base.to_string(),
                }
            }
        };
        s += &format!("{k:>3}  {:<40} {word}\n", p.name);
    }
    s += &format!("{done} of {} done\n", points.len());
    if !to_continue.is_empty() && queue.is_empty() {
        s += &if slurm {
            format!(
                "continue the runs not done with: headlab sweep {} --resubmit {}\n",
                dir.display(),
                task_list(&to_continue)
            )
        } else {
            "continue the runs not done with the command that made the sweep and --resume\n"
                .to_string()
        };
    }
    s
}

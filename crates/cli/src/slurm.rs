//! Slurm as a launcher: the flags of a job array (shared by `headlab sweep` and the labs that
//! train several runs), the sbatch script of a sweep folder, its submission, and what Slurm
//! knows of its tasks.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use headlab_labs::sweep::SweepSpec;
use headlab_train::RunConfig;

use crate::common::whole_number;

/// Where the runs are trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Launcher {
    /// Here, one after another.
    Local,
    /// As one Slurm job array, one array task per run.
    Slurm,
}

/// What a Slurm job array is asked for (`headlab sweep` and the labs that train several
/// runs).
#[derive(Debug, Clone, Args, Default)]
pub struct SlurmArgs {
    /// Slurm: the partition (`#SBATCH --partition`).
    #[arg(long)]
    pub partition: Option<String>,
    /// Slurm: each task's time limit (`#SBATCH --time`, e.g. 00:30:00).
    #[arg(long)]
    pub time: Option<String>,
    /// Slurm: cores per task (`#SBATCH --cpus-per-task`; the run uses them all; default 2).
    #[arg(long, value_parser = whole_number::<usize>)]
    pub cpus_per_task: Option<usize>,
    /// Slurm: MPI ranks that train each run together (`#SBATCH --ntasks`, started by `srun
    /// --mpi=pmix`), each with --cpus-per-task cores; needs a build with `--features mpi`
    /// (default 1: one process per run).
    #[arg(long, value_parser = whole_number::<usize>)]
    pub ntasks: Option<usize>,
    /// Slurm: memory per task (`#SBATCH --mem`, e.g. 2G).
    #[arg(long)]
    pub mem: Option<String>,
    /// Slurm: one more `#SBATCH` line (repeatable), e.g. --sbatch "--account=lab".
    #[arg(long = "sbatch", value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch: Vec<String>,
    /// Slurm: write the script and print the sbatch command instead of submitting.
    #[arg(long)]
    pub dry_run: bool,
}

impl SlurmArgs {
    /// The first Slurm-only flag given, for refusing it where the runs train here.
    pub fn first_given(&self) -> Option<&'static str> {
        [
            (self.dry_run, "--dry-run"),
            (self.partition.is_some(), "--partition"),
            (self.time.is_some(), "--time"),
            (self.cpus_per_task.is_some(), "--cpus-per-task"),
            (self.ntasks.is_some(), "--ntasks"),
            (self.mem.is_some(), "--mem"),
            (!self.sbatch.is_empty(), "--sbatch"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// Refuses Slurm's flags when the runs train here: `--dry-run` would otherwise train
    /// them all.
    pub fn refuse_without_slurm(&self) -> Result<()> {
        if let Some(flag) = self.first_given() {
            bail!(
                "{flag} is a Slurm setting, but the runs would train here (local launcher): add \
                 --launcher slurm, or leave {flag} out"
            );
        }
        Ok(())
    }

    /// The ranks per run: 1 unless --ntasks asks for more.
    pub fn ranks(&self) -> usize {
        self.ntasks.unwrap_or(1)
    }

    /// Refuses `--ntasks` that the runs `configs` (named) cannot use, before anything is
    /// written: 0, a binary without MPI, a step that the ranks cannot share equally, a
    /// backend that cannot take part.
    pub fn check_ranks<'a>(
        &self,
        configs: impl IntoIterator<Item = (&'a str, &'a RunConfig)>,
    ) -> Result<()> {
        let n = self.ranks();
        if n == 0 {
            bail!("--ntasks 0: a run needs at least one rank; leave --ntasks out for one");
        }
        if n == 1 {
            return Ok(());
        }
        if !headlab_train::world::MPI_BUILT {
            bail!(
                "--ntasks {n} trains each run on {n} MPI ranks, but this headlab was built \
                 without MPI: build it with `cargo build --release --features mpi` (Open MPI \
                 and libclang installed), or leave --ntasks out"
            );
        }
        for (name, config) in configs {
            let train = &config.train;
            headlab_train::world::Shard::of(0, n, train.grad_accum, train.batch_size)
                .with_context(|| format!("run {name} with --ntasks {n}"))?;
            if train.backend == "wgpu" {
                bail!(
                    "run {name}: train.backend = wgpu cannot train under MPI (--ntasks {n}); \
                     use flex, or leave --ntasks out"
                );
            }
        }
        Ok(())
    }
}

/// The script each Slurm sweep keeps; its presence marks a folder as a Slurm sweep.
pub const SCRIPT: &str = "sweep.sbatch";

/// The file holding the id of the sweep's last submitted job.
pub const JOB_FILE: &str = "slurm-job";

/// Where `program` is on PATH.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| p.is_file())
    })
}

/// Whether the sweep in `dir` was made for Slurm (its script was written).
pub fn is_slurm_sweep(dir: &Path) -> bool {
    dir.join(SCRIPT).is_file()
}

/// The sbatch script of the sweep in `dir`: one array task per run, each training its run
/// with this binary (the nodes need no Rust) and leaving its exit code beside its log. Logs
/// are appended to, so a task submitted again keeps what the earlier one wrote.
fn script(dir: &Path, args: &SlurmArgs, n: usize) -> Result<String> {
    let exe = std::env::current_exe().context("finding the headlab binary")?;
    // Each task starts in this folder and names the sweep as it was named here, so its runs'
    // pages carry the titles a local sweep gives them.
    let cwd = std::env::current_dir().context("the current folder")?;
    let logs = std::path::absolute(dir)
        .context("the sweep folder's path")?
        .join("logs");
    let mut s = format!(
        "#!/bin/bash\n#SBATCH --job-name=headlab-sweep\n#SBATCH --array=0-{}\n\
         #SBATCH --cpus-per-task={}\n#SBATCH --chdir={}\n#SBATCH --output={}/task-%a.out\n\
         #SBATCH --open-mode=append\n",
        n - 1,
        args.cpus_per_task.unwrap_or(2),
        cwd.display(),
        logs.display()
    );
    let ranks = args.ranks();
    if ranks > 1 {
        s += &format!("#SBATCH --ntasks={ranks}\n");
    }
    // Several ranks train the task's run together: srun starts them (PMIx, which Open MPI
    // speaks) and stops them all if one fails.
    let launch = if ranks > 1 {
        "srun --mpi=pmix --kill-on-bad-exit=1 "
    } else {
        ""
    };
    if let Some(p) = &args.partition {
        s += &format!("#SBATCH --partition={p}\n");
    }
    if let Some(t) = &args.time {
        s += &format!("#SBATCH --time={t}\n");
    }
    if let Some(m) = &args.mem {
        s += &format!("#SBATCH --mem={m}\n");
    }
    for extra in &args.sbatch {
        s += &format!("#SBATCH {extra}\n");
    }
    s += &format!(
        "\n# One run per array task; the run uses the task's cores.\n\
         export RAYON_NUM_THREADS=\"${{SLURM_CPUS_PER_TASK:-{}}}\"\n\
         echo \"== headlab sweep: task $SLURM_ARRAY_TASK_ID of job $SLURM_ARRAY_JOB_ID, $(date)\"\n\
         {launch}'{}' sweep '{}' --point \"$SLURM_ARRAY_TASK_ID\"\n\
         echo $? > '{}'/task-\"$SLURM_ARRAY_TASK_ID\".exit\n",
        args.cpus_per_task.unwrap_or(2),
        exe.display(),
        dir.display(),
        logs.display()
    );
    Ok(s)
}

/// Writes the sweep's script and submits it (only the tasks `only`, when given); with
/// `--dry-run`, prints the command instead.
pub fn submit(dir: &Path, args: &SlurmArgs, only: Option<&[usize]>) -> Result<()> {
    let spec = SweepSpec::read(dir)?;
    let n = spec.points().len();
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let path = dir.join(SCRIPT);
    if only.is_none() || !path.exists() {
        std::fs::write(&path, script(dir, args, n)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let mut command = vec!["sbatch".to_string()];
    if let Some(tasks) = only {
        for k in tasks {
            let _ = std::fs::remove_file(logs.join(format!("task-{k}.exit")));
        }
        command.push(format!("--array={}", task_list(tasks)));
    }
    command.push(path.display().to_string());
    if args.dry_run {
        println!("{}", command.join(" "));
        eprintln!("wrote {} (not submitted: --dry-run)", path.display());
        return Ok(());
    }
    let output = Command::new(&command[0])
        .args(&command[1..])
        .output()
        .context("running sbatch")?;
    if !output.status.success() {
        bail!(
            "sbatch refused the sweep: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let said = String::from_utf8_lossy(&output.stdout);
    let job = said
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string();
    std::fs::write(dir.join(JOB_FILE), format!("{job}\n")).context("writing slurm-job")?;
    println!("{}", said.trim());
    eprintln!("follow it with: headlab sweep {} --status", dir.display());
    Ok(())
}

/// `0,2,3` for sbatch's `--array` and for `--resubmit`.
pub fn task_list(tasks: &[usize]) -> String {
    tasks
        .iter()
        .map(|k| k.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The id of the sweep's last submitted job, if it was submitted.
pub fn job(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(JOB_FILE))
        .ok()
        .map(|j| j.trim().to_string())
        .filter(|j| !j.is_empty())
}

/// The array tasks of the sweep's job that Slurm still holds (pending or running), with
/// squeue's word for each; empty when nothing was submitted, or squeue is not there.
pub fn alive(dir: &Path) -> Vec<(usize, String)> {
    let Some(job) = job(dir) else {
        return Vec::new();
    };
    let Ok(out) = Command::new("squeue")
        .args(["-h", "-r", "-j", &job, "-o", "%K %T"])
        .output()
    else {
        return Vec::new();
    };
    parse_queue(&String::from_utf8_lossy(&out.stdout))
}

/// squeue's `%K %T` lines: array task id and state. A pending array not yet split prints
/// a range (`0-3`), whose every task is pending.
fn parse_queue(text: &str) -> Vec<(usize, String)> {
    let mut tasks = Vec::new();
    for line in text.lines() {
        let Some((ids, state)) = line.trim().split_once(' ') else {
            continue;
        };
        let state = state.trim().to_lowercase();
        tasks.extend(task_ids(ids).into_iter().map(|k| (k, state.clone())));
    }
    tasks
}

/// Slurm's array task ids: `3`, `0-3`, `5,7%2` (a `%` limit after them).
fn task_ids(text: &str) -> Vec<usize> {
    let text = text.split('%').next().unwrap_or(text);
    let mut ids = Vec::new();
    for part in text.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(lo), Ok(hi)) = (lo.trim().parse::<usize>(), hi.trim().parse::<usize>()) {
            ids.extend(lo..=hi);
        }
    }
    ids
}

/// How the tasks of the sweep's job that Slurm no longer holds ended, as Slurm's accounting
/// (`sacct`) or, while the controller remembers them, `scontrol` says: `cancelled`, `failed`,
/// `timeout`, `out_of_memory`, `completed`... Empty when neither answers.
pub fn ended(dir: &Path) -> Vec<(usize, String)> {
    let Some(job) = job(dir) else {
        return Vec::new();
    };
    let sacct = Command::new("sacct")
        .args(["-n", "-P", "-X", "-j", &job, "-o", "JobID,State"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| parse_sacct(&String::from_utf8_lossy(&o.stdout), &job))
        .unwrap_or_default();
    if !sacct.is_empty() {
        return sacct;
    }
    Command::new("scontrol")
        .args(["show", "job", "-o", &job])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| parse_scontrol(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_default()
}

/// sacct's `JobID|State` lines for array job `job`: `13_2|CANCELLED by 0`.
fn parse_sacct(text: &str, job: &str) -> Vec<(usize, String)> {
    text.lines()
        .filter_map(|l| {
            let (id, state) = l.split_once('|')?;
            let k = id.strip_prefix(job)?.strip_prefix('_')?.parse().ok()?;
            let word = state.split_whitespace().next()?.to_lowercase();
            Some((k, word))
        })
        .collect()
}

/// `scontrol show job -o`'s one line per array task: `... ArrayTaskId=2 JobState=CANCELLED ...`.
fn parse_scontrol(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .filter_map(|l| {
            let field = |name: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            };
            let state = field("JobState")?.to_lowercase();
            Some(
                task_ids(field("ArrayTaskId")?)
                    .into_iter()
                    .map(move |k| (k, state.clone())),
            )
        })
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slurm's outputs as Slurm 22.05 writes them.
    #[test]
    fn slurms_task_states_are_read_per_task() {
        assert_eq!(
            parse_queue("0-2 PENDING\n3 RUNNING\n5,7%2 PENDING\n"),
            vec![
                (0, "pending".to_string()),
                (1, "pending".into()),
                (2, "pending".into()),
                (3, "running".into()),
                (5, "pending".into()),
                (7, "pending".into()),
            ]
        );
        assert_eq!(
            parse_sacct("13_0|COMPLETED\n13_1|CANCELLED by 0\n130_2|FAILED\n", "13"),
            vec![(0, "completed".to_string()), (1, "cancelled".into())]
        );
        assert_eq!(
            parse_scontrol(
                "JobId=14 ArrayJobId=13 ArrayTaskId=1 JobName=x JobState=CANCELLED Reason=None\n\
                 JobId=13 ArrayJobId=13 ArrayTaskId=0 JobState=COMPLETED Reason=None\n\
                 JobId=15 ArrayJobId=15 ArrayTaskId=2-3 JobState=CANCELLED Reason=None\n"
            ),
            vec![
                (1, "cancelled".to_string()),
                (0, "completed".into()),
                (2, "cancelled".into()),
                (3, "cancelled".into())
            ]
        );
    }
}

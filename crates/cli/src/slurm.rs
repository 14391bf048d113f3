//! Slurm as a launcher: the flags of a job array (shared by `headlab sweep` and the labs that
//! train several runs), the sbatch script of a sweep folder, and its submission.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use headlab_labs::sweep::SweepSpec;

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
#[derive(Debug, Args, Default)]
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

/// The script each Slurm sweep keeps, and the array task's exit code files.
const SCRIPT: &str = "sweep.sbatch";

/// Where `program` is on PATH.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| p.is_file())
    })
}

/// The sbatch script of the sweep in `dir`: one array task per run, each training its run
/// with this binary (the nodes need no Rust) and leaving its exit code beside its log.
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
         #SBATCH --cpus-per-task={}\n#SBATCH --chdir={}\n#SBATCH --output={}/task-%a.out\n",
        n - 1,
        args.cpus_per_task.unwrap_or(2),
        cwd.display(),
        logs.display()
    );
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
         '{}' sweep '{}' --point \"$SLURM_ARRAY_TASK_ID\"\n\
         echo $? > '{}'/task-\"$SLURM_ARRAY_TASK_ID\".exit\n",
        args.cpus_per_task.unwrap_or(2),
        exe.display(),
        dir.display(),
        logs.display()
    );
    Ok(s)
}

/// Writes the sweep's script and submits it (only task `only`, when given); with
/// `--dry-run`, prints the command instead.
pub fn submit(dir: &Path, args: &SlurmArgs, only: Option<usize>) -> Result<()> {
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
    if let Some(k) = only {
        let _ = std::fs::remove_file(logs.join(format!("task-{k}.exit")));
        command.push(format!("--array={k}"));
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
    std::fs::write(dir.join("slurm-job"), format!("{job}\n")).context("writing slurm-job")?;
    println!("{}", said.trim());
    eprintln!("follow it with: headlab sweep {} --status", dir.display());
    Ok(())
}

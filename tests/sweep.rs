//! `headlab sweep`: a grid of runs on this machine or as a Slurm job array, resumable, with one
//! results table.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{headlab, headlab_env, ok};

/// Small runs: 30 steps on 100k characters of grammar.
const SMALL: [&str; 8] = [
    "--set",
    "train.max_iters=30",
    "--set",
    "data.builtin_chars=100000",
    "--set",
    "train.eval_interval=15",
    "--set",
    "train.grammar_sentences=20",
];

/// `headlab sweep` with the 2 x 2 grid of these tests into `out`, and `extra`.
fn sweep(out: &str, extra: &[&str], dir: &Path) -> std::process::Output {
    let mut args = vec![
        "sweep",
        "--grid",
        "model.n_heads=1,2",
        "--grid",
        "train.seed=1,2",
        "--out",
        out,
    ];
    args.extend_from_slice(&SMALL);
    args.extend_from_slice(extra);
    headlab(&args, dir)
}

/// `results.csv` without its last column (`train_s`, the only timing in it).
fn without_timing(csv: &str) -> String {
    csv.lines()
        .map(|l| l.rsplit_once(',').map_or(l, |(a, _)| a).to_string() + "\n")
        .collect()
}

/// metrics.csv's columns that do not depend on the machine's speed.
fn losses(metrics: &str) -> String {
    metrics
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            format!(
                "{},{},{},{},{},{},{}\n",
                f[0], f[1], f[2], f[3], f[6], f[7], f[8]
            )
        })
        .collect()
}

/// A local sweep trains one run per point, in a folder named by its settings with those
/// settings in its config; results.csv has a row per run whose losses are the run's own
/// (result.json, read here), and two runs at once give the same; `--resume` keeps the finished runs and retrains a deleted one to
/// the same losses digit for digit; `--status` counts them.
#[test]
fn a_local_sweep_trains_every_point_and_tables_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    ok(&sweep("s", &[], dir.path()));
    let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
    let csv = read("s/results.csv");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "name,model.n_heads,train.seed,train_loss,val_loss,well_formed,agreeing,\
         syntactic_head,relation,accuracy,baseline,train_s"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 4, "{csv}");
    for (row, (heads, seed)) in rows.iter().zip([(1, 1), (1, 2), (2, 1), (2, 2)]) {
        assert_eq!(row[0], format!("model.n_heads-{heads}__train.seed-{seed}"));
        assert_eq!((row[1], row[2]), (&*heads.to_string(), &*seed.to_string()));
        let config = read(&format!("s/{}/config.toml", row[0]));
        assert!(config.contains(&format!("n_heads = {heads}\n")), "{config}");
        assert!(config.contains(&format!("seed = {seed}\n")), "{config}");
        let result: serde_json::Value =
            serde_json::from_str(&read(&format!("s/{}/result.json", row[0]))).unwrap();
        let val = result["val_loss"].as_f64().unwrap();
        assert_eq!(row[4], format!("{val:.6}"), "{csv}");
        let share: f64 = row[5].parse().unwrap();
        assert!((0.0..=1.0).contains(&share), "{csv}");
    }
    // Two runs at once, each a process of its own: the same table.
    ok(&sweep("j", &["--jobs", "2"], dir.path()));
    assert_eq!(without_timing(&read("j/results.csv")), without_timing(&csv));
    // Resumed, a run trained again appends to its log: the first process's lines stay.
    let first_log = read("j/logs/run-3.log");
    std::fs::remove_dir_all(dir.path().join("j/model.n_heads-2__train.seed-2")).unwrap();
    ok(&sweep("j", &["--jobs", "2", "--resume"], dir.path()));
    let log = read("j/logs/run-3.log");
    assert!(log.starts_with(&first_log), "{log}");
    assert_eq!(log.matches("== headlab sweep: run 3").count(), 2, "{log}");
    // A local sweep's run is not submitted to Slurm: a done run has nothing to resubmit, and
    // a local sweep's are not Slurm's to train (issue 79).
    for (k, says) in [
        ("0", "is done: nothing to resubmit"),
        ("3", "is a local sweep"),
    ] {
        if k == "3" {
            std::fs::remove_dir_all(dir.path().join("j/model.n_heads-2__train.seed-2")).unwrap();
        }
        let out = headlab(&["sweep", "j", "--resubmit", k], dir.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(!dir.path().join("j/sweep.sbatch").exists());
        assert!(!dir.path().join("j/slurm-job").exists());
    }
    let status = ok(&headlab(&["sweep", "j", "--status"], dir.path()));
    assert!(
        status.ends_with(
            "continue the runs not done with the command that made the sweep and --resume\n"
        ),
        "{status}"
    );
    let html = read("s/results.html");
    assert_eq!(html.matches("<tr>").count(), 1 + 4, "{html}");
    assert!(dir.path().join("s/losses.png").is_file());

    let one = "s/model.n_heads-2__train.seed-1";
    let before = read(&format!("{one}/metrics.csv"));
    std::fs::remove_dir_all(dir.path().join(one)).unwrap();
    let again = sweep("s", &["--resume"], dir.path());
    let log = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{log}");
    assert_eq!(log.matches("finished before: kept").count(), 3, "{log}");
    assert_eq!(
        losses(&read(&format!("{one}/metrics.csv"))),
        losses(&before)
    );
    assert_eq!(without_timing(&read("s/results.csv")), without_timing(&csv));
    let status = ok(&headlab(&["sweep", "s", "--status"], dir.path()));
    assert!(status.ends_with("4 of 4 done\n"), "{status}");
}

/// Bad sweeps get one line and exit 2 with nothing written or submitted: a key that does not
/// exist (listing the valid ones), a value of the wrong type, no grid, the Slurm launcher with
/// no sbatch, and --resume on a folder another sweep made (left as it was).
#[test]
fn bad_sweeps_exit_2_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |args: &[&str], env: &[(&str, &str)], says: &str| {
        let out = headlab_env(args, dir.path(), env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!dir.path().join("bad").exists(), "{args:?}");
    };
    let grid = |g: &'static str| ["sweep", "--grid", g, "--out", "bad"];
    refused(
        &grid("model.n_headz=1,2"),
        &[],
        "--grid \"model.n_headz=1\"",
    );
    refused(&grid("model.n_headz=1,2"), &[], "valid keys");
    refused(&grid("model.n_heads=1,x"), &[], "wrong type");
    refused(&grid("model.n_heads="), &[], "empty");
    refused(&["sweep", "--out", "bad"], &[], "at least one axis");
    // Issue 79: --dry-run without Slurm trained every run; a --set of an axis's key was
    // dropped; an empty grid in the [sweep] table gave "0 runs".
    let mut local = grid("model.n_heads=1,2").to_vec();
    local.extend(["--set", "train.max_iters=5", "--dry-run"]);
    refused(&local, &[], "--dry-run is a Slurm setting");
    let mut local = grid("model.n_heads=1,2").to_vec();
    local.extend(["--partition", "debug"]);
    refused(&local, &[], "--partition is a Slurm setting");
    refused(
        &[
            "lab",
            "syntax",
            "--heads",
            "1,2",
            "--seeds",
            "1",
            "--out",
            "bad",
            "--dry-run",
        ],
        &[],
        "--dry-run is a Slurm setting",
    );
    let mut set = grid("model.n_heads=1,2").to_vec();
    set.extend(["--set", "model.n_heads=4"]);
    refused(&set, &[], "model.n_heads is an axis of the grid");
    std::fs::write(
        dir.path().join("empty.toml"),
        "[sweep]\ngrid = { \"model.n_heads\" = [] }\n",
    )
    .unwrap();
    refused(
        &["sweep", "--config", "empty.toml", "--out", "bad"],
        &[],
        "model.n_heads = [] has no values",
    );
    // A folder that is no sweep is named for what it is.
    std::fs::create_dir_all(dir.path().join("a-run")).unwrap();
    std::fs::write(dir.path().join("a-run/config.toml"), "").unwrap();
    let status = |what: &str, says: &str| {
        let out = headlab(&["sweep", what, "--status"], dir.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(!stderr.contains("os error"), "{stderr}");
    };
    status("a-run", "a-run is not a sweep folder: it is a run folder");
    status("a-run/config.toml", "it is a file");
    status("nowhere", "no such folder");
    // sbatch refusing the job leaves no sweep folder behind.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("sbatch");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'sbatch: error: Memory specification can not be satisfied' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut mem = grid("model.n_heads=1,2").to_vec();
    mem.extend(["--launcher", "slurm", "--mem", "2G"]);
    refused(
        &mem,
        &[("PATH", &path)],
        "Memory specification can not be satisfied",
    );
    let slurm = [
        "sweep",
        "--grid",
        "model.n_heads=1,2",
        "--out",
        "bad",
        "--launcher",
        "slurm",
    ];
    refused(&slurm, &[("PATH", "/nonexistent")], "sbatch");
    ok(&headlab(
        &[
            "sweep",
            "--grid",
            "model.n_heads=1,2",
            "--out",
            "other",
            "--launcher",
            "slurm",
            "--dry-run",
        ],
        dir.path(),
    ));
    let spec = std::fs::read_to_string(dir.path().join("other/sweep.json")).unwrap();
    let out = headlab(
        &[
            "sweep",
            "--grid",
            "model.n_heads=4,8",
            "--out",
            "other",
            "--resume",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds another sweep"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("other/sweep.json")).unwrap(),
        spec
    );
}

/// `--launcher slurm --dry-run` writes one array task per run with the options asked, each
/// task training its run by index; `--resubmit K` asks for that task alone.
#[test]
fn the_slurm_launcher_writes_one_array_task_per_run() {
    let dir = tempfile::tempdir().unwrap();
    let printed = ok(&sweep(
        "s",
        &[
            "--launcher",
            "slurm",
            "--dry-run",
            "--partition",
            "debug",
            "--time",
            "00:05:00",
            "--mem",
            "1G",
            "--cpus-per-task",
            "1",
            "--sbatch",
            "--account=lab",
        ],
        dir.path(),
    ));
    assert_eq!(printed.trim(), "sbatch s/sweep.sbatch");
    let script = std::fs::read_to_string(dir.path().join("s/sweep.sbatch")).unwrap();
    for line in [
        "#SBATCH --array=0-3\n",
        "#SBATCH --cpus-per-task=1\n",
        "#SBATCH --partition=debug\n",
        "#SBATCH --time=00:05:00\n",
        "#SBATCH --mem=1G\n",
        "#SBATCH --account=lab\n",
        "--point \"$SLURM_ARRAY_TASK_ID\"\n",
    ] {
        assert!(script.contains(line), "{line:?} not in\n{script}");
    }
    let again = ok(&headlab(
        &["sweep", "s", "--resubmit", "2", "--dry-run"],
        dir.path(),
    ));
    assert_eq!(again.trim(), "sbatch --array=2 s/sweep.sbatch");
    let status = ok(&headlab(&["sweep", "s", "--status"], dir.path()));
    assert!(
        status.ends_with(
            "0 of 4 done\ncontinue the runs not done with: headlab sweep s --resubmit 0,1,2,3\n"
        ),
        "{status}"
    );

    // lab syntax's runs as an array, named as the lab names them; a lab of one run refuses.
    ok(&headlab(
        &[
            "lab",
            "syntax",
            "--heads",
            "1,2",
            "--seeds",
            "1",
            "--out",
            "lab",
            "--launcher",
            "slurm",
            "--dry-run",
        ],
        dir.path(),
    ));
    let script = std::fs::read_to_string(dir.path().join("lab/sweep.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --array=0-1\n"), "{script}");
    let status = ok(&headlab(&["sweep", "lab", "--status"], dir.path()));
    assert!(
        status.contains("h1-s1") && status.contains("h2-s1"),
        "{status}"
    );
    // lab symmetry's tasks are its starts.
    ok(&headlab(
        &[
            "lab",
            "symmetry",
            "--out",
            "sym",
            "--launcher",
            "slurm",
            "--dry-run",
        ],
        dir.path(),
    ));
    let script = std::fs::read_to_string(dir.path().join("sym/sweep.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --array=0-5\n"), "{script}");
    let status = ok(&headlab(&["sweep", "sym", "--status"], dir.path()));
    for run in [
        "identical-flex",
        "identical-ndarray",
        "identical-1e-6-flex",
        "identical-1e-2-flex",
        "random-flex",
    ] {
        assert!(status.contains(&format!(" {run} ")), "{status}");
    }
    let one = headlab(
        &[
            "lab",
            "induction",
            "--out",
            "one",
            "--launcher",
            "slurm",
            "--dry-run",
        ],
        dir.path(),
    );
    assert_eq!(one.status.code(), Some(2));
    assert!(!dir.path().join("one").exists());
}

/// Polls `headlab sweep OUT --status` until its `n` runs are done: a failed task, or ten
/// minutes, fails the test with the status.
pub(crate) fn wait_until_done(out: &str, n: usize, dir: &Path) {
    let started = Instant::now();
    loop {
        let status = ok(&headlab(&["sweep", out, "--status"], dir));
        if status.ends_with(&format!("{n} of {n} done\n")) {
            return;
        }
        assert!(!status.contains("failed"), "{status}");
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the Slurm sweep {out} did not finish in 10 minutes:\n{status}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Issue 79: while Slurm holds a sweep's tasks, `--resume` and `--resubmit` refuse naming the
/// job (they once submitted the array again, whose logs overwrote the real ones) and
/// `--collect` points at `--status`; once cancelled, `--status` says so and gives the command
/// that continues; a task submitted again appends to its log.
fn held_tasks_are_never_started_twice(dir: &Path) {
    let held = ["--launcher", "slurm", "--cpus-per-task", "1"];
    // Submitted held (`sbatch --hold`), so no task starts until released; a task submitted
    // again from the same script is held too, and released here.
    let mut later = held.to_vec();
    later.extend(["--sbatch", "--hold"]);
    ok(&sweep("held", &later, dir));
    let release = || {
        let job = std::fs::read_to_string(dir.join("held/slurm-job")).unwrap();
        let out = std::process::Command::new("scontrol")
            .args(["release", job.trim()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    let job = std::fs::read_to_string(dir.join("held/slurm-job")).unwrap();
    let job = job.trim();
    let refused = |out: std::process::Output, says: &str| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{says:?} not in {stderr}");
    };
    let mut again = held.to_vec();
    again.push("--resume");
    let holds = format!("Slurm job {job} still holds runs of the sweep in held");
    refused(sweep("held", &again, dir), &holds);
    refused(headlab(&["sweep", "held", "--resubmit", "1"], dir), &holds);
    refused(
        headlab(&["sweep", "held", "--collect"], dir),
        "headlab sweep held --status",
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("held/slurm-job"))
            .unwrap()
            .trim(),
        job
    );
    let status = ok(&headlab(&["sweep", "held", "--status"], dir));
    assert!(status.contains("pending"), "{status}");
    let cancelled = std::process::Command::new("scancel")
        .arg(job)
        .output()
        .unwrap();
    assert!(cancelled.status.success(), "{cancelled:?}");
    let started = Instant::now();
    let status = loop {
        let status = ok(&headlab(&["sweep", "held", "--status"], dir));
        if !status.contains("pending") {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{status}");
        std::thread::sleep(Duration::from_secs(1));
    };
    assert!(status.contains("cancelled by Slurm"), "{status}");
    assert!(
        status
            .ends_with("continue the runs not done with: headlab sweep held --resubmit 0,1,2,3\n"),
        "{status}"
    );
    ok(&headlab(&["sweep", "held", "--resubmit", "0,1,2,3"], dir));
    release();
    wait_until_done("held", 4, dir);
    std::fs::remove_dir_all(dir.join("held/model.n_heads-1__train.seed-1")).unwrap();
    ok(&headlab(&["sweep", "held", "--resubmit", "0"], dir));
    release();
    wait_until_done("held", 4, dir);
    let log = std::fs::read_to_string(dir.join("held/logs/task-0.out")).unwrap();
    assert_eq!(
        log.matches("== headlab sweep: task 0 of job").count(),
        2,
        "{log}"
    );
}

/// On a real Slurm (`.ci/run` starts a one-node cluster): the 4-run sweep submitted as an
/// array finishes, and its results and run folders equal the local launcher's, digit for
/// digit (checkpoints byte for byte), apart from timings; and lab syntax's and lab
/// symmetry's runs trained there, measured by the lab with --resume, give the summary and the
/// table of the lab run here. Skipped where no Slurm answers, unless
/// `HEADLAB_REQUIRE_SLURM=1`.
#[test]
fn a_sweep_on_slurm_equals_the_local_one() {
    let up = std::process::Command::new("sinfo")
        .arg("-h")
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    if !up {
        assert!(
            std::env::var("HEADLAB_REQUIRE_SLURM").as_deref() != Ok("1"),
            "HEADLAB_REQUIRE_SLURM=1 but no Slurm answers (sinfo)"
        );
        eprintln!("skipped: no Slurm cluster answers sinfo here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    held_tasks_are_never_started_twice(dir.path());
    ok(&sweep("local", &[], dir.path()));
    ok(&sweep(
        "slurm",
        &["--launcher", "slurm", "--cpus-per-task", "1"],
        dir.path(),
    ));
    wait_until_done("slurm", 4, dir.path());
    ok(&headlab(&["sweep", "slurm", "--collect"], dir.path()));
    let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
    assert_eq!(
        without_timing(&read("slurm/results.csv")),
        without_timing(&read("local/results.csv"))
    );
    for name in [
        "model.n_heads-1__train.seed-1",
        "model.n_heads-2__train.seed-2",
    ] {
        for file in ["config.toml", "heads/syntax.csv", "heads/agreement.csv"] {
            assert_eq!(
                read(&format!("slurm/{name}/{file}")),
                read(&format!("local/{name}/{file}")),
                "{name}/{file}"
            );
        }
        assert_eq!(
            losses(&read(&format!("slurm/{name}/metrics.csv"))),
            losses(&read(&format!("local/{name}/metrics.csv")))
        );
        // The checkpoints too, byte for byte.
        for file in ["best/model.bpk", "last/model.bpk", "last/optim.safetensors"] {
            let bytes = |side: &str| std::fs::read(dir.path().join(side).join(name).join(file));
            assert!(
                bytes("slurm").unwrap() == bytes("local").unwrap(),
                "{name}/{file}"
            );
        }
    }

    // A lab's runs on Slurm, then the lab with --resume: the summary of the lab run here.
    let lab = |out: &'static str, extra: &[&'static str]| {
        let mut args = vec![
            "lab",
            "syntax",
            "--heads",
            "1,2",
            "--seeds",
            "1",
            "--set",
            "train.max_iters=60",
            "--set",
            "train.track_heads_every=20",
            "--set",
            "data.builtin_chars=200000",
            "--out",
            out,
        ];
        args.extend_from_slice(extra);
        args
    };
    ok(&headlab(&lab("lab-local", &[]), dir.path()));
    ok(&headlab(
        &lab(
            "lab-slurm",
            &["--launcher", "slurm", "--cpus-per-task", "1"],
        ),
        dir.path(),
    ));
    wait_until_done("lab-slurm", 2, dir.path());
    ok(&headlab(&lab("lab-slurm", &["--resume"]), dir.path()));
    let summary = |out: &str| -> String {
        read(&format!("{out}/summary.md"))
            .lines()
            .filter(|l| !l.starts_with("Reproduce"))
            .map(|l| {
                // The lab's own time, the one number that differs.
                let cut = l.find(" in ").map_or(l.len(), |i| i);
                if l.starts_with("Word-level models") {
                    &l[..cut]
                } else {
                    l
                }
                .to_string()
                    + "\n"
            })
            .collect()
    };
    assert_eq!(summary("lab-slurm"), summary("lab-local"));

    // lab symmetry's runs differ in how they start: each array task trains its start, and
    // the lab measures them to the table of the lab run here.
    let symmetry = |out: &'static str, extra: &[&'static str]| {
        let mut args = vec![
            "lab",
            "symmetry",
            "--set",
            "train.max_iters=100",
            "--set",
            "train.track_heads_every=25",
            "--out",
            out,
        ];
        args.extend_from_slice(extra);
        args
    };
    ok(&headlab(&symmetry("sym-local", &[]), dir.path()));
    ok(&headlab(
        &symmetry(
            "sym-slurm",
            &["--launcher", "slurm", "--cpus-per-task", "1"],
        ),
        dir.path(),
    ));
    wait_until_done("sym-slurm", 6, dir.path());
    let measured = headlab(&symmetry("sym-slurm", &["--resume"]), dir.path());
    ok(&measured);
    let log = String::from_utf8_lossy(&measured.stderr);
    assert_eq!(log.matches("finished before: kept").count(), 6, "{log}");
    assert_eq!(
        read("sym-slurm/symmetry.csv"),
        read("sym-local/symmetry.csv")
    );
}

/// A config file's `[sweep]` table gives the axes (its grid, in key order) and the launcher's
/// settings, and the command's flags win over it; a key the table does not take is refused,
/// exit 2, nothing written.
#[test]
fn a_sweep_table_in_the_config_gives_axes_and_launcher_settings() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("grid.toml"),
        "[train]\nmax_iters = 30\n\n[sweep]\ngrid = { \"train.seed\" = [1, 2], \
         \"model.n_heads\" = [1, 2, 4] }\nlauncher = \"slurm\"\npartition = \"debug\"\n\
         time = \"00:05:00\"\n",
    )
    .unwrap();
    ok(&headlab(
        &[
            "sweep",
            "--config",
            "grid.toml",
            "--out",
            "s",
            "--dry-run",
            "--time",
            "00:09:00",
        ],
        dir.path(),
    ));
    let script = std::fs::read_to_string(dir.path().join("s/sweep.sbatch")).unwrap();
    for line in [
        "#SBATCH --array=0-5\n",
        "#SBATCH --partition=debug\n",
        "#SBATCH --time=00:09:00\n",
    ] {
        assert!(script.contains(line), "{line:?} not in\n{script}");
    }
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("s/sweep.json")).unwrap())
            .unwrap();
    let keys: Vec<&str> = spec["axes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["model.n_heads", "train.seed"]);
    assert!(spec["base"].as_str().unwrap().contains("max_iters = 30"));
    std::fs::write(
        dir.path().join("bad.toml"),
        "[sweep]\ngrid = { \"model.n_heads\" = [1] }\ncolour = \"red\"\n",
    )
    .unwrap();
    let out = headlab(&["sweep", "--config", "bad.toml", "--out", "b"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown field `colour`"), "{stderr}");
    assert!(!dir.path().join("b").exists());
}

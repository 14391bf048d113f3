//! `headlab train` as several MPI ranks (issue 78): the same losses as one process, the
//! parameters equal on every rank, rank 0 alone writing, a killed rank stopping the run with
//! its checkpoint intact, and bad shares refused before anything is written. The `mpirun`
//! tests need the `mpi` feature and Open MPI (`.ci/run`'s second test command); they skip
//! where `mpirun` is missing unless `HEADLAB_REQUIRE_MPI=1`. Without the feature, a launch as
//! several ranks is refused.

#[cfg(feature = "mpi")]
use std::path::Path;
#[cfg(feature = "mpi")]
use std::process::{Command, Output, Stdio};
#[cfg(feature = "mpi")]
use std::time::{Duration, Instant};

#[cfg(not(feature = "mpi"))]
use crate::common::headlab_env;
#[cfg(feature = "mpi")]
use crate::common::{TINY_MODEL, headlab, ok};

/// The losses of `metrics.csv`: (step, split, loss).
#[cfg(feature = "mpi")]
fn losses(run: &Path) -> Vec<(usize, String, f64)> {
    let text = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name| header.iter().position(|h| *h == name).unwrap();
    let (s, sp, l) = (col("step"), col("split"), col("loss"));
    lines
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            (
                f[s].parse().unwrap(),
                f[sp].to_string(),
                f[l].parse().unwrap(),
            )
        })
        .collect()
}

/// A build without the `mpi` feature, started as rank 0 of 2: one line naming the variable
/// and the feature, exit 2, no run folder; rank 1 of the same launch says nothing.
#[cfg(not(feature = "mpi"))]
#[test]
fn several_ranks_without_the_mpi_feature_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let launch = |rank| {
        headlab_env(
            &["train", "--out", "r"],
            dir.path(),
            &[
                ("OMPI_COMM_WORLD_SIZE", "2"),
                ("OMPI_COMM_WORLD_RANK", rank),
            ],
        )
    };
    let out = launch("0");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("started as 2 ranks (OMPI_COMM_WORLD_SIZE=2)"),
        "{err}"
    );
    assert!(err.contains("--features mpi"), "{err}");
    let out = launch("1");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.path().join("r").exists());
    // A world of one is one process: it trains.
    let one = headlab_env(
        &["train", "--out", "r", "--set", "train.max_iters=1"],
        dir.path(),
        &[("OMPI_COMM_WORLD_SIZE", "1"), ("OMPI_COMM_WORLD_RANK", "0")],
    );
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
}

/// `mpirun`, or `None` with a "skipped" line unless `HEADLAB_REQUIRE_MPI=1`.
#[cfg(feature = "mpi")]
fn mpirun() -> Option<&'static str> {
    let found = Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("HEADLAB_REQUIRE_MPI").as_deref() != Ok("1"),
            "HEADLAB_REQUIRE_MPI=1 but mpirun is missing"
        );
        eprintln!("skipped: no mpirun here");
        return None;
    }
    Some("mpirun")
}

/// `mpirun -np n headlab args` in `cwd`, started (root needs Open MPI's consent; the 2-core
/// machines need --oversubscribe beyond their cores).
#[cfg(feature = "mpi")]
fn spawn_ranks(mpirun: &str, n: usize, args: &[&str], cwd: &Path) -> std::process::Child {
    Command::new(mpirun)
        .args(["--oversubscribe", "-np", &n.to_string()])
        .arg(env!("CARGO_BIN_EXE_headlab"))
        .args(args)
        .current_dir(cwd)
        .env("XDG_RUNTIME_DIR", cwd)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun starts")
}

#[cfg(feature = "mpi")]
fn ranks(mpirun: &str, n: usize, args: &[&str], cwd: &Path) -> Output {
    spawn_ranks(mpirun, n, args, cwd)
        .wait_with_output()
        .expect("mpirun ends")
}

#[cfg(feature = "mpi")]
fn args<'a>(out: &'a str, sets: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["train", "--out", out];
    for s in sets {
        a.extend(["--set", s]);
    }
    a
}

/// Two ranks against one process, on the tests' tiny model and on the default run cut short,
/// every step logged and every step checked for equal parameters (an evaluation at each):
/// the losses agree within reduction-order rounding, measured (row shards: up to 2.9e-5
/// relative over the default run's first 50 steps on a Zen 3; 1e-6 over its first 20). With
/// two micro-batches, each rank computes one whole: the single process's numbers exactly.
/// Rank 0 writes what the single process writes and rank 1 nothing more.
#[cfg(feature = "mpi")]
#[test]
fn two_ranks_train_to_the_losses_of_one_process() {
    let Some(mpirun) = mpirun() else { return };
    let dir = tempfile::tempdir().unwrap();
    let tiny: Vec<&str> = TINY_MODEL
        .iter()
        .copied()
        .filter(|a| *a != "--set")
        .collect();
    let every_step = [
        "train.max_iters=20",
        "train.eval_interval=1",
        "train.eval_iters=1",
        "train.log_interval=1",
        "train.sample_tokens=0",
        "train.grammar_sentences=0",
        "train.track_heads_every=0",
    ];
    let cases: [(&str, Vec<&str>, f64); 3] = [
        ("tiny", [tiny.clone(), every_step.to_vec()].concat(), 1e-4),
        ("default", every_step.to_vec(), 1e-4),
        (
            "accum",
            [tiny, every_step.to_vec(), vec!["train.grad_accum=2"]].concat(),
            0.0,
        ),
    ];
    for (name, sets, tolerance) in cases {
        let (one, two) = (format!("{name}-1"), format!("{name}-2"));
        let alone = headlab(&args(&one, &sets), dir.path());
        ok(&alone);
        let out = ranks(mpirun, 2, &args(&two, &sets), dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {err}");
        assert!(err.contains("data parallel: 2 ranks (MPI)"), "{err}");
        // Rank 1 printed no start line of its own.
        assert_eq!(err.matches("headlab: ").count(), 1, "{err}");
        let (a, b) = (
            losses(&dir.path().join(&one)),
            losses(&dir.path().join(&two)),
        );
        assert_eq!(a.len(), b.len(), "{name}");
        for ((s, split, x), (_, _, y)) in a.iter().zip(&b) {
            let rel = (x - y).abs() / x.abs();
            assert!(
                rel <= tolerance,
                "{name} step {s} {split}: {x} alone, {y} on 2 ranks"
            );
        }
        let list = |run: &str| {
            let mut names: Vec<String> = std::fs::read_dir(dir.path().join(run))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(list(&one), list(&two), "{name}");
        let config = std::fs::read_to_string(dir.path().join(&two).join("config.toml")).unwrap();
        assert!(
            config.starts_with("# world size: trained by 2 MPI ranks from step 0\n"),
            "{config}"
        );
        let result = std::fs::read_to_string(dir.path().join(&two).join("result.json")).unwrap();
        assert!(result.contains("\"world_size\": 2"), "{result}");
        let single = std::fs::read_to_string(dir.path().join(&one).join("result.json")).unwrap();
        assert!(!single.contains("world_size"), "{single}");
    }
    // Nothing but the runs in the folder: rank 1 wrote nowhere else.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 6);
}

/// A rank killed mid-run: the other stops within seconds with one line naming the intact
/// checkpoint, mpirun exits non-zero, and the run resumes from that checkpoint as one process
/// and as two ranks, both continuing the same run.
#[cfg(feature = "mpi")]
#[test]
fn a_killed_rank_stops_the_run_and_it_resumes_on_any_number_of_ranks() {
    let Some(mpirun) = mpirun() else { return };
    let dir = tempfile::tempdir().unwrap();
    let sets = [
        "train.max_iters=100000",
        "train.eval_interval=20",
        "train.eval_iters=2",
        "train.sample_tokens=0",
    ];
    let run = dir.path().join("killed");
    let child = spawn_ranks(mpirun, 2, &args("killed", &sets), dir.path());
    let start = Instant::now();
    // Wait for the evaluation at step 20, saved as `last`.
    while !std::fs::read_to_string(run.join("metrics.csv")).is_ok_and(|t| t.contains("\n20,val")) {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "no step 20 after 5 min"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let rank1 = rank_pid(&run, 1).expect("rank 1 runs");
    let killed = Instant::now();
    Command::new("kill")
        .args(["-9", &rank1.to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(killed.elapsed() < Duration::from_secs(20), "{err}");
    assert!(!out.status.success(), "{err}");
    let stopped: Vec<&str> = err.lines().filter(|l| l.contains("stopped by")).collect();
    assert_eq!(stopped.len(), 1, "{err}");
    assert!(
        stopped[0].starts_with("rank 0 of 2: stopped by a signal"),
        "{err}"
    );
    assert!(stopped[0].contains("its last checkpoint (step "), "{err}");
    assert!(stopped[0].contains("headlab train --resume"), "{err}");
    let state = std::fs::read_to_string(run.join("last").join("state.json")).unwrap();
    let saved: serde_json::Value = serde_json::from_str(&state).unwrap();
    let step = saved["step"].as_u64().unwrap() as usize;
    assert!(step >= 20 && step.is_multiple_of(20), "{state}");
    assert!(stopped[0].contains(&format!("(step {step})")), "{err}");
    let before = losses(&run);
    // Continue to 40 steps past the checkpoint, as one process and as two ranks.
    let end = format!("train.max_iters={}", step + 40);
    let copy = dir.path().join("killed-2");
    let cp = Command::new("cp").arg("-r").arg(&run).arg(&copy).status();
    assert!(cp.unwrap().success());
    ok(&headlab(
        &["train", "--resume", "killed", "--set", &end],
        dir.path(),
    ));
    let two = ranks(
        mpirun,
        2,
        &["train", "--resume", "killed-2", "--set", &end],
        dir.path(),
    );
    assert!(
        two.status.success(),
        "{}",
        String::from_utf8_lossy(&two.stderr)
    );
    let (a, b) = (losses(&run), losses(&copy));
    // The rows up to the checkpoint are the killed run's; the rest continue it.
    let kept = |rows: &[(usize, String, f64)]| -> Vec<(usize, String, f64)> {
        rows.iter().filter(|r| r.0 <= step).cloned().collect()
    };
    let upto: Vec<_> = before.iter().filter(|r| r.0 <= step).cloned().collect();
    assert_eq!(kept(&a), upto);
    assert_eq!(kept(&b), upto);
    let last = |rows: &[(usize, String, f64)]| rows.last().unwrap().clone();
    assert_eq!(last(&a).0, step + 40);
    let (x, y) = (last(&a).2, last(&b).2);
    assert!(
        (x - y).abs() / x < 1e-3,
        "{x} as one process, {y} on 2 ranks"
    );
}

/// The process id of rank `rank` of the run in `run`: the headlab process whose environment
/// says so and whose command line names the run.
#[cfg(feature = "mpi")]
fn rank_pid(run: &Path, rank: usize) -> Option<u32> {
    let name = run.file_name()?.to_string_lossy().into_owned();
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd);
        if !cmd.starts_with(env!("CARGO_BIN_EXE_headlab")) || !cmd.contains(&name) {
            return None;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        environ
            .split(|b| *b == 0)
            .any(|v| v == want.as_bytes())
            .then_some(pid)
    })
}

/// Shares that cannot be equal, a backend that cannot take part and a command that runs as
/// one process: one line from rank 0, exit 2, nothing written.
#[cfg(feature = "mpi")]
#[test]
fn what_ranks_cannot_share_is_refused_before_anything_is_written() {
    let Some(mpirun) = mpirun() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cases: [(usize, Vec<&str>, &str); 4] = [
        (
            5,
            args("r", &[]),
            "train.batch_size = 24 does not divide among 5 ranks",
        ),
        (
            3,
            args("r", &["train.batch_size=2"]),
            "3 ranks cannot share a step of 1 micro-batch(es) of 2 rows",
        ),
        (
            2,
            args("r", &["train.backend=wgpu"]),
            "train.backend = wgpu cannot train under MPI (2 ranks)",
        ),
        (
            2,
            vec!["eval", "r"],
            "only `headlab train` (and a sweep's task",
        ),
    ];
    for (n, a, want) in cases {
        let out = ranks(mpirun, n, &a, dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{a:?}: {err}");
        let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(ours.len(), 1, "{a:?}: {err}");
        assert!(ours[0].contains(want), "{a:?}: {err}");
        assert!(!err.contains("interrupted"), "{a:?}: {err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{a:?}");
    }
}

/// `--ntasks` in a build without MPI is refused before anything is written.
#[cfg(not(feature = "mpi"))]
#[test]
fn ntasks_without_the_mpi_feature_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = headlab_env(
        &[
            "sweep",
            "--grid",
            "model.n_heads=1,2",
            "--launcher",
            "slurm",
            "--ntasks",
            "2",
            "--dry-run",
            "--out",
            "s",
        ],
        dir.path(),
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--ntasks 2 trains each run on 2 MPI ranks"),
        "{err}"
    );
    assert!(err.contains("--features mpi"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A Slurm sweep with `--ntasks 2` submits an array of MPI jobs: each run trains on two
/// ranks started by `srun --mpi=pmix` (its log says so) to the losses of the same sweep
/// trained here as one process per run, within reduction-order rounding. `--ntasks` without
/// Slurm, and a batch the ranks cannot share, are refused with nothing written. Skipped
/// where no Slurm answers, unless `HEADLAB_REQUIRE_SLURM=1`.
#[cfg(feature = "mpi")]
#[test]
fn a_slurm_sweep_trains_each_run_on_its_ranks() {
    let Some(_) = mpirun() else { return };
    let up = Command::new("sinfo")
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
    let sweep = |out: &'static str, extra: &[&'static str]| {
        let mut a = vec![
            "sweep",
            "--grid",
            "model.n_heads=1,2",
            "--set",
            "train.max_iters=30",
            "--set",
            "train.eval_interval=10",
            "--set",
            "train.log_interval=1",
            "--set",
            "train.grammar_sentences=20",
            "--set",
            "data.builtin_chars=100000",
            "--out",
            out,
        ];
        a.extend_from_slice(extra);
        headlab(&a, dir.path())
    };
    for (extra, want) in [
        (
            &["--ntasks", "2"][..],
            "--ntasks is a Slurm setting, but the runs would train here",
        ),
        (
            &["--launcher", "slurm", "--ntasks", "5"][..],
            "run model.n_heads-1 with --ntasks 5: train.batch_size = 24 does not divide among 5",
        ),
    ] {
        let out = sweep("refused", extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
        assert!(!dir.path().join("refused").exists());
    }
    ok(&sweep("local", &[]));
    ok(&sweep(
        "slurm",
        &[
            "--launcher",
            "slurm",
            "--ntasks",
            "2",
            "--cpus-per-task",
            "1",
        ],
    ));
    crate::sweep::wait_until_done("slurm", 2, dir.path());
    for name in ["model.n_heads-1", "model.n_heads-2"] {
        let log = std::fs::read_to_string(dir.path().join("slurm/logs").join(format!(
            "task-{}.out",
            if name.ends_with('1') { 0 } else { 1 }
        )))
        .unwrap();
        assert!(log.contains("data parallel: 2 ranks (MPI)"), "{log}");
        let (a, b) = (
            losses(&dir.path().join("local").join(name)),
            losses(&dir.path().join("slurm").join(name)),
        );
        assert_eq!(a.len(), b.len(), "{name}");
        for ((s, split, x), (_, _, y)) in a.iter().zip(&b) {
            let rel = (x - y).abs() / x.abs();
            assert!(
                rel <= 1e-4,
                "{name} step {s} {split}: {x} here, {y} on 2 ranks"
            );
        }
    }
}

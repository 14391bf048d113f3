//! Nothing is lost: a training process killed with SIGKILL at any moment (during a step,
//! while a checkpoint is being written, between the renames that put it in place) leaves a
//! run directory that loads, and resuming it gives exactly the losses of a run that was
//! never interrupted. Ctrl-C (SIGINT) stops at the end of a step with a checkpoint and says
//! how to resume; a diverging run stops with exit code 3 and keeps its last good checkpoint.
//! A reader of its log that goes away (`| head`) does not end it either.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::LazyLock;
use std::sync::mpsc;
use std::time::Duration;

use crate::common::{headlab_reader_leaves, tiny};

/// The tests' tiny model (tests/common) with this file's schedule and data.
static TINY: LazyLock<Vec<&str>> = LazyLock::new(|| {
    tiny(&[
        "--set",
        "train.eval_iters=2",
        "--set",
        "train.log_interval=1",
        "--set",
        "train.warmup_iters=5",
        "--set",
        "train.eval_interval=5",
        "--set",
        "train.lr_decay_iters=60",
        "--set",
        "train.sample_tokens=10",
        "--set",
        "data.builtin_chars=20000",
    ])
});

/// Steps of the SIGKILL test's runs.
const MAX_ITERS: usize = 60;

fn command(args: &[&str], cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_headlab"));
    cmd.args(args)
        .current_dir(cwd)
        .env("XDG_RUNTIME_DIR", cwd)
        .env_remove("HEADLAB_TEST_PAUSE")
        .env_remove("HEADLAB_TEST_STOP_AT");
    cmd
}

fn ok(out: Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "headlab failed ({}):\n{stderr}",
        out.status
    );
    stderr
}

fn train_args<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["train", "--out", out];
    args.extend_from_slice(&TINY);
    args.extend_from_slice(extra);
    args
}

/// (step, split, loss) of every row of metrics.csv; the other columns hold timings.
fn metrics(run: &Path) -> Vec<(usize, String, String)> {
    let text = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("step,split,loss,"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].parse().unwrap(), f[1].to_string(), f[2].to_string())
        })
        .collect()
}

/// `headlab args` is refused: exit code 2, saying `needle`.
fn refused(args: &[&str], cwd: &Path, needle: &str) {
    let out = command(args, cwd).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
}

/// Step recorded in a checkpoint's state.json.
fn checkpoint_step(dir: &Path) -> usize {
    let text = std::fs::read_to_string(dir.join("state.json")).unwrap();
    let state: serde_json::Value = serde_json::from_str(&text).unwrap();
    state["step"].as_u64().unwrap() as usize
}

/// A running `headlab train` whose stderr lines arrive on a channel.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    fn spawn(args: &[&str], cwd: &Path, pause: Option<&str>) -> Self {
        match pause {
            Some(pause) => Self::spawn_env(args, cwd, &[("HEADLAB_TEST_PAUSE", pause)]),
            None => Self::spawn_env(args, cwd, &[]),
        }
    }

    /// [`Running::spawn_env`] with `HEADLAB_TEST_STOP_AT=point`, once it waits there.
    fn waiting_at(args: &[&str], cwd: &Path, point: &str) -> Self {
        let mut p = Self::spawn_env(args, cwd, &[("HEADLAB_TEST_STOP_AT", point)]);
        p.wait_for(&format!("headlab-test: waiting at {point}"));
        p
    }

    /// [`Running::spawn`] with `env`, in a process group of its own (as a job a shell or
    /// `timeout` starts), so a test can signal the group.
    fn spawn_env(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Self {
        use std::os::unix::process::CommandExt;
        let mut cmd = command(args, cwd);
        cmd.envs(env.iter().copied()).process_group(0);
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("headlab starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (at most two minutes) for a stderr line containing `needle`.
    fn wait_for(&mut self, needle: &str) {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(120)) {
                Ok(line) => {
                    let hit = line.contains(needle);
                    self.seen.push(line);
                    if hit {
                        return;
                    }
                }
                Err(_) => panic!(
                    "no line with {needle:?}; stderr so far:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// SIGKILL, then reap. The process must still have been running: it had not exited just
    /// before, and it ended by the signal (a process that had exited on its own would report
    /// its exit code, even if it exited between the check and the kill).
    fn kill(mut self) {
        let early = self.child.try_wait().unwrap();
        assert!(
            early.is_none(),
            "the run exited ({early:?}) before the kill; stderr so far:\n{}",
            self.seen.join("\n")
        );
        self.child.kill().unwrap();
        let status = self.child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "the run was not ended by SIGKILL ({status})"
        );
    }

    /// Waits for exit; (exit code, all of stderr).
    fn finish(mut self) -> (Option<i32>, String) {
        let status = self.child.wait().unwrap();
        self.seen.extend(self.lines.iter());
        (status.code(), self.seen.join("\n"))
    }
}

/// Largest step among the complete rows of metrics.csv (a row cut short by the kill is
/// skipped), 0 if there are none.
fn last_logged_step(run: &Path) -> usize {
    let text = std::fs::read_to_string(run.join("metrics.csv")).unwrap_or_default();
    let columns = text.lines().next().map_or(0, |h| h.split(',').count());
    text.lines()
        .skip(1)
        .filter(|l| l.split(',').count() == columns)
        .filter_map(|l| l.split(',').next()?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// Steps of the `step N: train loss ...` lines a run printed at its evals.
fn eval_steps(stderr: &str) -> Vec<usize> {
    stderr
        .lines()
        .filter(|l| l.contains(": train loss "))
        .filter_map(|l| l.trim_start().strip_prefix("step "))
        .filter_map(|l| l.split(':').next()?.trim().parse().ok())
        .collect()
}

/// The run was killed mid-run (nothing logged or saved at `MAX_ITERS`), loads (`eval` on its
/// last checkpoint), then resumes from that checkpoint, not from scratch, to the end; its
/// metrics must equal the uninterrupted run's.
fn resume_and_compare(dir: &Path, name: &str, straight: &[(usize, String, String)], what: &str) {
    let run = dir.join(name);
    let logged = last_logged_step(&run);
    assert!(logged < MAX_ITERS, "{what}: step {logged} was logged");
    // `.last.old` is what loading falls back to when the kill came between the renames.
    let saved = ["last", ".last.old"]
        .iter()
        .map(|c| run.join(c))
        .find(|c| c.is_dir())
        .map(|c| checkpoint_step(&c))
        .unwrap_or_else(|| panic!("{what}: no checkpoint"));
    assert!(saved < MAX_ITERS, "{what}: checkpoint at step {saved}");
    ok(command(&["eval", name, "--checkpoint", "last"], dir)
        .output()
        .unwrap());
    let stderr = ok(command(&["train", "--resume", name], dir).output().unwrap());
    // A resumed run does not evaluate again at its checkpoint's step: its first eval is the
    // next one (TINY evaluates every 5 steps), and it evaluates up to the end.
    let evals = eval_steps(&stderr);
    let expected: Vec<usize> = (saved + 1..=MAX_ITERS).filter(|s| s % 5 == 0).collect();
    assert_eq!(
        evals, expected,
        "{what}: resumed from step {saved}, evaluated at\n{stderr}"
    );
    let resumed = metrics(&dir.join(name));
    assert_eq!(
        resumed, straight,
        "{what}: resumed run differs from the straight run"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.join(name))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(
        leftovers.is_empty(),
        "{what}: temporary files left: {leftovers:?}"
    );
}

#[test]
fn sigkill_at_any_moment_then_resume_matches_a_straight_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let max_iters = format!("train.max_iters={MAX_ITERS}");
    let max = ["--set", max_iters.as_str()];
    ok(command(&train_args("straight", &max), dir)
        .output()
        .unwrap());
    let straight = metrics(&dir.join("straight"));
    assert_eq!(straight.iter().filter(|r| r.1 == "val").count(), 13);

    // Killed while checkpoint files are written but not yet renamed into place: the previous
    // checkpoint (step 15) is what loads.
    let mut p = Running::spawn(&train_args("written", &max), dir, Some("last:written@20"));
    p.wait_for("paused at last:written@20");
    p.kill();
    let run = dir.join("written");
    assert!(run.join(".last.tmp/manifest.json").is_file());
    assert_eq!(checkpoint_step(&run.join("last")), 15);
    resume_and_compare(dir, "written", &straight, "killed before the rename");

    // Killed between the two renames: `last` is gone, `.last.old` (step 25) is loaded.
    let mut p = Running::spawn(&train_args("swapped", &max), dir, Some("last:swapped@30"));
    p.wait_for("paused at last:swapped@30");
    p.kill();
    let run = dir.join("swapped");
    assert!(!run.join("last").exists());
    assert_eq!(checkpoint_step(&run.join(".last.old")), 25);
    resume_and_compare(dir, "swapped", &straight, "killed between the renames");

    // Killed while writing `best` (saved before `last` at the same step).
    let mut p = Running::spawn(&train_args("inbest", &max), dir, Some("best:written@10"));
    p.wait_for("paused at best:written@10");
    p.kill();
    assert_eq!(checkpoint_step(&dir.join("inbest/last")), 5);
    resume_and_compare(dir, "inbest", &straight, "killed while writing best");

    // Killed at arbitrary moments of training: mostly mid-step, sometimes mid-checkpoint.
    for (i, (after, delay_ms)) in [("step     10", 0), ("step     25", 7), ("step     40", 23)]
        .into_iter()
        .enumerate()
    {
        let name = format!("timed{i}");
        let mut p = Running::spawn(&train_args(&name, &max), dir, None);
        p.wait_for(after);
        std::thread::sleep(Duration::from_millis(delay_ms));
        p.kill();
        resume_and_compare(
            dir,
            &name,
            &straight,
            &format!("killed {delay_ms} ms after {after:?}"),
        );
    }
}

#[test]
fn ctrl_c_stops_at_a_step_with_a_checkpoint_and_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Far more steps than it gets to: the interrupt comes first.
    let mut p = Running::spawn(
        &train_args(
            "run",
            &[
                "--set",
                "train.max_iters=100000",
                "--set",
                "train.lr_decay_iters=100000",
            ],
        ),
        dir,
        None,
    );
    p.wait_for("step     10");
    let pid = p.child.id().to_string();
    let sent = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(sent.success());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(130), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("interrupted at step "))
        .unwrap_or_else(|| panic!("no interrupted line in:\n{stderr}"));
    assert!(
        line.contains("resume with: headlab train --resume run"),
        "{line}"
    );
    assert!(
        !stderr.contains("error:") && !stderr.contains("panicked"),
        "{stderr}"
    );
    let step: usize = line["interrupted at step ".len()..]
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(step >= 10, "{line}");
    let run = dir.join("run");
    assert_eq!(checkpoint_step(&run.join("last")), step);
    assert!(metrics(&run).iter().all(|r| r.0 <= step));

    // Resumed to `step + 12`, it matches a run that went there straight.
    let end = format!("train.max_iters={}", step + 12);
    let decay = ["--set", "train.lr_decay_iters=100000"];
    let mut args = train_args("straight", &decay);
    args.extend(["--set", &end]);
    ok(command(&args, dir).output().unwrap());
    ok(command(&["train", "--resume", "run", "--set", &end], dir)
        .output()
        .unwrap());
    assert_eq!(metrics(&run), metrics(&dir.join("straight")));
}

#[test]
fn a_diverging_run_stops_with_exit_3_and_keeps_its_last_good_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = command(
        &train_args(
            "run",
            &[
                "--set",
                "train.lr=1e4",
                "--set",
                "train.max_iters=60",
                "--set",
                "train.eval_interval=2",
            ],
        ),
        dir,
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for part in [
        "training diverged at step ",
        "(lr ",
        "run/last (step ",
        "lower train.lr",
    ] {
        assert!(stderr.contains(part), "{part:?} missing from:\n{stderr}");
    }
    let kept: usize = stderr
        .split("run/last (step ")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let run = dir.join("run");
    assert_eq!(checkpoint_step(&run.join("last")), kept);
    // No non-finite loss was recorded, and the kept checkpoint evaluates to a finite loss.
    for (step, split, loss) in metrics(&run) {
        let loss: f64 = loss.parse().unwrap();
        assert!(loss.is_finite(), "step {step} {split}: {loss}");
    }
    let eval = String::from_utf8_lossy(
        &command(&["eval", "run", "--checkpoint", "last"], dir)
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    let loss: f64 = eval
        .split("loss ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no loss in {eval:?}"));
    assert!(loss.is_finite(), "{eval}");
}

/// How a stop request reaches the run.
#[derive(Debug, Clone, Copy)]
enum Signals {
    /// One signal to the process.
    Once(&'static str),
    /// The same signal twice, 10 ms apart (two `kill`s, a user's double Ctrl-C).
    Twice(&'static str),
    /// To the process and then to its group at once, as `timeout -s INT` delivers it.
    ProcessAndGroup(&'static str),
}

impl Signals {
    fn send(self, pid: u32) {
        let kill = |signal: &str, target: String| {
            let sent = Command::new("kill")
                .args([format!("-{signal}"), "--".into(), target])
                .status()
                .unwrap();
            assert!(sent.success());
        };
        match self {
            Signals::Once(s) => kill(s, pid.to_string()),
            Signals::Twice(s) => {
                kill(s, pid.to_string());
                std::thread::sleep(Duration::from_millis(10));
                kill(s, pid.to_string());
            }
            Signals::ProcessAndGroup(s) => {
                kill(s, pid.to_string());
                kill(s, format!("-{pid}"));
            }
        }
    }

    fn exit_code(self) -> i32 {
        let (Signals::Once(s) | Signals::Twice(s) | Signals::ProcessAndGroup(s)) = self;
        match s {
            "INT" => 130,
            "TERM" => 143,
            other => panic!("no exit code for SIG{other}"),
        }
    }
}

/// The step of the `interrupted at step N;` line.
fn interrupted_step(stderr: &str) -> usize {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("interrupted at step "))
        .unwrap_or_else(|| panic!("no interrupted line in:\n{stderr}"));
    line["interrupted at step ".len()..]
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn stop_requests_at_any_point_save_the_step_printed_and_resume_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let max = ["--set", "train.max_iters=30"];
    ok(command(&train_args("straight", &max), dir)
        .output()
        .unwrap());
    let straight = metrics(&dir.join("straight"));

    // Where the run is when the request comes, how it comes, and the checkpoint it must
    // end in: inside step 7 (saved at 8, after the step), between the batches of the
    // evaluation at 10 (saved at 10, evaluated on resume), while `last` of step 15 is being
    // written (saved at 15).
    let cases = [
        ("step@7", Signals::Once("INT"), 8),
        ("step@7", Signals::Twice("INT"), 8),
        ("step@7", Signals::ProcessAndGroup("INT"), 8),
        ("step@7", Signals::Once("TERM"), 8),
        ("eval@10", Signals::Twice("INT"), 10),
        ("eval@10", Signals::Twice("TERM"), 10),
        ("last:written@15", Signals::ProcessAndGroup("INT"), 15),
    ];
    for (i, (point, signals, expected)) in cases.into_iter().enumerate() {
        let what = format!("{signals:?} at {point}");
        let name = format!("run{i}");
        let p = Running::waiting_at(&train_args(&name, &max), dir, point);
        signals.send(p.child.id());
        let (code, stderr) = p.finish();
        assert_eq!(code, Some(signals.exit_code()), "{what}:\n{stderr}");
        let step = interrupted_step(&stderr);
        assert_eq!(step, expected, "{what}:\n{stderr}");
        assert!(
            stderr.contains("stopping after this step to save a checkpoint"),
            "{what}:\n{stderr}"
        );
        assert!(!stderr.contains("error:"), "{what}:\n{stderr}");
        let run = dir.join(&name);
        assert_eq!(checkpoint_step(&run.join("last")), step, "{what}");
        let resumed = ok(command(&["train", "--resume", &name], dir)
            .output()
            .unwrap());
        // Stopped inside an evaluation, the resumed run does it first; otherwise the
        // checkpoint's step was evaluated (or is not an evaluation step).
        let first_eval = if point.starts_with("eval@") {
            step
        } else {
            (step + 1..).find(|s| s % 5 == 0).unwrap()
        };
        assert_eq!(
            eval_steps(&resumed).first(),
            Some(&first_eval),
            "{what}:\n{resumed}"
        );
        assert_eq!(metrics(&run), straight, "{what}: resumed run differs");
    }
}

#[test]
fn stop_requests_before_or_after_training_end_at_once_and_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let max = ["--set", "train.max_iters=10"];

    // While the text is prepared nothing is written yet: the process ends at once.
    let p = Running::waiting_at(&train_args("early", &max), dir, "prepare");
    Signals::ProcessAndGroup("INT").send(p.child.id());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted before training started: nothing was written"),
        "{stderr}"
    );
    assert!(!dir.join("early").exists());

    // During the loss over the val split after the last step: the run is complete, its
    // result says the loss is missing, and the message says how to get it.
    let p = Running::waiting_at(&train_args("end", &max), dir, "final");
    Signals::Twice("TERM").send(p.child.id());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(143), "{stderr}");
    assert!(
        stderr.contains("interrupted after the last step (10): the run is complete"),
        "{stderr}"
    );
    let run = dir.join("end");
    assert_eq!(checkpoint_step(&run.join("last")), 10);
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("result.json")).unwrap()).unwrap();
    assert!(result["val_full_loss"].is_null(), "{result}");
    assert_eq!(result["steps"], 10);

    // While the head table is written after training: the run is saved, the process ends.
    let p = Running::waiting_at(&train_args("heads", &max), dir, "heads");
    Signals::Once("INT").send(p.child.id());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted after training: the run is complete and saved"),
        "{stderr}"
    );
    assert_eq!(checkpoint_step(&dir.join("heads/last")), 10);
    assert!(dir.join("heads/result.json").is_file());
}

#[test]
fn resuming_a_run_without_a_checkpoint_says_it_starts_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let max = ["--set", "train.max_iters=10"];
    // Killed while its first checkpoint was being written: none is in place.
    let mut p = Running::spawn(&train_args("run", &max), dir, Some("last:written@0"));
    p.wait_for("paused at last:written@0");
    p.kill();
    assert!(!dir.join("run/last").exists());
    let stderr = ok(command(&["train", "--resume", "run"], dir)
        .output()
        .unwrap());
    assert!(
        stderr.contains("has no checkpoint (it was stopped before its first one was saved): training starts again from step 0"),
        "{stderr}"
    );
    assert_eq!(checkpoint_step(&dir.join("run/last")), 10);
}

/// While a run trains, `report` says so and a second `train --resume` or `--force` on it is
/// refused; once stopped, it is reported as stopped.
#[test]
fn a_run_still_training_is_reported_as_such_and_a_stopped_one_as_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let max = ["--set", "train.max_iters=10"];
    let p = Running::waiting_at(&train_args("run", &max), dir, "step@7");
    let pid = p.child.id();
    let report =
        String::from_utf8_lossy(&command(&["report", "run"], dir).output().unwrap().stderr)
            .into_owned();
    assert!(
        report.contains(&format!("the run is still training (process {pid})")),
        "{report}"
    );
    assert!(!report.contains("the run stopped at step"), "{report}");
    // A second process on the same run is refused, and writes nothing there.
    let before = metrics(&dir.join("run"));
    for args in [
        vec!["train", "--resume", "run"],
        train_args("run", &["--force"]),
    ] {
        refused(
            &args,
            dir,
            &format!("run is in use by process {pid} now (training it)"),
        );
    }
    assert_eq!(metrics(&dir.join("run")), before);
    Signals::Once("INT").send(pid);
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(130), "{stderr}");
    let report =
        String::from_utf8_lossy(&command(&["report", "run"], dir).output().unwrap().stderr)
            .into_owned();
    assert!(
        report.contains("the run stopped at step 8 of 10"),
        "{report}"
    );
    assert!(!dir.join(".run.training").exists());
    // Stopped between evaluations, its `best` (step 5) is older than its `last` (step 8):
    // commands that read `best` by default say so.
    let sample = command(&["sample", "run", "--max-new-tokens", "5"], dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&sample.stderr);
    assert!(
        stderr.contains("note: using checkpoint best (step 5, val loss ")
            && stderr.contains("the run's last checkpoint is at step 8: --checkpoint last uses it"),
        "{stderr}"
    );
}

#[test]
fn a_reader_that_goes_away_ends_a_command_quietly() {
    use std::io::Read;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(
        command(&train_args("run", &["--set", "train.max_iters=4"]), dir)
            .output()
            .unwrap(),
    );
    // `headlab sample run --max-new-tokens 20000 | head -c 100`: the reader leaves long before
    // the sampler is done.
    let mut child = command(&["sample", "run", "--max-new-tokens", "20000"], dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    // The pipe's reader is gone (dropped above); the sampler's next write hits it.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("internal error"), "{stderr}");
    assert!(
        out.status.success() || out.status.signal() == Some(13),
        "{}: {stderr}",
        out.status
    );
}

/// `headlab train 2>&1 | head`: the log's reader goes away after the first line, and the run
/// still trains to its last step, saves its checkpoint and report, and exits 0. (Each log line
/// to the closed pipe was a panic: the run ended at its next line, exit 101.)
#[test]
fn a_log_reader_that_goes_away_does_not_end_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let steps = format!("train.max_iters={MAX_ITERS}");
    // Both readers gone after the first line: every later line and the sample meet a closed
    // pipe.
    let (status, first) = headlab_reader_leaves(&train_args("run", &["--set", &steps]), dir);
    assert!(first.starts_with("headlab: "), "{first}");
    assert!(status.success(), "{status}");
    let run = dir.join("run");
    let last = metrics(&run).last().map(|row| row.0);
    assert_eq!(last, Some(MAX_ITERS), "the run stopped early");
    for file in ["last", "report.html", "result.json", "sample.txt"] {
        assert!(run.join(file).exists(), "no {file} in the run");
    }
}

/// A lab stopped inside one of its runs keeps its finished runs and that run's checkpoint
/// (stopped between runs, the runs it finished) and says how to continue (while it runs, a
/// second lab on its folder is refused); `--resume` continues to exactly the losses and table of a lab
/// never stopped, a second `--resume` keeps every finished run without training it, and
/// one with other settings trains the runs again.
#[test]
fn a_stopped_lab_resumes_to_the_results_of_one_never_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let lab = |out: &'static str, extra: &[&'static str]| {
        let mut args = vec![
            "lab",
            "heads",
            "--out",
            out,
            "--heads",
            "1,2",
            "--seeds",
            "5",
            "--set",
            "train.max_iters=30",
            "--set",
            "train.eval_interval=10",
        ];
        args.extend_from_slice(extra);
        args
    };
    ok(command(&lab("straight", &[]), dir).output().unwrap());

    // Stopped inside step 7 of the first run: saved at 8, the second run never started. The
    // command that continues it leaves out --force (clap refuses it beside --resume).
    let p = Running::waiting_at(&lab("stopped", &["--force"]), dir, "step@7");
    // A second lab on the same folder meanwhile is refused and changes nothing there.
    let live = format!("stopped is in use by process {} now", p.child.id());
    for extra in [["--force"], ["--resume"]] {
        refused(&lab("stopped", &extra), dir, &live);
    }
    Signals::Once("INT").send(p.child.id());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted at step 8 of stopped/h1-s5, which saved a checkpoint"),
        "{stderr}"
    );
    let continues = "Continue the lab with: headlab lab heads --out stopped --heads 1,2 \
                     --seeds 5 --set train.max_iters=30 --set train.eval_interval=10 --resume";
    assert!(stderr.contains(continues), "{stderr}");
    assert!(!stderr.contains("error:"), "{stderr}");
    let stopped = dir.join("stopped");
    assert_eq!(checkpoint_step(&stopped.join("h1-s5/last")), 8);
    assert!(!stopped.join("h2-s5").exists());

    let resumed = ok(command(&lab("stopped", &["--resume"]), dir)
        .output()
        .unwrap());
    assert!(
        resumed.contains("stopped/h1-s5: stopped at step 8: continuing from there"),
        "{resumed}"
    );
    // From its checkpoint, not from scratch: the first run's first evaluation is at 10, the
    // second's at 0.
    assert_eq!(
        eval_steps(&resumed),
        [10, 20, 30, 0, 10, 20, 30],
        "{resumed}"
    );
    let read = |path: &Path| std::fs::read_to_string(path).unwrap();
    for run in ["h1-s5", "h2-s5"] {
        assert_eq!(
            metrics(&stopped.join(run)),
            metrics(&dir.join("straight").join(run)),
            "{run}: the resumed lab's losses differ"
        );
    }
    assert_eq!(
        read(&stopped.join("val_loss.csv")),
        read(&dir.join("straight/val_loss.csv"))
    );
    // The summary's "Reproduce" line starts the lab afresh.
    let summary = read(&stopped.join("summary.md"));
    assert!(
        summary.contains("`headlab lab heads --out stopped --heads 1,2 --seeds 5 --set train.max_iters=30 --set train.eval_interval=10`"),
        "{summary}"
    );

    // Everything finished: kept as it is (a retrained run would write new step timings).
    let files = |name| read(&stopped.join(name).join("metrics.csv"));
    let before = [files("h1-s5"), files("h2-s5")];
    let again = ok(command(&lab("stopped", &["--resume"]), dir)
        .output()
        .unwrap());
    for run in ["h1-s5", "h2-s5"] {
        assert!(
            again.contains(&format!("stopped/{run}: finished before: kept")),
            "{again}"
        );
    }
    assert_eq!([files("h1-s5"), files("h2-s5")], before);

    // Killed after its last checkpoint, before its result: trained again, to the same losses.
    std::fs::remove_file(stopped.join("h2-s5/result.json")).unwrap();
    let redone = ok(command(&lab("stopped", &["--resume"]), dir)
        .output()
        .unwrap());
    assert!(
        redone.contains(
            "stopped/h2-s5: it trained all its steps but stopped before its result: training \
             it again from the start"
        ),
        "{redone}"
    );
    assert_eq!(
        metrics(&stopped.join("h2-s5")),
        metrics(&dir.join("straight/h2-s5"))
    );

    // During the first run's loss over the val split after its last step: the run is
    // complete and kept, the lab stops there.
    let p = Running::waiting_at(&lab("final", &[]), dir, "final");
    Signals::Once("INT").send(p.child.id());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted at step 30 of final/h1-s5"),
        "{stderr}"
    );
    assert!(!dir.join("final/h2-s5").exists());
    let resumed = ok(command(&lab("final", &["--resume"]), dir).output().unwrap());
    assert!(
        resumed.contains("final/h1-s5: finished before: kept"),
        "{resumed}"
    );
    assert_eq!(
        read(&dir.join("final/val_loss.csv")),
        read(&dir.join("straight/val_loss.csv"))
    );

    // Between runs, while the lab measures the first: the process ends at once, the first
    // run kept, and --resume keeps it and trains the second.
    let p = Running::waiting_at(&lab("between", &[]), dir, "lab:done");
    // No run trains now, and the folder and its runs are still the running lab's.
    let pid = p.child.id();
    refused(
        &lab("between", &["--force"]),
        dir,
        &format!("between is in use by process {pid} now"),
    );
    refused(
        &["train", "--resume", "between/h1-s5"],
        dir,
        &format!("between/h1-s5 is in use by process {pid} now (a lab measuring it)"),
    );
    Signals::Once("INT").send(p.child.id());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains(
            "interrupted while the lab measured its runs; the runs it finished are kept in \
             between. Continue the lab with: headlab lab heads --out between"
        ),
        "{stderr}"
    );
    assert!(dir.join("between/h1-s5/result.json").is_file());
    assert!(!dir.join("between/h2-s5").exists());
    // Ended at once, it still took its mark away.
    assert!(!dir.join(".between.training").exists());
    let resumed = ok(command(&lab("between", &["--resume"]), dir)
        .output()
        .unwrap());
    assert!(
        resumed.contains("between/h1-s5: finished before: kept"),
        "{resumed}"
    );
    assert_eq!(
        read(&dir.join("between/val_loss.csv")),
        read(&dir.join("straight/val_loss.csv"))
    );

    // Before its first run has written anything: the process ends at once and leaves no
    // folder behind.
    let p = Running::waiting_at(&lab("early", &[]), dir, "prepare");
    Signals::Once("INT").send(p.child.id());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted before training started: nothing was written"),
        "{stderr}"
    );
    assert!(!dir.join("early").exists());

    // Other settings: no run is theirs, so each trains again.
    let other = ok(command(
        &lab("stopped", &["--set", "train.max_iters=20", "--resume"]),
        dir,
    )
    .output()
    .unwrap());
    assert!(
        other.contains(
            "stopped/h1-s5: it was trained with other settings (train.max_iters): training it \
             again from the start"
        ),
        "{other}"
    );
    assert_eq!(checkpoint_step(&stopped.join("h2-s5/last")), 20);
}

/// A sweep stopped (SIGTERM inside a run's step, then Ctrl-C twice between runs) loses no
/// finished run: `--resume` keeps those, continues the stopped one from its checkpoint, and
/// ends with the results of a sweep never stopped, digit for digit but for the timings.
#[test]
fn a_stopped_sweep_resumes_to_the_results_of_one_never_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let sweep = |out: &'static str, extra: &[&'static str]| {
        let mut args = vec![
            "sweep",
            "--grid",
            "train.seed=5,6,7",
            "--out",
            out,
            "--set",
            "train.max_iters=30",
            "--set",
            "train.eval_interval=10",
            "--set",
            "data.builtin_chars=100000",
        ];
        args.extend_from_slice(extra);
        args
    };
    ok(command(&sweep("straight", &[]), dir).output().unwrap());
    // Inside step 7 of the first run.
    let p = Running::waiting_at(&sweep("stopped", &[]), dir, "step@7");
    Signals::Once("TERM").send(p.child.id());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(143), "{stderr}");
    assert!(!dir.join("stopped/train.seed-5/result.json").exists());
    // Between the first and the second run.
    let p = Running::waiting_at(&sweep("stopped", &["--resume"]), dir, "lab:done");
    Signals::Twice("INT").send(p.child.id());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(130), "{stderr}");
    assert!(dir.join("stopped/train.seed-5/result.json").is_file());
    assert!(!dir.join("stopped/train.seed-6").exists());
    let resumed = ok(command(&sweep("stopped", &["--resume"]), dir)
        .output()
        .unwrap());
    assert!(
        resumed.contains("stopped/train.seed-5: finished before: kept"),
        "{resumed}"
    );
    let read = |path: &Path| std::fs::read_to_string(path).unwrap();
    let timing = |csv: String| -> String {
        csv.lines()
            .map(|l| l.rsplit_once(',').map_or(l, |(a, _)| a).to_string() + "\n")
            .collect()
    };
    assert_eq!(
        timing(read(&dir.join("stopped/results.csv"))),
        timing(read(&dir.join("straight/results.csv")))
    );
}

/// `lab grokking` keeps no checkpoint: a stop request ends its loop after the step, measured
/// there, and its files are written up to that step (the rows before it equal a run never
/// stopped) with the command's exit code 130.
#[test]
fn a_stopped_lab_grokking_writes_what_it_measured() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let lab = |out: &'static str| {
        [
            "lab",
            "grokking",
            "--out",
            out,
            "--p",
            "31",
            "--fraction",
            "0.7",
            "--steps",
            "60",
        ]
    };
    ok(command(&lab("straight"), dir).output().unwrap());
    let p = Running::waiting_at(&lab("stopped"), dir, "grok@40");
    Signals::Twice("INT").send(p.child.id());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("Ctrl-C: stopping after this step to write what the lab has"),
        "{stderr}"
    );
    assert!(
        stderr.contains("interrupted at step 40 of 60: the results up to there are in stopped"),
        "{stderr}"
    );
    let rows = |out: &str| -> Vec<String> {
        let csv = std::fs::read_to_string(dir.join(out).join("grokking.csv")).unwrap();
        csv.lines().skip(1).map(str::to_string).collect()
    };
    let (stopped, straight) = (rows("stopped"), rows("straight"));
    let step = |row: &String| -> usize { row.split(',').next().unwrap().parse().unwrap() };
    let (last, before) = stopped.split_last().unwrap();
    assert_eq!(step(last), 40);
    let straight_before: Vec<String> = straight.into_iter().filter(|r| step(r) < 40).collect();
    assert_eq!(before, straight_before.as_slice());
    let summary = std::fs::read_to_string(dir.join("stopped/summary.md")).unwrap();
    assert!(summary.contains("40 of its 60 steps"), "{summary}");
    for file in ["fourier.csv", "grokking.png", "loss.png", "fourier.png"] {
        assert!(dir.join("stopped").join(file).is_file(), "{file}");
    }
}

/// Two `train --force` on one run started together: the one that takes the run's mark first
/// trains, the other is refused with the in-use message and removes nothing. Held at the
/// moment it has the mark (before its folder exists), the first one refuses the second
/// every time; started in the same instant, every loser says so plainly (no "Directory not
/// empty", no missing file) and the folder left is one whole run.
#[test]
fn two_trainings_started_together_on_one_run_leave_one_whole_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = Running::waiting_at(&train_args("run", &["--force"]), dir, "claimed");
    let pid = p.child.id();
    refused(
        &train_args("run", &["--force"]),
        dir,
        &format!("run is in use by process {pid} now (training it)"),
    );
    Signals::Once("INT").send(pid);
    let (code, stderr) = p.finish();
    // Stopped before its first step, it saved that step's checkpoint: the run is the first's.
    assert_eq!(code, Some(130), "{stderr}");
    assert_eq!(checkpoint_step(&dir.join("run/last")), 0);

    for round in 0..4 {
        let out = format!("race{round}");
        let spawn = || {
            command(
                &train_args(&out, &["--force", "--set", "train.max_iters=4"]),
                dir,
            )
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
        };
        let (a, b) = (spawn(), spawn());
        let mut finished = 0;
        for child in [a, b] {
            let done = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&done.stderr);
            match done.status.code() {
                Some(0) => finished += 1,
                Some(2) => assert!(stderr.contains("is in use by process"), "{stderr}"),
                other => panic!("round {round}: exit {other:?}:\n{stderr}"),
            }
        }
        assert!(finished >= 1, "round {round}: neither finished");
        assert!(
            dir.join(&out).join("result.json").is_file(),
            "round {round}"
        );
        assert_eq!(
            metrics(&dir.join(&out)).last().unwrap().0,
            4,
            "round {round}"
        );
    }
}

/// A tmpfs of `mb` megabytes mounted at `at` until dropped; `None` where this process may
/// not mount (not root), which fails the test under CI.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(at: &Path, mb: usize) -> Option<Self> {
        std::fs::create_dir_all(at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(at)
            .output()
            .is_ok_and(|o| o.status.success());
        if !mounted {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root and must mount a small tmpfs for this test"
            );
            eprintln!("skipped: mounting a small tmpfs needs root");
            return None;
        }
        Some(Self(at.to_path_buf()))
    }

    /// Writes zeros into `filler` until the disk is full.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The disk fills up under a run: it says so, names the intact checkpoint and the command
/// that continues, and leaves no partial checkpoint; with space freed, --resume finishes
/// the run with the losses of one never stopped.
#[test]
fn a_full_disk_names_the_intact_checkpoint_and_leaves_no_partial_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let Some(disk) = SmallDisk::mount(&dir.join("disk"), 24) else {
        return;
    };
    let max = ["--set", "train.max_iters=10"];
    ok(command(&train_args("straight", &max), dir)
        .output()
        .unwrap());
    let p = Running::waiting_at(&train_args("disk/run", &max), dir, "step@7");
    let filler = disk.fill();
    Signals::Once("INT").send(p.child.id());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(2), "{stderr}");
    for part in [
        "the disk holding disk/run is full (",
        "No space left on device",
        "No partial checkpoint is left; disk/run/last (step 5) is intact",
        "Free some space, then continue with: headlab train --resume disk/run",
    ] {
        assert!(stderr.contains(part), "{part:?} missing:\n{stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    for partial in [".last.tmp", ".best.tmp"] {
        assert!(!dir.join("disk/run").join(partial).exists(), "{partial}");
    }
    assert_eq!(checkpoint_step(&dir.join("disk/run/last")), 5);
    std::fs::remove_file(filler).unwrap();
    ok(command(&["train", "--resume", "disk/run"], dir)
        .output()
        .unwrap());
    assert_eq!(
        metrics(&dir.join("disk/run")),
        metrics(&dir.join("straight"))
    );
}

/// The run's folder removed while it trains: the run says its folder is gone and writes
/// nothing in its place (no half-made folder with a checkpoint in it).
#[test]
fn a_run_whose_folder_is_removed_says_so_and_recreates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let max = ["--set", "train.max_iters=10"];
    let p = Running::waiting_at(&train_args("run", &max), dir, "step@7");
    std::fs::remove_dir_all(dir.join("run")).unwrap();
    Signals::Once("INT").send(p.child.id());
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("error: the run's folder run was removed while it trained (")
            && stderr.contains("training stopped and wrote nothing in its place"),
        "{stderr}"
    );
    assert!(!dir.join("run").exists());
}

/// A lab whose loss goes non-finite stops as `train` does, exit 3, naming the run and the
/// step, and writes no summary that could read as a result (`lab grokking --lr 10` wrote
/// "train loss NaN" and "did not fit within 60 steps", exit 0).
#[test]
fn a_diverging_lab_stops_with_exit_3_and_writes_no_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = command(
        &[
            "lab", "grokking", "--out", "g", "--lr", "10", "--steps", "60",
        ],
        dir,
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    for part in [
        "error: lab grokking diverged at step ",
        "(lr 1.000e1); the lab stopped and wrote no summary",
        "Lower --lr",
    ] {
        assert!(stderr.contains(part), "{part:?} missing:\n{stderr}");
    }
    assert!(!dir.join("g/summary.md").exists());
    assert!(
        !dir.join("g").exists(),
        "the lab made g and wrote nothing there"
    );

    let out = command(
        &[
            "lab",
            "heads",
            "--out",
            "h",
            "--heads",
            "1",
            "--seeds",
            "5",
            "--set",
            "train.max_iters=60",
            "--set",
            "train.eval_interval=2",
            "--set",
            "train.lr=1e4",
        ],
        dir,
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    for part in [
        "error: the lab's run h/h1-s5 diverged at step ",
        "the lab stopped and wrote no summary",
        "--set train.lr=",
    ] {
        assert!(stderr.contains(part), "{part:?} missing:\n{stderr}");
    }
    assert!(!dir.join("h/summary.md").exists());
}

/// With their output in a log, labs print a line at the pace `train` does (every 15 s; here
/// every step, through the test hook), with the run, the step and the loss: `lab grokking`
/// printed nothing for minutes, and a lab's runs printed lines that did not say which run.
#[test]
fn labs_in_a_log_print_progress_lines_naming_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = command(
        &[
            "lab",
            "grokking",
            "--out",
            "g",
            "--p",
            "31",
            "--fraction",
            "0.7",
            "--steps",
            "20",
        ],
        dir,
    )
    .env("HEADLAB_TEST_PROGRESS_EVERY_MS", "0")
    .output()
    .unwrap();
    let stderr = ok(out);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("lab grokking: step "))
        .collect();
    assert_eq!(lines.len(), 20, "{stderr}");
    assert!(
        lines[0].starts_with("lab grokking: step 0/20: train loss "),
        "{stderr}"
    );
    assert!(
        lines[19].starts_with("lab grokking: step 19/20: train loss "),
        "{stderr}"
    );

    let out = command(
        &[
            "lab",
            "heads",
            "--out",
            "h",
            "--heads",
            "1,2",
            "--seeds",
            "5",
            "--set",
            "train.max_iters=4",
            "--set",
            "train.eval_interval=2",
        ],
        dir,
    )
    .env("HEADLAB_TEST_PROGRESS_EVERY_MS", "0")
    .output()
    .unwrap();
    let stderr = ok(out);
    for run in ["h/h1-s5", "h/h2-s5"] {
        for step in 1..=4 {
            let line = format!("{run}: step {step}/4: loss ");
            assert!(
                stderr.lines().any(|l| l.starts_with(&line)),
                "{line:?} missing:\n{stderr}"
            );
        }
    }
}

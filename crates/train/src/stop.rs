//! Stop requests: SIGINT (Ctrl-C) and SIGTERM (what `timeout`, systemd, Docker and Slurm send
//! first) end a run in a saved checkpoint of the step it prints, however often they arrive.
//!
//! The binary turns signals into [`request`]s (library code never installs handlers). What a
//! request does depends on whether anything is at stake:
//!
//! - before a run writes anything (reading and tokenising the text, training a BPE) there is
//!   nothing to save, so the process ends at once;
//! - once it writes ([`at_stake`]), the loop notices the request at its next safe point (after a
//!   step, between evaluation batches, after the checkpoint being written) and saves there.
//!   Further requests change nothing: `timeout` delivers its signal twice (to the child and to
//!   its group), and a supervisor may repeat SIGTERM. Ctrl-\ (SIGQUIT) still quits at once.

use std::borrow::Cow;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

/// The signal number of the first request (0: none).
static REQUESTED: AtomicI32 = AtomicI32::new(0);

/// `None` while a run writes what it needs to resume; otherwise the line a request prints as
/// the process ends at once. Held while deciding to exit, so a run never starts writing
/// while the process is ending.
static AT_ONCE: Mutex<Option<Cow<'static, str>>> = Mutex::new(Some(Cow::Borrowed(
    "interrupted before training started: nothing was written",
)));

/// What the process removes if a request ends it at once (destructors do not run then), in
/// order: marks that say a process is using a folder, and folders that would be left empty.
static LEFT_BEHIND: Mutex<Vec<std::path::PathBuf>> = Mutex::new(Vec::new());

/// Removes `path` (a file, or a folder once empty) if a request ends the process at once,
/// until [`keep_on_exit`].
pub fn remove_on_exit(path: &std::path::Path) {
    LEFT_BEHIND
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(path.to_path_buf());
}

/// Undoes [`remove_on_exit`] of `path`.
pub fn keep_on_exit(path: &std::path::Path) {
    LEFT_BEHIND
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|p| p != path);
}

/// SIGINT's number, and what [`exit_code`] gives when no signal was recorded.
pub const SIGINT: i32 = 2;

/// What became of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requested {
    /// The first one: the run stops at its next safe point.
    First,
    /// One more while stopping: ignored.
    Again,
}

/// Asks the run to stop because of `signal`. With nothing at stake the process exits here
/// with `128 + signal`, saying so; otherwise the run stops at its next safe point.
pub fn request(signal: i32) -> Requested {
    let first = REQUESTED
        .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok();
    let at_once = AT_ONCE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(line) = at_once.as_deref() {
        // Empty: another process speaks for this one (an MPI rank other than 0).
        if !line.is_empty() {
            crate::log_line!("\n{line}");
        }
        for path in LEFT_BEHIND.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            // A file, or a folder that is empty by now; anything else stays.
            let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path));
        }
        std::process::exit(128 + signal);
    }
    drop(at_once);
    if first {
        Requested::First
    } else {
        Requested::Again
    }
}

/// Whether a stop was requested.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst) != 0
}

/// The exit code of a stopped run: 128 + the signal that stopped it (130 for SIGINT, 143 for
/// SIGTERM), 130 if none was recorded.
pub fn exit_code() -> u8 {
    match REQUESTED.load(Ordering::SeqCst) {
        0 => (128 + SIGINT) as u8,
        s => (128 + s) as u8,
    }
}

/// Marks the run as writing: from here on, a request is honoured with a checkpoint instead
/// of ending the process. Idempotent.
pub fn at_stake() {
    *AT_ONCE.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// Marks the run as done writing what it needs (its checkpoints and results are on disk): a
/// request now ends the process at once, printing `line` (what was left undone and how to
/// make it).
pub fn nothing_at_stake(line: String) {
    *AT_ONCE.lock().unwrap_or_else(|e| e.into_inner()) = Some(Cow::Owned(line));
}

/// Test hook, compiled only with the `test-hooks` feature: with `HEADLAB_TEST_STOP_AT=POINT`
/// in the environment, the process announces `headlab-test: waiting at POINT` on stderr when
/// it reaches `POINT` and waits there until a stop is requested, so tests can signal a run at
/// a known moment. Points: `step@N` (inside step N, before its update), `eval@N` (between
/// the batches of the evaluation at step N), `NAME:written@N` (checkpoint NAME written, not
/// yet renamed), `final` (inside the end-of-run loss over the val split), `prepare` (a new
/// run's text read, not yet tokenized), `heads` (after training, before the head table),
/// `lab:done` (a lab's run saved, before the lab measures it).
#[cfg(feature = "test-hooks")]
pub fn test_point(point: std::fmt::Arguments<'_>) {
    static WANTED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let wanted = WANTED.get_or_init(|| std::env::var("HEADLAB_TEST_STOP_AT").ok());
    let Some(wanted) = wanted else { return };
    let point = point.to_string();
    if *wanted == point {
        crate::log_line!("headlab-test: waiting at {point}");
        while !requested() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Let a second signal of a pair arrive while the run is still here.
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Without the `test-hooks` feature: nothing.
#[cfg(not(feature = "test-hooks"))]
pub fn test_point(_point: std::fmt::Arguments<'_>) {}

//! Helpers shared by the end-to-end tests: run the `headlab` binary and check it succeeded.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// The model every end-to-end test trains, as `--set`s: 2 layers, 2 heads of d_k 16, 16
/// positions, batches of 8, no head tracking, on characters (the default run is on words; a
/// test of words says so). Files add their schedule with [`tiny`].
pub const TINY_MODEL: &[&str] = &[
    "--set",
    "data.tokenizer=char",
    "--set",
    "model.block_size=16",
    "--set",
    "model.d_model=32",
    "--set",
    "model.n_layers=2",
    "--set",
    "model.n_heads=2",
    "--set",
    "train.batch_size=8",
    "--set",
    "train.track_heads_every=0",
];

/// [`TINY_MODEL`] followed by `sets` (a later `--set` of the same key wins).
pub fn tiny(sets: &[&'static str]) -> Vec<&'static str> {
    TINY_MODEL.iter().chain(sets).copied().collect()
}

/// [`TINY_MODEL`] with a 4-step schedule on 4,000 characters: trains in well under a second.
#[allow(dead_code)] // Not every test file uses it.
pub static TINY: LazyLock<Vec<&str>> = LazyLock::new(|| {
    tiny(&[
        "--set",
        "train.eval_iters=2",
        "--set",
        "train.warmup_iters=2",
        "--set",
        "train.max_iters=4",
        "--set",
        "train.eval_interval=2",
        "--set",
        "train.sample_tokens=10",
        "--set",
        "data.builtin_chars=4000",
    ])
});

/// Runs `headlab args` in `cwd` (which also serves as `XDG_RUNTIME_DIR`, quieting wgpu).
#[allow(dead_code)] // Each test crate uses its own subset.
pub fn headlab(args: &[&str], cwd: &Path) -> Output {
    headlab_env(args, cwd, &[])
}

/// An environment value that removes the variable from headlab's environment instead.
#[allow(dead_code)]
pub const UNSET: &str = "\0unset";

/// [`headlab`] with extra environment variables ([`UNSET`] removes one).
#[allow(dead_code)]
pub fn headlab_env(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Output {
    headlab_within(args, cwd, env, Duration::from_secs(20 * 60))
}

/// [`headlab_env`] that fails the test when the command runs longer than `limit`, killing it,
/// so a hang is a failure with the output so far rather than a CI job that never ends.
#[allow(dead_code)]
pub fn headlab_within(args: &[&str], cwd: &Path, env: &[(&str, &str)], limit: Duration) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_headlab"));
    cmd.args(args).current_dir(cwd).env("XDG_RUNTIME_DIR", cwd);
    for &(k, v) in env {
        if v == UNSET {
            cmd.env_remove(k);
        } else {
            cmd.env(k, v);
        }
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("headlab runs");
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for headlab") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let err = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
            panic!("headlab {args:?} still ran after {limit:?} (hung?); killed. stderr:\n{err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Runs headlab whose output's reader goes away after the first line of stderr, as in
/// `headlab ... 2>&1 | head -1`: every later line, and anything printed on stdout, meets a
/// closed pipe. Returns how it ended and that first line (a hang past 20 minutes fails the
/// test).
#[allow(dead_code)]
pub fn headlab_reader_leaves(args: &[&str], cwd: &Path) -> (std::process::ExitStatus, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_headlab"))
        .args(args)
        .current_dir(cwd)
        .env("XDG_RUNTIME_DIR", cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("headlab runs");
    let mut first = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(!first.trim().is_empty(), "no first line: {first:?}");
    drop(child.stdout.take());
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waiting for headlab") {
            return (status, first);
        }
        if start.elapsed() > Duration::from_secs(20 * 60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("headlab {args:?} still ran after 20 minutes (hung?); killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts success and returns stdout.
pub fn ok(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "headlab failed ({}):\n{stderr}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Chromium, or `None` with a "skipped" line unless `HEADLAB_REQUIRE_CHROMIUM=1` (CI sets it).
#[allow(dead_code)]
pub fn chromium() -> Option<String> {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        let found = Command::new("which")
            .arg(name)
            .output()
            .ok()
            .filter(|o| o.status.success());
        if let Some(o) = found {
            return Some(String::from_utf8_lossy(&o.stdout).trim().to_string());
        }
    }
    if std::env::var("HEADLAB_REQUIRE_CHROMIUM").as_deref() == Ok("1") {
        panic!("HEADLAB_REQUIRE_CHROMIUM=1 but no chromium: apt-get install chromium");
    }
    eprintln!("skipped: no chromium (apt-get install chromium) to render the page");
    None
}

/// `page` rendered by headless Chromium (a fresh profile in `profile`, no network): the DOM
/// once its scripts ran, and what the browser logged (its console among it).
#[allow(dead_code)]
pub fn render(browser: &str, page: &Path, profile: &Path) -> (String, String) {
    render_at(browser, page, profile, None)
}

/// [`render`] in a window of `size` (width, height) pixels, Chromium's default without one.
#[allow(dead_code)]
pub fn render_at(
    browser: &str,
    page: &Path,
    profile: &Path,
    size: Option<(u32, u32)>,
) -> (String, String) {
    let window = size.map(|(w, h)| format!("--window-size={w},{h}"));
    let out = Command::new(browser)
        .args(window)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=5000",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The backend and adapter a checkpoint's manifest records.
#[allow(dead_code)]
pub fn trained_on(checkpoint: &Path) -> (String, Option<String>) {
    let text = std::fs::read_to_string(checkpoint.join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let on = &manifest["trained_on"];
    let backend = on["backend"].as_str().unwrap_or_else(|| panic!("{text}"));
    (
        backend.to_string(),
        on["adapter"].as_str().map(String::from),
    )
}

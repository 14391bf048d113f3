//! Helpers shared by the end-to-end tests: run the `headlab` binary and check it succeeded.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `headlab args` in `cwd` (which also serves as `XDG_RUNTIME_DIR`, quieting wgpu).
#[allow(dead_code)] // Each test crate uses its own subset.
pub fn headlab(args: &[&str], cwd: &Path) -> Output {
    headlab_env(args, cwd, &[])
}

/// [`headlab`] with extra environment variables.
pub fn headlab_env(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_headlab"));
    cmd.args(args).current_dir(cwd).env("XDG_RUNTIME_DIR", cwd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("headlab runs")
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

//! Helpers shared by the end-to-end tests: run the `headlab` binary and check it succeeded.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `headlab args` in `cwd` (which also serves as `XDG_RUNTIME_DIR`, quieting wgpu).
pub fn headlab(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_headlab"))
        .args(args)
        .current_dir(cwd)
        .env("XDG_RUNTIME_DIR", cwd)
        .output()
        .expect("headlab runs")
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

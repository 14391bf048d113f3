//! The process's memory: how the binaries' allocator (mimalloc) treats freed memory during
//! training ([`KeepFreedPages`]), and the peak resident memory a backend or a benchmark used
//! ([`reset_peak_rss`], [`peak_rss`]).
//!
//! mimalloc hands the pages of freed blocks back to the OS ("purging") and the next step
//! faults them in again, zeroed by the kernel (the profile: bench/NOTES.md). A training loop
//! reuses the same buffer sizes every step, so keeping the pages costs no more memory than
//! the step's peak.
#![allow(unsafe_code)]

use std::os::raw::c_long;
use std::sync::Mutex;

use libmimalloc_sys::{mi_option_get, mi_option_set, mi_option_t};

/// `mi_option_purge_delay` in mimalloc.h (v2 and v3): milliseconds before freed memory is
/// purged, -1 for never. The Rust bindings do not name it.
const PURGE_DELAY: mi_option_t = 15;

/// Live guards and the setting before the first of them.
static GUARDS: Mutex<(usize, c_long)> = Mutex::new((0, 0));

/// While alive, mimalloc keeps freed pages instead of purging them; when the last guard is
/// dropped the previous setting returns. Has no effect where mimalloc is not the global
/// allocator (the tests).
#[derive(Debug)]
#[must_use = "pages are kept only while the guard lives"]
pub struct KeepFreedPages(());

fn purge_delay() -> c_long {
    // SAFETY: mimalloc's option functions take any index below `_mi_option_last` and any
    // value, and only read or write its option table.
    unsafe { mi_option_get(PURGE_DELAY) }
}

fn set_purge_delay(ms: c_long) {
    // SAFETY: as in `purge_delay`; the table may change at any time (the purge code reads the
    // option each time it runs).
    unsafe { mi_option_set(PURGE_DELAY, ms) }
}

impl KeepFreedPages {
    /// Stops purging until the last guard is dropped.
    pub fn new() -> Self {
        let mut guards = GUARDS.lock().unwrap_or_else(|e| e.into_inner());
        if guards.0 == 0 {
            guards.1 = purge_delay();
            set_purge_delay(-1);
        }
        guards.0 += 1;
        Self(())
    }
}

impl Default for KeepFreedPages {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for KeepFreedPages {
    fn drop(&mut self) {
        let mut guards = GUARDS.lock().unwrap_or_else(|e| e.into_inner());
        guards.0 -= 1;
        if guards.0 == 0 {
            set_purge_delay(guards.1);
        }
    }
}

// Peak resident memory (Linux `/proc/self`). `None` where `/proc` does not have it.

fn status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Resets the peak (`VmHWM`) to the current RSS and returns that RSS in MiB.
pub fn reset_peak_rss() -> Option<f64> {
    // "5" to clear_refs resets the peak RSS (Linux >= 4.0).
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    status_mib("VmRSS:")
}

/// Peak RSS in MiB since the last [`reset_peak_rss`] (or since the start).
pub fn peak_rss() -> Option<f64> {
    status_mib("VmHWM:")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child process of [`the_index_is_the_purge_delay_and_the_last_guard_restores_it`].
    const CHILD: &str = "HEADLAB_ALLOC_TEST_CHILD";
    /// The purge delay the child is started with, through mimalloc's own environment variable:
    /// no option of mimalloc v2 or v3 has it by default.
    const FROM_ENV: c_long = 4321;

    /// Guards set the option while any is alive. Other tests may hold guards too, but none can
    /// restore the setting while these two live, so this holds under parallel tests.
    #[test]
    fn guards_turn_purging_off_while_any_is_alive() {
        two_guards();
    }

    /// Two nested guards, the outer dropped first: purging stays off until both are gone.
    fn two_guards() {
        let outer = KeepFreedPages::new();
        let inner = KeepFreedPages::new();
        assert_eq!(purge_delay(), -1);
        drop(outer);
        assert_eq!(purge_delay(), -1, "a guard is still alive");
        drop(inner);
    }

    /// The index is mimalloc's purge delay, and the last guard restores the setting before the
    /// first. mimalloc reads `MIMALLOC_<option name>` when it initialises an option, so a
    /// process started with `MIMALLOC_PURGE_DELAY=4321` must read 4321 at the index, and read
    /// it again after the guards are gone. That runs in a child process of this test binary
    /// holding only this test, so no other test's guard can be alive there: the check cannot
    /// be skipped and does not depend on other tests' timing.
    #[test]
    fn the_index_is_the_purge_delay_and_the_last_guard_restores_it() {
        if std::env::var_os(CHILD).is_some() {
            assert_eq!(purge_delay(), FROM_ENV, "not the purge delay");
            two_guards();
            assert_eq!(purge_delay(), FROM_ENV, "the last guard did not restore it");
            return;
        }
        // This test's name as the harness knows it: the module path without the crate.
        let path = concat!(
            module_path!(),
            "::the_index_is_the_purge_delay_and_the_last_guard_restores_it"
        );
        let name = path.split_once("::").expect("a crate prefix").1;
        let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args([name, "--exact", "--test-threads=1", "--nocapture"])
            .env(CHILD, "1")
            .env("MIMALLOC_PURGE_DELAY", FROM_ENV.to_string())
            // Its failure message, without a backtrace to bury it.
            .env("RUST_BACKTRACE", "0")
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the child failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        // A filter that matches no test succeeds too: the child must have run this one.
        assert!(
            stdout.contains("1 passed"),
            "the child did not run {name}:\n{stdout}"
        );
    }

    /// Other tests in this process may reset the peak at any time, so only what holds
    /// regardless: a live 64 MiB buffer is in the RSS, the peak is at least the RSS, and
    /// both are in MiB (KiB would put them above 64 GiB).
    #[test]
    fn a_live_buffer_shows_in_the_rss_and_the_peak_in_mib() {
        let big = vec![1u8; 64 << 20];
        std::hint::black_box(&big);
        let (Some(rss), Some(peak)) = (reset_peak_rss(), peak_rss()) else {
            eprintln!("skipped: no /proc/self/status here");
            return;
        };
        assert!(rss >= 64.0, "{rss}");
        assert!(peak >= rss && peak < 65536.0, "{rss} {peak}");
        drop(big);
    }
}

//! How the binaries' allocator (mimalloc) treats freed memory during training.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The index is mimalloc's purge delay (its default is 1000 ms in v3, 10 in v2, not the
    /// value of a neighbouring option), and guards set it and restore it. Other tests may hold
    /// guards meanwhile, so the default is checked only while none is alive.
    #[test]
    fn guards_turn_purging_off_and_the_last_restores_it() {
        let outer = KeepFreedPages::new();
        let inner = KeepFreedPages::new();
        assert_eq!(purge_delay(), -1);
        drop(outer);
        assert_eq!(purge_delay(), -1, "a guard is still alive");
        drop(inner);
        let guards = GUARDS.lock().unwrap();
        if guards.0 == 0 {
            let now = purge_delay();
            assert!(now == 1000 || now == 10, "not the purge delay: {now}");
        }
    }
}

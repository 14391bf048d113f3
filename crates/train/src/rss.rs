//! Peak resident memory of this process (Linux `/proc/self`), for reports of what a backend
//! or a benchmark used. `None` where `/proc` does not have it.

fn status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Resets the peak (`VmHWM`) to the current RSS and returns that RSS in MiB.
pub fn reset_peak() -> Option<f64> {
    // "5" to clear_refs resets the peak RSS (Linux >= 4.0).
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    status_mib("VmRSS:")
}

/// Peak RSS in MiB since the last [`reset_peak`] (or since the start).
pub fn peak() -> Option<f64> {
    status_mib("VmHWM:")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Other tests in this process may reset the peak at any time, so only what holds
    /// regardless: a live 64 MiB buffer is in the RSS, the peak is at least the RSS, and
    /// both are in MiB (KiB would put them above 64 GiB).
    #[test]
    fn a_live_buffer_shows_in_the_rss_and_the_peak_in_mib() {
        let big = vec![1u8; 64 << 20];
        std::hint::black_box(&big);
        let (Some(rss), Some(peak)) = (reset_peak(), peak()) else {
            eprintln!("skipped: no /proc/self/status here");
            return;
        };
        assert!(rss >= 64.0, "{rss}");
        assert!(peak >= rss && peak < 65536.0, "{rss} {peak}");
        drop(big);
    }
}

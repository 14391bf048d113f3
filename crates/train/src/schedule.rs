//! Learning-rate schedule: linear warm-up, then cosine decay to `min_lr` (nanoGPT's `get_lr`).

use std::f64::consts::PI;

/// The learning rate at iteration `it` (0-based).
///
/// Warm-up ramps linearly to `lr` over `warmup` iterations; from `warmup` to `decay_iters` a
/// half cosine brings it to `min_lr`, where it stays.
pub fn lr_at(it: usize, lr: f64, min_lr: f64, warmup: usize, decay_iters: usize) -> f64 {
    if it < warmup {
        return lr * (it + 1) as f64 / (warmup + 1) as f64;
    }
    if it >= decay_iters {
        return min_lr;
    }
    let ratio = (it - warmup) as f64 / (decay_iters - warmup).max(1) as f64;
    let coeff = 0.5 * (1.0 + (PI * ratio).cos());
    min_lr + coeff * (lr - min_lr)
}

impl crate::config::TrainConfig {
    /// The learning rate of step `it` under this `[train]` section's schedule.
    pub fn lr_at(&self, it: usize) -> f64 {
        lr_at(
            it,
            self.lr,
            self.min_lr,
            self.warmup_iters,
            self.decay_iters(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::lr_at;

    #[test]
    fn warms_up_linearly_then_follows_a_half_cosine_to_min_lr() {
        let f = |it| lr_at(it, 1e-3, 1e-4, 100, 2000);
        assert!((f(0) - 1e-3 / 101.0).abs() < 1e-15);
        assert!((f(99) - 1e-3 * 100.0 / 101.0).abs() < 1e-15);
        assert!((f(100) - 1e-3).abs() < 1e-15);
        // Half-way through the decay the cosine is at its midpoint.
        assert!((f(1050) - 0.55e-3).abs() < 1e-12);
        assert!((f(2000) - 1e-4).abs() < 1e-15);
        assert!((f(5000) - 1e-4).abs() < 1e-15);
        assert!((1..2000).all(|i| i <= 100 || f(i) <= f(i - 1)));
    }
}

//! Learning-rate schedules: linear warm-up, then cosine decay to `min_lr` (nanoGPT's `get_lr`)
//! or warmup-stable-decay.

use std::f64::consts::PI;

use crate::config::Schedule;

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

/// Warmup-stable-decay at iteration `it` (0-based) of `max_iters`: the same linear warm-up as
/// [`lr_at`], `lr` until the last `cooldown` iterations, then a straight line that would
/// reach `min_lr` at `max_iters` (the last step runs at `min_lr + (lr - min_lr) / cooldown`).
pub fn wsd_lr_at(
    it: usize,
    lr: f64,
    min_lr: f64,
    warmup: usize,
    cooldown: usize,
    max_iters: usize,
) -> f64 {
    if it < warmup {
        return lr * (it + 1) as f64 / (warmup + 1) as f64;
    }
    let start = max_iters.saturating_sub(cooldown);
    if it < start || cooldown == 0 {
        return lr;
    }
    let done = ((it - start) as f64 / cooldown as f64).min(1.0);
    lr + (min_lr - lr) * done
}

impl crate::config::TrainConfig {
    /// The learning rate of step `it` under this `[train]` section's schedule.
    pub fn lr_at(&self, it: usize) -> f64 {
        match self.schedule {
            Schedule::Cosine => lr_at(
                it,
                self.lr,
                self.min_lr,
                self.warmup_iters,
                self.decay_iters(),
            ),
            Schedule::Wsd => wsd_lr_at(
                it,
                self.lr,
                self.min_lr,
                self.warmup_iters,
                self.cooldown_iters(),
                self.max_iters,
            ),
        }
    }

    /// The `wsd` schedule's decay: `cooldown_fraction` of `max_iters`, rounded.
    pub fn cooldown_iters(&self) -> usize {
        (self.cooldown_fraction * self.max_iters as f64).round() as usize
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

    /// Warm-up 10, then 1e-3 until step 700 of 1000 (cooldown 300), then a line towards 0 at
    /// step 1000.
    #[test]
    fn wsd_holds_the_rate_then_decays_linearly_over_the_cooldown() {
        let f = |it| super::wsd_lr_at(it, 1e-3, 0.0, 10, 300, 1000);
        assert!((f(0) - 1e-3 / 11.0).abs() < 1e-15);
        assert!((f(9) - 1e-3 * 10.0 / 11.0).abs() < 1e-15);
        assert_eq!(f(10), 1e-3);
        assert_eq!(f(699), 1e-3);
        assert_eq!(f(700), 1e-3);
        assert!((f(850) - 0.5e-3).abs() < 1e-15);
        assert!((f(999) - 1e-3 / 300.0).abs() < 1e-15);
        // With a floor the line ends there.
        let g = |it| super::wsd_lr_at(it, 1e-3, 1e-4, 10, 300, 1000);
        assert!((g(850) - 0.55e-3).abs() < 1e-15);
        // Through the config: cooldown_fraction 0.3 of 1000 steps.
        let config = crate::config::TrainConfig {
            schedule: crate::config::Schedule::Wsd,
            cooldown_fraction: 0.3,
            max_iters: 1000,
            lr: 1e-3,
            min_lr: 0.0,
            warmup_iters: 10,
            ..Default::default()
        };
        assert_eq!(config.cooldown_iters(), 300);
        assert!((config.lr_at(850) - 0.5e-3).abs() < 1e-15);
    }
}

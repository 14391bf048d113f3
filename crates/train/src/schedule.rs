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

/// Why a resumed run's learning rate at `step` differs from the one its saved `[train]`
/// section gives, as one line: `note:` when every cause is a key the user changed on purpose
/// (`train.lr`, ...), `warning:` when `train.max_iters` moved the decay as a side effect (the
/// cosine follows it unless `train.lr_decay_iters` is set; `wsd`'s cooldown always does),
/// with the `--set` that keeps the old decay where one exists. `None` when the rate stays,
/// and at step 0 (an imported run, or one stopped before its first step), where no old
/// schedule has run.
pub fn schedule_move(
    saved: &crate::config::TrainConfig,
    now: &crate::config::TrainConfig,
    step: usize,
) -> Option<String> {
    let (before, after) = (saved.lr_at(step), now.lr_at(step));
    if step == 0 || (after - before).abs() <= 1e-3 * before.abs() {
        return None;
    }
    let mut causes = Vec::new();
    let mut side_effect = false;
    let mut changed = |key: &str, old: String, new: String| {
        if old != new {
            causes.push(format!("train.{key} is {new} (was {old})"));
        }
    };
    let name = |t: &crate::config::TrainConfig| match t.schedule {
        Schedule::Cosine => "cosine".to_string(),
        Schedule::Wsd => "wsd".to_string(),
    };
    changed("schedule", name(saved), name(now));
    changed("lr", saved.lr.to_string(), now.lr.to_string());
    changed("min_lr", saved.min_lr.to_string(), now.min_lr.to_string());
    let warmup = |t: &crate::config::TrainConfig| t.warmup_iters.to_string();
    changed("warmup_iters", warmup(saved), warmup(now));
    if saved.schedule == now.schedule {
        match now.schedule {
            Schedule::Cosine if saved.decay_iters() != now.decay_iters() => {
                if saved.lr_decay_iters.is_none() && now.lr_decay_iters.is_none() {
                    side_effect = true;
                    causes.push(format!(
                        "the cosine decay follows train.max_iters, so it now ends at step {} \
                         instead of {}; to keep the old decay add --set train.lr_decay_iters={}",
                        now.decay_iters(),
                        saved.decay_iters(),
                        saved.decay_iters()
                    ));
                } else {
                    let show = |t: &crate::config::TrainConfig| t.decay_iters().to_string();
                    changed("lr_decay_iters", show(saved), show(now));
                }
            }
            Schedule::Wsd => {
                let fraction = |t: &crate::config::TrainConfig| t.cooldown_fraction.to_string();
                changed("cooldown_fraction", fraction(saved), fraction(now));
                if saved.max_iters != now.max_iters {
                    side_effect = true;
                    let start = |t: &crate::config::TrainConfig| {
                        t.max_iters.saturating_sub(t.cooldown_iters())
                    };
                    causes.push(format!(
                        "the wsd cooldown is the last train.cooldown_fraction of train.max_iters, \
                         so it now runs from step {} instead of {}",
                        start(now),
                        start(saved)
                    ));
                }
            }
            Schedule::Cosine => {}
        }
    }
    let kind = if side_effect { "warning" } else { "note" };
    Some(format!(
        "{kind}: resuming at step {step}, the learning rate is {after:.2e} instead of \
         {before:.2e}: {}",
        causes.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::lr_at;
    use crate::config::{Schedule, TrainConfig};

    /// Each line names what moved the rate, and only a side effect of train.max_iters gets a
    /// fix; the values are worked by hand from nanoGPT's schedule.
    #[test]
    fn a_resume_names_what_moved_the_rate_and_offers_a_fix_only_for_a_side_effect() {
        let saved = TrainConfig {
            max_iters: 2200,
            lr: 4e-3,
            min_lr: 2e-4,
            warmup_iters: 50,
            ..Default::default()
        };
        let with = |f: &dyn Fn(&mut TrainConfig)| {
            let mut t = saved.clone();
            f(&mut t);
            t
        };
        // The same schedule, or nothing trained yet: nothing to say.
        assert_eq!(super::schedule_move(&saved, &saved, 1000), None);
        assert_eq!(
            super::schedule_move(&saved, &with(&|t| t.lr = 1e-3), 0),
            None
        );
        // train.lr: the cosine at step 50 is at its peak, the new one.
        let lr = with(&|t| t.lr = 2e-3);
        let line = super::schedule_move(&saved, &lr, 50).unwrap();
        assert_eq!(
            line,
            "note: resuming at step 50, the learning rate is 2.00e-3 instead of 4.00e-3: \
             train.lr is 0.002 (was 0.004)"
        );
        // train.max_iters stretches the cosine: at step 1125 of 50..2200 it is half-way
        // (2.1e-3); of 50..4350, a quarter of the way (cos 45 degrees).
        let longer = with(&|t| t.max_iters = 4350);
        let line = super::schedule_move(&saved, &longer, 1125).unwrap();
        let quarter = 2e-4 + 0.5 * (1.0 + std::f64::consts::FRAC_1_SQRT_2) * 3.8e-3;
        assert_eq!(
            line,
            format!(
                "warning: resuming at step 1125, the learning rate is {quarter:.2e} instead of \
                 2.10e-3: the cosine decay follows train.max_iters, so it now ends at step 4350 \
                 instead of 2200; to keep the old decay add --set train.lr_decay_iters=2200"
            )
        );
        // The fix it offers works: with it the rate does not move.
        let fixed = with(&|t| {
            t.max_iters = 4350;
            t.lr_decay_iters = Some(2200);
        });
        assert_eq!(super::schedule_move(&saved, &fixed, 1125), None);
        // An explicit decay end is named as such.
        let decay = with(&|t| t.lr_decay_iters = Some(1000));
        let line = super::schedule_move(&saved, &decay, 800).unwrap();
        assert!(line.starts_with("note:"), "{line}");
        assert!(
            line.ends_with("train.lr_decay_iters is 1000 (was 2200)"),
            "{line}"
        );
        // Two keys at once are both named.
        let both = with(&|t| {
            t.min_lr = 0.0;
            t.warmup_iters = 100;
        });
        let line = super::schedule_move(&saved, &both, 60).unwrap();
        assert!(
            line.ends_with("train.min_lr is 0 (was 0.0002); train.warmup_iters is 100 (was 50)"),
            "{line}"
        );
        // wsd: a longer run moves its cooldown (the last 20%: 1760 -> 3360).
        let wsd = with(&|t| t.schedule = Schedule::Wsd);
        let wsd_longer = with(&|t| {
            t.schedule = Schedule::Wsd;
            t.max_iters = 4200;
        });
        let line = super::schedule_move(&wsd, &wsd_longer, 2000).unwrap();
        assert!(line.starts_with("warning:"), "{line}");
        assert!(
            line.contains("now runs from step 3360 instead of 1760"),
            "{line}"
        );
    }

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

//! Whether two sets of seeds differ: headlab's and PyTorch's losses on the same config. Two
//! answers that need no assumption about the losses' distribution: an exact rank-sum test
//! (Mann-Whitney) and a bootstrap interval of the difference of medians.

/// The median; `NaN` for no values.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Each value's rank among all of them, from 1, ties sharing their mean rank, doubled so
/// that every rank is an integer.
fn doubled_ranks(pooled: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..pooled.len()).collect();
    order.sort_by(|&i, &j| pooled[i].total_cmp(&pooled[j]));
    let mut ranks = vec![0; pooled.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && pooled[order[end]] == pooled[order[start]] {
            end += 1;
        }
        // Ranks start+1 ..= end share their mean (start + 1 + end) / 2, doubled.
        for &i in &order[start..end] {
            ranks[i] = start + 1 + end;
        }
        start = end;
    }
    ranks
}

/// The two-sided exact p-value of the rank-sum test: the share of all ways to pick `a.len()`
/// of the pooled values whose rank sum is at least as far from its mean as `a`'s is. Counted
/// by dynamic programming over (values picked, doubled rank sum), exact with ties as well.
pub fn rank_sum_p(a: &[f64], b: &[f64]) -> f64 {
    let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
    let (n, k) = (pooled.len(), a.len());
    if k == 0 || k == n {
        return 1.0;
    }
    let ranks = doubled_ranks(&pooled);
    let observed: usize = ranks[..k].iter().sum();
    let total: usize = ranks.iter().sum();
    // ways[j][s]: subsets of j values with doubled rank sum s (f64: C(40, 20) overflows no f64).
    let mut ways = vec![vec![0.0f64; total + 1]; k + 1];
    ways[0][0] = 1.0;
    for &r in &ranks {
        for j in (1..=k).rev() {
            for s in (r..=total).rev() {
                ways[j][s] += ways[j - 1][s - r];
            }
        }
    }
    // The mean rank sum of k values is k (n + 1) / 2: doubled, k (n + 1).
    let mean = k * (n + 1);
    let far = |s: usize| s.abs_diff(mean);
    let all: f64 = ways[k].iter().sum();
    let extreme: f64 = (0..=total)
        .filter(|&s| far(s) >= far(observed))
        .map(|s| ways[k][s])
        .sum();
    extreme / all
}

/// splitmix64: a fixed stream, so that the interval is the same at every run of the record.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 11) as f64 / (1u64 << 53) as f64 * n as f64) as usize
    }
}

/// The 95% percentile bootstrap interval of `median(a) - median(b)`: each side resampled
/// with replacement `rounds` times, independently.
pub fn median_difference_interval(a: &[f64], b: &[f64], rounds: usize) -> (f64, f64) {
    let mut rng = SplitMix(0x5eed);
    let mut resample =
        |v: &[f64]| -> Vec<f64> { (0..v.len()).map(|_| v[rng.below(v.len())]).collect() };
    let mut diffs: Vec<f64> = (0..rounds)
        .map(|_| median(&resample(a)) - median(&resample(b)))
        .collect();
    diffs.sort_by(f64::total_cmp);
    let at = |q: f64| diffs[((q * (rounds - 1) as f64).round() as usize).min(rounds - 1)];
    (at(0.025), at(0.975))
}

/// One sentence on whether `ours` and `theirs` differ, with the numbers behind it; `names`
/// says whose they are ("headlab's", "PyTorch's").
pub fn verdict(what: &str, names: (&str, &str), ours: &[f64], theirs: &[f64]) -> String {
    let diff = median(ours) - median(theirs);
    let (lo, hi) = median_difference_interval(ours, theirs, 10_000);
    let p = rank_sum_p(ours, theirs);
    let says = if p < 0.05 {
        "they differ at the 5% level"
    } else {
        "no difference at the 5% level"
    };
    format!(
        "{what}: {} median minus {} {diff:+.4} (95% bootstrap interval {lo:+.4} to {hi:+.4}, \
         10,000 resamples); Mann-Whitney rank-sum test, exact two-sided p = {p:.3} ({} vs {} \
         seeds): {says}",
        names.0,
        names.1,
        ours.len(),
        theirs.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The p-value by listing every subset (a bitmask each), ranks by counting: independent
    /// of the dynamic program and of the sort above.
    fn p_by_listing(a: &[f64], b: &[f64]) -> f64 {
        let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
        let n = pooled.len();
        let rank = |x: f64| {
            let below = pooled.iter().filter(|&&y| y < x).count() as f64;
            let equal = pooled.iter().filter(|&&y| y == x).count() as f64;
            below + (equal + 1.0) / 2.0
        };
        let ranks: Vec<f64> = pooled.iter().map(|&x| rank(x)).collect();
        let mean = a.len() as f64 * (n as f64 + 1.0) / 2.0;
        let observed = (ranks[..a.len()].iter().sum::<f64>() - mean).abs();
        let (mut all, mut extreme) = (0u64, 0u64);
        for mask in 0u32..(1 << n) {
            if mask.count_ones() as usize != a.len() {
                continue;
            }
            let sum: f64 = (0..n)
                .filter(|i| mask >> i & 1 == 1)
                .map(|i| ranks[i])
                .sum();
            all += 1;
            if (sum - mean).abs() >= observed - 1e-9 {
                extreme += 1;
            }
        }
        extreme as f64 / all as f64
    }

    #[test]
    fn the_rank_sum_p_value_is_the_exact_one() {
        // Three against three, fully apart: 2 of the C(6, 3) = 20 splits are as extreme.
        assert!((rank_sum_p(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]) - 0.1).abs() < 1e-12);
        // Identical samples: every split is at least as extreme.
        assert_eq!(rank_sum_p(&[1.0, 1.0], &[1.0, 1.0]), 1.0);
        let cases: [(&[f64], &[f64]); 4] = [
            (
                &[1.52, 1.55, 1.56, 1.53, 1.54],
                &[1.53, 1.53, 1.531, 1.52, 1.54, 1.535],
            ),
            (&[0.1, 0.4, 0.4, 0.9], &[0.2, 0.4, 0.5, 0.7, 0.8, 1.0, 1.1]),
            (&[3.0, 1.0], &[2.0, 5.0, 4.0, 0.5, 6.0]),
            (
                &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                &[1.5, 2.5, 3.5, 4.5, 5.5, 7.0],
            ),
        ];
        for (a, b) in cases {
            let (p, listed) = (rank_sum_p(a, b), p_by_listing(a, b));
            assert!(
                (p - listed).abs() < 1e-12,
                "{a:?} vs {b:?}: {p} vs {listed}"
            );
        }
    }

    #[test]
    fn the_bootstrap_interval_holds_the_difference_and_shrinks_to_it() {
        // Constant samples: every resample has the same medians.
        let (lo, hi) = median_difference_interval(&[2.0; 5], &[1.5; 7], 1000);
        assert_eq!((lo, hi), (0.5, 0.5));
        let a = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9];
        let b: Vec<f64> = a.iter().map(|x| x + 0.05).collect();
        let (lo, hi) = median_difference_interval(&a, &b, 10_000);
        assert!(
            lo < -0.05 && -0.05 < hi && lo >= -0.9 && hi <= 0.8,
            "{lo} {hi}"
        );
        // The interval of a set against itself shifted far away excludes zero.
        let far: Vec<f64> = a.iter().map(|x| x + 5.0).collect();
        let (lo, hi) = median_difference_interval(&a, &far, 10_000);
        assert!(hi < 0.0 && lo > -5.9, "{lo} {hi}");
    }
}

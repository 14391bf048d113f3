//! Dropout's mask as a function of one seed and each element's index: element `i` is kept when
//! the `i`-th output of a SplitMix64 generator started at the seed, read as a fraction of
//! 2^64, is at least the drop probability. Neither pass stores the mask (the backward computes
//! it again), and any slice of it can be computed on any core. Burn's layer instead draws a
//! Bernoulli tensor element by element from one ChaCha generator on one thread, then multiplies
//! twice: on flex that was about a sixth of a training step with dropout 0.2 (bench/NOTES.md).

use rayon::prelude::*;

/// Elements per rayon task: small tensors stay on the calling thread.
const CHUNK: usize = 1 << 14;

/// SplitMix64's increment (2^64 / the golden ratio).
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// One dropout call's mask: which elements survive and the factor they are scaled by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mask {
    seed: u64,
    /// An element is dropped when its draw is below this (the probability times 2^32).
    threshold: u64,
    /// `1 / (1 - p)`, as Burn's layer scales kept values.
    scale: f32,
}

impl Mask {
    /// The mask that drops each element with probability `prob` (in `[0, 1)`), drawn from
    /// `seed`.
    pub fn new(prob: f64, seed: u64) -> Self {
        debug_assert!((0.0..1.0).contains(&prob), "dropout probability {prob}");
        Self {
            seed,
            threshold: (prob * 4_294_967_296.0).round() as u64,
            scale: (1.0 / (1.0 - prob)) as f32,
        }
    }

    /// Whether element `i` is kept: the top 32 bits of SplitMix64's `i`-th output.
    pub fn keeps(&self, i: usize) -> bool {
        let mut z = self
            .seed
            .wrapping_add((i as u64).wrapping_add(1).wrapping_mul(GOLDEN));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        z >> 32 >= self.threshold
    }

    /// The factor element `i` is multiplied by: `1 / (1 - p)` if kept, else 0.
    pub fn factor(&self, i: usize) -> f32 {
        if self.keeps(i) { self.scale } else { 0.0 }
    }

    /// `x` with the dropped elements zeroed and the kept ones scaled: the forward on the
    /// input, and the backward on the output's gradient (the same mask, the same scale).
    pub fn apply(&self, x: &[f32]) -> Vec<f32> {
        let mut out = Vec::with_capacity(x.len());
        x.par_iter()
            .enumerate()
            .with_min_len(CHUNK)
            .map(|(i, &v)| v * self.factor(i))
            .collect_into_vec(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain SplitMix64 generator, written from its published definition, as the reference
    /// for the indexed draws.
    struct SplitMix64(u64);

    impl SplitMix64 {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    #[test]
    fn element_i_is_the_generators_ith_draw_against_the_probability() {
        let (prob, seed) = (0.3, 0xDEAD_BEEF_u64);
        let mask = Mask::new(prob, seed);
        let mut rng = SplitMix64(seed);
        for i in 0..10_000 {
            let draw = rng.next() as f64 / 2f64.powi(64);
            // Draws within 2^-32 of the probability may round either way.
            if (draw - prob).abs() > 1e-9 {
                assert_eq!(mask.keeps(i), draw >= prob, "element {i}, draw {draw}");
            }
        }
    }

    #[test]
    fn about_one_in_p_is_dropped_and_kept_values_are_scaled_exactly() {
        let n = 1_000_003;
        let x: Vec<f32> = (0..n).map(|i| 1.0 + (i % 97) as f32 / 97.0).collect();
        for prob in [0.1, 0.2, 0.5] {
            let y = Mask::new(prob, 7).apply(&x);
            let dropped = y.iter().filter(|&&v| v == 0.0).count() as f64;
            // Binomial: five standard deviations.
            let sd = (n as f64 * prob * (1.0 - prob)).sqrt();
            assert!(
                (dropped - n as f64 * prob).abs() < 5.0 * sd,
                "p {prob}: {dropped} of {n} dropped"
            );
            let scale = (1.0 / (1.0 - prob)) as f32;
            for (a, b) in x.iter().zip(&y) {
                assert!(*b == 0.0 || *b == a * scale, "{a} -> {b}");
            }
        }
    }

    #[test]
    fn one_seed_one_mask_and_another_seed_another() {
        let x = vec![1.0f32; 100_000];
        let a = Mask::new(0.2, 1).apply(&x);
        assert_eq!(a, Mask::new(0.2, 1).apply(&x));
        let b = Mask::new(0.2, 2).apply(&x);
        let differ = a.iter().zip(&b).filter(|(p, q)| p != q).count();
        // Independent masks differ where exactly one drops: 2 p (1 - p) of the elements.
        assert!((25_000..39_000).contains(&differ), "{differ}");
    }

    #[test]
    fn neighbouring_elements_are_dropped_independently() {
        // P(both of two neighbours dropped) = p^2 for independent draws.
        let (n, prob) = (1_000_000, 0.5);
        let mask = Mask::new(prob, 99);
        let both = (0..n - 1)
            .filter(|&i| !mask.keeps(i) && !mask.keeps(i + 1))
            .count() as f64;
        let expect = (n - 1) as f64 * prob * prob;
        assert!((both - expect).abs() < 5.0 * expect.sqrt(), "{both}");
    }
}

//! The modular addition task of the grokking papers (Power et al. 2022; Nanda et al. 2023):
//! every pair `a, b` in `0..p` with its answer `(a + b) mod p`, written as three tokens
//! `a b =` (the numbers are tokens `0..p`, `=` is token `p`) whose next token is the answer.

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use thiserror::Error;

/// The largest modulus: the whole task (p² examples) stays one full batch on a CPU.
pub const MAX_MODULUS: u32 = 211;

/// Why a modulus or a split cannot be used.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ModularError {
    /// Not a prime: the task's structure (a cyclic group whose every frequency is used) needs
    /// one.
    #[error("p = {p} is not prime ({factor} x {}); choose a prime such as 53, 97 or 113", p / factor)]
    NotPrime {
        /// The modulus.
        p: u32,
        /// Its smallest factor.
        factor: u32,
    },
    /// Too small or too large.
    #[error("p = {0} is outside 3..={MAX_MODULUS}: choose a prime such as 53, 97 or 113")]
    Range(u32),
    /// A train fraction that leaves one split empty.
    #[error("the train fraction {0} must be in (0, 1), e.g. 0.4, so that both splits hold pairs")]
    Fraction(f64),
    /// A train fraction that leaves a split with fewer than p pairs.
    #[error(
        "the train fraction {fraction} gives {train} training and {test} held-out pairs of the \
         {}; each split needs at least p = {p} (one pair per answer on average): choose a \
         fraction between {} and {}, e.g. 0.4",
        p * p,
        fraction_range(*p).0,
        fraction_range(*p).1
    )]
    TooFewPairs {
        /// The fraction asked for.
        fraction: f64,
        /// The modulus.
        p: u32,
        /// Pairs it would train on.
        train: usize,
        /// Pairs it would hold out.
        test: usize,
    },
}

/// The train fractions, to 3 decimals, that leave at least `p` pairs in each split of the p²:
/// `round(f p²) >= p` and `p² - round(f p²) >= p`.
pub fn fraction_range(p: u32) -> (f64, f64) {
    let (p, n) = (f64::from(p), f64::from(p * p));
    let lo = ((p - 0.5) / n * 1000.0).ceil() / 1000.0;
    let hi = ((n - p + 0.5) / n * 1000.0 - 1e-9).floor() / 1000.0;
    (lo, hi)
}

/// One example: `[a, b, answer]`.
pub type Example = [u32; 3];

/// The `=` token's id for modulus `p` (the vocabulary is `p + 1` tokens).
pub fn equals_token(p: u32) -> u32 {
    p
}

/// Checks that `p` is a prime the task can use.
pub fn check_modulus(p: u32) -> Result<(), ModularError> {
    if !(3..=MAX_MODULUS).contains(&p) {
        return Err(ModularError::Range(p));
    }
    match (2..p)
        .take_while(|f| f * f <= p)
        .find(|f| p.is_multiple_of(*f))
    {
        Some(factor) => Err(ModularError::NotPrime { p, factor }),
        None => Ok(()),
    }
}

/// Every pair of `0..p`, `a` major, with its sum mod `p`.
pub fn examples(p: u32) -> Result<Vec<Example>, ModularError> {
    check_modulus(p)?;
    Ok((0..p)
        .flat_map(|a| (0..p).map(move |b| [a, b, (a + b) % p]))
        .collect())
}

/// Checks that `p` and the train `fraction` give both splits at least `p` pairs, and returns
/// the number of training pairs.
pub fn check_split(p: u32, fraction: f64) -> Result<usize, ModularError> {
    if !(fraction > 0.0 && fraction < 1.0) {
        return Err(ModularError::Fraction(fraction));
    }
    check_modulus(p)?;
    let all = (p * p) as usize;
    let n = (fraction * all as f64).round() as usize;
    let test = all - n.min(all);
    if n < p as usize || test < p as usize {
        return Err(ModularError::TooFewPairs {
            fraction,
            p,
            train: n,
            test,
        });
    }
    Ok(n)
}

/// The pairs shuffled by `seed`, the first `round(fraction * p²)` for training and the rest
/// held out ([`check_split`]).
pub fn split(
    p: u32,
    fraction: f64,
    seed: u64,
) -> Result<(Vec<Example>, Vec<Example>), ModularError> {
    let n = check_split(p, fraction)?;
    let mut all = examples(p)?;
    all.shuffle(&mut StdRng::seed_from_u64(seed));
    let test = all.split_off(n);
    Ok((all, test))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every label is the sum mod p, checked by repeated subtraction rather than `%`; the
    /// split is a partition of all p² pairs of the size asked for.
    #[test]
    fn labels_are_sums_mod_p_and_the_split_partitions_the_pairs() {
        let p = 53;
        let all = examples(p).unwrap();
        assert_eq!(all.len(), 53 * 53);
        for [a, b, c] in &all {
            let mut s = a + b;
            while s >= p {
                s -= p;
            }
            assert_eq!(*c, s, "{a} + {b}");
        }
        let (train, test) = split(p, 0.4, 7).unwrap();
        assert_eq!(train.len(), (0.4f64 * 2809.0).round() as usize);
        let mut both: Vec<Example> = train.iter().chain(&test).copied().collect();
        both.sort();
        assert_eq!(both, all);
        assert_ne!(
            split(p, 0.4, 8).unwrap().0,
            train,
            "the seed picks the split"
        );
    }

    #[test]
    fn moduli_that_are_not_prime_or_too_large_are_refused() {
        assert_eq!(check_modulus(97), Ok(()));
        assert_eq!(check_modulus(2), Err(ModularError::Range(2)));
        assert_eq!(check_modulus(223), Err(ModularError::Range(223)));
        assert_eq!(
            check_modulus(91),
            Err(ModularError::NotPrime { p: 91, factor: 7 })
        );
        assert!(split(53, 1.0, 1).is_err() && split(53, 0.0, 1).is_err());
        assert!(split(53, f64::NAN, 1).is_err());
    }

    /// Each split holds at least p pairs, and the range the error offers is exactly the
    /// fractions (to 3 decimals) that give that, counted by a loop over every fraction.
    #[test]
    fn a_split_with_fewer_than_p_pairs_is_refused_and_the_offered_range_fits() {
        for p in [3u32, 53, 113] {
            let n = (p * p) as usize;
            let fits = |f: f64| {
                let train = (f * n as f64).round() as usize;
                train >= p as usize && n - train.min(n) >= p as usize
            };
            let fitting: Vec<f64> = (1..1000)
                .map(|k| f64::from(k) / 1000.0)
                .filter(|&f| fits(f))
                .collect();
            let (lo, hi) = fraction_range(p);
            assert_eq!((lo, hi), (fitting[0], *fitting.last().unwrap()), "p = {p}");
            for k in 1..1000 {
                let f = f64::from(k) / 1000.0;
                assert_eq!(split(p, f, 1).is_ok(), fits(f), "p = {p}, fraction {f}");
            }
        }
        let e = split(53, 0.0001, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the train fraction 0.0001 gives 0 training and 2809 held-out pairs of the 2809; \
             each split needs at least p = 53 (one pair per answer on average): choose a \
             fraction between 0.019 and 0.981, e.g. 0.4"
        );
    }
}

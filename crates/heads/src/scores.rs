//! What an attention head does, as numbers. Every score is defined here once, on one head's
//! attention pattern `A` (`[t, t]`, row i = where query i looks, rows sum to 1, causal).
//!
//! References: previous-token, induction and duplicate-token detectors follow Olsson et al.
//! 2022 ("In-context learning and induction heads") and TransformerLens' head detectors; the
//! first-token score is the "attention sink" of Xiao et al. 2023; mean attention distance is
//! Dosovitskiy et al. 2021 (ViT) measured in tokens; gradient importance is Michel et al. 2019
//! ("Are sixteen heads really better than one?").

/// One head's attention pattern, row-major `[t, t]`.
#[derive(Debug, Clone, Copy)]
pub struct Pattern<'a> {
    /// The weights.
    pub a: &'a [f32],
    /// Sequence length.
    pub t: usize,
}

impl Pattern<'_> {
    fn at(&self, i: usize, j: usize) -> f64 {
        self.a[i * self.t + j] as f64
    }

    fn mean_over(&self, rows: impl Iterator<Item = usize>, f: impl Fn(usize) -> f64) -> f64 {
        let (mut sum, mut n) = (0.0, 0usize);
        for i in rows {
            sum += f(i);
            n += 1;
        }
        if n == 0 { 0.0 } else { sum / n as f64 }
    }

    /// Mean of `A[i, i-1]` over `i >= 1`: 1 for a head that always looks one token back.
    pub fn previous_token(&self) -> f64 {
        self.mean_over(1..self.t, |i| self.at(i, i - 1))
    }

    /// Mean of `A[i, 0]` over `i >= 1`: 1 for a head that parks on the first token (a sink).
    pub fn first_token(&self) -> f64 {
        self.mean_over(1..self.t, |i| self.at(i, 0))
    }

    /// Mean over queries of `sum_j A[i, j] (i - j)`: how far back a head looks, in tokens.
    pub fn mean_distance(&self) -> f64 {
        self.mean_over(0..self.t, |i| {
            (0..=i).map(|j| self.at(i, j) * (i - j) as f64).sum()
        })
    }

    /// Mean over `i >= 1` of the entropy of row i divided by `ln(i + 1)`, its maximum over
    /// the `i + 1` visible keys: 0 = each query looks at one key, 1 = uniform.
    pub fn normalized_entropy(&self) -> f64 {
        self.mean_over(1..self.t, |i| {
            let h: f64 = (0..=i)
                .map(|j| self.at(i, j))
                .filter(|&p| p > 0.0)
                .map(|p| -p * p.ln())
                .sum();
            h / ((i + 1) as f64).ln()
        })
    }

    /// On a sequence whose positions `offset + k` and `offset + period + k` hold the same
    /// token (`k < period`): mean over the second copy of `A[i, i - period + 1]`, attention to
    /// the token that followed the earlier occurrence of the current token.
    pub fn induction(&self, offset: usize, period: usize) -> f64 {
        let rows = (offset + period..self.t.min(offset + 2 * period)).filter(|&i| i + 1 > period);
        self.mean_over(rows, |i| self.at(i, i + 1 - period))
    }

    /// On the same repeated sequence: mean over the second copy of `A[i, i - period]`,
    /// attention to the earlier occurrence of the current token itself.
    pub fn duplicate_token(&self, offset: usize, period: usize) -> f64 {
        let rows = offset + period..self.t.min(offset + 2 * period);
        self.mean_over(rows, |i| self.at(i, i - period))
    }
}

/// A head's role, from its scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeadLabel {
    /// Induction score >= 0.4: completes repeated patterns.
    Induction,
    /// Previous-token score >= 0.5.
    PreviousToken,
    /// First-token score >= 0.5: parks attention on position 0.
    Sink,
    /// Mean distance <= 3 tokens: looks at a short local window.
    Local,
    /// Mean distance >= a quarter of the context.
    LongRange,
    /// None of the above: spread out (normalised entropy high) or mixed.
    Diffuse,
}

/// Thresholds of [`label`], in the order they are tried.
pub const INDUCTION_MIN: f64 = 0.4;
/// See [`label`].
pub const PREVIOUS_TOKEN_MIN: f64 = 0.5;
/// See [`label`].
pub const SINK_MIN: f64 = 0.5;
/// See [`label`].
pub const LOCAL_MAX_DISTANCE: f64 = 3.0;
/// See [`label`]: a fraction of the context length.
pub const LONG_RANGE_MIN_FRACTION: f64 = 0.25;

/// Names a head's role. The first rule that holds wins: induction, previous-token, sink,
/// local, long-range; else diffuse.
pub fn label(
    induction: f64,
    previous_token: f64,
    first_token: f64,
    mean_distance: f64,
    t: usize,
) -> HeadLabel {
    if induction >= INDUCTION_MIN {
        HeadLabel::Induction
    } else if previous_token >= PREVIOUS_TOKEN_MIN {
        HeadLabel::PreviousToken
    } else if first_token >= SINK_MIN {
        HeadLabel::Sink
    } else if mean_distance <= LOCAL_MAX_DISTANCE {
        HeadLabel::Local
    } else if mean_distance >= LONG_RANGE_MIN_FRACTION * t as f64 {
        HeadLabel::LongRange
    } else {
        HeadLabel::Diffuse
    }
}

impl std::fmt::Display for HeadLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HeadLabel::Induction => "induction",
            HeadLabel::PreviousToken => "previous-token",
            HeadLabel::Sink => "sink",
            HeadLabel::Local => "local",
            HeadLabel::LongRange => "long-range",
            HeadLabel::Diffuse => "diffuse",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a causal pattern where row i puts all weight on `f(i)`.
    fn one_hot(t: usize, f: impl Fn(usize) -> usize) -> Vec<f32> {
        let mut a = vec![0.0; t * t];
        for i in 0..t {
            a[i * t + f(i)] = 1.0;
        }
        a
    }

    #[test]
    fn a_previous_token_head_scores_one_there_and_zero_elsewhere() {
        let t = 10;
        let a = one_hot(t, |i| i.saturating_sub(1));
        let p = Pattern { a: &a, t };
        assert_eq!(p.previous_token(), 1.0);
        assert_eq!(p.induction(0, 5), 0.0);
        assert_eq!(p.duplicate_token(0, 5), 0.0);
        assert!(
            (p.first_token() - 1.0 / 9.0).abs() < 1e-12,
            "only row 1 looks at 0"
        );
        assert!((p.mean_distance() - 0.9).abs() < 1e-12);
        assert_eq!(p.normalized_entropy(), 0.0);
        assert_eq!(
            label(
                0.0,
                p.previous_token(),
                p.first_token(),
                p.mean_distance(),
                t
            ),
            HeadLabel::PreviousToken
        );
    }

    #[test]
    fn an_induction_head_scores_one_on_the_repeat() {
        // [r1..r5, r1..r5]: in the second copy, row i looks at i - 5 + 1.
        let (t, period) = (10, 5);
        let a = one_hot(t, |i| if i >= period { i - period + 1 } else { i });
        let p = Pattern { a: &a, t };
        assert_eq!(p.induction(0, period), 1.0);
        assert_eq!(p.duplicate_token(0, period), 0.0);
        assert_eq!(p.previous_token(), 0.0);
        assert_eq!(
            label(
                p.induction(0, period),
                p.previous_token(),
                p.first_token(),
                p.mean_distance(),
                t
            ),
            HeadLabel::Induction
        );

        let dup = one_hot(t, |i| if i >= period { i - period } else { i });
        let d = Pattern { a: &dup, t };
        assert_eq!(d.duplicate_token(0, period), 1.0);
        assert_eq!(d.induction(0, period), 0.0);
        // With a one-token prefix the copies start at 1 and 1 + period.
        let shifted = one_hot(t + 1, |i| if i > period { i - period + 1 } else { 0 });
        let s = Pattern {
            a: &shifted,
            t: t + 1,
        };
        assert_eq!(s.induction(1, period), 1.0);
    }

    #[test]
    fn uniform_attention_has_entropy_one_and_is_diffuse_or_long_range() {
        let t = 8;
        let mut a = vec![0.0f32; t * t];
        for i in 0..t {
            for j in 0..=i {
                a[i * t + j] = 1.0 / (i + 1) as f32;
            }
        }
        let p = Pattern { a: &a, t };
        assert!((p.normalized_entropy() - 1.0).abs() < 1e-6);
        // Uniform over 0..=i has mean distance i/2, averaged: (0+..+7)/2/8 = 1.75.
        assert!((p.mean_distance() - 1.75).abs() < 1e-6);
        let sink = one_hot(t, |_| 0);
        let s = Pattern { a: &sink, t };
        assert_eq!(s.first_token(), 1.0);
        assert_eq!(
            label(
                0.0,
                s.previous_token(),
                s.first_token(),
                s.mean_distance(),
                t
            ),
            HeadLabel::Sink
        );
        assert_eq!(label(0.0, 0.0, 0.0, 1.0, 64), HeadLabel::Local);
        assert_eq!(label(0.0, 0.0, 0.0, 20.0, 64), HeadLabel::LongRange);
        assert_eq!(label(0.0, 0.0, 0.0, 8.0, 64), HeadLabel::Diffuse);
    }
}

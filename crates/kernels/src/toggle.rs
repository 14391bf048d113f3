//! Run-time switches. [`with_kernels`] turns headlab's kernels off for the calling thread, so
//! one process can run the same model on the kernels and on Burn's own ops (`flex-burn` in
//! `headlab compare` and `headlab-bench`). With the `test-hooks` feature, `mutation` plants one
//! deliberately wrong kernel, named by `HEADLAB_TEST_MUTATION`, so the tests can prove that
//! `headlab compare` catches it.

use std::cell::Cell;

thread_local! {
    static ENABLED: Cell<bool> = const { Cell::new(true) };
    static PRECISION: Cell<Precision> = const { Cell::new(Precision::F32) };
}

/// What the linear layers' products take as operands (`train.precision`). Weights, gradients,
/// the optimizer's state and every other op stay f32 either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f32 operands (gemm's f32 kernels).
    #[default]
    F32,
    /// Operands rounded to bfloat16, products accumulated in f32 ([`crate::bf16`]).
    Bf16,
}

/// The precision a linear layer run on this thread takes (see [`with_precision`]).
pub fn precision() -> Precision {
    PRECISION.with(Cell::get)
}

/// Runs `f` with the linear layers' products in `precision` on this thread, then restores the
/// setting, also when `f` panics. A layer's backward takes the precision its forward took.
pub fn with_precision<R>(precision: Precision, f: impl FnOnce() -> R) -> R {
    struct Restore(Precision);
    impl Drop for Restore {
        fn drop(&mut self) {
            PRECISION.with(|p| p.set(self.0));
        }
    }
    let _restore = Restore(PRECISION.with(|p| p.replace(precision)));
    f()
}

/// Whether headlab's kernels may run on this thread (see [`with_kernels`]).
pub fn kernels_enabled() -> bool {
    ENABLED.with(Cell::get)
}

/// Runs `f` with headlab's kernels on or off on this thread, then restores the setting, also
/// when `f` panics. Off, every wrapper of this crate takes Burn's op, as on a backend the
/// kernels do not run on. The setting is per thread because the wrappers decide on the
/// caller's thread; Burn's autodiff replays whatever was chosen in the forward.
pub fn with_kernels<R>(on: bool, f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ENABLED.with(|e| e.set(self.0));
        }
    }
    let _restore = Restore(ENABLED.with(|e| e.replace(on)));
    f()
}

/// A deliberately wrong kernel, for the tests that prove `headlab compare` catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// GELU by its tanh approximation instead of erf (forward only).
    TanhGelu,
    /// LayerNorm with epsilon 1e-6 instead of the model's 1e-5.
    LayerNormEps,
    /// Attention scores scaled by `1 / d_k` instead of `1 / sqrt(d_k)`.
    AttentionScale,
    /// Softmax without subtracting each row's maximum: overflows once scores pass ~88.
    SoftmaxNoMax,
    /// AdamW without its bias corrections.
    AdamWNoBiasCorrection,
    /// RMS norm (QK-norm) without its epsilon.
    RmsNormNoEps,
    /// bf16 packing by truncation instead of round-to-nearest-even.
    Bf16Truncate,
}

impl Mutation {
    /// Every mutation, with the name `HEADLAB_TEST_MUTATION` takes.
    pub const ALL: [(&'static str, Mutation); 7] = [
        ("tanh-gelu", Mutation::TanhGelu),
        ("layer-norm-eps", Mutation::LayerNormEps),
        ("attention-scale", Mutation::AttentionScale),
        ("softmax-no-max", Mutation::SoftmaxNoMax),
        ("adamw-no-bias-correction", Mutation::AdamWNoBiasCorrection),
        ("rms-norm-no-eps", Mutation::RmsNormNoEps),
        ("bf16-truncate", Mutation::Bf16Truncate),
    ];
}

/// Whether `m` is planted: only in builds with `test-hooks`, when `HEADLAB_TEST_MUTATION`
/// names it (read once per process).
#[cfg(feature = "test-hooks")]
pub(crate) fn mutated(m: Mutation) -> bool {
    static PLANTED: std::sync::OnceLock<Option<Mutation>> = std::sync::OnceLock::new();
    let planted = PLANTED.get_or_init(|| {
        let name = std::env::var("HEADLAB_TEST_MUTATION").ok()?;
        let found = Mutation::ALL.iter().find(|(n, _)| *n == name);
        assert!(
            found.is_some(),
            "HEADLAB_TEST_MUTATION={name}: no such mutation"
        );
        found.map(|(_, m)| *m)
    });
    *planted == Some(m)
}

/// Without `test-hooks` nothing is ever planted.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn mutated(_: Mutation) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_kernels_restores_the_setting_even_after_a_panic() {
        assert!(kernels_enabled());
        assert!(!with_kernels(false, kernels_enabled));
        assert!(with_kernels(false, || with_kernels(true, kernels_enabled)));
        assert!(kernels_enabled());
        let caught = std::panic::catch_unwind(|| with_kernels(false, || panic!("inside")));
        assert!(caught.is_err());
        assert!(kernels_enabled());
        // Another thread keeps its own setting.
        with_kernels(false, || {
            assert!(std::thread::spawn(kernels_enabled).join().unwrap());
        });
    }
}

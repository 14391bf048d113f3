//! The CPU's fused multiply-add peak: the one denominator every MFU column shares.
//!
//! A matmul's rate depends on whose matmul it is (MKL at AVX2 speed against gemm at
//! AVX-512's on the same core, see bench/NOTES.md), so "MFU of its own matmul" compares
//! each side with itself. This loop measures what the core can do at all: independent
//! accumulators held in registers, one FMA per accumulator per iteration, at the widest
//! SIMD the CPU runs. With enough accumulators to cover the FMA latency on every FMA port,
//! no memory traffic and no dependency chain limits it.

use std::time::Instant;

/// The SIMD extension the peak loop ran with, its f32 lanes, and the loop itself.
pub struct Isa {
    /// `avx512f`, `avx2+fma`, `neon` or `scalar`.
    pub name: &'static str,
    /// f32 lanes per vector.
    pub lanes: usize,
    /// Accumulators (independent FMA chains) the loop keeps in registers.
    pub accumulators: usize,
    /// Runs `iters` iterations of `acc = acc * m + a` on every accumulator lane, starting from
    /// `x0`, and returns the sum of all lanes of all accumulators.
    kernel: fn(u64, f32, f32, f32) -> f32,
}

impl Isa {
    /// The widest extension this CPU runs.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Self {
                    name: "avx512f",
                    lanes: 16,
                    accumulators: x86::ACC_512,
                    kernel: x86::run_avx512,
                };
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Self {
                    name: "avx2+fma",
                    lanes: 8,
                    accumulators: x86::ACC_256,
                    kernel: x86::run_avx2,
                };
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            return Self {
                name: "neon",
                lanes: 4,
                accumulators: arm::ACC,
                kernel: arm::fma_neon,
            };
        }
        #[allow(unreachable_code)]
        Self::scalar()
    }

    /// The portable loop, for CPUs without a SIMD build here.
    fn scalar() -> Self {
        Self {
            name: "scalar",
            lanes: 1,
            accumulators: SCALAR_ACC,
            kernel: fma_scalar,
        }
    }

    /// FLOPs of `iters` iterations: two per lane per accumulator.
    pub fn flops(&self, iters: u64) -> f64 {
        2.0 * iters as f64 * (self.lanes * self.accumulators) as f64
    }

    /// The loop's result, for the check that it does the work it is credited with.
    pub fn run(&self, iters: u64, x0: f32, m: f32, a: f32) -> f32 {
        (self.kernel)(iters, x0, m, a)
    }
}

/// The FMA peak of `threads` threads running the loop at once, in GFLOP/s: the best of
/// `repeats` runs of about `seconds` each, timed from the first thread's start to the last
/// one's end.
pub fn fma_peak(isa: &Isa, threads: usize, seconds: f64, repeats: usize) -> f64 {
    // Calibrate the iteration count on one thread.
    let mut iters = 1u64 << 16;
    loop {
        let start = Instant::now();
        std::hint::black_box(isa.run(iters, 1.0, 0.999_9, 1e-4));
        let took = start.elapsed().as_secs_f64();
        if took > 0.05 {
            iters = ((iters as f64) * seconds / took).max(1.0) as u64;
            break;
        }
        iters *= 4;
    }
    (0..repeats.max(1))
        .map(|_| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| std::hint::black_box(isa.run(iters, 1.0, 0.999_9, 1e-4)));
                }
            });
            isa.flops(iters) * threads as f64 / start.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

/// The bf16 peak of `threads` threads, in GFLOP/s, measured as [`fma_peak`] but on
/// `vdpbf16ps` (two multiply-adds per f32 lane): the MFU denominator of bf16 columns. `None`
/// where the CPU lacks AVX512-BF16.
pub fn bf16_peak(threads: usize, seconds: f64, repeats: usize) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    if headlab_kernels::bf16::supported() {
        let isa = Isa {
            name: "avx512bf16",
            // Two bf16 pairs' worth of multiply-adds per f32 lane: counted as 32 lanes.
            lanes: 32,
            accumulators: x86::ACC_512,
            kernel: x86::run_bf16,
        };
        return Some(fma_peak(&isa, threads, seconds, repeats));
    }
    let _ = (threads, seconds, repeats);
    None
}

const SCALAR_ACC: usize = 8;

/// `iters` rounds of `acc = fma(acc, m, a)` on named accumulators, one local variable each:
/// an array of vectors is not kept in registers reliably (LLVM spilled part of one to the
/// stack, which halved the rate).
macro_rules! fma_chains {
    ($fma:expr, $iters:expr, $x0:expr, [$($acc:ident),+], $reduce:expr) => {{
        $(let mut $acc = $x0;)+
        for _ in 0..$iters {
            $($acc = $fma($acc);)+
        }
        0.0 $(+ $reduce($acc))+
    }};
}

fn fma_scalar(iters: u64, x0: f32, m: f32, a: f32) -> f32 {
    fma_chains!(
        |x: f32| x.mul_add(m, a),
        iters,
        x0,
        [c0, c1, c2, c3, c4, c5, c6, c7],
        |x: f32| x
    )
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Independent chains: two FMA pipes with a latency of 4 (Zen 4/5, recent Intel) need 8;
    /// 16 of the 32 zmm registers leave margin for cores with more pipes or longer latency.
    pub const ACC_512: usize = 16;
    /// 12 of the 16 ymm registers (two more hold `m` and `a`).
    pub const ACC_256: usize = 12;

    /// Only ever chosen by [`super::Isa::detect`] after it found AVX-512F.
    pub fn run_avx512(iters: u64, x0: f32, m: f32, a: f32) -> f32 {
        // SAFETY: `detect` picks this function only on a CPU with AVX-512F.
        #[allow(unsafe_code)]
        let sum = unsafe { fma_avx512(iters, x0, m, a) };
        sum
    }

    /// Only ever chosen by [`super::Isa::detect`] after it found AVX2 and FMA.
    pub fn run_avx2(iters: u64, x0: f32, m: f32, a: f32) -> f32 {
        // SAFETY: `detect` picks this function only on a CPU with AVX2 and FMA.
        #[allow(unsafe_code)]
        let sum = unsafe { fma_avx2(iters, x0, m, a) };
        sum
    }

    #[target_feature(enable = "avx512f")]
    fn fma_avx512(iters: u64, x0: f32, m: f32, a: f32) -> f32 {
        let (vm, va) = (_mm512_set1_ps(m), _mm512_set1_ps(a));
        fma_chains!(
            |x| _mm512_fmadd_ps(x, vm, va),
            iters,
            _mm512_set1_ps(x0),
            [
                c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15
            ],
            _mm512_reduce_add_ps
        )
    }

    /// Only ever called after `headlab_kernels::bf16::supported()`.
    pub fn run_bf16(iters: u64, x0: f32, m: f32, a: f32) -> f32 {
        // SAFETY: the caller found AVX512F and AVX512-BF16.
        #[allow(unsafe_code)]
        let sum = unsafe { dot_bf16(iters, x0, m, a) };
        sum
    }

    /// `acc += m a + m a` per lane and iteration: each lane's bf16 pair is `(m, m)` against
    /// `(a, a)`, both rounded to bf16 (the check allows for it).
    #[target_feature(enable = "avx512f,avx512bf16")]
    fn dot_bf16(iters: u64, x0: f32, m: f32, a: f32) -> f32 {
        let pair = |x: f32| {
            let h = headlab_kernels::bf16::to_bf16(x) as i32;
            // SAFETY: a 512-bit integer vector and a bf16 vector are the same bits.
            #[allow(unsafe_code)]
            let v: __m512bh = unsafe { std::mem::transmute(_mm512_set1_epi32(h | (h << 16))) };
            v
        };
        let (vm, va) = (pair(m), pair(a));
        fma_chains!(
            |x| _mm512_dpbf16_ps(x, vm, va),
            iters,
            _mm512_set1_ps(x0),
            [
                c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15
            ],
            _mm512_reduce_add_ps
        )
    }

    #[target_feature(enable = "avx2,fma")]
    fn fma_avx2(iters: u64, x0: f32, m: f32, a: f32) -> f32 {
        let (vm, va) = (_mm256_set1_ps(m), _mm256_set1_ps(a));
        // [8] -> [4] -> [2] -> [1]
        let reduce = |x: __m256| {
            let quad = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
            let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
            _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair)))
        };
        fma_chains!(
            |x| _mm256_fmadd_ps(x, vm, va),
            iters,
            _mm256_set1_ps(x0),
            [c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11],
            reduce
        )
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::aarch64::*;

    /// 16 of the 32 vector registers.
    pub const ACC: usize = 16;

    pub fn fma_neon(iters: u64, x0: f32, m: f32, a: f32) -> f32 {
        // SAFETY: NEON is part of the aarch64 baseline.
        #[allow(unsafe_code)]
        let sum = unsafe {
            let (vm, va) = (vdupq_n_f32(m), vdupq_n_f32(a));
            fma_chains!(
                |x| vfmaq_f32(va, x, vm),
                iters,
                vdupq_n_f32(x0),
                [
                    c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15
                ],
                |x| vaddvq_f32(x)
            )
        };
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loop does the iterations it is credited with: its result matches the recurrence
    /// computed in f64, and one iteration fewer would be off by far more than f32 rounding.
    #[test]
    fn the_peak_loop_computes_every_fma_it_counts() {
        for isa in [Isa::detect(), Isa::scalar()] {
            check_loop(&isa);
        }
    }

    fn check_loop(isa: &Isa) {
        let (iters, x0, m, a) = (1000u64, 1.0f32, 0.999f32, 1e-4f32);
        let chain = |n: u64| (0..n).fold(x0 as f64, |x, _| x * m as f64 + a as f64);
        let per_lane = (isa.lanes * isa.accumulators) as f64;
        let expected = chain(iters) * per_lane;
        let got = isa.run(iters, x0, m, a) as f64;
        let one_short = chain(iters - 1) * per_lane;
        let tolerance = (expected - one_short).abs() / 10.0;
        assert!(
            (got - expected).abs() < tolerance,
            "{}: {got} against {expected} (one iteration short: {one_short})",
            isa.name
        );
        assert_eq!(isa.flops(10), 20.0 * per_lane);
    }

    /// The bf16 loop adds `2 m a` (m and a rounded to bf16) to every lane per iteration, as
    /// it is credited with: against the sum in f64.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_bf16_peak_loop_does_two_multiply_adds_per_lane() {
        if !headlab_kernels::bf16::supported() {
            eprintln!("skipped: no AVX512-BF16 on this CPU");
            return;
        }
        let (iters, x0, m, a) = (1000u64, 1.0f32, 0.5f32, 0.25f32);
        let got = x86::run_bf16(iters, x0, m, a) as f64;
        // 16 accumulators of 16 lanes, each 1 + 1000 * 2 * 0.125 (exact in bf16 and f32).
        let expected = 256.0 * (1.0 + iters as f64 * 2.0 * 0.125);
        assert_eq!(got, expected);
    }
}

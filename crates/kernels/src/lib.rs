//! headlab's CPU kernels for Burn: attention, GELU, LayerNorm, linear layers, QK-norm with
//! RoPE, each one op with its own backward, and the optimizers' updates.
//!
//! Burn 0.22 runs `burn::tensor::module::attention` as a chain of primitive ops whenever
//! gradients flow, on every backend, so training pays for a `[t_q, t_k]` score matrix per head
//! and a dozen passes over it in each direction. [`flash_attention`] registers one op instead:
//! a forward blocked over queries that keeps each row's log-sum-exp, and a hand-written
//! backward that recomputes the probabilities from it (`flash`). It is a Burn backend
//! extension, so it runs on `flex` and `ndarray`, with or without autodiff; on other backends
//! (wgpu) [`supports`] says no and callers keep their own path.
//!
//! [`gelu`] and [`layer_norm`] do the same for the two other chains of small ops that the
//! training profile showed (bench/NOTES.md): one vectorised pass each way instead of a node
//! per primitive op. [`linear`] runs a layer as one `gemm` per
//! direction on flex's buffers in place (Burn's splits `[b, t, d]` inputs into `b` products and
//! copies strided operands). [`rotary()`] runs QK-norm and RoPE as one op on the projections'
//! layout (Burn's dozen single-threaded element-wise ops took 12% of the speedrun step's
//! thread). [`dropout()`] draws its mask from a counter-based generator, so neither pass stores
//! it and every core computes a share. [`adamw`] updates a parameter and its moments in one
//! pass, and [`newton_schulz`] runs Muon's iteration on the gemm. Each falls back to Burn's ops
//! where the kernels do not run.
//!
//! Modules: `flash` (flash attention on host memory), `dropout` (the mask), `gelu`,
//! `layer_norm`, `linear` and `rotary` (the other kernels on host memory), `muon`
//! (Newton-Schulz on host memory), `ops` (the kernels registered with Burn as ops, with their
//! backward), `adamw` (the one-pass update), `gemm` (matrix products on strided views), `simd`
//! (run-time CPU-feature dispatch), `uninit` (output buffers written once, never zeroed first;
//! buffers that are added into zeroed chunk by chunk on the pool),
//! `toggle` (kernels off per thread; test-only wrong kernels), `device` (backends by name, a
//! wgpu device that works, the compute pool) and `memory` (the allocator's freed pages, peak
//! RSS).
//!
//! This is the one crate of headlab that names backends ([`BackendKind`]); every other crate
//! takes a `Device` and stays backend-generic. It depends on
//! Burn alone and must not depend on any other headlab crate.

mod adamw;
pub mod bf16;
mod device;
pub mod dropout;
pub mod flash;
pub mod gelu;
mod gemm;
pub mod layer_norm;
pub mod linear;
pub mod memory;
pub mod muon;
mod ops;
pub mod rotary;
mod simd;
mod toggle;
mod uninit;

use burn::backend::{Dispatch, DispatchDevice};
use burn::tensor::{DType, Tensor};

pub use adamw::AdamWStep;
pub use device::{
    BACKENDS, BackendError, BackendKind, NDARRAY_BUILT, WGPU_BUILT, adapter_name, on_compute_pool,
    wgpu_device, wgpu_for_tests,
};
pub use ops::KernelBackend;
pub use rotary::Rotary;
pub use toggle::{Mutation, Precision, kernels_enabled, precision, with_kernels, with_precision};

/// A float tensor's values on the host as `E` (f32, or f64 for the f64 truth): the one way
/// headlab reads a tensor back.
///
/// # Panics
/// If the values do not convert to `E` (an Int or Bool tensor): callers pass float tensors.
pub fn to_host<E: burn::tensor::Element, const D: usize>(t: Tensor<D>) -> Vec<E> {
    t.into_data()
        .try_into_vec_as::<E>()
        .expect("a float tensor converts to f32 and f64")
}

/// Whether the kernels run on this tensor: f32 on `flex` or `ndarray`, with the kernels not
/// switched off on this thread ([`with_kernels`]).
pub fn runs_on<const D: usize>(x: &Tensor<D>) -> bool {
    let cpu = match x.device().inner().as_dispatch() {
        DispatchDevice::Flex(_) => true,
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => true,
        #[allow(unreachable_patterns)] // Without ndarray and wgpu, flex is the only device.
        _ => false,
    };
    cpu && x.dtype() == DType::F32 && kernels_enabled()
}

/// Whether [`flash_attention`] runs on these inputs: f32 on `flex` or `ndarray`, `k` and `v`
/// of one shape matching `q`'s batch, heads and `d_k`, and no more queries than keys when
/// `causal`.
pub fn supports(q: &Tensor<4>, k: &Tensor<4>, v: &Tensor<4>, causal: bool) -> bool {
    let ([b, h, t_q, d_k], [kb, kh, t_k, kd]) = (q.dims(), k.dims());
    runs_on(q)
        && runs_on(k)
        && runs_on(v)
        && k.dims() == v.dims()
        && [kb, kh, kd] == [b, h, d_k]
        && t_k > 0
        && (!causal || t_q <= t_k)
}

/// `softmax(q k^T / sqrt(d_k) + causal mask) v` through the flash kernel, differentiable
/// when the device has autodiff. With `causal`, queries are the last `t_q` of the `t_k`
/// positions (query `i` sees keys `0..=i + t_k - t_q`), as with a KV cache.
///
/// # Panics
/// Unless [`supports`] holds for the inputs: callers check it and take another path.
///
/// # Shapes
/// `q [b, h, t_q, d_k]`, `k, v [b, h, t_k, d_k]` -> `[b, h, t_q, d_k]`
pub fn flash_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, causal: bool) -> Tensor<4> {
    assert!(
        supports(&q, &k, &v, causal),
        "flash_attention: inputs it does not support; check `supports` first"
    );
    let out = <Dispatch as KernelBackend>::flash_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        causal,
        false,
        None,
    );
    Tensor::from_dispatch(out)
}

/// [`flash_attention`] on the projections' own layout, `[b, t, h, d_k]` in and out, so no
/// head transposes are made in either direction; with `drop` ([`dropout_mask`]), dropout on
/// the attention probabilities inside the kernel.
///
/// # Panics
/// Unless [`supports`] holds for the inputs with heads and positions swapped.
///
/// # Shapes
/// `q [b, t_q, h, d_k]`, `k, v [b, t_k, h, d_k]` -> `[b, t_q, h, d_k]`
pub fn flash_attention_heads_last(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    causal: bool,
    drop: Option<dropout::Mask>,
) -> Tensor<4> {
    let ([b, t_q, h, d_k], [kb, t_k, kh, kd]) = (q.dims(), k.dims());
    assert!(
        runs_on(&q)
            && runs_on(&k)
            && runs_on(&v)
            && k.dims() == v.dims()
            && [kb, kh, kd] == [b, h, d_k]
            && t_k > 0
            && (!causal || t_q <= t_k),
        "flash_attention_heads_last: inputs it does not support"
    );
    let out = <Dispatch as KernelBackend>::flash_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        causal,
        true,
        drop,
    );
    Tensor::from_dispatch(out)
}

/// Exact (erf) GELU, `x * Phi(x)`: headlab's kernel (one node, its own backward) where it
/// runs, `x (1 + erf(x / sqrt 2)) / 2` in Burn's ops elsewhere.
///
/// Not Burn's `gelu` elsewhere: Burn 0.22's default `gelu_backward`, which the cubecl backends
/// (wgpu) use, is the derivative of the tanh approximation, not of the erf GELU its forward
/// computes. `headlab compare` found it: wgpu's MLP weight gradients sat 25x further from
/// the f64 truth than the CPU backends'. Written out, autodiff differentiates `erf` exactly.
pub fn gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    if runs_on(&x) {
        Tensor::from_dispatch(<Dispatch as KernelBackend>::gelu(x.into_dispatch()))
    } else {
        let cdf = x
            .clone()
            .div_scalar(std::f64::consts::SQRT_2)
            .erf()
            .add_scalar(1.0)
            .mul_scalar(0.5);
        x * cdf
    }
}

/// `layer` (Burn's dropout module) on `x`, with its semantics: only while training (the layer's
/// flag set and gradients on the device), kept values scaled by `1 / (1 - prob)`. Where the
/// kernels run the mask comes from [`dropout::Mask`], seeded from the device's generator (so
/// `Device::seed` still fixes it); elsewhere Burn's layer runs.
pub fn dropout<const D: usize>(layer: &burn::nn::Dropout, x: Tensor<D>) -> Tensor<D> {
    // Asked only where the kernels run: the seed's draws are a read back from the device.
    let mask = runs_on(&x)
        .then(|| dropout_mask(layer, &x.device()))
        .flatten();
    match mask {
        Some(mask) => Tensor::from_dispatch(<Dispatch as KernelBackend>::dropout(
            x.into_dispatch(),
            mask,
        )),
        None => layer.forward(x),
    }
}

/// The mask `layer` applies on `device` now: `None` where it applies none (not training, or
/// `prob` 0), else a fresh one seeded by two draws from the device's generator.
pub fn dropout_mask(
    layer: &burn::nn::Dropout,
    device: &burn::tensor::Device,
) -> Option<dropout::Mask> {
    let training = layer.training.is_enabled() && device.is_autodiff();
    if !training || layer.prob == 0.0 {
        return None;
    }
    // Two draws below 2^30 (Int may be i32): a 60-bit seed.
    let draws = Tensor::<1, burn::tensor::Int>::random(
        [2],
        burn::tensor::Distribution::Uniform(0.0, 1_073_741_824.0),
        device,
    );
    let draws = draws
        .into_data()
        .try_into_vec_as::<i64>()
        .expect("an Int tensor converts to i64");
    let seed = draws.iter().fold(0u64, |s, &d| (s << 30) ^ d as u64);
    Some(dropout::Mask::new(layer.prob, seed))
}

/// LayerNorm over the last dimension, `(x - mean) / sqrt(var + epsilon) * gamma + beta` with
/// the biased variance, as `burn::nn::LayerNorm`: headlab's kernel where it runs, Burn's
/// `layer_norm` elsewhere.
///
/// # Shapes
/// `x [..., d]`, `gamma, beta [d]` -> `[..., d]`
pub fn layer_norm<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Option<Tensor<1>>,
    epsilon: f64,
) -> Tensor<D> {
    let d = gamma.dims()[0];
    // Mismatched shapes go to Burn's op, which reports them.
    let fits = x.dims()[D - 1] == d && beta.as_ref().is_none_or(|b| b.dims() == [d]);
    if !(fits && runs_on(&x) && runs_on(&gamma) && beta.as_ref().is_none_or(runs_on)) {
        return burn::tensor::module::layer_norm(x, gamma, beta, epsilon);
    }
    // Without a shift, zeros: a constant, so no gradient is registered for it.
    let beta = beta.unwrap_or_else(|| gamma.zeros_like());
    let epsilon = if toggle::mutated(Mutation::LayerNormEps) {
        1e-6
    } else {
        epsilon
    };
    Tensor::from_dispatch(<Dispatch as KernelBackend>::layer_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        epsilon,
    ))
}

/// RMS norm over the last dimension without a gain, `x / sqrt(mean(x^2) + epsilon)` (QK-norm),
/// in Burn's ops: the path where [`rotary()`] does not run (wgpu, flex-burn, f64). Where the
/// kernels run, the `rms-norm-no-eps` test mutation drops epsilon, so the tests can show
/// `headlab compare` catches a wrong variant of it.
///
/// # Shapes
/// `x [..., d] -> [..., d]`
pub fn rms_norm<const D: usize>(x: Tensor<D>, epsilon: f64) -> Tensor<D> {
    let epsilon = if runs_on(&x) && toggle::mutated(Mutation::RmsNormNoEps) {
        0.0
    } else {
        epsilon
    };
    let mean_square = x.clone().square().mean_dim(D - 1);
    x / mean_square.add_scalar(epsilon).sqrt()
}

/// QK-norm (`spec.rms_epsilon`) then RoPE (`spec.rope_base`) on every head of `x`, on the
/// projections' own layout, through headlab's kernel: one op with its own backward. The
/// `rms-norm-no-eps` test mutation drops the norm's epsilon, as in [`rms_norm`].
///
/// # Panics
/// Unless [`runs_on`] holds for `x`: callers check it and keep Burn's ops otherwise.
///
/// # Shapes
/// `x [b, t, h, d_k] -> [b, t, h, d_k]` (`d_k` even with RoPE)
pub fn rotary(x: Tensor<4>, mut spec: Rotary) -> Tensor<4> {
    assert!(
        runs_on(&x),
        "rotary: a tensor the kernel does not run on; check `runs_on` first"
    );
    if spec.rms_epsilon.is_some() && toggle::mutated(Mutation::RmsNormNoEps) {
        spec.rms_epsilon = Some(0.0);
    }
    Tensor::from_dispatch(<Dispatch as KernelBackend>::rotary(x.into_dispatch(), spec))
}

/// `x W (+ b)` for `x [..., d_in]`, `W [d_in, d_out]` (Burn's layout), `b [d_out]`: one
/// `gemm` over all rows each way, with no copies of `x` or `W` on flex, where the kernels
/// run; Burn's `linear` elsewhere.
pub fn linear<const D: usize>(
    x: Tensor<D>,
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
) -> Tensor<D> {
    let [d_in, d_out] = weight.dims();
    // Mismatched shapes go to Burn's op, which reports them.
    let fits = x.dims()[D - 1] == d_in && bias.as_ref().is_none_or(|b| b.dims() == [d_out]);
    if !(fits && runs_on(&x) && runs_on(&weight) && bias.as_ref().is_none_or(runs_on)) {
        return burn::tensor::module::linear(x, weight, bias);
    }
    let out = match bias {
        Some(bias) => <Dispatch as KernelBackend>::linear_bias(
            x.into_dispatch(),
            weight.into_dispatch(),
            bias.into_dispatch(),
        ),
        None => <Dispatch as KernelBackend>::linear(x.into_dispatch(), weight.into_dispatch()),
    };
    Tensor::from_dispatch(out)
}

/// A `burn::nn::Linear` layer's forward through [`linear`].
pub fn linear_layer<const D: usize>(layer: &burn::nn::Linear, x: Tensor<D>) -> Tensor<D> {
    linear(x, layer.weight.val(), layer.bias.as_ref().map(|b| b.val()))
}

/// Muon's orthogonalised update of `g [m, n]`: `steps` steps of the Newton-Schulz quintic
/// with coefficients `(a, b, c)` on `g / |g|_F`, about `g`'s polar factor `U V^T`. headlab's
/// host kernel ([`muon::newton_schulz`], every product on its gemm) where the kernels run,
/// [`newton_schulz_tensor_ops`] elsewhere.
///
/// # Shapes
/// `[m, n] -> [m, n]`
pub fn newton_schulz(g: Tensor<2>, steps: usize, coefficients: (f64, f64, f64)) -> Tensor<2> {
    if !runs_on(&g) {
        return newton_schulz_tensor_ops(g, steps, coefficients);
    }
    let [m, n] = g.dims();
    let device = g.device();
    let (a, b, c) = coefficients;
    let x = muon::newton_schulz(
        &to_host::<f32, 2>(g),
        m,
        n,
        steps,
        (a as f32, b as f32, c as f32),
    );
    Tensor::from_data(burn::tensor::TensorData::new(x, [m, n]), &device)
}

/// [`newton_schulz`] written with Burn's tensor ops, for the backends the kernel does not run
/// on.
pub fn newton_schulz_tensor_ops(
    g: Tensor<2>,
    steps: usize,
    (a, b, c): (f64, f64, f64),
) -> Tensor<2> {
    let [m, n] = g.dims();
    let tall = m > n;
    // [m, n] -> [n, m] when tall: X X^T is then min(m, n) square.
    let mut x = if tall { g.transpose() } else { g };
    let norm = x.clone().square().sum().sqrt().add_scalar(1e-7);
    x = x.div(norm.unsqueeze());
    for _ in 0..steps {
        let gram = x.clone().matmul(x.clone().transpose());
        let poly = gram.clone().mul_scalar(b) + gram.clone().matmul(gram).mul_scalar(c);
        x = x.clone().mul_scalar(a) + poly.matmul(x);
    }
    if tall { x.transpose() } else { x }
}

/// One AdamW update of a flat parameter `[n]` from its gradient and moments (`None` at the
/// first step): the parameter and the moments after it. headlab's one-pass kernel where it
/// runs, [`adamw_tensor_ops`] elsewhere.
pub fn adamw(
    param: Tensor<1>,
    grad: Tensor<1>,
    moments: Option<(Tensor<1>, Tensor<1>)>,
    step: &AdamWStep,
) -> (Tensor<1>, Tensor<1>, Tensor<1>) {
    let (m, v) = moments.unwrap_or_else(|| (grad.zeros_like(), grad.zeros_like()));
    let n = param.dims();
    let fits = grad.dims() == n && m.dims() == n && v.dims() == n;
    if !(fits && [&param, &grad, &m, &v].into_iter().all(runs_on)) {
        return adamw_tensor_ops(param, grad, m, v, step);
    }
    let (param, m, v) = <Dispatch as KernelBackend>::adamw(
        param.into_dispatch(),
        grad.into_dispatch(),
        m.into_dispatch(),
        v.into_dispatch(),
        *step,
    );
    (
        Tensor::from_dispatch(param),
        Tensor::from_dispatch(m),
        Tensor::from_dispatch(v),
    )
}

/// [`adamw`] written with Burn's tensor ops, for the backends the kernel does not run on.
pub fn adamw_tensor_ops(
    param: Tensor<1>,
    grad: Tensor<1>,
    m: Tensor<1>,
    v: Tensor<1>,
    s: &AdamWStep,
) -> (Tensor<1>, Tensor<1>, Tensor<1>) {
    let g = grad.mul_scalar(s.grad_scale);
    let m = m.mul_scalar(s.beta1) + g.clone().mul_scalar(1.0 - s.beta1);
    let v = v.mul_scalar(s.beta2) + g.square().mul_scalar(1.0 - s.beta2);
    let m_hat = m.clone().div_scalar(1.0 - s.beta1.powi(s.step));
    let v_hat = v.clone().div_scalar(1.0 - s.beta2.powi(s.step));
    let delta = m_hat.div(v_hat.sqrt().add_scalar(s.eps));
    let param = param.mul_scalar(1.0 - s.lr * s.weight_decay) - delta.mul_scalar(s.lr);
    (param, m, v)
}

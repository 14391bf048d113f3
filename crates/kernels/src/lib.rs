//! Flash attention for Burn's CPU backends, with its own backward.
//!
//! Burn 0.22 runs `burn::tensor::module::attention` as a chain of primitive ops whenever
//! gradients flow, on every backend, so training pays for a `[t_q, t_k]` score matrix per head
//! and a dozen passes over it in each direction. [`flash_attention`] registers one op instead:
//! a forward blocked over queries that keeps each row's log-sum-exp, and a hand-written
//! backward that recomputes the probabilities from it ([`cpu`]). It is a Burn backend
//! extension, so it runs on `flex` and `ndarray`, with or without autodiff; on other backends
//! (wgpu) [`supports`] says no and callers keep their own path.
//!
//! This is the one crate of headlab that names backends; `headlab-attention` calls it through
//! [`flash_attention`] and stays backend-generic.

pub mod cpu;
mod ext;
mod gemm;
mod simd;

use burn::backend::DispatchDevice;
use burn::tensor::{DType, Tensor};

pub use ext::FlashAttentionBackend;

/// Whether [`flash_attention`] runs on these inputs: f32 on `flex` or `ndarray`, `k` and `v`
/// of one shape matching `q`'s batch, heads and `d_k`, and no more queries than keys when
/// `causal`.
pub fn supports(q: &Tensor<4>, k: &Tensor<4>, v: &Tensor<4>, causal: bool) -> bool {
    let ([b, h, t_q, d_k], [kb, kh, t_k, kd]) = (q.dims(), k.dims());
    let cpu = matches!(
        q.device().inner().as_dispatch(),
        DispatchDevice::Flex(_) | DispatchDevice::NdArray(_)
    );
    cpu && q.dtype() == DType::F32
        && k.dims() == v.dims()
        && [kb, kh, kd] == [b, h, d_k]
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
    let out = <burn::backend::Dispatch as FlashAttentionBackend>::flash_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        causal,
    );
    Tensor::from_dispatch(out)
}

//! Scaled dot-product attention on its own: `softmax(Q K^T / sqrt(d_k) + mask) V`, what
//! every head computes and what PyTorch calls `scaled_dot_product_attention`.
//!
//! Three implementations:
//! - [`naive_attention`] materialises the `[t_q, t_k]` weights with Burn's tensor ops. It is
//!   the reference, runs everywhere and is the only one that can return the weights.
//! - [`fused_attention`] calls the backend's own kernel through
//!   `burn::tensor::module::attention`: tiled over keys on flex and the cubecl backends, but
//!   Burn's autodiff replaces it with the naive chain of ops, and ndarray has only that chain.
//! - [`flash_attention`] is headlab's kernel (`headlab-kernels`): blocked over queries, one op
//!   with a hand-written backward, on the CPU backends. Elsewhere it is the naive op.
//!
//! [`scaled_dot_product_attention`] picks: flash where it runs, else the backend's fused
//! kernel without gradients, else the naive op.

use burn::tensor::activation::softmax;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Tensor};

use crate::mask::MASKED_SCORE;
use crate::mask::causal_mask;

/// Post-softmax weights `softmax(q k^T / sqrt(d_k))`, masked causally (query `i` is the
/// `t_k - t_q + i`-th key, so a KV cache can pass fewer queries than keys) and, where given,
/// by a `[b, t_k]` padding mask (`true` = padding).
///
/// # Shapes
/// `q [b, h, t_q, d_k]`, `k [b, h, t_k, d_k]` -> `[b, h, t_q, t_k]`
pub fn attention_weights(
    q: Tensor<4>,
    k: Tensor<4>,
    causal: bool,
    padding: Option<Tensor<2, Bool>>,
) -> Tensor<4> {
    let [b, _, t_q, d_k] = q.dims();
    let t_k = k.dims()[2];
    let device = q.device();
    // [b, h, t_q, d_k] x [b, h, d_k, t_k] -> [b, h, t_q, t_k]
    let mut scores = q
        .matmul(k.transpose())
        .mul_scalar(1.0 / (d_k as f64).sqrt());
    if causal {
        let mask = causal_mask(t_q, t_k, &device);
        scores = scores.mask_fill(mask.unsqueeze::<4>(), MASKED_SCORE);
    }
    if let Some(padding) = padding {
        // [b, t_k] -> [b, 1, 1, t_k]
        scores = scores.mask_fill(padding.reshape([b, 1, 1, t_k]), MASKED_SCORE);
    }
    softmax(scores, 3)
}

/// `softmax(q k^T / sqrt(d_k) + causal mask) v`, materialising the `[t_q, t_k]` weights.
///
/// # Shapes
/// `q [b, h, t_q, d_k]`, `k, v [b, h, t_k, d_k]` -> `[b, h, t_q, d_k]`
pub fn naive_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, causal: bool) -> Tensor<4> {
    attention_weights(q, k, causal, None).matmul(v)
}

/// The backend's fused attention kernel, with the causal mask aligned as in
/// [`attention_weights`] (queries are the last `t_q` of the `t_k` positions).
///
/// # Shapes
/// `q [b, h, t_q, d_k]`, `k, v [b, h, t_k, d_k]` -> `[b, h, t_q, d_k]`
pub fn fused_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, causal: bool) -> Tensor<4> {
    let options = AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: causal,
    };
    attention(q, k, v, None, None, options)
}

/// headlab's flash kernel where it runs (f32 on flex or ndarray), differentiable through its
/// own backward; [`naive_attention`] elsewhere (wgpu, other dtypes).
///
/// # Shapes
/// `q [b, h, t_q, d_k]`, `k, v [b, h, t_k, d_k]` -> `[b, h, t_q, d_k]`
pub fn flash_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, causal: bool) -> Tensor<4> {
    if headlab_kernels::supports(&q, &k, &v, causal) {
        headlab_kernels::flash_attention(q, k, v, causal)
    } else {
        naive_attention(q, k, v, causal)
    }
}

/// The fastest kernel for the inputs: [`flash_attention`]'s kernel where it runs (measured
/// faster than flex's fused kernel at every length, and the only one with a backward of its
/// own), else the backend's [`fused_attention`] without gradients, else [`naive_attention`].
///
/// # Shapes
/// `q [b, h, t_q, d_k]`, `k, v [b, h, t_k, d_k]` -> `[b, h, t_q, d_k]`
pub fn scaled_dot_product_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    causal: bool,
) -> Tensor<4> {
    if headlab_kernels::supports(&q, &k, &v, causal) {
        headlab_kernels::flash_attention(q, k, v, causal)
    } else if q.device().is_autodiff() {
        naive_attention(q, k, v, causal)
    } else {
        fused_attention(q, k, v, causal)
    }
}

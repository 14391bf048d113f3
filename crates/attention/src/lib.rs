//! Multi-head self-attention that shows what each head does.
//!
//! - [`MultiHeadAttention`]: batched heads, grouped-query K/V, causal and padding masks,
//!   per-head weights on request and a head mask for ablation.
//! - [`mask`]: causal and padding masks, and the score masked positions get.
//! - [`sdpa`]: scaled dot-product attention alone, the op each head runs.
//! - [`rope`]: rotary position embeddings, and [`Position`]: QK-norm then RoPE on queries and
//!   keys, through headlab's kernel where it runs.
//! - [`reference`]: a per-head loop and an f64 implementation it is tested against.
//!
//! The crate names no backend: it takes tensors and a [`burn::tensor::Device`], and its tests
//! run on each backend. It depends on `headlab-kernels` (for the CPU ops) and Burn, nothing
//! else of headlab.

#![warn(missing_docs)]

pub mod error;
pub mod mask;
pub mod mha;
pub mod reference;
pub mod rope;
pub mod sdpa;

pub use error::AttentionConfigError;
pub use mask::{MASKED_SCORE, causal_mask, padding_mask};
pub use mha::{
    AttentionOptions, AttentionOutput, MultiHeadAttention, MultiHeadAttentionConfig, Qkv,
    gpt2_linear,
};
pub use rope::{Position, apply_rope};
pub use sdpa::{
    attention_weights, flash_attention, fused_attention, naive_attention,
    scaled_dot_product_attention,
};

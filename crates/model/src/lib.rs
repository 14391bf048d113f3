//! A small GPT-style decoder built on `headlab-attention`.
//!
//! - [`GptConfig`]: sizes, positional encoding, norm placement, tying, attention-only.
//! - [`Gpt`]: `tokens [b, t] -> logits [b, t, vocab]`, with per-layer attention weights and a
//!   head mask on request ([`Gpt::forward_with`]) and a KV cache ([`Gpt::forward_cached`]).
//! - [`Sampling`], [`Decoder`], [`Gpt::generate`]: cached generation with temperature,
//!   top-k and top-p.
//! - [`Gpt::save_weights`] / [`Gpt::load_weights`]: burnpack or safetensors.
//!
//! Like the attention crate it names no backend. It depends on `headlab-attention` and
//! `headlab-kernels` only: no data, training or analysis.

#![warn(missing_docs)]

pub mod block;
pub mod config;
pub mod generate;
pub mod gpt;
pub mod io;

pub use block::{
    Block, BlockDeltas, BlockOptions, BlockOutput, HeadInput, LayerCache, Mlp, PatchSite, norm,
    patch_position,
};
pub use config::{Activation, Gelu, GptConfig, GptConfigError, Norm, Positional};
pub use generate::{Decoder, GenerateError, Sampling};
pub use gpt::{ForwardOptions, Gpt, GptOutput, KvCache, cross_entropy, sinusoidal_encoding};
pub use headlab_attention as attention;
pub use io::{WeightsError, WeightsFormat};

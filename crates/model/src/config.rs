//! The decoder's configuration and its validation.

use burn::config::Config;
use headlab_attention::{AttentionConfigError, MultiHeadAttentionConfig};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// How token positions enter the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Positional {
    /// A learned embedding per position, added to the token embedding (GPT-2).
    #[default]
    Learned,
    /// Fixed sines and cosines added to the token embedding (the original Transformer).
    Sinusoidal,
    /// Rotary embeddings: Q and K of every head are rotated by their position (RoFormer).
    Rope,
}

/// Where LayerNorm sits in a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Norm {
    /// `x + attn(ln(x))`, then `x + mlp(ln(x))` (GPT-2; trains stably without warm-up tricks).
    #[default]
    Pre,
    /// `ln(x + attn(x))`, then `ln(x + mlp(x))` (the original Transformer's Add & Norm).
    Post,
}

/// Configuration of [`Gpt`](crate::Gpt).
#[derive(Config, Debug, PartialEq)]
pub struct GptConfig {
    /// Number of distinct tokens.
    pub vocab_size: usize,
    /// Longest context the model sees (positions 0..block_size).
    #[config(default = 64)]
    pub block_size: usize,
    /// Width of the residual stream.
    #[config(default = 128)]
    pub d_model: usize,
    /// Number of transformer blocks.
    #[config(default = 4)]
    pub n_layers: usize,
    /// Query heads per block; each gets `d_k = d_model / n_heads`.
    #[config(default = 4)]
    pub n_heads: usize,
    /// Key/value heads per block (grouped-query attention). `None` means `n_heads`.
    #[config(default = "None")]
    pub n_kv_heads: Option<usize>,
    /// Hidden width of the MLP. `None` means `4 * d_model`.
    #[config(default = "None")]
    pub d_ff: Option<usize>,
    /// Dropout on embeddings, attention weights and residual branches while training.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Biases in the linear layers and LayerNorms.
    #[config(default = true)]
    pub bias: bool,
    /// How positions are encoded.
    #[config(default = "Positional::Learned")]
    pub positional: Positional,
    /// Pre- or post-LayerNorm blocks.
    #[config(default = "Norm::Pre")]
    pub norm: Norm,
    /// Share the token embedding with the LM head (GPT-2 does).
    #[config(default = true)]
    pub tie_embeddings: bool,
    /// Blocks without MLPs: the attention-only models used to study induction heads.
    #[config(default = false)]
    pub attn_only: bool,
}

/// A [`GptConfig`] that cannot be built.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GptConfigError {
    /// A size is zero.
    #[error("model.{field} must be at least 1, got 0")]
    Zero {
        /// The offending field.
        field: &'static str,
    },
    /// RoPE rotates pairs of dimensions.
    #[error(
        "model.positional = \"rope\" needs an even d_k, but d_model / n_heads = {d_model} / \
         {n_heads} = {d_k}: choose n_heads so that d_k is even, or positional = \"learned\""
    )]
    RopeOddDk {
        /// Model width.
        d_model: usize,
        /// Heads.
        n_heads: usize,
        /// Head width.
        d_k: usize,
    },
    /// Sinusoidal encodings interleave sines and cosines.
    #[error("model.positional = \"sinusoidal\" needs an even d_model, got {0}")]
    SinusoidalOddDModel(usize),
    /// Dropout outside [0, 1).
    #[error("model.dropout must be in [0, 1), got {0}; use 0 to turn it off")]
    Dropout(f64),
    /// The attention layer rejected its sizes.
    #[error("model.{0}")]
    Attention(#[from] AttentionConfigError),
}

impl GptConfig {
    /// Head width `d_model / n_heads`.
    pub fn d_k(&self) -> usize {
        self.d_model / self.n_heads.max(1)
    }

    /// MLP hidden width.
    pub fn mlp_width(&self) -> usize {
        self.d_ff.unwrap_or(4 * self.d_model)
    }

    /// The attention layer of every block.
    pub fn attention(&self) -> MultiHeadAttentionConfig {
        MultiHeadAttentionConfig::new(self.d_model, self.n_heads)
            .with_n_kv_heads(self.n_kv_heads)
            .with_dropout(self.dropout)
            .with_bias(self.bias)
            .with_causal(true)
            .with_init_std(0.02)
            .with_out_init_std(Some(self.residual_init_std()))
    }

    /// GPT-2 scales the init of projections into the residual stream by `1/sqrt(2 n_layers)`.
    pub fn residual_init_std(&self) -> f64 {
        0.02 / (2.0 * self.n_layers.max(1) as f64).sqrt()
    }

    /// Checks every field, naming it and the fix when it cannot work.
    pub fn validate(&self) -> Result<(), GptConfigError> {
        for (field, value) in [
            ("vocab_size", self.vocab_size),
            ("block_size", self.block_size),
            ("d_model", self.d_model),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("d_ff", self.mlp_width()),
        ] {
            if value == 0 {
                return Err(GptConfigError::Zero { field });
            }
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(GptConfigError::Dropout(self.dropout));
        }
        self.attention().validate()?;
        match self.positional {
            Positional::Rope if !self.d_k().is_multiple_of(2) => Err(GptConfigError::RopeOddDk {
                d_model: self.d_model,
                n_heads: self.n_heads,
                d_k: self.d_k(),
            }),
            Positional::Sinusoidal if !self.d_model.is_multiple_of(2) => {
                Err(GptConfigError::SinusoidalOddDModel(self.d_model))
            }
            _ => Ok(()),
        }
    }

    /// Parameter count from the formula, for checking the built model.
    ///
    /// Per block: attention `d (d + 2 d_kv + d) + biases`, two LayerNorms, and unless
    /// attention-only an MLP `2 d d_ff + biases`; the final LayerNorm (pre-norm only) and an
    /// untied LM head. "Without embeddings" leaves out the token and position tables, as
    /// Kaplan et al. count N; a tied LM head is the token table, so it goes too.
    pub fn param_count(&self, with_embeddings: bool) -> usize {
        let (d, ff, v) = (self.d_model, self.mlp_width(), self.vocab_size);
        let d_kv = self.n_kv_heads.unwrap_or(self.n_heads) * self.d_k();
        let b = usize::from(self.bias);
        let ln = d + b * d;
        let attn = d * (2 * d + 2 * d_kv) + b * (2 * d + 2 * d_kv);
        let mlp = if self.attn_only {
            0
        } else {
            2 * d * ff + b * (ff + d)
        };
        let n_ln = if self.attn_only { 1 } else { 2 };
        let blocks = self.n_layers * (attn + mlp + n_ln * ln);
        let wte = v * d;
        let wpe = if self.positional == Positional::Learned {
            self.block_size * d
        } else {
            0
        };
        let lm_head = if self.tie_embeddings { 0 } else { d * v };
        // Post-norm blocks end in a LayerNorm already; only pre-norm adds a final one.
        let ln_f = if self.norm == Norm::Pre { ln } else { 0 };
        let non_embedding = blocks + ln_f + lm_head;
        if with_embeddings {
            non_embedding + wte + wpe
        } else {
            non_embedding
        }
    }
}

//! The decoder's configuration and its validation.

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

/// Configuration of [`Gpt`](crate::Gpt), and the `[model]` section of a run config.
///
/// Every field has a default, so a config file lists only what differs; unknown keys are
/// errors. `vocab_size` comes from the tokenizer: a run config leaves it out (0 there means
/// "unset") and the trainer fills it in with [`with_vocab_size`](Self::with_vocab_size).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GptConfig {
    /// Number of distinct tokens. Set from the tokenizer; not a `[model]` key.
    #[serde(skip_serializing_if = "is_zero")]
    pub vocab_size: usize,
    /// Rows of the token embedding (and columns of an untied LM head) when there are more
    /// than `vocab_size`: nanoGPT pads GPT-2's 50257 tokens to 50304, and fine-tunes pad to a
    /// multiple of 64 or 128. The extra rows are kept so the weights round-trip, but no token
    /// reads them and the logits leave them out, so nothing samples one. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub padded_vocab_size: Option<usize>,
    /// Longest context the model sees (positions 0..block_size). Default 64.
    pub block_size: usize,
    /// Width of the residual stream. Default 128.
    pub d_model: usize,
    /// Number of transformer blocks. Default 2.
    pub n_layers: usize,
    /// Query heads per block; each gets `d_k = d_model / n_heads`. Default 4.
    pub n_heads: usize,
    /// Key/value heads per block (grouped-query attention); must divide `n_heads`.
    /// Default: none, meaning `n_heads` (plain multi-head attention).
    pub n_kv_heads: Option<usize>,
    /// Hidden width of the MLP. Default: none, meaning `4 * d_model`.
    pub d_ff: Option<usize>,
    /// Dropout on embeddings, attention weights and residual branches while training, in
    /// [0, 1). Default 0.0 (small data, short runs).
    pub dropout: f64,
    /// Biases in the linear layers and LayerNorms. Default true.
    pub bias: bool,
    /// How positions are encoded: `learned`, `sinusoidal` or `rope`. Default `learned`.
    pub positional: Positional,
    /// Pre- or post-LayerNorm blocks: `pre` or `post`. Default `pre`.
    pub norm: Norm,
    /// Share the token embedding with the LM head (GPT-2 does). Default true.
    pub tie_embeddings: bool,
    /// Blocks without MLPs: the attention-only models used to study induction heads.
    /// Default false.
    pub attn_only: bool,
    /// The MLP's GELU: `exact` or `tanh` (GPT-2's approximation). Default `exact`.
    pub gelu: Gelu,
    /// The MLP's activation: `gelu` (the flavour `gelu` names) or `relu2`. Default `gelu`.
    #[serde(skip_serializing_if = "is_default")]
    pub activation: Activation,
    /// RMS-normalise every head's queries and keys (no gain, epsilon [`QK_NORM_EPSILON`])
    /// before RoPE and the dot product, so no score can grow past `sqrt(d_k)` (Henry et al.
    /// 2020, "Query-Key Normalization for Transformers"; modded-nanogpt's speedrun). Default
    /// false.
    #[serde(skip_serializing_if = "is_default")]
    pub qk_norm: bool,
    /// Start W_O and the MLP's `c_proj` at zero, so every block starts as the identity and
    /// the first steps train the embeddings and head through a clean residual stream
    /// (modded-nanogpt's speedrun). Default false.
    #[serde(skip_serializing_if = "is_default")]
    pub zero_init_proj: bool,
    /// Start the untied LM head at zero: the first logits are uniform, the first loss is
    /// `ln(vocab)` (modded-nanogpt's speedrun). Needs `tie_embeddings = false`. Default false.
    #[serde(skip_serializing_if = "is_default")]
    pub zero_init_head: bool,
    /// A previous-token table `bigram [vocab, d_model]`: position `i` adds row `tokens[i-1]`
    /// to its embedding (nothing at a window's first position), so the first block sees
    /// character pairs without spending a head on them (the bigram-embedding idea of the
    /// modded-nanogpt speedrun, at the character level). Default false.
    #[serde(skip_serializing_if = "is_default")]
    pub bigram: bool,
    /// Soft-cap the logits at `c`: `c tanh(z / c)`, smooth and bounded (Gemma 2; the
    /// modded-nanogpt speedrun caps at 30 or 15). Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logit_softcap: Option<f64>,
}

/// Epsilon of [`GptConfig::qk_norm`]'s RMS norm, added to the mean square.
pub const QK_NORM_EPSILON: f64 = 1e-6;

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Default for GptConfig {
    fn default() -> Self {
        Self {
            vocab_size: 0,
            padded_vocab_size: None,
            block_size: 64,
            d_model: 128,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: None,
            d_ff: None,
            dropout: 0.0,
            bias: true,
            positional: Positional::Learned,
            norm: Norm::Pre,
            tie_embeddings: true,
            attn_only: false,
            gelu: Gelu::Exact,
            activation: Activation::Gelu,
            qk_norm: false,
            zero_init_proj: false,
            zero_init_head: false,
            bigram: false,
            logit_softcap: None,
        }
    }
}

/// The MLP's nonlinearity between `c_fc` and `c_proj`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// GELU, exact or tanh as [`GptConfig::gelu`] says (GPT-2, nanoGPT).
    #[default]
    Gelu,
    /// `relu(x)^2`: cheaper than GELU and faster to train at small scale (So et al. 2021,
    /// "Primer"; the modded-nanogpt speedrun).
    Relu2,
}

/// The MLP's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Gelu {
    /// `x * Phi(x)` with the exact normal CDF (PyTorch's `nn.GELU()`, nanoGPT).
    #[default]
    Exact,
    /// The tanh approximation `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, which GPT-2
    /// was trained with (`gelu_new` in Hugging Face configs).
    Tanh,
}

/// `with_<field>(value)` builders, as Burn's configs have them.
macro_rules! builders {
    ($($with:ident => $field:ident: $ty:ty),* $(,)?) => {
        $(
            #[doc = concat!("Sets `", stringify!($field), "`.")]
            pub fn $with(mut self, $field: $ty) -> Self {
                self.$field = $field;
                self
            }
        )*
    };
}

/// A [`GptConfig`] that cannot be built. Every message names the `[model]` key and the fix.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GptConfigError {
    /// A size is zero.
    #[error("model.{field} is 0 but must be at least 1 (default {default})")]
    Zero {
        /// The offending field.
        field: &'static str,
        /// Its default, as a user would write it (read from [`GptConfig::default`]).
        default: String,
    },
    /// The heads cannot split the residual stream evenly.
    #[error(
        "model.d_model = {d_model} is not divisible by model.n_heads = {n_heads}, so the heads \
         cannot split the residual stream evenly; use model.n_heads = {}, or a model.d_model \
         that is a multiple of {n_heads} ({})",
        join_or(.head_choices), join_or(.d_model_choices)
    )]
    HeadsDoNotDivide {
        /// Model width.
        d_model: usize,
        /// Requested heads.
        n_heads: usize,
        /// The head counts dividing d_model just below and above n_heads.
        head_choices: Vec<usize>,
        /// The multiples of n_heads just below and above d_model.
        d_model_choices: Vec<usize>,
    },
    /// The query heads cannot be grouped evenly over the key/value heads.
    #[error(
        "model.n_kv_heads = {n_kv_heads} does not divide model.n_heads = {n_heads}; each \
         key/value head must serve the same number of query heads, so use model.n_kv_heads = {}",
        join_or(.choices)
    )]
    KvHeadsDoNotDivide {
        /// Query heads.
        n_heads: usize,
        /// Requested key/value heads.
        n_kv_heads: usize,
        /// Key/value head counts that divide n_heads.
        choices: Vec<usize>,
    },
    /// RoPE rotates pairs of dimensions.
    #[error(
        "model.positional = \"rope\" rotates pairs of dimensions, but the head dimension \
         model.d_model / model.n_heads = {d_model} / {n_heads} = {d_k} is odd; change \
         model.n_heads or model.d_model, or use model.positional = \"learned\""
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
    #[error(
        "model.positional = \"sinusoidal\" needs an even model.d_model, got {0}; use an even \
         d_model or model.positional = \"learned\""
    )]
    SinusoidalOddDModel(usize),
    /// Dropout outside [0, 1).
    #[error("model.dropout = {0} is out of range: it must be in [0, 1); use 0 to turn it off")]
    Dropout(f64),
    /// `vocab_size` in a `[model]` section.
    #[error(
        "model.vocab_size = {0} is set, but the vocabulary comes from the tokenizer; remove it \
         and choose data.tokenizer (and data.vocab_size for bpe) instead"
    )]
    VocabSizeInConfig(usize),
    /// Fewer padded rows than tokens.
    #[error(
        "model.padded_vocab_size = {rows} is smaller than the tokenizer's {tokens} tokens; \
         give at least {tokens}, or remove it"
    )]
    PaddingBelowVocab {
        /// The padded size.
        rows: usize,
        /// The tokenizer's size.
        tokens: usize,
    },
    /// A zero-initialised head that is the token table.
    #[error(
        "model.zero_init_head = true needs an untied LM head, but model.tie_embeddings = true \
         (a zero token table would embed every token as zeros); set model.tie_embeddings = \
         false, or remove model.zero_init_head"
    )]
    ZeroInitTiedHead,
    /// A soft cap that is not a positive number.
    #[error(
        "model.logit_softcap = {0} must be a positive number (e.g. 30); remove it to leave the \
         logits uncapped"
    )]
    LogitSoftcap(f64),
    /// The attention layer rejected its sizes for a reason the checks above do not cover.
    #[error("model.{0}")]
    Attention(AttentionConfigError),
}

fn join_or(items: &[usize]) -> String {
    let items: Vec<String> = items.iter().map(|i| i.to_string()).collect();
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// The entries of the sorted `choices` just below and just above `target`.
fn nearest(choices: &[usize], target: usize) -> Vec<usize> {
    let below = choices.iter().rev().find(|&&c| c < target);
    let above = choices.iter().find(|&&c| c > target);
    below.into_iter().chain(above).copied().collect()
}

impl GptConfig {
    /// A config with every default and `vocab_size` tokens.
    pub fn new(vocab_size: usize) -> Self {
        Self {
            vocab_size,
            ..Self::default()
        }
    }

    builders! {
        with_vocab_size => vocab_size: usize,
        with_padded_vocab_size => padded_vocab_size: Option<usize>,
        with_block_size => block_size: usize,
        with_d_model => d_model: usize,
        with_n_layers => n_layers: usize,
        with_n_heads => n_heads: usize,
        with_n_kv_heads => n_kv_heads: Option<usize>,
        with_d_ff => d_ff: Option<usize>,
        with_dropout => dropout: f64,
        with_bias => bias: bool,
        with_positional => positional: Positional,
        with_norm => norm: Norm,
        with_tie_embeddings => tie_embeddings: bool,
        with_attn_only => attn_only: bool,
        with_gelu => gelu: Gelu,
        with_activation => activation: Activation,
        with_qk_norm => qk_norm: bool,
        with_zero_init_proj => zero_init_proj: bool,
        with_zero_init_head => zero_init_head: bool,
        with_bigram => bigram: bool,
        with_logit_softcap => logit_softcap: Option<f64>,
    }

    /// Rows of the token embedding: `padded_vocab_size`, or `vocab_size` when unpadded.
    pub fn embedding_rows(&self) -> usize {
        self.padded_vocab_size.unwrap_or(self.vocab_size)
    }

    /// Head width `d_model / n_heads` (0 when `n_heads` is 0; validate first).
    pub fn d_k(&self) -> usize {
        self.d_model.checked_div(self.n_heads).unwrap_or(0)
    }

    /// Key/value heads after applying the default (`n_heads`).
    pub fn kv_heads(&self) -> usize {
        self.n_kv_heads.unwrap_or(self.n_heads)
    }

    /// MLP hidden width after applying the default (`4 * d_model`).
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

    /// GPT-2 scales the init of projections into the residual stream by `1/sqrt(2 n_layers)`;
    /// with `zero_init_proj` they start at zero.
    pub fn residual_init_std(&self) -> f64 {
        if self.zero_init_proj {
            return 0.0;
        }
        0.02 / (2.0 * self.n_layers.max(1) as f64).sqrt()
    }

    /// Checks every field, including that `vocab_size` was set.
    pub fn validate(&self) -> Result<(), GptConfigError> {
        if self.vocab_size == 0 {
            return Err(GptConfigError::Zero {
                field: "vocab_size",
                default: "from the tokenizer".into(),
            });
        }
        if let Some(rows) = self.padded_vocab_size
            && rows < self.vocab_size
        {
            return Err(GptConfigError::PaddingBelowVocab {
                rows,
                tokens: self.vocab_size,
            });
        }
        self.validate_section()
    }

    /// Checks every field but `vocab_size`: the `[model]` section of a run config, before the
    /// tokenizer is known.
    pub fn validate_section(&self) -> Result<(), GptConfigError> {
        // The defaults quoted are read from `GptConfig::default`, so they cannot drift.
        let d = GptConfig::default();
        let zero_checks: [(&'static str, Option<usize>, String); 6] = [
            (
                "block_size",
                Some(self.block_size),
                d.block_size.to_string(),
            ),
            ("d_model", Some(self.d_model), d.d_model.to_string()),
            ("n_layers", Some(self.n_layers), d.n_layers.to_string()),
            ("n_heads", Some(self.n_heads), d.n_heads.to_string()),
            ("n_kv_heads", self.n_kv_heads, "model.n_heads".into()),
            ("d_ff", self.d_ff, "4 * model.d_model".into()),
        ];
        for (field, value, default) in zero_checks {
            if value == Some(0) {
                return Err(GptConfigError::Zero { field, default });
            }
        }
        // The attention layer owns the head arithmetic; its errors are restated with the
        // [model] keys and the nearest values that work.
        match self.attention().validate() {
            Ok(()) => {}
            Err(AttentionConfigError::HeadsDoNotDivide {
                d_model,
                n_heads,
                valid,
            }) => {
                let multiples = [
                    d_model / n_heads * n_heads,
                    (d_model / n_heads + 1) * n_heads,
                ];
                return Err(GptConfigError::HeadsDoNotDivide {
                    d_model,
                    n_heads,
                    head_choices: nearest(&valid, n_heads),
                    d_model_choices: multiples.into_iter().filter(|&m| m > 0).collect(),
                });
            }
            Err(AttentionConfigError::KvHeadsDoNotDivide {
                n_heads,
                n_kv_heads,
                valid,
            }) => {
                return Err(GptConfigError::KvHeadsDoNotDivide {
                    n_heads,
                    n_kv_heads,
                    choices: valid,
                });
            }
            Err(AttentionConfigError::Dropout(p)) => return Err(GptConfigError::Dropout(p)),
            Err(other) => return Err(GptConfigError::Attention(other)),
        }
        if self.zero_init_head && self.tie_embeddings {
            return Err(GptConfigError::ZeroInitTiedHead);
        }
        if let Some(c) = self.logit_softcap
            && !(c.is_finite() && c > 0.0)
        {
            return Err(GptConfigError::LogitSoftcap(c));
        }
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

    /// Training compute per token as nanoGPT's `estimate_mfu` counts it: `6 N + 12 L d T`,
    /// with N every parameter but the position table (forward and backward through every
    /// weight, plus the attention products over all `T` keys). The speedrun's budget and the
    /// bench's FLOP rates both use it.
    pub fn flops_per_token(&self) -> f64 {
        let wpe = if self.positional == Positional::Learned {
            self.block_size * self.d_model
        } else {
            0
        };
        let n = (self.param_count(true) - wpe) as f64;
        6.0 * n + 12.0 * (self.n_layers * self.d_model * self.block_size) as f64
    }

    /// Parameter count from the formula, for checking the built model.
    ///
    /// Per block: attention `d (d + 2 d_kv + d) + biases`, two LayerNorms, and unless
    /// attention-only an MLP `2 d d_ff + biases`; the final LayerNorm (pre-norm only) and an
    /// untied LM head. "Without embeddings" leaves out the token and position tables, as
    /// Kaplan et al. count N; a tied LM head is the token table, so it goes too.
    pub fn param_count(&self, with_embeddings: bool) -> usize {
        let (d, ff, v) = (self.d_model, self.mlp_width(), self.embedding_rows());
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
        let bigram = if self.bigram { v * d } else { 0 };
        // Post-norm blocks end in a LayerNorm already; only pre-norm adds a final one.
        let ln_f = if self.norm == Norm::Pre { ln } else { 0 };
        let non_embedding = blocks + ln_f + lm_head;
        if with_embeddings {
            non_embedding + wte + wpe + bigram
        } else {
            non_embedding
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_the_nearest_values_that_work() {
        let divisors = |n: usize| (1..=n).filter(|k| n.is_multiple_of(*k)).collect::<Vec<_>>();
        assert_eq!(nearest(&divisors(130), 4), vec![2, 5]);
        assert_eq!(nearest(&divisors(7), 9), vec![7]);
        assert_eq!(join_or(&[1, 2, 3]), "1, 2 or 3");
        let e = GptConfig::new(10)
            .with_d_model(3)
            .with_n_heads(4)
            .validate_section();
        assert!(
            matches!(&e, Err(GptConfigError::HeadsDoNotDivide { d_model_choices, .. }) if *d_model_choices == vec![4]),
            "{e:?}"
        );
    }
}

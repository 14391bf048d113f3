//! Typed errors for configurations that cannot work.

use thiserror::Error;

/// A multi-head attention configuration that cannot be built.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AttentionConfigError {
    /// A size is zero.
    #[error("{field} must be at least 1, got 0")]
    Zero {
        /// The offending field.
        field: &'static str,
    },
    /// The heads cannot split d_model evenly.
    #[error(
        "d_model = {d_model} is not divisible by n_heads = {n_heads}: each head gets \
         d_k = d_model / n_heads dimensions. Choose n_heads from {valid:?}, or a d_model that \
         is a multiple of {n_heads}"
    )]
    HeadsDoNotDivide {
        /// Model width.
        d_model: usize,
        /// Requested heads.
        n_heads: usize,
        /// Head counts that divide d_model.
        valid: Vec<usize>,
    },
    /// The query heads cannot be grouped evenly over the key/value heads.
    #[error(
        "n_heads = {n_heads} is not divisible by n_kv_heads = {n_kv_heads}: grouped-query \
         attention shares each key/value head among n_heads / n_kv_heads query heads. Choose \
         n_kv_heads from {valid:?}"
    )]
    KvHeadsDoNotDivide {
        /// Query heads.
        n_heads: usize,
        /// Requested key/value heads.
        n_kv_heads: usize,
        /// Key/value head counts that divide n_heads.
        valid: Vec<usize>,
    },
    /// Dropout outside [0, 1).
    #[error("dropout must be in [0, 1), got {0}; use 0 to turn it off")]
    Dropout(f64),
}

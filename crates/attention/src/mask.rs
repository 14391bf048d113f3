//! Attention masks. Burn's convention is used throughout: `true` marks a position that must
//! get weight 0.

use burn::tensor::{Bool, Device, Tensor};

/// Score given to masked positions before the softmax. Finite, so a row whose keys are all
/// masked gives uniform weights instead of NaN; large enough that `exp` underflows to exactly 0.
pub const MASKED_SCORE: f32 = -1.0e9;

/// Causal mask for `t_q` queries that are the last `t_q` of `t_k` positions: query `i` may see
/// key `j` only when `j <= i + (t_k - t_q)`.
///
/// # Shapes
/// `-> [t_q, t_k]`, `true` above the shifted diagonal.
pub fn causal_mask(t_q: usize, t_k: usize, device: &Device) -> Tensor<2, Bool> {
    let offset = t_k as i64 - t_q as i64;
    Tensor::<2, Bool>::tril_mask([t_q, t_k], offset, device)
}

/// Padding mask from sequence lengths: key `j` of sequence `i` is padding when
/// `j >= lengths[i]`.
///
/// # Shapes
/// `lengths [b] -> [b, t]`
pub fn padding_mask(lengths: &[usize], t: usize, device: &Device) -> Tensor<2, Bool> {
    let data: Vec<bool> = lengths
        .iter()
        .flat_map(|&len| (0..t).map(move |j| j >= len))
        .collect();
    Tensor::from_data(
        burn::tensor::TensorData::new(data, [lengths.len(), t]),
        device,
    )
}

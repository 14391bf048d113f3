//! Seeded batches: every random draw of a run derives from `(seed, step, stream)`, so a
//! resumed run draws exactly what an uninterrupted one would have.

use burn::tensor::{Device, Int, Tensor, TensorData};

/// The RNG stream of training batches.
pub const STREAM_BATCH: u64 = 1;
/// The RNG stream of evaluation batches.
pub const STREAM_EVAL: u64 = 2;
/// The RNG stream that seeds the device (dropout).
pub const STREAM_DEVICE: u64 = 3;

/// SplitMix64: decorrelates seeds derived from `(seed, step, stream)`.
pub fn mix_seed(seed: u64, step: u64, stream: u64) -> u64 {
    let mut z = seed
        .wrapping_add(step.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `[b, t]` token tensors from flat row-major ids (inputs and targets).
pub fn batch_tensors(
    x: &[u32],
    y: &[u32],
    b: usize,
    t: usize,
    device: &Device,
) -> (Tensor<2, Int>, Tensor<2, Int>) {
    (ids_tensor(x, b, t, device), ids_tensor(y, b, t, device))
}

/// A `[b, t]` tensor of token ids, row-major.
pub fn ids_tensor(ids: &[u32], b: usize, t: usize, device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
    Tensor::<2, Int>::from_data(TensorData::new(ids, [b, t]), device)
}

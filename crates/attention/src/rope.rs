//! Rotary position embeddings (Su et al. 2021, RoFormer).
//!
//! Each pair of dimensions `(c, c + d_k/2)` of a query or key at position `p` is rotated by the
//! angle `p * base^(-2c/d_k)` ("rotate half", as in GPT-NeoX and Llama). A rotation preserves
//! dot products up to the difference of angles, so `q_i . k_j` depends on `i - j` only.
//! Angles are computed in f64 on the host so long generations keep their precision.

use burn::tensor::{DType, Device, Tensor, TensorData};
use headlab_kernels::Rotary;

/// The RoFormer frequency base.
pub const ROPE_BASE: f64 = 10_000.0;

/// `cos` and `sin` of the rotation angles for positions `offset..offset + t`, rounded once
/// from f64 to `dtype` (an f64 model, `headlab compare`'s ground truth, gets them in f64).
///
/// # Shapes
/// `-> ([1, 1, t, d_k], [1, 1, t, d_k])`, each half of the last axis repeated.
pub fn rope_tables(
    t: usize,
    d_k: usize,
    offset: usize,
    device: &Device,
    dtype: DType,
) -> (Tensor<4>, Tensor<4>) {
    let half = d_k / 2;
    let mut cos = Vec::with_capacity(t * d_k);
    let mut sin = Vec::with_capacity(t * d_k);
    for p in offset..offset + t {
        for c in 0..d_k {
            let freq = ROPE_BASE.powf(-2.0 * (c % half) as f64 / d_k as f64);
            let angle = p as f64 * freq;
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    let table =
        |v: Vec<f64>| Tensor::from_data(TensorData::new(v, [1, 1, t, d_k]), (device, dtype));
    (table(cos), table(sin))
}

/// Rotates queries or keys whose first position is `offset`.
///
/// # Shapes
/// `x [b, h, t, d_k] -> [b, h, t, d_k]` (`d_k` even)
pub fn apply_rope(x: Tensor<4>, offset: usize) -> Tensor<4> {
    let [b, h, t, d_k] = x.dims();
    let half = d_k / 2;
    let (cos, sin) = rope_tables(t, d_k, offset, &x.device(), x.dtype());
    let x1 = x.clone().slice([0..b, 0..h, 0..t, 0..half]);
    let x2 = x.clone().slice([0..b, 0..h, 0..t, half..d_k]);
    // rotate_half(x) = [-x2, x1]
    let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
    x.mul(cos).add(rotated.mul(sin))
}

/// What happens to queries and keys between their projection and attention: QK-norm (an RMS
/// norm without gain), then RoPE from position `offset`; neither by default.
///
/// # Panics
/// With `rope` and an odd `d_k` where the kernel runs (`GptConfig` refuses such models; Burn's
/// ops would rotate wrong pairs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Position {
    /// QK-norm's epsilon; `None` leaves the norm out.
    pub rms_epsilon: Option<f64>,
    /// Whether queries and keys are rotated.
    pub rope: bool,
    /// The position of the first query or key.
    pub offset: usize,
}

impl Position {
    /// Whether queries and keys pass unchanged.
    pub fn is_identity(&self) -> bool {
        self.rms_epsilon.is_none() && !self.rope
    }

    /// On the projections' layout: headlab's kernel (one op each way) where it runs,
    /// [`Self::heads_first`]'s Burn ops elsewhere.
    ///
    /// # Shapes
    /// `x [b, t, h, d_k] -> [b, t, h, d_k]`
    pub fn heads_last(&self, x: Tensor<4>) -> Tensor<4> {
        if self.is_identity() {
            x
        } else if headlab_kernels::runs_on(&x) {
            let spec = Rotary {
                rms_epsilon: self.rms_epsilon,
                rope_base: self.rope.then_some(ROPE_BASE),
                offset: self.offset,
            };
            headlab_kernels::rotary(x, spec)
        } else {
            // [b, t, h, d_k] -> [b, h, t, d_k] -> [b, t, h, d_k]
            self.heads_first(x.swap_dims(1, 2)).swap_dims(1, 2)
        }
    }

    /// On heads split out: Burn's ops where the kernel does not run, the kernel on the
    /// projections' layout (a view of these heads) where it does.
    ///
    /// # Shapes
    /// `x [b, h, t, d_k] -> [b, h, t, d_k]`
    pub fn heads_first(&self, x: Tensor<4>) -> Tensor<4> {
        if self.is_identity() {
            return x;
        }
        if headlab_kernels::runs_on(&x) {
            // [b, h, t, d_k] -> [b, t, h, d_k] -> [b, h, t, d_k]
            return self.heads_last(x.swap_dims(1, 2)).swap_dims(1, 2);
        }
        let x = match self.rms_epsilon {
            Some(epsilon) => headlab_kernels::rms_norm(x, epsilon),
            None => x,
        };
        if self.rope {
            apply_rope(x, self.offset)
        } else {
            x
        }
    }
}

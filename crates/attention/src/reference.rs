//! Deliberately slow references that the fast module is tested against.
//!
//! [`per_head_loop`] runs each head on its own weight slices with 2-D matmuls, one sequence
//! at a time, and applies W_O head by head (`sum_h context_h W_O[h]`, which equals concat then
//! W_O). [`HostAttention`] does the same in f64 on plain `Vec`s, with no Burn at all. Neither
//! uses a reshape, so a wrong head split in the module cannot hide in them.

use burn::tensor::{Device, Tensor, TensorData, activation::softmax};

use crate::mask::MASKED_SCORE;
use crate::mha::MultiHeadAttention;

/// Columns of `w [d_in, d_out]` that belong to head `h` of width `d_k`.
fn head_cols(w: Tensor<2>, h: usize, d_k: usize) -> Tensor<2> {
    let d_in = w.dims()[0];
    w.slice([0..d_in, h * d_k..(h + 1) * d_k])
}

/// Applies `x W + b` using only head `h`'s columns.
fn head_linear(
    x: Tensor<2>,
    w: Tensor<2>,
    bias: Option<Tensor<1>>,
    h: usize,
    d_k: usize,
) -> Tensor<2> {
    let y = x.matmul(head_cols(w, h, d_k));
    match bias {
        Some(bias) => y.add(bias.narrow(0, h * d_k, d_k).unsqueeze::<2>()),
        None => y,
    }
}

/// Per-head loop reference of [`MultiHeadAttention::forward_with`] (no dropout).
///
/// `padding_lengths[i]` marks keys `>= len` of sequence `i` as padding; `head_mask[h]` scales
/// head `h`'s contribution.
///
/// # Shapes
/// `x [b, t, d_model] -> (output [b, t, d_model], weights [b, n_heads, t, t])`
pub fn per_head_loop(
    mha: &MultiHeadAttention,
    x: Tensor<3>,
    padding_lengths: Option<&[usize]>,
    head_mask: Option<&[f32]>,
) -> (Tensor<3>, Tensor<4>) {
    let [b, t, d] = x.dims();
    let device = x.device();
    let group = mha.n_heads / mha.n_kv_heads;
    let (wq, wk, wv, wo) = (
        mha.q_proj.weight.val(),
        mha.k_proj.weight.val(),
        mha.v_proj.weight.val(),
        mha.o_proj.weight.val(),
    );
    let bias = |l: &burn::nn::Linear| l.bias.as_ref().map(|p| p.val());
    let mut outputs = Vec::with_capacity(b);
    let mut all_weights = Vec::with_capacity(b);
    for i in 0..b {
        let xi: Tensor<2> = x.clone().slice([i..i + 1, 0..t, 0..d]).reshape([t, d]);
        let len = padding_lengths.map_or(t, |l| l[i]);
        let mask = mask_matrix(t, len, mha.causal, &device);
        let mut out = Tensor::<2>::zeros([t, d], &device);
        let mut head_weights = Vec::with_capacity(mha.n_heads);
        for h in 0..mha.n_heads {
            let kv = h / group;
            let q = head_linear(xi.clone(), wq.clone(), bias(&mha.q_proj), h, mha.d_k);
            let k = head_linear(xi.clone(), wk.clone(), bias(&mha.k_proj), kv, mha.d_k);
            let v = head_linear(xi.clone(), wv.clone(), bias(&mha.v_proj), kv, mha.d_k);
            let scores = q
                .matmul(k.transpose())
                .div_scalar((mha.d_k as f64).sqrt())
                .add(mask.clone());
            let w = softmax(scores, 1);
            let context = w.clone().matmul(v);
            let wo_h = wo.clone().slice([h * mha.d_k..(h + 1) * mha.d_k, 0..d]);
            let scale = head_mask.map_or(1.0, |m| m[h]);
            out = out.add(context.matmul(wo_h).mul_scalar(scale));
            head_weights.push(w.reshape([1, t, t]));
        }
        if let Some(bo) = bias(&mha.o_proj) {
            out = out.add(bo.unsqueeze::<2>());
        }
        outputs.push(out.reshape([1, t, d]));
        all_weights.push(Tensor::cat(head_weights, 0).reshape([1, mha.n_heads, t, t]));
    }
    (Tensor::cat(outputs, 0), Tensor::cat(all_weights, 0))
}

/// Additive mask: 0 where allowed, [`MASKED_SCORE`] where not.
fn mask_matrix(t: usize, len: usize, causal: bool, device: &Device) -> Tensor<2> {
    let mut data = vec![0.0f32; t * t];
    for i in 0..t {
        for j in 0..t {
            if (causal && j > i) || j >= len {
                data[i * t + j] = MASKED_SCORE;
            }
        }
    }
    Tensor::from_data(TensorData::new(data, [t, t]), device)
}

/// The attention weights copied to the host as f64, row-major `[d_in, d_out]` like Burn's.
#[derive(Debug, Clone)]
pub struct HostAttention {
    /// Residual width.
    pub d_model: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Causal masking.
    pub causal: bool,
    /// `[d_model, n_heads * d_k]` and bias.
    pub wq: (Vec<f64>, Option<Vec<f64>>),
    /// `[d_model, n_kv_heads * d_k]` and bias.
    pub wk: (Vec<f64>, Option<Vec<f64>>),
    /// `[d_model, n_kv_heads * d_k]` and bias.
    pub wv: (Vec<f64>, Option<Vec<f64>>),
    /// `[n_heads * d_k, d_model]` and bias.
    pub wo: (Vec<f64>, Option<Vec<f64>>),
}

/// Reads a tensor into f64.
pub fn to_f64<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data()
        .try_into_vec_as::<f32>()
        .expect("float tensor")
        .into_iter()
        .map(f64::from)
        .collect()
}

impl HostAttention {
    /// Copies the weights of `mha` to the host.
    pub fn from_module(mha: &MultiHeadAttention) -> Self {
        let read = |l: &burn::nn::Linear| {
            (
                to_f64(l.weight.val()),
                l.bias.as_ref().map(|b| to_f64(b.val())),
            )
        };
        Self {
            d_model: mha.d_model(),
            n_heads: mha.n_heads,
            n_kv_heads: mha.n_kv_heads,
            causal: mha.causal,
            wq: read(&mha.q_proj),
            wk: read(&mha.k_proj),
            wv: read(&mha.v_proj),
            wo: read(&mha.o_proj),
        }
    }

    /// Forward pass in f64. `x` is row-major `[b, t, d_model]`; returns the output
    /// `[b, t, d_model]` and the weights `[b, n_heads, t, t]`, both row-major.
    pub fn forward(
        &self,
        x: &[f64],
        b: usize,
        t: usize,
        padding_lengths: Option<&[usize]>,
        head_mask: Option<&[f64]>,
    ) -> (Vec<f64>, Vec<f64>) {
        let d = self.d_model;
        let d_k = d / self.n_heads;
        let group = self.n_heads / self.n_kv_heads;
        let linear = |x: &[f64], (w, bias): &(Vec<f64>, Option<Vec<f64>>), d_out: usize| {
            let rows = x.len() / d;
            let mut y = vec![0.0; rows * d_out];
            for r in 0..rows {
                for o in 0..d_out {
                    let mut acc = bias.as_ref().map_or(0.0, |b| b[o]);
                    for k in 0..d {
                        acc += x[r * d + k] * w[k * d_out + o];
                    }
                    y[r * d_out + o] = acc;
                }
            }
            y
        };
        let d_kv = self.n_kv_heads * d_k;
        let mut out = vec![0.0; b * t * d];
        let mut weights = vec![0.0; b * self.n_heads * t * t];
        for i in 0..b {
            let xi = &x[i * t * d..(i + 1) * t * d];
            let q = linear(xi, &self.wq, d);
            let k = linear(xi, &self.wk, d_kv);
            let v = linear(xi, &self.wv, d_kv);
            let len = padding_lengths.map_or(t, |l| l[i]);
            let mut concat = vec![0.0; t * d];
            for h in 0..self.n_heads {
                let kv = h / group;
                let scale = head_mask.map_or(1.0, |m| m[h]);
                for r in 0..t {
                    let allowed = |j: usize| !((self.causal && j > r) || j >= len);
                    let mut scores = vec![f64::NEG_INFINITY; t];
                    for j in (0..t).filter(|&j| allowed(j)) {
                        let dot: f64 = (0..d_k)
                            .map(|c| q[r * d + h * d_k + c] * k[j * d_kv + kv * d_k + c])
                            .sum();
                        scores[j] = dot / (d_k as f64).sqrt();
                    }
                    // A row with no allowed key is uniform, as in the module.
                    let any = (0..t).any(allowed);
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let exps: Vec<f64> = (0..t)
                        .map(|j| match (any, allowed(j)) {
                            (true, true) => (scores[j] - max).exp(),
                            (true, false) => 0.0,
                            (false, _) => 1.0,
                        })
                        .collect();
                    let sum: f64 = exps.iter().sum();
                    for j in 0..t {
                        let w = exps[j] / sum;
                        weights[((i * self.n_heads + h) * t + r) * t + j] = w;
                        for c in 0..d_k {
                            concat[r * d + h * d_k + c] += scale * w * v[j * d_kv + kv * d_k + c];
                        }
                    }
                }
            }
            let y = linear(&concat, &self.wo, d);
            out[i * t * d..(i + 1) * t * d].copy_from_slice(&y);
        }
        (out, weights)
    }
}

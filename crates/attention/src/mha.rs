//! Multi-head self-attention, written to be looked inside.
//!
//! `x [b, t, d]` is projected to Q, K and V; d_model is split into `n_heads` heads of
//! `d_k = d_model / n_heads` by a reshape (so one head or eight have the same parameter
//! count); every head runs `softmax(Q K^T / sqrt(d_k)) V` in one batched matmul; the heads are
//! concatenated back to `[b, t, d]` and mixed by the output projection W_O.
//!
//! Two hooks make heads observable: the post-softmax weights of every head can be returned,
//! and a head mask scales each head's output before W_O (0 ablates a head; real values let
//! gradient-based importance be taken with respect to the mask).

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Dropout, DropoutConfig, Initializer, Linear, LinearConfig};
use burn::tensor::{Bool, Device, Tensor, TensorData};
use headlab_kernels::{flash_attention_heads_last, linear_layer};

use crate::error::AttentionConfigError;
use crate::rope::Position;
use crate::sdpa::{attention_weights, scaled_dot_product_attention};

/// Configuration of [`MultiHeadAttention`].
#[derive(Config, Debug)]
pub struct MultiHeadAttentionConfig {
    /// Width of the residual stream, split evenly across the heads.
    pub d_model: usize,
    /// Number of query heads; each gets `d_k = d_model / n_heads` dimensions.
    pub n_heads: usize,
    /// Number of key/value heads for grouped-query attention. `None` means `n_heads`
    /// (plain multi-head attention); 1 is multi-query attention.
    #[config(default = "None")]
    pub n_kv_heads: Option<usize>,
    /// Dropout on the attention weights and on the output, active only while training.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Whether the Q, K, V and output projections have a bias.
    #[config(default = true)]
    pub bias: bool,
    /// Whether position i may only attend to keys at positions <= i.
    #[config(default = true)]
    pub causal: bool,
    /// Standard deviation of the normal initialisation of Q, K and V (GPT-2 uses 0.02).
    #[config(default = 0.02)]
    pub init_std: f64,
    /// Standard deviation for W_O; `None` means `init_std`. GPT-2 scales it by
    /// `1 / sqrt(2 * n_layers)` because each block adds to the residual stream twice.
    #[config(default = "None")]
    pub out_init_std: Option<f64>,
}

/// A linear layer with GPT-2's initialisation: `N(0, std^2)` weights (exact zeros for a
/// `std` of 0, drawing nothing), zero bias. Every projection of attention and of the model's
/// MLP and LM head is made by it.
pub fn gpt2_linear(d_in: usize, d_out: usize, bias: bool, std: f64, device: &Device) -> Linear {
    let initializer = if std == 0.0 {
        Initializer::Zeros
    } else {
        Initializer::Normal { mean: 0.0, std }
    };
    let mut layer = LinearConfig::new(d_in, d_out)
        .with_bias(bias)
        .with_initializer(initializer)
        .init(device);
    layer.bias = layer
        .bias
        .map(|_| Param::from_tensor(Tensor::zeros([d_out], device)));
    layer
}

impl MultiHeadAttentionConfig {
    /// Key/value heads actually used.
    pub fn kv_heads(&self) -> usize {
        self.n_kv_heads.unwrap_or(self.n_heads)
    }

    /// Checks that the sizes can work, naming the numbers and the fix when they cannot.
    pub fn validate(&self) -> Result<(), AttentionConfigError> {
        if self.d_model == 0 {
            return Err(AttentionConfigError::Zero { field: "d_model" });
        }
        if self.n_heads == 0 {
            return Err(AttentionConfigError::Zero { field: "n_heads" });
        }
        if self.kv_heads() == 0 {
            return Err(AttentionConfigError::Zero {
                field: "n_kv_heads",
            });
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            return Err(AttentionConfigError::HeadsDoNotDivide {
                d_model: self.d_model,
                n_heads: self.n_heads,
                valid: divisors(self.d_model),
            });
        }
        if !self.n_heads.is_multiple_of(self.kv_heads()) {
            return Err(AttentionConfigError::KvHeadsDoNotDivide {
                n_heads: self.n_heads,
                n_kv_heads: self.kv_heads(),
                valid: divisors(self.n_heads),
            });
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(AttentionConfigError::Dropout(self.dropout));
        }
        Ok(())
    }

    /// Builds the module on `device`, after [`validate`](Self::validate).
    pub fn init(&self, device: &Device) -> Result<MultiHeadAttention, AttentionConfigError> {
        self.validate()?;
        let d_k = self.d_model / self.n_heads;
        let d_kv = self.kv_heads() * d_k;
        let linear =
            |d_out: usize, std: f64| gpt2_linear(self.d_model, d_out, self.bias, std, device);
        Ok(MultiHeadAttention {
            q_proj: linear(self.d_model, self.init_std),
            k_proj: linear(d_kv, self.init_std),
            v_proj: linear(d_kv, self.init_std),
            o_proj: linear(self.d_model, self.out_init_std.unwrap_or(self.init_std)),
            attn_dropout: DropoutConfig::new(self.dropout).init(),
            resid_dropout: DropoutConfig::new(self.dropout).init(),
            n_heads: self.n_heads,
            n_kv_heads: self.kv_heads(),
            d_k,
            causal: self.causal,
        })
    }
}

/// The divisors of `n`, offered as valid choices in error messages.
fn divisors(n: usize) -> Vec<usize> {
    (1..=n).filter(|k| n.is_multiple_of(*k)).collect()
}

/// Multi-head self-attention with optional grouped-query K/V sharing.
///
/// Parameters are named as in the checkpoint files: `q_proj`, `k_proj`, `v_proj`, `o_proj`.
/// Burn's [`Linear`] stores weights as `[d_in, d_out]`, so head `h` owns columns
/// `h * d_k .. (h + 1) * d_k` of `q_proj.weight` and rows `h * d_k .. (h + 1) * d_k` of
/// `o_proj.weight`.
#[derive(Module, Debug)]
pub struct MultiHeadAttention {
    /// W_Q: `[d_model, n_heads * d_k]`.
    pub q_proj: Linear,
    /// W_K: `[d_model, n_kv_heads * d_k]`.
    pub k_proj: Linear,
    /// W_V: `[d_model, n_kv_heads * d_k]`.
    pub v_proj: Linear,
    /// W_O: `[n_heads * d_k, d_model]`.
    pub o_proj: Linear,
    /// Dropout on the attention weights.
    pub attn_dropout: Dropout,
    /// Dropout on the output.
    pub resid_dropout: Dropout,
    /// Number of query heads.
    pub n_heads: usize,
    /// Number of key/value heads.
    pub n_kv_heads: usize,
    /// Width of one head.
    pub d_k: usize,
    /// Whether queries may not look at later keys.
    pub causal: bool,
}

/// Optional inputs of [`MultiHeadAttention::forward_with`].
#[derive(Debug, Clone, Default)]
pub struct AttentionOptions {
    /// `[b, t_k]`, `true` where the key is padding and must get weight 0.
    pub padding_mask: Option<Tensor<2, Bool>>,
    /// `[n_heads]`, multiplies each head's output before W_O: 1 keeps, 0 ablates.
    pub head_mask: Option<Tensor<1>>,
    /// `[n_heads, d_k]`, added to each head's output after the head mask. With a mask of 0
    /// and the head's mean output this is mean ablation.
    pub head_bias: Option<Tensor<2>>,
    /// Return the attention weights `[b, n_heads, t_q, t_k]` (after softmax, before dropout).
    pub return_weights: bool,
    /// Return every head's output `[b, n_heads, t_q, d_k]` (before mask and bias).
    pub return_head_outputs: bool,
    /// Activation patching: head `.0`'s output is replaced by that head's slice of `.1`
    /// `[b, n_heads, t_q, d_k]` (another run's outputs) at every position, after mask and bias.
    pub head_patch: Option<(usize, Tensor<4>)>,
    /// `[b, n_heads, t_q, d_k]` added to every head's output after the patch: zeros that
    /// require gradients give the gradient with respect to each head's output (attribution
    /// patching) without changing the forward pass.
    pub head_delta: Option<Tensor<4>>,
}

impl AttentionOptions {
    /// No mask, no hooks, nothing asked for: plain self-attention.
    pub fn is_plain(&self) -> bool {
        self.padding_mask.is_none()
            && self.head_mask.is_none()
            && self.head_bias.is_none()
            && !self.return_weights
            && !self.return_head_outputs
            && self.head_patch.is_none()
            && self.head_delta.is_none()
    }

    /// Options that ask for the attention weights.
    pub fn with_weights() -> Self {
        Self {
            return_weights: true,
            ..Self::default()
        }
    }
}

/// Result of [`MultiHeadAttention::forward_with`].
#[derive(Debug, Clone)]
pub struct AttentionOutput {
    /// `[b, t_q, d_model]`.
    pub output: Tensor<3>,
    /// `[b, n_heads, t_q, t_k]` when asked for.
    pub weights: Option<Tensor<4>>,
    /// `[b, n_heads, t_q, d_k]` when asked for.
    pub head_outputs: Option<Tensor<4>>,
}

/// Queries, keys and values split into heads.
#[derive(Debug, Clone)]
pub struct Qkv {
    /// `[b, n_heads, t, d_k]`.
    pub q: Tensor<4>,
    /// `[b, n_kv_heads, t, d_k]`.
    pub k: Tensor<4>,
    /// `[b, n_kv_heads, t, d_k]`.
    pub v: Tensor<4>,
}

impl MultiHeadAttention {
    /// Width of the residual stream.
    pub fn d_model(&self) -> usize {
        self.n_heads * self.d_k
    }

    /// Self-attention with no hooks.
    ///
    /// # Shapes
    /// `x [b, t, d_model] -> [b, t, d_model]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        self.forward_with(x, AttentionOptions::default()).output
    }

    /// Self-attention with a padding mask, a head mask and the weights on request.
    ///
    /// # Shapes
    /// `x [b, t, d_model] -> output [b, t, d_model]`, `weights [b, n_heads, t, t]`
    pub fn forward_with(&self, x: Tensor<3>, options: AttentionOptions) -> AttentionOutput {
        if options.is_plain()
            && let Some(output) = self.forward_direct(x.clone(), Position::default())
        {
            return AttentionOutput {
                output,
                weights: None,
                head_outputs: None,
            };
        }
        let qkv = self.project(x);
        self.attend(qkv.q, qkv.k, qkv.v, options)
    }

    /// Self-attention without hooks on headlab's flash kernel, with Q, K and V left in the
    /// projections' `[b, t, h, d_k]` layout (no head transposes either way), queries and keys
    /// through `position` first, dropout on the weights inside the kernel. `None` where it does
    /// not apply: grouped K/V, or a backend the kernel does not run on;
    /// [`project`](Self::project), `position` and [`attend`](Self::attend) compute the same
    /// there (with dropout, under another draw of the mask).
    ///
    /// # Shapes
    /// `x [b, t, d_model] -> [b, t, d_model]`
    pub fn forward_direct(&self, x: Tensor<3>, position: Position) -> Option<Tensor<3>> {
        if self.n_kv_heads != self.n_heads || !headlab_kernels::runs_on(&x) {
            return None;
        }
        // Dropout on the weights runs inside the kernel, as the weights never exist here.
        let drop = headlab_kernels::dropout_mask(&self.attn_dropout, &x.device());
        let [b, t, d] = x.dims();
        // [b, t, h * d_k] -> [b, t, h, d_k]: a view of the projection's output
        let heads = |y: Tensor<3>| y.reshape([b, t, self.n_heads, self.d_k]);
        let q = position.heads_last(heads(linear_layer(&self.q_proj, x.clone())));
        let k = position.heads_last(heads(linear_layer(&self.k_proj, x.clone())));
        let v = heads(linear_layer(&self.v_proj, x));
        // [b, t, h, d_k] -> [b, t, h * d_k]: the heads concatenated, as W_O reads them
        let context = flash_attention_heads_last(q, k, v, self.causal, drop).reshape([b, t, d]);
        Some(headlab_kernels::dropout(
            &self.resid_dropout,
            linear_layer(&self.o_proj, context),
        ))
    }

    /// Projects `x` to per-head queries, keys and values. Split from [`attend`](Self::attend) so
    /// a caller can rotate Q and K (RoPE) or prepend cached keys in between.
    ///
    /// # Shapes
    /// `x [b, t, d_model] -> q [b, n_heads, t, d_k]`, `k, v [b, n_kv_heads, t, d_k]`
    pub fn project(&self, x: Tensor<3>) -> Qkv {
        let [b, t, _] = x.dims();
        let split = |y: Tensor<3>, heads: usize| {
            // [b, t, h * d_k] -> [b, t, h, d_k] -> [b, h, t, d_k]
            y.reshape([b, t, heads, self.d_k]).swap_dims(1, 2)
        };
        Qkv {
            q: split(linear_layer(&self.q_proj, x.clone()), self.n_heads),
            k: split(linear_layer(&self.k_proj, x.clone()), self.n_kv_heads),
            v: split(linear_layer(&self.v_proj, x), self.n_kv_heads),
        }
    }

    /// Scaled dot-product attention of every head at once, then concat and W_O.
    ///
    /// The queries are the last `t_q` positions of the `t_k` keys (a KV cache passes all keys
    /// so far and only the new queries), so the causal mask lets query `i` see keys
    /// `j <= i + t_k - t_q`.
    ///
    /// # Shapes
    /// `q [b, n_heads, t_q, d_k]`, `k, v [b, n_kv_heads, t_k, d_k]`
    /// `-> output [b, t_q, d_model]`, `weights [b, n_heads, t_q, t_k]`
    pub fn attend(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        options: AttentionOptions,
    ) -> AttentionOutput {
        let [b, _, t_q, _] = q.dims();
        let k = self.repeat_kv(k);
        let v = self.repeat_kv(v);
        // With nobody asking for the weights and no dropout on them, one kernel computes the
        // same sum without keeping a [t_q, t_k] buffer: headlab's flash kernel (with its own
        // backward) on the CPU backends, the backend's fused kernel elsewhere.
        let dropout = q.device().is_autodiff() && self.attn_dropout.prob > 0.0;
        let direct = !dropout && !options.return_weights && options.padding_mask.is_none();
        let (mut context, weights) = if direct {
            (scaled_dot_product_attention(q, k, v, self.causal), None)
        } else {
            // [b, h, t_q, t_k]
            let weights = attention_weights(q, k, self.causal, options.padding_mask);
            // [b, h, t_q, t_k] x [b, h, t_k, d_k] -> [b, h, t_q, d_k]
            let context = headlab_kernels::dropout(&self.attn_dropout, weights.clone()).matmul(v);
            (context, Some(weights))
        };
        let head_outputs = options.return_head_outputs.then(|| context.clone());
        if let Some(head_mask) = options.head_mask {
            // [h] -> [1, h, 1, 1]
            context = context.mul(head_mask.reshape([1, self.n_heads, 1, 1]));
        }
        if let Some(head_bias) = options.head_bias {
            // [h, d_k] -> [1, h, 1, d_k]
            context = context.add(head_bias.reshape([1, self.n_heads, 1, self.d_k]));
        }
        if let Some((head, value)) = options.head_patch {
            // One-hot over heads, [1, h, 1, 1]: the other heads keep their own outputs exactly.
            let mut pick = vec![0.0f32; self.n_heads];
            pick[head] = 1.0;
            let on = (&value.device(), value.dtype());
            let pick = Tensor::<1>::from_data(TensorData::new(pick, [self.n_heads]), on).reshape([
                1,
                self.n_heads,
                1,
                1,
            ]);
            let keep = pick.clone().neg().add_scalar(1.0);
            context = context.mul(keep).add(value.mul(pick));
        }
        if let Some(delta) = options.head_delta {
            context = context.add(delta);
        }
        // [b, h, t_q, d_k] -> [b, t_q, h, d_k] -> [b, t_q, h * d_k]
        let context = context.swap_dims(1, 2).reshape([b, t_q, self.d_model()]);
        let output =
            headlab_kernels::dropout(&self.resid_dropout, linear_layer(&self.o_proj, context));

        AttentionOutput {
            output,
            weights: weights.filter(|_| options.return_weights),
            head_outputs,
        }
    }

    /// Shares each K/V head with its group of `n_heads / n_kv_heads` query heads:
    /// query head `h` reads K/V head `h / group`.
    ///
    /// # Shapes
    /// `[b, n_kv_heads, t, d_k] -> [b, n_heads, t, d_k]`
    pub fn repeat_kv(&self, x: Tensor<4>) -> Tensor<4> {
        let group = self.n_heads / self.n_kv_heads;
        if group == 1 {
            return x;
        }
        let [b, kv, t, d_k] = x.dims();
        // [b, kv, t, d_k] -> [b, kv, 1, t, d_k] -> [b, kv, group, t, d_k] -> [b, h, t, d_k]
        x.unsqueeze_dim::<5>(2)
            .expand([b, kv, group, t, d_k])
            .reshape([b, kv * group, t, d_k])
    }
}

//! One transformer block: attention and MLP, each with a residual connection and LayerNorm.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, LayerNorm, LayerNormConfig, Linear};
use burn::tensor::{Device, Tensor, TensorData};
pub(crate) use headlab_attention::gpt2_linear;
use headlab_attention::{AttentionOptions, MultiHeadAttention, Position, Qkv};
use headlab_kernels::linear_layer;

use crate::config::{Activation, Gelu, GptConfig, Norm, QK_NORM_EPSILON};

/// LayerNorm's epsilon, PyTorch's default (`burn::nn::LayerNorm` keeps its own private).
pub const LN_EPSILON: f64 = 1e-5;

/// A `[d_model]` LayerNorm, with a shift when the model has biases.
pub(crate) fn layer_norm_config(config: &GptConfig) -> LayerNormConfig {
    LayerNormConfig::new(config.d_model)
        .with_bias(config.bias)
        .with_epsilon(LN_EPSILON)
}

/// `ln` applied over the last dimension through headlab's kernel (one op with its own
/// backward on the CPU backends, Burn's `layer_norm` elsewhere).
pub fn norm<const D: usize>(ln: &LayerNorm, x: Tensor<D>) -> Tensor<D> {
    let beta = ln.beta.as_ref().map(|b| b.val());
    headlab_kernels::layer_norm(x, ln.gamma.val(), beta, LN_EPSILON)
}

/// The position-wise feed-forward network `c_proj(act(c_fc(x)))`.
#[derive(Module, Debug)]
pub struct Mlp {
    /// `[d_model, d_ff]`.
    pub c_fc: Linear,
    /// `[d_ff, d_model]`, initialised with the residual scale.
    pub c_proj: Linear,
    /// Dropout on the output.
    pub dropout: Dropout,
    /// Which GELU runs between the two, when the activation is GELU.
    #[module(skip)]
    pub gelu: Gelu,
    /// GELU or ReLU².
    #[module(skip)]
    pub activation: Activation,
}

impl Mlp {
    fn new(config: &GptConfig, device: &Device) -> Self {
        let (d, ff) = (config.d_model, config.mlp_width());
        Self {
            c_fc: gpt2_linear(d, ff, config.bias, 0.02, device),
            c_proj: gpt2_linear(ff, d, config.bias, config.residual_init_std(), device),
            dropout: DropoutConfig::new(config.dropout).init(),
            gelu: config.gelu,
            activation: config.activation,
        }
    }

    /// # Shapes
    /// `[b, t, d_model] -> [b, t, d_model]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let h = linear_layer(&self.c_fc, x);
        let h = match (self.activation, self.gelu) {
            (Activation::Gelu, Gelu::Exact) => headlab_kernels::gelu(h),
            (Activation::Gelu, Gelu::Tanh) => gelu_tanh(h),
            (Activation::Relu2, _) => relu_squared(h),
        };
        headlab_kernels::dropout(&self.dropout, linear_layer(&self.c_proj, h))
    }
}

/// GPT-2's GELU, `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, as Burn's ops. The cube is
/// two products, not `powf`, which some backends leave undefined for negative `x`. GPT-2
/// checkpoints are analysed and fine-tuned here, not trained from scratch, so it has no
/// kernel of its own.
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let sqrt_2_over_pi = (2.0 / std::f64::consts::PI).sqrt();
    let cube = x.clone() * x.clone() * x.clone();
    let inner = (x.clone() + cube * 0.044715) * sqrt_2_over_pi;
    x * (inner.tanh() + 1.0) * 0.5
}

/// `relu(x)^2` (Primer's squared ReLU), as Burn's ops: autodiff gives `2 relu(x)`.
pub fn relu_squared<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    burn::tensor::activation::relu(x).square()
}

/// Keys and values of one layer for the positions seen so far, before grouped-query
/// repetition (so a GQA model caches `n_kv_heads`, not `n_heads`).
#[derive(Debug, Clone)]
pub struct LayerCache {
    /// `[b, n_kv_heads, t_cached, d_k]`, already rotated when the model uses RoPE.
    pub k: Tensor<4>,
    /// `[b, n_kv_heads, t_cached, d_k]`.
    pub v: Tensor<4>,
}

/// Activation patching: another run's values in place of this run's own, at one site.
#[derive(Debug, Clone)]
pub enum PatchSite {
    /// The residual stream entering the block, at one position.
    ResidPre {
        /// The position patched.
        position: usize,
        /// `[b, t, d_model]`: the other run's stream there.
        value: Tensor<3>,
    },
    /// The attention sublayer's output (what it adds to the stream) at one position.
    Attention {
        /// The position patched.
        position: usize,
        /// `[b, t, d_model]`: the other run's attention output.
        value: Tensor<3>,
    },
    /// The MLP's output at one position.
    Mlp {
        /// The position patched.
        position: usize,
        /// `[b, t, d_model]`: the other run's MLP output.
        value: Tensor<3>,
    },
    /// One head's output before `W_O`, at every position.
    Head {
        /// The head patched.
        head: usize,
        /// `[b, n_heads, t, d_k]`: the other run's head outputs.
        value: Tensor<4>,
    },
    /// What some heads' query, key or value projection reads: their own copy of the residual
    /// stream entering the block, plus `delta`, then `ln_1` in a pre-norm block (direct path
    /// patching: an earlier head's clean-minus-corrupted write reaches this one input and
    /// nothing else). On grouped key/value heads a K or V input is the shared head's.
    HeadInput {
        /// The heads whose input is patched (usually one).
        heads: Vec<usize>,
        /// Which of its projections reads the patched stream.
        input: HeadInput,
        /// `[b, t, d_model]`, added at every position.
        delta: Tensor<3>,
    },
}

/// One of a head's three projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum HeadInput {
    /// Its queries.
    Q,
    /// Its keys.
    K,
    /// Its values.
    V,
}

impl HeadInput {
    /// Q, K, V.
    pub const ALL: [HeadInput; 3] = [HeadInput::Q, HeadInput::K, HeadInput::V];

    /// `Q`, `K` or `V`.
    pub fn name(self) -> &'static str {
        match self {
            HeadInput::Q => "Q",
            HeadInput::K => "K",
            HeadInput::V => "V",
        }
    }
}

/// `x [b, t, d]` with row `position` taken from `value`; every other row is `x`'s, exactly.
pub fn patch_position(x: Tensor<3>, value: Tensor<3>, position: usize) -> Tensor<3> {
    let t = x.dims()[1];
    let mut pick = vec![0.0f32; t];
    pick[position] = 1.0;
    let on = (&x.device(), x.dtype());
    // [t] -> [1, t, 1]
    let pick = Tensor::<1>::from_data(TensorData::new(pick, [t]), on).reshape([1, t, 1]);
    let keep = pick.clone().neg().add_scalar(1.0);
    x.mul(keep).add(value.mul(pick))
}

/// `qkv` with `heads`' `input` projection taken from `patched` (the same block's projections
/// of another stream). With grouped key/value heads, query head `h`'s K or V is the shared
/// head's.
///
/// # Shapes
/// `q [b, n_heads, t, d_k]`, `k, v [b, n_kv_heads, t, d_k]`, unchanged
fn patch_head_input(
    mut qkv: Qkv,
    patched: Qkv,
    heads: &[usize],
    input: HeadInput,
    n_heads: usize,
) -> Qkv {
    let take = |to: Tensor<4>, from: Tensor<4>, h: usize| {
        let [b, _, t, d_k] = to.dims();
        let range = [0..b, h..h + 1, 0..t, 0..d_k];
        to.slice_assign(range.clone(), from.slice(range))
    };
    let group = n_heads / qkv.k.dims()[1];
    for &head in heads {
        match input {
            HeadInput::Q => qkv.q = take(qkv.q, patched.q.clone(), head),
            HeadInput::K => qkv.k = take(qkv.k, patched.k.clone(), head / group),
            HeadInput::V => qkv.v = take(qkv.v, patched.v.clone(), head / group),
        }
    }
    qkv
}

/// Tensors added at each site of a block. Zeros that require gradients leave the forward
/// pass as it is and give, in one backward pass, the gradient of whatever the logits feed
/// with respect to every site at once (attribution patching).
#[derive(Debug, Clone)]
pub struct BlockDeltas {
    /// `[b, t, d_model]`, added to the residual stream entering the block.
    pub resid_pre: Tensor<3>,
    /// `[b, n_heads, t, d_k]`, added to each head's output before `W_O`.
    pub head: Tensor<4>,
    /// `[b, t, d_model]`, added to the attention sublayer's output.
    pub attn_out: Tensor<3>,
    /// `[b, t, d_model]`, added to the MLP's output (unused without an MLP).
    pub mlp_out: Tensor<3>,
}

/// What a block's attention is asked to do besides its forward pass.
#[derive(Debug, Clone, Default)]
pub struct BlockOptions {
    /// `[n_heads]` scale of each head's output (1 keeps, 0 ablates).
    pub head_mask: Option<Tensor<1>>,
    /// `[n_heads, d_k]` added to each head's output after the mask (mean ablation).
    pub head_bias: Option<Tensor<2>>,
    /// Return the attention weights `[b, n_heads, t_q, t_k]`.
    pub return_weights: bool,
    /// Return each head's output `[b, n_heads, t_q, d_k]`.
    pub return_head_outputs: bool,
    /// Return the attention and MLP sublayers' outputs (what each adds to the residual
    /// stream), without changing which kernels compute them.
    pub return_sublayers: bool,
    /// Another run's values at one site of this block (the residual stream entering it is
    /// patched by the model, before the block runs).
    pub patch: Option<PatchSite>,
    /// Added at the head outputs and the sublayers' outputs (the model adds `resid_pre`).
    pub deltas: Option<BlockDeltas>,
}

/// What happens to the sublayers' outputs before they join the stream.
struct SublayerHooks {
    /// Another run's attention or MLP output at one position.
    patch: Option<PatchSite>,
    /// `[b, t, d_model]` added to the attention output, then to the MLP's.
    deltas: Option<(Tensor<3>, Tensor<3>)>,
}

/// A block's output and what its attention was asked to capture.
#[derive(Debug, Clone)]
pub struct BlockOutput {
    /// `[b, t, d_model]`.
    pub x: Tensor<3>,
    /// `[b, n_heads, t_q, t_k]` when asked for.
    pub weights: Option<Tensor<4>>,
    /// `[b, n_heads, t_q, d_k]` when asked for.
    pub head_outputs: Option<Tensor<4>>,
    /// The attention sublayer's output `[b, t, d_model]`, when asked for.
    pub attention: Option<Tensor<3>>,
    /// The MLP sublayer's output `[b, t, d_model]`, when asked for (none attention-only).
    pub mlp: Option<Tensor<3>>,
    /// With the sublayers: `[1]`, the largest `|q . k| / sqrt(d_k)` over heads and query-key
    /// pairs (masked ones included), how far the softmax's inputs reach.
    pub max_score: Option<Tensor<1>>,
}

/// Attention then MLP, pre- or post-LayerNorm.
#[derive(Module, Debug)]
pub struct Block {
    /// LayerNorm around the attention sublayer.
    pub ln_1: LayerNorm,
    /// Multi-head self-attention.
    pub attn: MultiHeadAttention,
    /// LayerNorm around the MLP; absent in attention-only models.
    pub ln_2: Option<LayerNorm>,
    /// The MLP; absent in attention-only models.
    pub mlp: Option<Mlp>,
    /// Pre- or post-norm.
    #[module(skip)]
    pub norm: Norm,
    /// Whether Q and K are rotated by position.
    #[module(skip)]
    pub rope: bool,
    /// Whether Q and K are RMS-normalised per head first.
    #[module(skip)]
    pub qk_norm: bool,
}

impl Block {
    pub(crate) fn new(config: &GptConfig, device: &Device) -> Self {
        let ln = || layer_norm_config(config).init(device);
        Self {
            ln_1: ln(),
            attn: config
                .attention()
                .init(device)
                .expect("validated with the model config"),
            ln_2: (!config.attn_only).then(ln),
            mlp: (!config.attn_only).then(|| Mlp::new(config, device)),
            norm: config.norm,
            rope: config.positional == crate::Positional::Rope,
            qk_norm: config.qk_norm,
        }
    }

    /// Runs the block on new positions `offset..offset + t`. With a cache, the new keys and
    /// values are appended to it and the queries attend to everything cached.
    ///
    /// # Shapes
    /// `x [b, t, d_model] -> x [b, t, d_model]`, `weights [b, n_heads, t, t_cached + t]`
    pub fn forward(
        &self,
        x: Tensor<3>,
        offset: usize,
        cache: Option<&mut Option<LayerCache>>,
        options: BlockOptions,
    ) -> BlockOutput {
        let pre = self.norm == Norm::Pre;
        let h = if pre {
            norm(&self.ln_1, x.clone())
        } else {
            x.clone()
        };
        let (head_patch, input_patch, sublayer_patch) = match options.patch {
            Some(PatchSite::Head { head, value }) => (Some((head, value)), None, None),
            Some(PatchSite::HeadInput {
                heads,
                input,
                delta,
            }) => (None, Some((heads, input, delta)), None),
            other => (None, None, other),
        };
        let plain = cache.is_none()
            && options.head_mask.is_none()
            && options.head_bias.is_none()
            && head_patch.is_none()
            && input_patch.is_none()
            && !options.return_weights
            && !options.return_head_outputs
            && options.deltas.is_none();
        let sublayers = options.return_sublayers;
        let (head_delta, sublayer_deltas) = match options.deltas {
            Some(d) => (Some(d.head), Some((d.attn_out, d.mlp_out))),
            None => (None, None),
        };
        let hooks = SublayerHooks {
            patch: sublayer_patch,
            deltas: sublayer_deltas,
        };
        let max_score = sublayers.then(|| self.max_score(h.clone(), offset));
        if plain
            && let Some(output) = self
                .attn
                .forward_direct(h.clone(), self.position_at(offset))
        {
            let mut out = self.finish(x, output, None, None, sublayers, hooks);
            out.max_score = max_score;
            return out;
        }
        let mut qkv = self.attn.project(h);
        if let Some((heads, input, delta)) = input_patch {
            let stream = x.clone() + delta;
            let stream = if pre {
                norm(&self.ln_1, stream)
            } else {
                stream
            };
            let patched = self.attn.project(stream);
            qkv = patch_head_input(qkv, patched, &heads, input, self.attn.n_heads);
        }
        let qkv = self.position(qkv, offset);
        let (k, v) = match cache {
            Some(slot) => {
                let (k, v) = match slot.take() {
                    // [b, kv, t_cached, d_k] ++ [b, kv, t, d_k] along positions
                    Some(c) => (
                        Tensor::cat(vec![c.k, qkv.k], 2),
                        Tensor::cat(vec![c.v, qkv.v], 2),
                    ),
                    None => (qkv.k, qkv.v),
                };
                *slot = Some(LayerCache {
                    k: k.clone(),
                    v: v.clone(),
                });
                (k, v)
            }
            None => (qkv.k, qkv.v),
        };
        let attn = self.attn.attend(
            qkv.q,
            k,
            v,
            AttentionOptions {
                padding_mask: None,
                head_mask: options.head_mask,
                head_bias: options.head_bias,
                return_weights: options.return_weights,
                return_head_outputs: options.return_head_outputs,
                head_patch,
                head_delta,
            },
        );
        let mut out = self.finish(
            x,
            attn.output,
            attn.weights,
            attn.head_outputs,
            sublayers,
            hooks,
        );
        out.max_score = max_score;
        out
    }

    /// QK-norm, then RoPE, on freshly projected heads whose first position is `offset`.
    ///
    /// # Shapes
    /// `q [b, n_heads, t, d_k]`, `k [b, n_kv_heads, t, d_k]`, unchanged
    pub fn position(&self, mut qkv: Qkv, offset: usize) -> Qkv {
        let position = self.position_at(offset);
        qkv.q = position.heads_first(qkv.q);
        qkv.k = position.heads_first(qkv.k);
        qkv
    }

    /// This block's QK-norm and RoPE for heads whose first position is `offset`.
    fn position_at(&self, offset: usize) -> Position {
        Position {
            rms_epsilon: self.qk_norm.then_some(QK_NORM_EPSILON),
            rope: self.rope,
            offset,
        }
    }

    /// `max |q . k| / sqrt(d_k)` over heads and query-key pairs of the attention input `h`:
    /// the softmax turns an absolute error in a score into a relative error in its weight, so
    /// this sets how much it amplifies rounding (`headlab compare`'s bound). Computed apart
    /// from the forward so the forward's kernels stay as they are.
    ///
    /// # Shapes
    /// `h [b, t, d_model] -> [1]`
    fn max_score(&self, h: Tensor<3>, offset: usize) -> Tensor<1> {
        let qkv = self.position(self.attn.project(h), offset);
        let k = self.attn.repeat_kv(qkv.k);
        // [b, h, t, d_k] x [b, h, d_k, t] -> [b, h, t, t]
        let scores = qkv.q.matmul(k.transpose());
        scores.abs().max().div_scalar((self.attn.d_k as f64).sqrt())
    }

    /// The residual add around attention, then the MLP sublayer; `hooks` replace one
    /// sublayer's output at one position, or add to both.
    fn finish(
        &self,
        x: Tensor<3>,
        attn: Tensor<3>,
        weights: Option<Tensor<4>>,
        head_outputs: Option<Tensor<4>>,
        sublayers: bool,
        hooks: SublayerHooks,
    ) -> BlockOutput {
        let pre = self.norm == Norm::Pre;
        let (attn_delta, mlp_delta) = hooks.deltas.unzip();
        let (attn_patch, mlp_patch) = match hooks.patch {
            Some(PatchSite::Attention { position, value }) => (Some((position, value)), None),
            Some(PatchSite::Mlp { position, value }) => (None, Some((position, value))),
            _ => (None, None),
        };
        let attn = match attn_patch {
            Some((position, value)) => patch_position(attn, value, position),
            None => attn,
        };
        let attn = match attn_delta {
            Some(delta) => attn + delta,
            None => attn,
        };
        let attention = sublayers.then(|| attn.clone());
        let mut x = if pre {
            x + attn
        } else {
            norm(&self.ln_1, x + attn)
        };
        let mut mlp_out = None;
        if let (Some(ln_2), Some(mlp)) = (&self.ln_2, &self.mlp) {
            let input = if pre {
                norm(ln_2, x.clone())
            } else {
                x.clone()
            };
            let y = mlp.forward(input);
            let y = match mlp_patch {
                Some((position, value)) => patch_position(y, value, position),
                None => y,
            };
            let y = match mlp_delta {
                Some(delta) => y + delta,
                None => y,
            };
            mlp_out = sublayers.then(|| y.clone());
            x = if pre { x + y } else { norm(ln_2, x + y) };
        }
        BlockOutput {
            x,
            weights,
            head_outputs,
            attention,
            mlp: mlp_out,
            max_score: None,
        }
    }
}

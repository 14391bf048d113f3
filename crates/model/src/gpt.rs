//! The GPT-style decoder: embeddings, a stack of blocks, final LayerNorm and LM head.

use burn::module::{Flag, Module, ModuleMapper, Param};
use burn::nn::{Embedding, EmbeddingConfig, Initializer, LayerNorm, Linear};
use burn::tensor::activation::log_softmax;
use burn::tensor::{DType, Device, FloatDType, Int, Tensor, TensorData};

use crate::block::{
    Block, BlockDeltas, BlockOptions, LayerCache, PatchSite, gpt2_linear, layer_norm_config, norm,
    patch_position,
};
use crate::config::{GptConfig, GptConfigError, Norm, Positional};

/// A decoder-only transformer in the nanoGPT mould.
///
/// Parameter names follow GPT-2: `wte`, `wpe`, `blocks.{i}.ln_1`, `blocks.{i}.attn.q_proj`,
/// `blocks.{i}.mlp.c_fc`, `ln_f`, `lm_head`.
#[derive(Module, Debug)]
pub struct Gpt {
    /// Token embedding `[embedding_rows, d_model]`; also the LM head when tied.
    pub wte: Embedding,
    /// Learned position embedding `[block_size, d_model]`, when `positional = learned`.
    pub wpe: Option<Embedding>,
    /// The transformer blocks.
    pub blocks: Vec<Block>,
    /// Final LayerNorm (pre-norm models only; post-norm blocks end in one).
    pub ln_f: Option<LayerNorm>,
    /// Untied LM head `[d_model, embedding_rows]`.
    pub lm_head: Option<Linear>,
    /// Previous-token table `[embedding_rows, d_model]` (`bigram` models only).
    pub bigram: Option<Embedding>,
    /// The configuration the model was built from.
    #[module(skip)]
    pub config: GptConfig,
}

/// What [`Gpt::forward_with`] should capture or ablate.
#[derive(Debug, Clone, Default)]
pub struct ForwardOptions {
    /// `[n_layers, n_heads]` scale of every head's output (1 keeps, 0 ablates).
    pub head_mask: Option<Tensor<2>>,
    /// `[n_layers, n_heads, d_k]` added to every head's output after the mask; with a mask
    /// of 0 and a head's mean output this is mean ablation.
    pub head_bias: Option<Tensor<3>>,
    /// Return every layer's attention weights.
    pub return_weights: bool,
    /// Return every layer's per-head outputs (before mask and bias).
    pub return_head_outputs: bool,
    /// Return the embedding and every sublayer's output, named, computed by the same kernels
    /// as a plain forward (`headlab compare` localises a wrong kernel with them).
    pub return_sublayers: bool,
    /// Activation patching: block `.0`'s site `.1` takes another run's values.
    pub patch: Option<(usize, PatchSite)>,
    /// One per block: tensors added at its sites (attribution patching's gradients).
    pub deltas: Option<Vec<BlockDeltas>>,
}

/// Logits and, when asked for, attention weights.
#[derive(Debug, Clone)]
pub struct GptOutput {
    /// `[b, t, vocab_size]`.
    pub logits: Tensor<3>,
    /// One `[b, n_heads, t, t]` per layer, when asked for.
    pub weights: Vec<Tensor<4>>,
    /// One `[b, n_heads, t, d_k]` per layer, when asked for.
    pub head_outputs: Vec<Tensor<4>>,
    /// When asked for, in order: `embedding`, then per layer `block {i} attention` and
    /// `block {i} MLP` (the sublayers' outputs before the residual add), each
    /// `[b, t, d_model]`.
    pub sublayers: Vec<(String, Tensor<3>)>,
    /// With the sublayers, per layer: `[1]`, the largest `|q . k| / sqrt(d_k)` of its
    /// attention.
    pub max_scores: Vec<Tensor<1>>,
}

/// Keys and values of every layer for the positions decoded so far.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    /// One slot per layer.
    pub layers: Vec<Option<LayerCache>>,
    /// Number of positions cached; the next token's position.
    pub len: usize,
    /// `[b, 1]`: the last token decoded, the previous token of the next one (bigram models).
    pub last: Option<Tensor<2, Int>>,
}

impl KvCache {
    /// An empty cache for `n_layers` layers.
    pub fn new(n_layers: usize) -> Self {
        Self {
            layers: vec![None; n_layers],
            len: 0,
            last: None,
        }
    }
}

/// Fixed sinusoidal encodings of "Attention Is All You Need" for positions
/// `offset..offset + t`, computed in f64 and rounded once to `dtype`.
///
/// # Shapes
/// `-> [1, t, d_model]`
pub fn sinusoidal_encoding(
    t: usize,
    d_model: usize,
    offset: usize,
    device: &Device,
    dtype: DType,
) -> Tensor<3> {
    let mut data = Vec::with_capacity(t * d_model);
    for p in offset..offset + t {
        for i in 0..d_model {
            let angle = p as f64 / 10_000f64.powf((i - i % 2) as f64 / d_model as f64);
            data.push(if i % 2 == 0 { angle.sin() } else { angle.cos() });
        }
    }
    Tensor::from_data(TensorData::new(data, [1, t, d_model]), (device, dtype))
}

impl Gpt {
    /// Builds a model with GPT-2's initialisation after validating `config`.
    pub fn new(config: &GptConfig, device: &Device) -> Result<Self, GptConfigError> {
        config.validate()?;
        let embedding = |n: usize| {
            EmbeddingConfig::new(n, config.d_model)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: 0.02,
                })
                .init(device)
        };
        Ok(Self {
            wte: embedding(config.embedding_rows()),
            wpe: (config.positional == Positional::Learned).then(|| embedding(config.block_size)),
            blocks: (0..config.n_layers)
                .map(|_| Block::new(config, device))
                .collect(),
            ln_f: (config.norm == Norm::Pre).then(|| layer_norm_config(config).init(device)),
            lm_head: (!config.tie_embeddings).then(|| {
                let std = if config.zero_init_head { 0.0 } else { 0.02 };
                gpt2_linear(config.d_model, config.embedding_rows(), false, std, device)
            }),
            bigram: config.bigram.then(|| embedding(config.embedding_rows())),
            config: config.clone(),
        })
    }

    /// The same model with every parameter cast to `dtype` (f64 for `headlab compare`'s
    /// ground truth). On an autodiff device the parameters stay trainable. headlab's kernels
    /// run on f32 only, so a model in another dtype runs on Burn's ops.
    pub fn cast(self, dtype: FloatDType) -> Self {
        struct Cast(FloatDType);
        impl ModuleMapper for Cast {
            fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
                let dtype = self.0;
                param.map(|t| t.cast(dtype))
            }
        }
        let autodiff = self.wte.weight.val().device().is_autodiff();
        if autodiff {
            // Cast the plain values, then make them trainable leaves again.
            self.valid().map(&mut Cast(dtype)).train()
        } else {
            self.map(&mut Cast(dtype))
        }
    }

    /// The model on an autodiff device with dropout off: for the gradients of the function it
    /// computes (the analyses' importance, attribution and discovery passes), not those of a
    /// training step. [`Module::train`] alone turns the layers' dropout back on.
    pub fn differentiable(&self) -> Self {
        struct NoDropout;
        impl ModuleMapper for NoDropout {
            fn map_flag(&mut self, flag: Param<Flag>) -> Param<Flag> {
                flag.with_value(false)
            }
        }
        self.clone().train().map(&mut NoDropout)
    }

    /// What the first block reads: token and position embeddings of `tokens` from position 0
    /// (the `embedding` of [`ForwardOptions::return_sublayers`], without the blocks).
    ///
    /// # Shapes
    /// `tokens [b, t] -> [b, t, d_model]`
    pub fn embedding(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        self.embed(tokens, 0, None)
    }

    /// Token and position embeddings for positions `offset..offset + t`; `previous` is the
    /// token before the first (a decoding cache's last), for the bigram table.
    ///
    /// # Shapes
    /// `tokens [b, t]`, `previous [b, 1]` -> `[b, t, d_model]`
    fn embed(
        &self,
        tokens: Tensor<2, Int>,
        offset: usize,
        previous: Option<Tensor<2, Int>>,
    ) -> Tensor<3> {
        let t = tokens.dims()[1];
        let device = tokens.device();
        let mut x = self.wte.forward(tokens.clone());
        if let Some(bigram) = &self.bigram {
            x = x + self.bigram_rows(bigram, tokens, previous);
        }
        match (&self.wpe, self.config.positional) {
            (Some(wpe), _) => {
                let positions =
                    Tensor::<1, Int>::arange(offset as i64..(offset + t) as i64, &device);
                // [t] -> [1, t] -> [1, t, d]
                x + wpe.forward(positions.unsqueeze::<2>())
            }
            (None, Positional::Sinusoidal) => {
                let dtype = x.dtype();
                x + sinusoidal_encoding(t, self.config.d_model, offset, &device, dtype)
            }
            _ => x,
        }
    }

    /// Row `tokens[i - 1]` of the bigram table at every position `i`; at the first, the row
    /// of `previous` if there is one, else zeros.
    ///
    /// # Shapes
    /// `tokens [b, t]`, `previous [b, 1]` -> `[b, t, d_model]`
    fn bigram_rows(
        &self,
        table: &Embedding,
        tokens: Tensor<2, Int>,
        previous: Option<Tensor<2, Int>>,
    ) -> Tensor<3> {
        let [b, t] = tokens.dims();
        let d = self.config.d_model;
        // [b, t] -> [b, t - 1]: the previous token of positions 1..t
        let shifted = tokens.slice([0..b, 0..t - 1]);
        match previous {
            Some(first) => table.forward(Tensor::cat(vec![first, shifted], 1)),
            None => {
                // Nothing at a window's first position.
                let on = (&shifted.device(), self.wte.weight.val().dtype());
                let start = Tensor::<3>::zeros([b, 1, d], on);
                if t == 1 {
                    return start;
                }
                Tensor::cat(vec![start, table.forward(shifted)], 1)
            }
        }
    }

    /// Final LayerNorm and LM head: the logits of a residual stream (the logit lens reads
    /// intermediate states through it). A padded vocabulary's extra rows get no logit.
    ///
    /// # Shapes
    /// `[b, t, d_model] -> [b, t, vocab_size]`
    pub fn readout(&self, x: Tensor<3>) -> Tensor<3> {
        let x = match &self.ln_f {
            Some(ln) => norm(ln, x),
            None => x,
        };
        let (d, v) = (self.config.d_model, self.config.vocab_size);
        if self.config.embedding_rows() > v {
            // [rows, d] -> [v, d] -> [d, v], or [d, rows] -> [d, v]
            let w = match &self.lm_head {
                Some(head) => head.weight.val().slice([0..d, 0..v]),
                None => self.wte.weight.val().slice([0..v, 0..d]).transpose(),
            };
            return self.softcap(headlab_kernels::linear(x, w, None));
        }
        let logits = match &self.lm_head {
            Some(head) => headlab_kernels::linear_layer(head, x),
            // Tied: logits = x W_te^T, with W_te [v, d] read as [d, v].
            None => headlab_kernels::linear(x, self.wte.weight.val().transpose(), None),
        };
        self.softcap(logits)
    }

    /// `c tanh(z / c)` with `c` the model's `logit_softcap`; the logits as they are without.
    fn softcap(&self, logits: Tensor<3>) -> Tensor<3> {
        match self.config.logit_softcap {
            Some(c) => logits.div_scalar(c).tanh().mul_scalar(c),
            None => logits,
        }
    }

    /// # Shapes
    /// `tokens [b, t] -> logits [b, t, vocab_size]` (`t <= block_size`)
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        self.forward_with(tokens, ForwardOptions::default()).logits
    }

    /// Forward pass with a head mask and every layer's attention weights on request.
    ///
    /// # Shapes
    /// `tokens [b, t]`, `head_mask [n_layers, n_heads]`
    /// `-> logits [b, t, vocab_size]`, `weights n_layers x [b, n_heads, t, t]`
    pub fn forward_with(&self, tokens: Tensor<2, Int>, options: ForwardOptions) -> GptOutput {
        let mut x = self.embed(tokens, 0, None);
        let mut weights = Vec::new();
        let mut head_outputs = Vec::new();
        let mut sublayers = Vec::new();
        let mut max_scores = Vec::new();
        if options.return_sublayers {
            sublayers.push(("embedding".to_string(), x.clone()));
        }
        for (layer, block) in self.blocks.iter().enumerate() {
            let mut patch = match &options.patch {
                Some((l, site)) if *l == layer => Some(site.clone()),
                _ => None,
            };
            if let Some(PatchSite::ResidPre { position, value }) = &patch {
                x = patch_position(x, value.clone(), *position);
                patch = None;
            }
            let deltas = options.deltas.as_ref().map(|d| d[layer].clone());
            if let Some(d) = &deltas {
                x = x + d.resid_pre.clone();
            }
            let head_mask = options.head_mask.as_ref().map(|m| {
                let n_heads = m.dims()[1];
                // [n_layers, n_heads] -> [1, n_heads] -> [n_heads]
                m.clone()
                    .slice([layer..layer + 1, 0..n_heads])
                    .reshape([n_heads])
            });
            let head_bias = options.head_bias.as_ref().map(|m| {
                let [_, n_heads, d_k] = m.dims();
                // [n_layers, n_heads, d_k] -> [1, n_heads, d_k] -> [n_heads, d_k]
                m.clone()
                    .slice([layer..layer + 1, 0..n_heads, 0..d_k])
                    .reshape([n_heads, d_k])
            });
            let block_options = BlockOptions {
                head_mask,
                head_bias,
                return_weights: options.return_weights,
                return_head_outputs: options.return_head_outputs,
                return_sublayers: options.return_sublayers,
                patch,
                deltas,
            };
            let out = block.forward(x, 0, None, block_options);
            x = out.x;
            weights.extend(out.weights);
            head_outputs.extend(out.head_outputs);
            max_scores.extend(out.max_score);
            let named = [("attention", out.attention), ("MLP", out.mlp)];
            for (name, value) in named {
                if let Some(value) = value {
                    sublayers.push((format!("block {layer} {name}"), value));
                }
            }
        }
        GptOutput {
            logits: self.readout(x),
            weights,
            head_outputs,
            sublayers,
            max_scores,
        }
    }

    /// Runs new tokens through the model, reusing and extending `cache`. Their positions
    /// continue from `cache.len`.
    ///
    /// # Shapes
    /// `tokens [b, t_new] -> logits [b, t_new, vocab_size]`
    pub fn forward_cached(&self, tokens: Tensor<2, Int>, cache: &mut KvCache) -> Tensor<3> {
        if cache.layers.len() != self.blocks.len() {
            *cache = KvCache::new(self.blocks.len());
        }
        let t = tokens.dims()[1];
        let offset = cache.len;
        let last = tokens.clone().slice([0..tokens.dims()[0], t - 1..t]);
        let mut x = self.embed(tokens, offset, cache.last.replace(last));
        for (block, slot) in self.blocks.iter().zip(cache.layers.iter_mut()) {
            x = block
                .forward(x, offset, Some(slot), BlockOptions::default())
                .x;
        }
        cache.len += t;
        self.readout(x)
    }
}

/// Mean cross-entropy of `logits` against `targets`, skipping targets equal to
/// `ignore_index`.
///
/// # Shapes
/// `logits [b, t, v]`, `targets [b, t] -> [1]`
pub fn cross_entropy(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    ignore_index: Option<i64>,
) -> Tensor<1> {
    let [b, t, v] = logits.dims();
    // [b, t, v] -> [b * t, v]
    let log_probs = log_softmax(logits.reshape([b * t, v]), 1);
    let targets = targets.reshape([b * t, 1]);
    match ignore_index {
        None => log_probs.gather(1, targets).mean().neg(),
        Some(ignore) => {
            let keep = targets.clone().not_equal_elem(ignore);
            // Gather needs a valid index everywhere; ignored rows read class 0 and are zeroed.
            let safe = targets.mask_fill(keep.clone().bool_not(), 0);
            let keep = keep.float();
            let picked = log_probs.gather(1, safe).mul(keep.clone());
            picked.sum().neg().div(keep.sum().clamp_min(1.0))
        }
    }
}

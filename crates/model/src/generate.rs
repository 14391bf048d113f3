//! Autoregressive generation with a KV cache, and the sampling rules.

use burn::tensor::{Int, Tensor, TensorData};
use headlab_kernels::to_host;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use thiserror::Error;

use crate::gpt::{Gpt, KvCache};

/// How the next token is drawn from the logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// Divides the logits; 0 picks the most likely token (greedy).
    pub temperature: f32,
    /// Keep only the `k` most likely tokens.
    pub top_k: Option<usize>,
    /// Keep the smallest set of most likely tokens whose probability reaches `p` (nucleus).
    pub top_p: Option<f32>,
    /// Seed of the sampling RNG: same seed, same text.
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: None,
            top_p: None,
            seed: 1337,
        }
    }
}

/// Generation that cannot start.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GenerateError {
    /// Nothing to condition on.
    #[error("the prompt is empty: give at least one token (e.g. a newline)")]
    EmptyPrompt,
    /// A token id outside the vocabulary.
    #[error("prompt token {token} is outside the vocabulary of {vocab_size} tokens")]
    TokenOutOfVocab {
        /// The token.
        token: u32,
        /// Vocabulary size.
        vocab_size: usize,
    },
    /// Negative or non-finite temperature.
    #[error("temperature must be >= 0 (0 = greedy), got {0}")]
    Temperature(f32),
    /// top_k of zero.
    #[error("top_k must be at least 1 (1 = greedy), got 0")]
    TopK,
    /// top_p outside (0, 1].
    #[error("top_p must be in (0, 1], got {0}")]
    TopP(f32),
}

impl Sampling {
    /// Rejects settings that have no meaning.
    pub fn validate(&self) -> Result<(), GenerateError> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(GenerateError::Temperature(self.temperature));
        }
        if self.top_k == Some(0) {
            return Err(GenerateError::TopK);
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return Err(GenerateError::TopP(p));
        }
        Ok(())
    }

    /// The probabilities the next token is drawn from, after temperature, top-k and top-p.
    /// Greedy (temperature 0) puts all mass on the first largest logit.
    pub fn distribution(&self, logits: &[f32]) -> Vec<f64> {
        let argmax = logits
            .iter()
            .enumerate()
            .fold(0, |best, (i, &l)| if l > logits[best] { i } else { best });
        if self.temperature == 0.0 {
            let mut p = vec![0.0; logits.len()];
            p[argmax] = 1.0;
            return p;
        }
        let max = logits[argmax] as f64;
        let mut p: Vec<f64> = logits
            .iter()
            .map(|&l| ((l as f64 - max) / self.temperature as f64).exp())
            .collect();
        // Most likely first; ties keep vocabulary order so results are reproducible.
        let mut order: Vec<usize> = (0..p.len()).collect();
        order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
        let mut keep = self.top_k.unwrap_or(p.len()).min(p.len());
        if let Some(top_p) = self.top_p {
            let total: f64 = p.iter().sum();
            let mut mass = 0.0;
            for (n, &i) in order.iter().enumerate().take(keep) {
                mass += p[i] / total;
                if mass >= top_p as f64 - 1e-12 {
                    keep = n + 1;
                    break;
                }
            }
        }
        for &i in &order[keep..] {
            p[i] = 0.0;
        }
        let total: f64 = p.iter().sum();
        p.iter_mut().for_each(|x| *x /= total);
        p
    }

    /// Draws one token from `logits` with `rng`.
    pub fn sample(&self, logits: &[f32], rng: &mut StdRng) -> u32 {
        let p = self.distribution(logits);
        let u: f64 = rng.random();
        let mut acc = 0.0;
        for (i, &pi) in p.iter().enumerate() {
            acc += pi;
            if u < acc {
                return i as u32;
            }
        }
        // Rounding left u above the last partial sum: take the last token with mass.
        p.iter().rposition(|&x| x > 0.0).unwrap_or(0) as u32
    }
}

/// Decodes sequences token by token with a KV cache: one, or several side by side in one
/// batch (`rows`), each row advancing by one token per step.
///
/// The model sees at most `block_size` tokens: a longer prompt is cropped from the left, and
/// once the window is full it slides by one token per step. A sliding window invalidates the
/// cache for every positional scheme: learned and sinusoidal positions all shift, and even
/// with RoPE the deeper layers' cached keys were computed while the dropped token was still
/// visible. So the cache is rebuilt from the new window, which keeps the logits exactly those
/// of a full forward over it (as nanoGPT computes them without a cache).
#[derive(Debug)]
pub struct Decoder<'a> {
    model: &'a Gpt,
    cache: KvCache,
    /// Each row's tokens the model currently sees.
    windows: Vec<Vec<u32>>,
    /// Row-major `[rows, vocab_size]`.
    logits: Vec<f32>,
}

impl<'a> Decoder<'a> {
    /// Runs the prompt through the model.
    pub fn new(model: &'a Gpt, prompt: &[u32]) -> Result<Self, GenerateError> {
        Self::rows(model, prompt, 1)
    }

    /// Runs the prompt through the model as `rows` identical rows.
    pub fn rows(model: &'a Gpt, prompt: &[u32], rows: usize) -> Result<Self, GenerateError> {
        check_prompt(prompt, model.config.vocab_size)?;
        let start = prompt.len().saturating_sub(model.config.block_size);
        let mut decoder = Self {
            model,
            cache: KvCache::new(model.blocks.len()),
            windows: vec![prompt[start..].to_vec(); rows],
            logits: Vec::new(),
        };
        decoder.feed(prompt.len() - start);
        Ok(decoder)
    }

    /// Runs the last `t` tokens of every window through the cache.
    fn feed(&mut self, t: usize) {
        let device = self.model.wte.weight.val().device();
        let ids: Vec<i64> = self
            .windows
            .iter()
            .flat_map(|w| w[w.len() - t..].iter().map(|&id| id as i64))
            .collect();
        let rows = self.windows.len();
        let input = Tensor::<2, Int>::from_data(TensorData::new(ids, [rows, t]), &device);
        // [rows, t, v] -> the last position of each row, [rows * v]
        let logits = self.model.forward_cached(input, &mut self.cache);
        let [_, t, v] = logits.dims();
        self.logits =
            to_host::<f32, _>(logits.slice([0..rows, t - 1..t, 0..v]).reshape([rows * v]));
    }

    /// Logits for the token after the current window (of every row, row-major).
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// The tokens the model currently sees (in the first row).
    pub fn window(&self) -> &[u32] {
        &self.windows[0]
    }

    /// Appends `token`, sliding the window when it is full.
    pub fn push(&mut self, token: u32) {
        self.push_rows(&[token]);
    }

    /// Keeps only the rows `keep` names (indices into the current rows, ascending), so rows
    /// that are done cost nothing from here on; the kept rows' windows, cached keys and values
    /// and logits are theirs as before.
    ///
    /// # Panics
    /// If an index is not a current row.
    pub fn keep_rows(&mut self, keep: &[usize]) {
        let rows = self.windows.len();
        assert!(
            keep.iter().all(|&r| r < rows),
            "a row to keep is out of range"
        );
        if keep.len() == rows {
            return;
        }
        let v = self.model.config.vocab_size;
        self.windows = keep.iter().map(|&r| self.windows[r].clone()).collect();
        self.logits = keep
            .iter()
            .flat_map(|&r| self.logits[r * v..(r + 1) * v].iter().copied())
            .collect();
        let device = self.model.wte.weight.val().device();
        let ids: Vec<i64> = keep.iter().map(|&r| r as i64).collect();
        let ids = Tensor::<1, Int>::from_data(TensorData::new(ids, [keep.len()]), &device);
        // [rows, ...] -> [kept, ...] along the batch dimension
        for layer in self.cache.layers.iter_mut().flatten() {
            layer.k = layer.k.clone().select(0, ids.clone());
            layer.v = layer.v.clone().select(0, ids.clone());
        }
        if let Some(last) = self.cache.last.take() {
            self.cache.last = Some(last.select(0, ids));
        }
    }

    /// Appends one token to each row, sliding the windows when they are full.
    ///
    /// # Panics
    /// If `tokens` has not one token per row.
    pub fn push_rows(&mut self, tokens: &[u32]) {
        assert_eq!(tokens.len(), self.windows.len(), "one token per row");
        let full = self.windows[0].len() == self.model.config.block_size;
        for (window, &token) in self.windows.iter_mut().zip(tokens) {
            if full {
                window.remove(0);
            }
            window.push(token);
        }
        if full {
            self.cache = KvCache::new(self.model.blocks.len());
            self.feed(self.model.config.block_size);
        } else {
            self.feed(1);
        }
    }
}

/// A prompt the model can read: not empty, every token in the vocabulary.
fn check_prompt(prompt: &[u32], vocab_size: usize) -> Result<(), GenerateError> {
    if prompt.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    match prompt.iter().find(|&&t| t as usize >= vocab_size) {
        Some(&token) => Err(GenerateError::TokenOutOfVocab { token, vocab_size }),
        None => Ok(()),
    }
}

impl Gpt {
    /// `rows` continuations of `prompt` drawn side by side ([`Decoder::rows`]): each
    /// `max_new_tokens` long, or ending with its first token from `stop`. Rows draw from one
    /// seeded RNG in turn, so the same seed gives the same rows; a finished row leaves the
    /// batch ([`Decoder::keep_rows`]), so a few long rows do not keep the others' work going.
    pub fn generate_rows(
        &self,
        prompt: &[u32],
        rows: usize,
        max_new_tokens: usize,
        sampling: &Sampling,
        stop: &[u32],
    ) -> Result<Vec<Vec<u32>>, GenerateError> {
        sampling.validate()?;
        let v = self.config.vocab_size;
        let mut rng = StdRng::seed_from_u64(sampling.seed);
        let mut decoder = Decoder::rows(self, prompt, rows)?;
        let mut out = vec![Vec::new(); rows];
        // The rows still drawing, as indices into `out`, ascending; row i of the decoder is
        // `open[i]`.
        let mut open: Vec<usize> = (0..rows).collect();
        for step in 0..max_new_tokens {
            let mut last = Vec::with_capacity(open.len());
            let mut keep = Vec::with_capacity(open.len());
            for (i, &r) in open.iter().enumerate() {
                let token = sampling.sample(&decoder.logits()[i * v..(i + 1) * v], &mut rng);
                out[r].push(token);
                if !stop.contains(&token) {
                    keep.push(i);
                    last.push(token);
                }
            }
            if keep.is_empty() || step + 1 == max_new_tokens {
                break;
            }
            decoder.keep_rows(&keep);
            open = keep.iter().map(|&i| open[i]).collect();
            decoder.push_rows(&last);
        }
        Ok(out)
    }

    /// Generates `max_new_tokens` after `prompt`, calling `on_token` as each one is drawn.
    pub fn generate(
        &self,
        prompt: &[u32],
        max_new_tokens: usize,
        sampling: &Sampling,
        mut on_token: impl FnMut(u32),
    ) -> Result<Vec<u32>, GenerateError> {
        sampling.validate()?;
        let mut rng = StdRng::seed_from_u64(sampling.seed);
        let mut decoder = Decoder::new(self, prompt)?;
        let mut out = Vec::with_capacity(max_new_tokens);
        for i in 0..max_new_tokens {
            let token = sampling.sample(decoder.logits(), &mut rng);
            on_token(token);
            out.push(token);
            if i + 1 < max_new_tokens {
                decoder.push(token);
            }
        }
        Ok(out)
    }
}

//! Circuit discovery: which edges of the model's computational graph carry a task, found
//! rather than guessed.
//!
//! The graph (Conmy et al. 2023): senders write into the residual stream (the embedding, each
//! head through its rows of `W_O`, each MLP); receivers read it (each head's Q, K and V input,
//! each MLP, the logits). Every receiver reads the sum of the writes of the senders before
//! it, so an edge is one sender's write as one receiver reads it. An edge is *corrupted* when
//! its receiver reads that sender's write from the corrupted run instead of the current one;
//! attention biases, the same in both runs, are added to every later receiver.
//!
//! - **ACDC** (Conmy et al. 2023): from the whole clean model, visit receivers from the logits
//!   back and try to corrupt each incoming edge; the edge stays out when the metric moves by
//!   less than `threshold` of the clean-minus-corrupted gap. One forward pass per edge.
//! - **EAP** (Syed, Rager and Conmy 2023): score every edge at once by the first-order change
//!   of the metric when it is corrupted, `(write_corrupted - write_clean) . d metric / d input`
//!   at the clean run (one forward and one backward pass), then keep the highest-scoring edges,
//!   as few as leave the metric within `threshold` of the gap (a binary search over how many).
//!
//! Pre-norm models only (a receiver's input is a sum of writes only there), with as many key
//! and value heads as query heads.

use std::time::Instant;

use burn::tensor::{Device, Tensor};
use headlab_kernels::to_host;
use headlab_model::attention::{AttentionOptions, Qkv};
use headlab_model::{Gpt, HeadInput, Norm, norm};
use serde::Serialize;
use thiserror::Error;

use crate::patching::{Metric, PatchError, batch, check, metric_of, metric_tensor};

/// Why a circuit cannot be searched for.
#[derive(Debug, Error)]
pub enum CircuitError {
    /// The prompts or the metric.
    #[error(transparent)]
    Prompts(#[from] PatchError),
    /// Post-norm or grouped key/value heads.
    #[error("{0}")]
    Model(String),
    /// More edges than asked to try.
    #[error(
        "this model's graph has {edges} edges, more than --max-edges {max}: ACDC runs one \
         forward pass per edge; raise --max-edges, or use --method eap (a few dozen passes)"
    )]
    TooLarge {
        /// Edges in the graph.
        edges: usize,
        /// The bound.
        max: usize,
    },
    /// A task whose corrupted prompt scores the answer higher than the clean one: there is
    /// no gap for a circuit to explain.
    #[error(
        "the metric is {clean:.4} on the clean prompt and {corrupted:.4} on the corrupted one: \
         the corrupted prompt favours the answer more, so the gap points the wrong way and no \
         circuit explains it; swap --clean and --corrupted (and --answer and --versus), or \
         choose prompts on which the clean one favours the answer"
    )]
    WrongWay {
        /// The whole model's metric on the clean prompt.
        clean: f64,
        /// On the corrupted prompt.
        corrupted: f64,
    },
    /// A threshold outside `[0, 1)`.
    #[error(
        "--threshold {0} is out of range: it is a share of the clean-minus-corrupted gap, in \
         [0, 1)"
    )]
    Threshold(f64),
}

/// `headlab circuit`'s threshold when none is given, a share of the gap.
pub const DEFAULT_THRESHOLD: f64 = 0.02;

/// What writes into the residual stream, in the order the model writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Sender {
    /// Token and position embeddings.
    Embed,
    /// Head `.1` of layer `.0`, through its rows of `W_O`.
    Head(usize, usize),
    /// The MLP of a layer.
    Mlp(usize),
}

/// What reads the residual stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Receiver {
    /// One input of head `.1` of layer `.0`.
    Head(usize, usize, HeadInput),
    /// The MLP of a layer.
    Mlp(usize),
    /// The final LayerNorm and LM head.
    Logits,
}

impl Sender {
    /// `embed`, `1.0`, `mlp 1`.
    pub fn name(self) -> String {
        match self {
            Sender::Embed => "embed".into(),
            Sender::Head(l, h) => format!("{l}.{h}"),
            Sender::Mlp(l) => format!("mlp {l}"),
        }
    }
}

impl Receiver {
    /// `1.0` (the input apart, see [`Receiver::input`]), `mlp 1`, `logits`.
    pub fn name(self) -> String {
        match self {
            Receiver::Head(l, h, _) => format!("{l}.{h}"),
            Receiver::Mlp(l) => format!("mlp {l}"),
            Receiver::Logits => "logits".into(),
        }
    }

    /// `Q`, `K`, `V` for a head's input; empty otherwise.
    pub fn input(self) -> &'static str {
        match self {
            Receiver::Head(_, _, input) => input.name(),
            _ => "",
        }
    }

    /// The name with the input: `1.0 K`, `mlp 1`, `logits`.
    pub fn label(self) -> String {
        match self {
            Receiver::Head(..) => format!("{} {}", self.name(), self.input()),
            _ => self.name(),
        }
    }
}

/// One sender's write as one receiver reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Edge {
    pub from: Sender,
    pub to: Receiver,
}

impl Edge {
    /// `0.1 -> 1.0 K`, `1.0 -> logits`.
    pub fn label(self) -> String {
        format!("{} -> {}", self.from.name(), self.to.label())
    }
}

/// A model's graph: senders and receivers in the order the model runs them, and every edge.
#[derive(Debug, Clone)]
pub struct Graph {
    pub senders: Vec<Sender>,
    pub receivers: Vec<Receiver>,
    pub edges: Vec<Edge>,
    /// Per receiver, the indices of its incoming edges, in the senders' order.
    pub incoming: Vec<Vec<usize>>,
}

impl Graph {
    /// The graph of `model`; refused for post-norm models and grouped key/value heads.
    pub fn of(model: &Gpt) -> Result<Self, CircuitError> {
        let c = &model.config;
        if c.norm == Norm::Post {
            return Err(CircuitError::Model(
                "circuit discovery splits what each receiver reads into the writes of the \
                 senders before it, which only adds up in a pre-norm model, and this one is \
                 post-norm (model.norm = \"post\")"
                    .into(),
            ));
        }
        if c.kv_heads() != c.n_heads {
            return Err(CircuitError::Model(format!(
                "this model shares {} key/value heads between {} query heads; circuit discovery \
                 needs one K and one V input per head",
                c.kv_heads(),
                c.n_heads
            )));
        }
        let mlp = model.blocks.iter().all(|b| b.mlp.is_some());
        let mut senders = vec![Sender::Embed];
        let mut receivers = Vec::new();
        for l in 0..c.n_layers {
            for h in 0..c.n_heads {
                for input in HeadInput::ALL {
                    receivers.push(Receiver::Head(l, h, input));
                }
            }
            senders.extend((0..c.n_heads).map(|h| Sender::Head(l, h)));
            if mlp {
                receivers.push(Receiver::Mlp(l));
                senders.push(Sender::Mlp(l));
            }
        }
        receivers.push(Receiver::Logits);
        // A receiver reads every sender written before it.
        let before = |s: Sender, r: Receiver| match (s, r) {
            (_, Receiver::Logits) | (Sender::Embed, _) => true,
            (Sender::Head(a, _), Receiver::Head(b, _, _)) => a < b,
            (Sender::Head(a, _), Receiver::Mlp(b)) => a <= b,
            (Sender::Mlp(a), Receiver::Head(b, _, _) | Receiver::Mlp(b)) => a < b,
        };
        let (mut edges, mut incoming) = (Vec::new(), Vec::new());
        for &to in &receivers {
            let mut into = Vec::new();
            for &from in &senders {
                if before(from, to) {
                    into.push(edges.len());
                    edges.push(Edge { from, to });
                }
            }
            incoming.push(into);
        }
        Ok(Self {
            senders,
            receivers,
            edges,
            incoming,
        })
    }

    fn sender_index(&self, s: Sender) -> usize {
        self.senders
            .iter()
            .position(|&x| x == s)
            .expect("a sender of the graph")
    }

    fn receiver_index(&self, r: Receiver) -> usize {
        self.receivers
            .iter()
            .position(|&x| x == r)
            .expect("a receiver of the graph")
    }
}

/// Every sender's write in one run, `[1, t, d_model]` each, in [`Graph::senders`]' order.
#[derive(Debug, Clone)]
pub struct Writes(pub Vec<Tensor<3>>);

/// One forward pass through `graph`: each receiver reads the current run's writes, except
/// along the edges marked in `corrupted`, where it reads `alt`'s (another run's) instead;
/// `deltas` (one per receiver) are added to what each receiver reads (zeros that require
/// gradients give the metric's gradient with respect to every receiver's input). Returns the
/// logits `[1, t, vocab]` and this run's writes.
pub fn run_graph(
    model: &Gpt,
    graph: &Graph,
    tokens: &[u32],
    alt: Option<&Writes>,
    corrupted: &[bool],
    deltas: Option<&[Tensor<3>]>,
    device: &Device,
) -> (Tensor<3>, Writes) {
    let c = &model.config;
    let (n_heads, d, d_k, t) = (c.n_heads, c.d_model, c.d_k(), tokens.len());
    let embedding = model.embedding(batch(tokens, device));
    let mut writes: Vec<Tensor<3>> = vec![embedding.clone()];
    // The sum of every write so far and the attention biases: what a receiver with no
    // corrupted edge reads.
    let mut full = embedding;
    // What receiver `r` reads.
    let read = |r: usize, full: &Tensor<3>, writes: &[Tensor<3>]| -> Option<Tensor<3>> {
        let mut stream: Option<Tensor<3>> = None;
        for &e in &graph.incoming[r] {
            if corrupted[e] {
                let s = graph.sender_index(graph.edges[e].from);
                let alt = &alt.expect("corrupted edges read another run").0[s];
                let moved = alt.clone() - writes[s].clone();
                stream = Some(match stream {
                    Some(x) => x + moved,
                    None => full.clone() + moved,
                });
            }
        }
        match (stream, deltas) {
            (s, Some(deltas)) => Some(s.unwrap_or_else(|| full.clone()) + deltas[r].clone()),
            (s, None) => s,
        }
    };
    for (l, block) in model.blocks.iter().enumerate() {
        let attn = &block.attn;
        let shared = attn.project(norm(&block.ln_1, full.clone()));
        let head = |x: &Tensor<4>, h: usize| x.clone().slice([0..1, h..h + 1, 0..t, 0..d_k]);
        let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
        for h in 0..n_heads {
            for (input, into) in HeadInput::ALL.into_iter().zip([&mut q, &mut k, &mut v]) {
                let r = graph.receiver_index(Receiver::Head(l, h, input));
                let qkv = match read(r, &full, &writes) {
                    Some(stream) => attn.project(norm(&block.ln_1, stream)),
                    None => shared.clone(),
                };
                // [1, n_heads, t, d_k] -> [1, 1, t, d_k]
                into.push(head(
                    match input {
                        HeadInput::Q => &qkv.q,
                        HeadInput::K => &qkv.k,
                        HeadInput::V => &qkv.v,
                    },
                    h,
                ));
            }
        }
        // n_heads x [1, 1, t, d_k] -> [1, n_heads, t, d_k]
        let qkv = block.position(
            Qkv {
                q: Tensor::cat(q, 1),
                k: Tensor::cat(k, 1),
                v: Tensor::cat(v, 1),
            },
            0,
        );
        let options = AttentionOptions {
            return_head_outputs: true,
            ..AttentionOptions::default()
        };
        let z = attn
            .attend(qkv.q, qkv.k, qkv.v, options)
            .head_outputs
            .expect("asked for");
        let w_o = attn.o_proj.weight.val();
        let mut layer_writes = Vec::new();
        for h in 0..n_heads {
            // [1, 1, t, d_k] -> [1, t, d_k] x [d_k, d] -> [1, t, d]
            let z_h = head(&z, h).reshape([1, t, d_k]);
            let w = w_o.clone().slice([h * d_k..(h + 1) * d_k, 0..d]);
            layer_writes.push(headlab_kernels::linear(z_h, w, None));
        }
        for w in layer_writes {
            full = full + w.clone();
            writes.push(w);
        }
        if let Some(bias) = &attn.o_proj.bias {
            // [d] -> [1, 1, d]
            full = full + bias.val().reshape([1, 1, d]);
        }
        if let (Some(ln_2), Some(mlp)) = (&block.ln_2, &block.mlp) {
            let r = graph.receiver_index(Receiver::Mlp(l));
            let stream = read(r, &full, &writes).unwrap_or_else(|| full.clone());
            let y = mlp.forward(norm(ln_2, stream));
            full = full + y.clone();
            writes.push(y);
        }
    }
    let r = graph.receiver_index(Receiver::Logits);
    let stream = read(r, &full, &writes).unwrap_or_else(|| full.clone());
    (model.readout(stream), Writes(writes))
}

/// An edge with its score: the share of the clean-minus-corrupted gap the metric loses when
/// the edge is corrupted (positive: the edge carries the task). ACDC measures it when it
/// tries the edge out, with the edges left out before it; EAP estimates it to first order.
#[derive(Debug, Clone, Serialize)]
pub struct ScoredEdge {
    pub edge: Edge,
    pub score: f64,
    /// In the circuit.
    pub kept: bool,
}

/// Which search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Method {
    Acdc,
    Eap,
}

impl Method {
    /// `acdc`, `eap`.
    pub fn name(self) -> &'static str {
        match self {
            Method::Acdc => "acdc",
            Method::Eap => "eap",
        }
    }
}

/// A circuit found, and how faithful it is.
#[derive(Debug, Clone, Serialize)]
pub struct Discovery {
    pub method: Method,
    pub threshold: f64,
    /// Every edge of the graph, in the graph's order.
    pub edges: Vec<ScoredEdge>,
    /// The metric of the whole model (every edge clean).
    pub full: f64,
    /// With only the circuit's edges clean.
    pub circuit: f64,
    /// With every edge corrupted (the corrupted run).
    pub empty: f64,
    /// Forward passes used (backward passes counted as one each).
    pub passes: usize,
    /// Wall seconds.
    pub seconds: f64,
}

impl Discovery {
    /// `(circuit - empty) / (full - empty)`: the share of the task the circuit alone does.
    pub fn recovered(&self) -> f64 {
        (self.circuit - self.empty) / (self.full - self.empty)
    }

    /// The circuit's edges, the largest |score| first (ties in the graph's order).
    pub fn kept_by_score(&self) -> Vec<&ScoredEdge> {
        let mut kept: Vec<&ScoredEdge> = self.edges.iter().filter(|e| e.kept).collect();
        kept.sort_by(|a, b| b.score.abs().total_cmp(&a.score.abs()));
        kept
    }
}

/// `headlab circuit --task induction`'s prompts: `p` distinct random tokens then the first
/// `p - 1` again (clean), against `p` other tokens, none of the clean copy's, then the same
/// `p - 1` (corrupted): the answer is the clean run's `p`-th token, set against the corrupted
/// one's. `p` is 12, or what the context and the vocabulary hold. No token of `leave_out`
/// is drawn (the word tokenizer's `<unk>`, which stands for no word). Seeded, so every run
/// gets the same prompts.
pub fn induction_task(
    vocab_size: usize,
    block_size: usize,
    leave_out: &[u32],
) -> Result<(Vec<u32>, Vec<u32>, Metric), CircuitError> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut ids: Vec<u32> = (0..vocab_size as u32)
        .filter(|id| !leave_out.contains(id))
        .collect();
    let p = 12.min(block_size.div_ceil(2)).min(ids.len() / 2);
    if p < 2 {
        return Err(CircuitError::Model(format!(
            "--task induction writes 2 or more random tokens twice and as many others, which \
             needs model.block_size >= 3 and 4 tokens in the vocabulary (this model: \
             block_size {block_size}, vocabulary {vocab_size}); give --clean, --corrupted and \
             --answer"
        )));
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    ids.shuffle(&mut rng);
    let first: Vec<u32> = ids[..p].to_vec();
    let other: Vec<u32> = ids[p..2 * p].to_vec();
    let clean: Vec<u32> = first.iter().chain(&first[..p - 1]).copied().collect();
    let corrupted: Vec<u32> = other.iter().chain(&first[..p - 1]).copied().collect();
    let metric = Metric::LogitDiff {
        answer: first[p - 1],
        versus: other[p - 1],
    };
    Ok((clean, corrupted, metric))
}

/// Searches `model` for the circuit of the task `clean` -> `corrupted` scored by `metric`.
#[allow(clippy::too_many_arguments)]
pub fn discover(
    model: &Gpt,
    clean: &[u32],
    corrupted: &[u32],
    metric: Metric,
    method: Method,
    threshold: f64,
    max_edges: usize,
    device: &Device,
) -> Result<Discovery, CircuitError> {
    check(model, clean, corrupted, metric)?;
    if !(0.0..1.0).contains(&threshold) {
        return Err(CircuitError::Threshold(threshold));
    }
    let graph = Graph::of(model)?;
    let n = graph.edges.len();
    if method == Method::Acdc && n > max_edges {
        return Err(CircuitError::TooLarge {
            edges: n,
            max: max_edges,
        });
    }
    let started = Instant::now();
    let none = vec![false; n];
    let (clean_logits, clean_writes) = run_graph(model, &graph, clean, None, &none, None, device);
    let (corrupted_logits, corrupted_writes) =
        run_graph(model, &graph, corrupted, None, &none, None, device);
    let full = metric_of(clean_logits, metric);
    let empty = metric_of(corrupted_logits, metric);
    if full == empty {
        return Err(PatchError::NoDifference(full).into());
    }
    if full < empty {
        return Err(CircuitError::WrongWay {
            clean: full,
            corrupted: empty,
        });
    }
    let gap = full - empty;
    let passes = std::cell::Cell::new(2);
    let with = |corrupted: &[bool]| {
        passes.set(passes.get() + 1);
        let (logits, _) = run_graph(
            model,
            &graph,
            clean,
            Some(&corrupted_writes),
            corrupted,
            None,
            device,
        );
        metric_of(logits, metric)
    };
    // How far from the whole model, as a share of the gap.
    let distance = |m: f64| (m - full).abs() / gap.abs();
    let mut out = vec![false; n];
    let mut scores = vec![0.0; n];
    match method {
        Method::Acdc => {
            let mut current = 0.0;
            for r in (0..graph.receivers.len()).rev() {
                for &e in graph.incoming[r].iter().rev() {
                    out[e] = true;
                    let tried = distance(with(&out));
                    scores[e] = tried - current;
                    if scores[e] < threshold {
                        current = tried;
                    } else {
                        out[e] = false;
                    }
                }
            }
        }
        Method::Eap => {
            scores = eap_scores(
                model,
                &graph,
                clean,
                &corrupted_writes,
                &clean_writes,
                metric,
                device,
            )
            .into_iter()
            // The first-order change of the metric when the edge is corrupted, negated: the
            // share of the gap it loses, ACDC's sign.
            .map(|s| -s / gap)
            .collect();
            passes.set(passes.get() + 2);
            let mut order: Vec<usize> = (0..n).collect();
            // Largest first; ties in the graph's order.
            order.sort_by(|&a, &b| scores[b].abs().total_cmp(&scores[a].abs()));
            let keeping = |k: usize| {
                let mut out = vec![true; n];
                for &e in &order[..k] {
                    out[e] = false;
                }
                out
            };
            // The fewest top edges within the threshold: every edge is, so search below.
            let (mut lo, mut hi) = (0, n);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if distance(with(&keeping(mid))) <= threshold {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            out = keeping(lo);
        }
    }
    let circuit = with(&out);
    let edges = graph
        .edges
        .iter()
        .zip(scores.iter().zip(&out))
        .map(|(&edge, (&score, &gone))| ScoredEdge {
            edge,
            score,
            kept: !gone,
        })
        .collect();
    Ok(Discovery {
        method,
        threshold,
        edges,
        full,
        circuit,
        empty,
        passes: passes.get(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// EAP's score of every edge: `(write_corrupted - write_clean) . d metric / d input` of its
/// receiver, at the clean run (one forward and one backward pass), in metric units.
fn eap_scores(
    model: &Gpt,
    graph: &Graph,
    clean: &[u32],
    corrupted_writes: &Writes,
    clean_writes: &Writes,
    metric: Metric,
    device: &Device,
) -> Vec<f64> {
    let (t, d) = (clean.len(), model.config.d_model);
    let autodiff = &device.clone().autodiff();
    let differentiable = model.differentiable();
    let deltas: Vec<Tensor<3>> = graph
        .receivers
        .iter()
        .map(|_| Tensor::zeros([1, t, d], autodiff).require_grad())
        .collect();
    let none = vec![false; graph.edges.len()];
    let (logits, _) = run_graph(
        &differentiable,
        graph,
        clean,
        None,
        &none,
        Some(&deltas),
        autodiff,
    );
    let grads = metric_tensor(logits, metric).backward();
    let grad: Vec<Vec<f32>> = deltas
        .iter()
        .map(|x| to_host::<f32, _>(x.grad(&grads).expect("every receiver reads")))
        .collect();
    let host = |x: &Tensor<3>| to_host::<f32, _>(x.clone());
    let moved: Vec<Vec<f64>> = corrupted_writes
        .0
        .iter()
        .zip(&clean_writes.0)
        .map(|(k, c)| {
            host(k)
                .into_iter()
                .zip(host(c))
                .map(|(k, c)| f64::from(k) - f64::from(c))
                .collect()
        })
        .collect();
    graph
        .edges
        .iter()
        .map(|e| {
            let s = graph.sender_index(e.from);
            let r = graph.receiver_index(e.to);
            moved[s]
                .iter()
                .zip(&grad[r])
                .map(|(m, g)| m * f64::from(*g))
                .sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Paths, path_sweep};
    use burn::module::Param;
    use headlab_model::GptConfig;

    fn model(config: GptConfig, seed: u64) -> (Gpt, Device) {
        let device = Device::flex();
        device.seed(seed);
        (Gpt::new(&config, &device).unwrap(), device)
    }

    const CLEAN: [u32; 6] = [1, 4, 2, 7, 3, 5];
    const CORRUPTED: [u32; 6] = [6, 8, 9, 0, 10, 2];
    const METRIC: Metric = Metric::LogitDiff {
        answer: 2,
        versus: 9,
    };

    fn two_layers() -> GptConfig {
        GptConfig {
            vocab_size: 11,
            block_size: 8,
            d_model: 16,
            n_layers: 2,
            n_heads: 2,
            ..GptConfig::default()
        }
    }

    /// With no edge corrupted, the graph's forward pass, head by head and input by input, is
    /// the model's own.
    #[test]
    fn the_graph_with_every_edge_clean_is_the_model() {
        let (model, device) = model(two_layers(), 3);
        let graph = Graph::of(&model).unwrap();
        // Layer 0's 6 inputs read the embedding; mlp 0 reads it and 2 heads; layer 1's 6
        // inputs read those and mlp 0; mlp 1 one more than that and 2 heads; the logits all 7.
        assert_eq!(graph.edges.len(), 6 + 3 + 6 * 4 + 6 + 7);
        let none = vec![false; graph.edges.len()];
        let (logits, _) = run_graph(&model, &graph, &CLEAN, None, &none, None, &device);
        let ours = to_host::<f32, _>(logits);
        let theirs = to_host::<f32, _>(model.forward(batch(&CLEAN, &device)));
        for (a, b) in ours.iter().zip(&theirs) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }

    /// Corrupting one head-to-head edge of the corrupted run toward the clean one (the clean
    /// run's writes as the other run) is direct path patching: the metric equals
    /// [`path_sweep`]'s for that sender, receiver and input, which matches TransformerLens.
    #[test]
    fn one_edge_read_from_the_other_run_is_direct_path_patching() {
        let (model, device) = model(two_layers(), 4);
        let graph = Graph::of(&model).unwrap();
        let none = vec![false; graph.edges.len()];
        let (_, clean_writes) = run_graph(&model, &graph, &CLEAN, None, &none, None, &device);
        let paths = path_sweep(&model, &CLEAN, &CORRUPTED, METRIC, Paths::All, &device).unwrap();
        assert_eq!(paths.paths.len(), 2 * 2 * 3);
        for p in &paths.paths {
            let e = graph
                .edges
                .iter()
                .position(|e| {
                    e.from == Sender::Head(p.sender.0, p.sender.1)
                        && e.to == Receiver::Head(p.receiver.0, p.receiver.1, p.input)
                })
                .unwrap();
            let mut corrupted = none.clone();
            corrupted[e] = true;
            let (logits, _) = run_graph(
                &model,
                &graph,
                &CORRUPTED,
                Some(&clean_writes),
                &corrupted,
                None,
                &device,
            );
            let ours = metric_of(logits, METRIC);
            assert!(
                (ours - p.metric).abs() < 1e-4 * (1.0 + p.metric.abs()),
                "{p:?}: {ours}"
            );
        }
    }

    /// A planted circuit: a two-layer attention-only model whose queries and keys are zero
    /// (every head attends uniformly, so no Q or K edge carries anything) and whose second
    /// heads write nothing (their rows of `W_O` are zero). Exactly six edges can move the
    /// metric: the embedding into 0.0's and 1.0's values, 0.0 into 1.0's values, and the
    /// embedding, 0.0 and 1.0 into the logits. ACDC and EAP both return that set, twice alike.
    #[test]
    fn both_methods_find_a_planted_circuit_exactly() {
        let config = GptConfig {
            attn_only: true,
            bias: false,
            ..two_layers()
        };
        let (mut model, device) = model(config, 5);
        let d_k = model.config.d_k();
        for block in &mut model.blocks {
            let attn = &mut block.attn;
            for proj in [&mut attn.q_proj, &mut attn.k_proj] {
                proj.weight = Param::from_tensor(proj.weight.val().zeros_like());
            }
            let w = attn.o_proj.weight.val();
            let [_, d] = w.dims();
            let rows = w.clone().slice([d_k..2 * d_k, 0..d]).zeros_like();
            attn.o_proj.weight = Param::from_tensor(w.slice_assign([d_k..2 * d_k, 0..d], rows));
        }
        let planted = [
            (Sender::Embed, Receiver::Head(0, 0, HeadInput::V)),
            (Sender::Embed, Receiver::Head(1, 0, HeadInput::V)),
            (Sender::Head(0, 0), Receiver::Head(1, 0, HeadInput::V)),
            (Sender::Embed, Receiver::Logits),
            (Sender::Head(0, 0), Receiver::Logits),
            (Sender::Head(1, 0), Receiver::Logits),
        ];
        for (method, threshold) in [(Method::Acdc, 1e-6), (Method::Eap, 0.0)] {
            // This model scores the answer higher on CORRUPTED: that is the clean side here.
            let found = |_| {
                discover(
                    &model, &CORRUPTED, &CLEAN, METRIC, method, threshold, 1000, &device,
                )
                .unwrap()
            };
            let (a, b) = (found(()), found(()));
            let kept: Vec<(Sender, Receiver)> = a
                .edges
                .iter()
                .filter(|e| e.kept)
                .map(|e| (e.edge.from, e.edge.to))
                .collect();
            assert_eq!(kept.len(), planted.len(), "{method:?}: {kept:?}");
            for p in &planted {
                assert!(kept.contains(p), "{method:?}: {p:?} not in {kept:?}");
            }
            assert!((a.recovered() - 1.0).abs() < 1e-6, "{}", a.recovered());
            let scores = |d: &Discovery| d.edges.iter().map(|e| e.score).collect::<Vec<_>>();
            assert_eq!(scores(&a), scores(&b));
        }
    }

    /// A threshold outside [0, 1) and a model too large for the edge budget are refused.
    #[test]
    fn refuses_thresholds_out_of_range_and_graphs_over_budget() {
        let (model, device) = model(two_layers(), 6);
        let run = |threshold, max| {
            discover(
                &model,
                &CLEAN,
                &CORRUPTED,
                METRIC,
                Method::Acdc,
                threshold,
                max,
                &device,
            )
        };
        assert!(matches!(run(1.0, 1000), Err(CircuitError::Threshold(_))));
        assert!(matches!(run(-0.1, 1000), Err(CircuitError::Threshold(_))));
        assert!(matches!(
            run(0.1, 10),
            Err(CircuitError::TooLarge { edges: 46, max: 10 })
        ));
    }

    /// `--task induction` draws no token it is told to leave out (the word tokenizer's
    /// `<unk>`): with 5 ids and id 0 left out, the prompts use exactly the other four.
    #[test]
    fn the_induction_task_draws_no_token_left_out() {
        let (clean, corrupted, metric) = induction_task(5, 16, &[0]).unwrap();
        let mut used: Vec<u32> = clean.iter().chain(&corrupted).copied().collect();
        used.sort_unstable();
        used.dedup();
        assert_eq!(used, vec![1, 2, 3, 4], "{clean:?} {corrupted:?}");
        let Metric::LogitDiff { answer, versus } = metric else {
            panic!("{metric:?}")
        };
        assert!(answer != 0 && versus != 0);
        // Too few tokens once it is left out: refused, not drawn.
        assert!(induction_task(4, 16, &[0]).is_err());
        // Its shape: p random tokens and the first p - 1 again, against p others and the same
        // p - 1; the answer is the clean run's p-th token, against the corrupted run's.
        let (clean, corrupted, metric) = induction_task(65, 64, &[]).unwrap();
        let p = clean.len().div_ceil(2);
        assert!(p == 12 && clean.len() == 2 * p - 1, "{clean:?}");
        assert_eq!(clean[p..], clean[..p - 1]);
        assert_eq!(corrupted[p..], clean[..p - 1]);
        assert!(corrupted[..p].iter().all(|c| !clean[..p].contains(c)));
        let mut first = clean[..p].to_vec();
        first.sort_unstable();
        first.dedup();
        assert_eq!(first.len(), p, "distinct: {clean:?}");
        assert_eq!(
            metric,
            Metric::LogitDiff {
                answer: clean[p - 1],
                versus: corrupted[p - 1]
            }
        );
    }

    /// A task whose corrupted prompt scores the answer higher than the clean one is refused
    /// (the gap points the wrong way); the same task turned round is searched.
    #[test]
    fn a_gap_that_points_the_wrong_way_is_refused() {
        let (model, device) = model(two_layers(), 3);
        let full = metric_of(model.forward(batch(&CLEAN, &device)), METRIC);
        let empty = metric_of(model.forward(batch(&CORRUPTED, &device)), METRIC);
        assert!(full != empty);
        let (clean, corrupted) = if full > empty {
            (CLEAN, CORRUPTED)
        } else {
            (CORRUPTED, CLEAN)
        };
        let search = |a: &[u32], b: &[u32]| {
            discover(&model, a, b, METRIC, Method::Acdc, 0.02, 5000, &device)
        };
        assert!(search(&clean, &corrupted).is_ok());
        let err = search(&corrupted, &clean).unwrap_err();
        assert!(
            matches!(err, CircuitError::WrongWay { clean: c, corrupted: d } if c < d),
            "{err}"
        );
    }
}

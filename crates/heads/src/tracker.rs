//! Head tracking as a training observer: with `train.track_heads_every = N`, every N steps
//! the heads are scored on a fixed probe and the scores, with each head's copying score
//! ([`crate::circuits`], from the weights), appended to the run's `head_history.csv`, the in-context-learning score on its held-out batches to
//! `icl_history.csv` ([`crate::icl`]), every head's map on one probe window to
//! `head_maps.jsonl`, and on a run on the built-in grammar corpus its syntactic scores
//! ([`crate::syntax`]) on the val split's first sentences to `syntax_history.csv`.

use std::io::Write;
use std::path::PathBuf;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};
use headlab_data::Split;
use headlab_kernels::to_host;
use headlab_model::Gpt;
use headlab_train::trainer::{Observer, ObserverError, RunStart};

use crate::analysis::{mean_patterns, pattern_scores};
use crate::circuits::copying_scores;
use crate::history::{HISTORY_HEADER, HISTORY_PREFIX, HeadHistory};
use crate::icl::{ICL_FILE, ICL_HEADER, icl_score};
use crate::maps::{MAPS_FILE, MAX_MAP_TOKENS, MapHistory, MapsHeader, quantize, step_line};
use crate::probe::Probe;
use crate::syntax::{
    MAX_SENTENCES, SYNTAX_HISTORY_FILE, SYNTAX_HISTORY_HEADER, SyntaxProbe, syntax_scores,
    val_probe,
};

/// File name of the tracked scores in a run directory. (Runs made before it had this name
/// kept it as `heads.csv`, which is now only the head table's name in `RUN/heads/`.)
pub const HISTORY_FILE: &str = "head_history.csv";

/// The history file's name in runs made before [`HISTORY_FILE`].
pub const LEGACY_HISTORY_FILE: &str = "heads.csv";

/// Scores every head on a fixed probe every `train.track_heads_every` steps (0: never).
#[derive(Debug, Default)]
pub struct HeadTracker {
    every: usize,
    state: Option<Tracking>,
    /// Each head's gradient norm of the step before the next tracked one, and that step + 1:
    /// what moved the heads to the state the next row scores.
    pending: Option<(usize, Vec<f64>)>,
}

#[derive(Debug)]
struct Tracking {
    probe: Probe,
    history: HeadHistory,
    csv: PathBuf,
    /// The window whose maps are kept, and where.
    map_ids: Vec<u32>,
    maps: PathBuf,
    /// A grammar run's syntactic probe and `syntax_history.csv`.
    syntax: Option<(SyntaxProbe, PathBuf)>,
    /// `icl_history.csv`.
    icl: PathBuf,
}

impl HeadTracker {
    /// A tracker that follows the run's `train.track_heads_every`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The scores recorded so far (a resumed run's earlier ones included).
    pub fn history(&self) -> Option<&HeadHistory> {
        self.state.as_ref().map(|s| &s.history)
    }
}

impl Observer for HeadTracker {
    fn start(&mut self, start: &RunStart<'_>) -> Result<(), ObserverError> {
        self.every = start.config.train.track_heads_every;
        if self.every == 0 {
            return Ok(());
        }
        let (model, seed) = (start.model, start.config.train.seed);
        let probe = Probe::new(
            start.dataset,
            model.block_size,
            model.vocab_size,
            None,
            seed,
        )?;
        let csv = start.run.root.join(HISTORY_FILE);
        // A run made before the rename keeps its history as heads.csv: move it, but only if
        // it is one (a head table written there by `headlab heads --out RUN` is not).
        let legacy = start.run.root.join(LEGACY_HISTORY_FILE);
        let is_history = |text: String| text.starts_with(HISTORY_PREFIX);
        if start.resumed && !csv.exists() && std::fs::read_to_string(&legacy).is_ok_and(is_history)
        {
            std::fs::rename(&legacy, &csv).map_err(|e| format!("{}: {e}", legacy.display()))?;
        }
        let history = match std::fs::read_to_string(&csv) {
            Ok(text) if start.resumed => HeadHistory::parse(&text, start.step),
            _ => HeadHistory::default(),
        };
        let (map_ids, maps) = start_maps(start)?;
        let syntax = start_syntax(start)?;
        let icl = start.run.root.join(ICL_FILE);
        if !start.resumed || !icl.is_file() {
            std::fs::write(&icl, ICL_HEADER).map_err(|e| format!("{}: {e}", icl.display()))?;
        }
        self.state = Some(Tracking {
            icl,
            probe,
            history,
            csv,
            map_ids,
            maps,
            syntax,
        });
        Ok(())
    }

    fn gradients(
        &mut self,
        step: usize,
        model: &Gpt,
        grads: &GradientsParams,
    ) -> Result<(), ObserverError> {
        if self.state.is_some() && (step + 1).is_multiple_of(self.every) {
            self.pending = Some((step + 1, head_gradient_norms(model, grads)));
        }
        Ok(())
    }

    fn at_step(&mut self, step: usize, model: &Gpt, device: &Device) -> Result<(), ObserverError> {
        let Some(tracking) = self.state.as_mut() else {
            return Ok(());
        };
        if !step.is_multiple_of(self.every) {
            return Ok(());
        }
        let model = model.valid();
        let (scores, repeat_loss) = pattern_scores(&model, &tracking.probe, device);
        let grads = match self.pending.take() {
            Some((at, norms)) if at == step => norms,
            _ => vec![f64::NAN; scores.len()],
        };
        let copying = copying_scores(&model);
        let rows = tracking
            .history
            .push(step, repeat_loss, scores, grads, copying);
        let fresh = tracking.history.points.len() == 1;
        append_rows(&tracking.csv, HISTORY_HEADER, fresh, step, &rows)?;
        let probe = &tracking.probe;
        if let Some(icl) = icl_score(&model, &probe.held_out, probe.batch, device) {
            append_rows(&tracking.icl, ICL_HEADER, false, step, &icl.row(step))?;
        }
        if let Some((probe, csv)) = &tracking.syntax {
            let rows = syntax_scores(&model, probe, device).history_rows(step);
            append_rows(csv, SYNTAX_HISTORY_HEADER, false, step, &rows)?;
        }

        let t = tracking.map_ids.len();
        let weights = mean_patterns(&model, &tracking.map_ids, 1, t, device);
        let line = step_line(step, &quantize(&weights));
        let path = &tracking.maps;
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(())
    }
}

/// Writes `rows` of `step` to the CSV file `path`: after `header` alone when `fresh` (or the
/// file cannot be read), else after the file's rows before `step` (rows at or past it were
/// left by a run killed after its last checkpoint).
fn append_rows(
    path: &std::path::Path,
    header: &str,
    fresh: bool,
    step: usize,
    rows: &str,
) -> Result<(), ObserverError> {
    let old = if fresh {
        None
    } else {
        std::fs::read_to_string(path).ok()
    };
    let mut text: String = match old {
        Some(old) => old
            .lines()
            .filter(|l| {
                l.split(',')
                    .next()
                    .and_then(|s| s.parse::<usize>().ok())
                    .is_none_or(|s| s < step)
            })
            .map(|l| format!("{l}\n"))
            .collect(),
        None => header.to_string(),
    };
    text.push_str(rows);
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// A grammar run's syntactic probe (the val split's first [`MAX_SENTENCES`] whole sentences)
/// and its `syntax_history.csv`, started anew unless the run resumes; `None` for any other
/// run.
fn start_syntax(start: &RunStart<'_>) -> Result<Option<(SyntaxProbe, PathBuf)>, ObserverError> {
    if !headlab_train::grammar::is_grammar_run(start.config) {
        return Ok(None);
    }
    // Tracking syntax is an extra: a text it cannot read leaves it out, not the run.
    let probe = match val_probe(start.dataset, start.dataset.tokenizer(), MAX_SENTENCES) {
        Ok(Some((probe, _))) => probe,
        Ok(None) => return Ok(None),
        Err(e) => {
            headlab_train::log_line!("note: the syntactic heads are not tracked: {e}");
            return Ok(None);
        }
    };
    let path = start.run.root.join(SYNTAX_HISTORY_FILE);
    if !start.resumed || !path.is_file() {
        std::fs::write(&path, SYNTAX_HISTORY_HEADER)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(Some((probe, path)))
}

/// The probe window of the maps (the start of the val split, at most [`MAX_MAP_TOKENS`]) and
/// `head_maps.jsonl`, started anew, or for a resumed run cut back to its step. An old run's
/// file that no longer fits (or cannot be read) is started anew.
fn start_maps(start: &RunStart<'_>) -> Result<(Vec<u32>, PathBuf), ObserverError> {
    let val = start.dataset.tokens(Split::Val);
    let map_ids = val.to_vec(0..val.len().min(start.model.block_size).min(MAX_MAP_TOKENS));
    let tokenizer = start.dataset.tokenizer();
    let header = MapsHeader {
        format: 1,
        n_layers: start.model.n_layers,
        n_heads: start.model.n_heads,
        tokens: map_ids.iter().map(|&id| tokenizer.token_text(id)).collect(),
    };
    let path = start.run.root.join(MAPS_FILE);
    let kept = std::fs::read_to_string(&path)
        .ok()
        .filter(|_| start.resumed)
        .and_then(|text| MapHistory::parse(&text, start.step).ok())
        .filter(|h| h.header == header);
    let history = kept.unwrap_or(MapHistory {
        header,
        steps: Vec::new(),
    });
    std::fs::write(&path, history.to_text()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((map_ids, path))
}

/// Each head's gradient norm, layer by layer: the L2 norm over its own parameters' gradients,
/// its columns of `W_Q`, its key/value head's columns of `W_K` and `W_V`, and its rows of
/// `W_O` (biases left out). A parameter without a gradient counts as zero.
pub fn head_gradient_norms(model: &Gpt, grads: &GradientsParams) -> Vec<f64> {
    let (d, d_k) = (model.config.d_model, model.config.d_k());
    let mut out = Vec::new();
    for block in &model.blocks {
        let attn = &block.attn;
        let host = |id| -> Vec<f64> {
            grads
                .get::<2>(id)
                .map(|g: Tensor<2>| to_host::<f32, _>(g).into_iter().map(f64::from).collect())
                .unwrap_or_default()
        };
        let (q, k, v, o) = (
            host(attn.q_proj.weight.id),
            host(attn.k_proj.weight.id),
            host(attn.v_proj.weight.id),
            host(attn.o_proj.weight.id),
        );
        // The squares of columns `c..c + d_k` of a `[d, cols]` gradient.
        let columns = |m: &[f64], cols: usize, c: usize| -> f64 {
            if m.is_empty() {
                return 0.0;
            }
            (0..d)
                .map(|r| {
                    m[r * cols + c..r * cols + c + d_k]
                        .iter()
                        .map(|x| x * x)
                        .sum::<f64>()
                })
                .sum()
        };
        let group = attn.n_heads / attn.n_kv_heads;
        let (q_cols, kv_cols) = (attn.n_heads * d_k, attn.n_kv_heads * d_k);
        for head in 0..attn.n_heads {
            let kv = head / group;
            let rows: f64 = if o.is_empty() {
                0.0
            } else {
                o[head * d_k * d..(head + 1) * d_k * d]
                    .iter()
                    .map(|x| x * x)
                    .sum()
            };
            let total = columns(&q, q_cols, head * d_k)
                + columns(&k, kv_cols, kv * d_k)
                + columns(&v, kv_cols, kv * d_k)
                + rows;
            out.push(total.sqrt());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;
    use headlab_model::GptConfig;

    /// With a loss that is each attention matrix times a constant matrix, summed, every
    /// gradient is that constant: each head's norm must be the one read off the constants by
    /// index, here with two query heads sharing one key/value head.
    #[test]
    fn head_gradient_norms_are_each_heads_own_slices() {
        let device = Device::flex().autodiff();
        device.seed(1);
        let config = GptConfig {
            vocab_size: 7,
            block_size: 4,
            d_model: 8,
            n_layers: 2,
            n_heads: 2,
            n_kv_heads: Some(1),
            ..GptConfig::default()
        };
        let model = Gpt::new(&config, &device).unwrap();
        let (d, d_k) = (8usize, 4usize);
        // Constants [rows, cols], different for every matrix and layer.
        let constant = |rows: usize, cols: usize, salt: usize| -> Vec<f32> {
            (0..rows * cols)
                .map(|i| ((i * 7 + salt * 13) % 11) as f32 - 5.0)
                .collect()
        };
        let mut loss = Tensor::<1>::zeros([1], &device);
        let mut expected = Vec::new();
        for (l, block) in model.blocks.iter().enumerate() {
            let a = &block.attn;
            let shapes = [(d, 2 * d_k), (d, d_k), (d, d_k), (2 * d_k, d)];
            let weights = [
                &a.q_proj.weight,
                &a.k_proj.weight,
                &a.v_proj.weight,
                &a.o_proj.weight,
            ];
            let mut cs = Vec::new();
            for (k, ((rows, cols), w)) in shapes.into_iter().zip(weights).enumerate() {
                let c = constant(rows, cols, l * 4 + k);
                let ct = Tensor::<2>::from_data(TensorData::new(c.clone(), [rows, cols]), &device);
                loss = loss + w.val().mul(ct).sum();
                cs.push(c);
            }
            let sq = |x: f32| f64::from(x) * f64::from(x);
            for head in 0..2 {
                let mut total = 0.0;
                for r in 0..d {
                    for c in 0..d_k {
                        total += sq(cs[0][r * 2 * d_k + head * d_k + c]);
                        // The one key/value head serves both query heads.
                        total += sq(cs[1][r * d_k + c]) + sq(cs[2][r * d_k + c]);
                    }
                }
                for r in head * d_k..(head + 1) * d_k {
                    for c in 0..d {
                        total += sq(cs[3][r * d + c]);
                    }
                }
                expected.push(total.sqrt());
            }
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let norms = head_gradient_norms(&model, &grads);
        assert_eq!(norms.len(), expected.len());
        for (i, (a, b)) in norms.iter().zip(&expected).enumerate() {
            assert!((a - b).abs() < 1e-9 * b, "head {i}: {a} vs {b}");
        }
    }
}

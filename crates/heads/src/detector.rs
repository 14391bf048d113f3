//! TransformerLens's head detector (`head_detector.detect_head`, error measure `"mul"`), so
//! headlab's numbers compare with work that used it.
//!
//! For one sequence of tokens, a detection pattern `D [t, t]` marks where a head of the kind
//! would look: previous-token `D[i, i-1] = 1`; duplicate-token `D[i, j] = 1` for `j < i` with
//! the same token; induction `D[i, j] = 1` for `1 <= j <= i` where token `j - 1` equals token
//! `i` (the token after an earlier occurrence). A head's score is the attention mass on the
//! marked entries over its total mass, `sum(A * D) / sum(A)`, after optionally zeroing the
//! first column (`exclude_bos`) and the diagonal (`exclude_current_token`); over several
//! sequences, the mean of the per-sequence scores.
//!
//! How it differs from headlab's own scores ([`crate::scores`]): those average the one entry
//! a pattern predicts over the rows where it exists (previous-token: rows 1.., `A[i, i-1]`;
//! induction and duplicate-token: only the second copy of a repeated run), while this rule
//! sums over every marked entry of every row and divides by all the attention, rows that have
//! no marked entry included (their mass counts against the head). On a repeated random run
//! its induction and duplicate scores are therefore at most about half of headlab's.

use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_kernels::to_host;
use headlab_model::{ForwardOptions, Gpt};
use serde::Serialize;

use crate::probe::Probe;

/// What a head is checked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Detection {
    /// Looks at the token before.
    PreviousToken,
    /// Looks at earlier copies of the current token.
    DuplicateToken,
    /// Looks at the token after an earlier copy of the current token.
    Induction,
}

impl Detection {
    /// TransformerLens's names: `previous_token_head`, `duplicate_token_head`, `induction_head`.
    pub fn name(self) -> &'static str {
        match self {
            Detection::PreviousToken => "previous_token_head",
            Detection::DuplicateToken => "duplicate_token_head",
            Detection::Induction => "induction_head",
        }
    }
}

/// The detection pattern `[t, t]` (row-major, 0 or 1) of `kind` for `tokens`.
pub fn detection_pattern(kind: Detection, tokens: &[u32]) -> Vec<f64> {
    let t = tokens.len();
    let mut d = vec![0.0; t * t];
    for i in 0..t {
        for j in 0..=i {
            let marked = match kind {
                Detection::PreviousToken => j + 1 == i,
                Detection::DuplicateToken => j < i && tokens[j] == tokens[i],
                Detection::Induction => j >= 1 && tokens[j - 1] == tokens[i] && j - 1 < i,
            };
            if marked {
                d[i * t + j] = 1.0;
            }
        }
    }
    d
}

/// One head's score on one pattern `a [t, t]`: `sum(a * d) / sum(a)`, with the first column
/// and/or the diagonal of `a` zeroed first.
pub fn similarity(a: &[f32], d: &[f64], t: usize, exclude_bos: bool, exclude_current: bool) -> f64 {
    let (mut marked, mut total) = (0.0, 0.0);
    for i in 0..t {
        for j in 0..t {
            if (exclude_bos && j == 0) || (exclude_current && i == j) {
                continue;
            }
            let w = f64::from(a[i * t + j]);
            marked += w * d[i * t + j];
            total += w;
        }
    }
    marked / total
}

/// Every head's score for `kind`, `[layer][head]`, each the mean over `sequences` of its
/// score on that sequence, as `detect_head` does for a list of prompts.
pub fn detect(
    model: &Gpt,
    sequences: &[Vec<u32>],
    kind: Detection,
    exclude_bos: bool,
    exclude_current: bool,
    device: &Device,
) -> Vec<Vec<f64>> {
    let (layers, heads) = (model.config.n_layers, model.config.n_heads);
    let mut sums = vec![vec![0.0; heads]; layers];
    for tokens in sequences {
        let t = tokens.len();
        let ids: Vec<i64> = tokens.iter().map(|&x| i64::from(x)).collect();
        let input = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, t]), device);
        let out = model.forward_with(
            input,
            ForwardOptions {
                return_weights: true,
                ..ForwardOptions::default()
            },
        );
        let d = detection_pattern(kind, tokens);
        for (layer, w) in out.weights.into_iter().enumerate() {
            // [1, h, t, t]
            let w = to_host::<f32, _>(w);
            for (head, a) in w.chunks(t * t).enumerate() {
                sums[layer][head] +=
                    similarity(a, &d, t, exclude_bos, exclude_current) / sequences.len() as f64;
            }
        }
    }
    sums
}

/// One head's three TransformerLens scores on headlab's probe.
#[derive(Debug, Clone, Serialize)]
pub struct DetectorRow {
    pub layer: usize,
    pub head: usize,
    /// On the probe's text windows.
    pub previous_token: f64,
    /// On the probe's repeated random runs.
    pub duplicate_token: f64,
    /// On the probe's repeated random runs.
    pub induction: f64,
}

/// TransformerLens's three scores (no exclusions, its defaults) on the inputs headlab's own
/// scores use: previous-token on the probe's text windows, duplicate-token and induction on
/// its repeated random runs.
pub fn detector_rows(model: &Gpt, probe: &Probe, device: &Device) -> Vec<DetectorRow> {
    let (n_text, t_text) = probe.text_shape;
    let text: Vec<Vec<u32>> = (0..n_text)
        .map(|r| probe.text[r * t_text..(r + 1) * t_text].to_vec())
        .collect();
    let repeated: Vec<Vec<u32>> = probe
        .repeated
        .chunks(probe.repeated_len())
        .map(<[u32]>::to_vec)
        .collect();
    let previous = detect(model, &text, Detection::PreviousToken, false, false, device);
    let duplicate = detect(
        model,
        &repeated,
        Detection::DuplicateToken,
        false,
        false,
        device,
    );
    let induction = detect(model, &repeated, Detection::Induction, false, false, device);
    let mut rows = Vec::new();
    for layer in 0..model.config.n_layers {
        for head in 0..model.config.n_heads {
            rows.push(DetectorRow {
                layer,
                head,
                previous_token: previous[layer][head],
                duplicate_token: duplicate[layer][head],
                induction: induction[layer][head],
            });
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The patterns of a short sequence, written out by hand: tokens `a b a b c`.
    #[test]
    fn detection_patterns_mark_what_each_head_kind_looks_at() {
        let tokens = [0, 1, 0, 1, 2];
        let marked = |kind| -> Vec<(usize, usize)> {
            let d = detection_pattern(kind, &tokens);
            (0..25)
                .filter(|&k| d[k] == 1.0)
                .map(|k| (k / 5, k % 5))
                .collect()
        };
        assert_eq!(
            marked(Detection::PreviousToken),
            [(1, 0), (2, 1), (3, 2), (4, 3)]
        );
        // Position 2 (a) repeats 0; 3 (b) repeats 1.
        assert_eq!(marked(Detection::DuplicateToken), [(2, 0), (3, 1)]);
        // Position 2 (a) looks after the earlier a: 1; 3 (b) after the earlier b: 2.
        assert_eq!(marked(Detection::Induction), [(2, 1), (3, 2)]);
    }

    /// `sum(A * D) / sum(A)` after the exclusions, on a pattern written by hand.
    #[test]
    fn similarity_is_the_marked_mass_over_the_remaining_mass() {
        // Rows: [1 0 0], [0.5 0.5 0], [0.2 0.3 0.5].
        let a = [1.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.2, 0.3, 0.5];
        let d = detection_pattern(Detection::PreviousToken, &[7, 8, 9]);
        // Marked: A[1,0] = 0.5, A[2,1] = 0.3, of a total of 3.
        assert!((similarity(&a, &d, 3, false, false) - 0.8 / 3.0).abs() < 1e-7);
        // Without column 0: 0.3 of 0.5 + 0.3 + 0.5.
        assert!((similarity(&a, &d, 3, true, false) - 0.3 / 1.3).abs() < 1e-7);
        // Without the diagonal: 0.8 of 0.5 + 0.2 + 0.3.
        assert!((similarity(&a, &d, 3, false, true) - 0.8 / 1.0).abs() < 1e-7);
    }

    /// Every case TransformerLens 4.3 recorded on two exported models (tests/fixtures/exports/
    /// tl-detector.json, made by tools/tl-detector.py): three kinds, with and without the
    /// exclusions, one prompt and two as a list. Both sides take f32 attention patterns from
    /// the same weights (headlab's flash kernel, transformers' eager attention); 1e-5 covers
    /// their rounding, far below the gaps between heads.
    #[test]
    fn scores_match_transformer_lens_on_exported_models() {
        let device = Device::flex();
        let mut cases = 0;
        for (name, imported, model, folder) in crate::tl_fixtures::each("tl-detector.json") {
            for case in folder.as_array().unwrap() {
                let sequences: Vec<Vec<u32>> = case["texts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| imported.tokenizer.encode(t.as_str().unwrap()).unwrap())
                    .collect();
                let ids: Vec<Vec<u32>> = serde_json::from_value(case["ids"].clone()).unwrap();
                assert_eq!(
                    sequences, ids,
                    "{name}: headlab and TransformerLens tokenize alike"
                );
                let kind = match case["kind"].as_str().unwrap() {
                    "previous_token_head" => Detection::PreviousToken,
                    "duplicate_token_head" => Detection::DuplicateToken,
                    _ => Detection::Induction,
                };
                let (bos, current) = (
                    case["exclude_bos"].as_bool().unwrap(),
                    case["exclude_current_token"].as_bool().unwrap(),
                );
                let ours = detect(&model, &sequences, kind, bos, current, &device);
                let theirs: Vec<Vec<f64>> = serde_json::from_value(case["scores"].clone()).unwrap();
                for (l, (a, b)) in ours.iter().zip(&theirs).enumerate() {
                    for (h, (x, y)) in a.iter().zip(b).enumerate() {
                        assert!(
                            (x - y).abs() < 1e-5,
                            "{name} {} {kind:?} bos {bos} current {current} L{l}H{h}: {x} vs \
                             TransformerLens {y}",
                            case["texts"]
                        );
                    }
                }
                cases += 1;
            }
        }
        assert_eq!(cases, 36);
    }
}

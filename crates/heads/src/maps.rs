//! Attention maps through training: what `train.track_heads_every` keeps beside the scores,
//! so a report can replay how each head's pattern formed.
//!
//! `head_maps.jsonl` holds a header line, then one line per tracked step:
//!
//! ```text
//! {"format":1,"n_layers":2,"n_heads":4,"tokens":["t","h","e","·",...]}
//! {"step":0,"maps":"<base64>"}
//! ```
//!
//! `maps` is every head's map on the same probe window (the start of the val split, at most
//! [`MAX_MAP_TOKENS`] tokens), `u8` per weight (`round(255 w)`), ordered `[layer][head][query
//! i][key j]`: 2 x 4 x 64 x 64 = 32 KiB per step for the default model, 43 KiB as base64.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

/// File name of the tracked maps in a run directory.
pub const MAPS_FILE: &str = "head_maps.jsonl";

/// The longest probe window whose maps are kept: a 64 x 64 map still reads at a glance.
pub const MAX_MAP_TOKENS: usize = 64;

/// The first line of `head_maps.jsonl`: what every later line's bytes mean.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MapsHeader {
    /// Version of this layout.
    pub format: u32,
    /// Blocks of the model.
    pub n_layers: usize,
    /// Heads per block.
    pub n_heads: usize,
    /// The probe window's tokens as text, whitespace made visible.
    pub tokens: Vec<String>,
}

impl MapsHeader {
    /// Bytes of one step's maps.
    pub fn step_bytes(&self) -> usize {
        let t = self.tokens.len();
        self.n_layers * self.n_heads * t * t
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct MapsLine {
    step: usize,
    maps: String,
}

/// The tracked maps of a run: the header and `(step, bytes)` in step order.
#[derive(Debug, Clone, PartialEq)]
pub struct MapHistory {
    /// What the bytes mean.
    pub header: MapsHeader,
    /// Each tracked step's maps, `header.step_bytes()` long.
    pub steps: Vec<(usize, Vec<u8>)>,
}

/// `weights[layer][head]` (row-major `[t, t]`, each in `[0, 1]`) as bytes, `round(255 w)`.
pub fn quantize(weights: &[Vec<Vec<f32>>]) -> Vec<u8> {
    weights
        .iter()
        .flatten()
        .flatten()
        .map(|&w| (w.clamp(0.0, 1.0) * 255.0).round() as u8)
        .collect()
}

/// Bytes as standard base64, the form `head_maps.jsonl` and report pages carry them in.
pub fn to_base64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// The header line (with its newline).
pub fn header_line(header: &MapsHeader) -> String {
    serde_json::to_string(header).expect("header serialises") + "\n"
}

/// One step's line (with its newline).
pub fn step_line(step: usize, bytes: &[u8]) -> String {
    let line = MapsLine {
        step,
        maps: to_base64(bytes),
    };
    serde_json::to_string(&line).expect("line serialises") + "\n"
}

/// Why `head_maps.jsonl` cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MapsFileError {
    /// The first line is not a header.
    #[error("line 1 is not a maps header ({0})")]
    Header(String),
    /// A header of a later layout.
    #[error("format {0} is newer than this headlab reads (1)")]
    Format(u32),
    /// A step's maps are not base64.
    #[error("line {line}: {why}")]
    Base64 {
        /// 1-based line number.
        line: usize,
        /// The decoder's words.
        why: String,
    },
    /// A step's maps are not the size the header gives.
    #[error("line {line} holds {found} bytes where the header says {expected}")]
    Size {
        /// 1-based line number.
        line: usize,
        /// Bytes found.
        found: usize,
        /// Bytes the header's layers, heads and tokens make.
        expected: usize,
    },
}

impl MapHistory {
    /// Reads `head_maps.jsonl`'s text, keeping steps `<= upto`. A line cut short by a crash
    /// ends the history; a damaged header or line of the wrong size is an error naming it.
    pub fn parse(text: &str, upto: usize) -> Result<Self, MapsFileError> {
        let mut lines = text.lines();
        let header: MapsHeader = serde_json::from_str(lines.next().unwrap_or_default())
            .map_err(|e| MapsFileError::Header(e.to_string()))?;
        if header.format != 1 {
            return Err(MapsFileError::Format(header.format));
        }
        let mut steps = Vec::new();
        for (i, line) in lines.enumerate() {
            let Ok(MapsLine { step, maps }) = serde_json::from_str::<MapsLine>(line) else {
                break;
            };
            let bytes = BASE64.decode(maps).map_err(|e| MapsFileError::Base64 {
                line: i + 2,
                why: e.to_string(),
            })?;
            if bytes.len() != header.step_bytes() {
                return Err(MapsFileError::Size {
                    line: i + 2,
                    found: bytes.len(),
                    expected: header.step_bytes(),
                });
            }
            if step <= upto {
                steps.push((step, bytes));
            }
        }
        Ok(Self { header, steps })
    }

    /// The file's text: header, then every step.
    pub fn to_text(&self) -> String {
        let mut text = header_line(&self.header);
        for (step, bytes) in &self.steps {
            text += &step_line(*step, bytes);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(t: usize) -> MapsHeader {
        MapsHeader {
            format: 1,
            n_layers: 1,
            n_heads: 2,
            tokens: (0..t).map(|i| i.to_string()).collect(),
        }
    }

    /// The byte of a weight is round(255 w), and out-of-range weights are not wrapped.
    #[test]
    fn quantize_rounds_to_255ths_in_layer_head_row_order() {
        let w = vec![vec![
            vec![0.0, 1.0, 0.5, 0.002],
            vec![0.998, 1.5, -0.1, 0.25],
        ]];
        assert_eq!(quantize(&w), [0, 255, 128, 1, 254, 255, 0, 64]);
    }

    /// Written steps read back; a truncated last line (a crash mid-write) is dropped, steps
    /// past `upto` are left out, and a line of the wrong size is named.
    #[test]
    fn a_history_reads_back_what_was_written() {
        let h = header(2);
        let a: Vec<u8> = (0..8).collect();
        let b: Vec<u8> = (10..18).collect();
        let text = header_line(&h) + &step_line(0, &a) + &step_line(50, &b);
        let read = MapHistory::parse(&text, usize::MAX).unwrap();
        assert_eq!(read.steps, [(0, a.clone()), (50, b.clone())]);
        assert_eq!(read.to_text(), text);
        assert_eq!(
            MapHistory::parse(&text, 49).unwrap().steps,
            [(0, a.clone())]
        );
        let cut = &text[..text.len() - 7];
        assert_eq!(MapHistory::parse(cut, 100).unwrap().steps.len(), 1);
        let wrong = header_line(&h) + &step_line(0, &a[..5]);
        let err = MapHistory::parse(&wrong, 100).unwrap_err();
        assert_eq!(
            err,
            MapsFileError::Size {
                line: 2,
                found: 5,
                expected: 8
            }
        );
        assert_eq!(
            err.to_string(),
            "line 2 holds 5 bytes where the header says 8"
        );
        assert!(MapHistory::parse("not json\n", 0).is_err());
    }
}

//! Head tracking as a training observer: with `train.track_heads_every = N`, every N steps
//! the heads are scored on a fixed probe and the scores appended to the run's
//! `head_history.csv`, and every head's map on one probe window to `head_maps.jsonl`.

use std::io::Write;
use std::path::PathBuf;

use burn::module::Module;
use burn::tensor::Device;
use headlab_data::Split;
use headlab_model::Gpt;
use headlab_train::trainer::{Observer, ObserverError, RunStart};

use crate::analysis::{Probe, mean_patterns, pattern_scores};
use crate::history::{HISTORY_HEADER, HeadHistory};
use crate::maps::{MAPS_FILE, MAX_MAP_TOKENS, MapHistory, MapsHeader, quantize, step_line};

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
}

#[derive(Debug)]
struct Tracking {
    probe: Probe,
    history: HeadHistory,
    csv: PathBuf,
    /// The window whose maps are kept, and where.
    map_ids: Vec<u32>,
    maps: PathBuf,
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
        let is_history = |text: String| text.starts_with(HISTORY_HEADER);
        if start.resumed && !csv.exists() && std::fs::read_to_string(&legacy).is_ok_and(is_history)
        {
            std::fs::rename(&legacy, &csv).map_err(|e| format!("{}: {e}", legacy.display()))?;
        }
        let history = match std::fs::read_to_string(&csv) {
            Ok(text) if start.resumed => HeadHistory::parse(&text, start.step),
            _ => HeadHistory::default(),
        };
        let (map_ids, maps) = start_maps(start)?;
        self.state = Some(Tracking {
            probe,
            history,
            csv,
            map_ids,
            maps,
        });
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
        let rows = tracking.history.push(step, repeat_loss, scores);
        let mut text = String::from(HISTORY_HEADER);
        if tracking.history.points.len() > 1 {
            text = std::fs::read_to_string(&tracking.csv).unwrap_or(text);
            // Rows past `step` were left by a run killed after its last checkpoint.
            text = text
                .lines()
                .filter(|l| {
                    l.split(',')
                        .next()
                        .and_then(|s| s.parse::<usize>().ok())
                        .is_none_or(|s| s < step)
                })
                .map(|l| format!("{l}\n"))
                .collect();
        }
        text.push_str(&rows);
        std::fs::write(&tracking.csv, text)
            .map_err(|e| format!("{}: {e}", tracking.csv.display()))?;

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

/// The probe window of the maps (the start of the val split, at most [`MAX_MAP_TOKENS`]) and
/// `head_maps.jsonl`, started anew, or for a resumed run cut back to its step. An old run's
/// file that no longer fits (or cannot be read) is started anew.
fn start_maps(start: &RunStart<'_>) -> Result<(Vec<u32>, PathBuf), ObserverError> {
    let val = start.dataset.tokens(Split::Val);
    let map_ids = val[..val.len().min(start.model.block_size).min(MAX_MAP_TOKENS)].to_vec();
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

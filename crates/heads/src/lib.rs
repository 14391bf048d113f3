//! What each attention head does, as numbers.
//!
//! - [`icl`]: the in-context-learning score (late minus early loss), through training.
//! - [`scores`]: score definitions on one attention pattern (previous-token, induction,
//!   duplicate-token, first-token, distance, entropy) and the labels drawn from them.
//! - [`probe`]: the fixed inputs heads are measured on (text windows, repeated random
//!   sequences, held-out batches).
//! - [`analysis`]: pattern scores, zero and mean ablation, gradient importance,
//!   and the head table of a checkpoint.
//! - [`attribution`]: direct logit attribution, each head's and MLP's direct share of a logit.
//! - [`circuits`]: each head's full OV circuit: its copying score (eigenvalues) and
//!   diagonal top-1 accuracy, what it writes rather than where it looks.
//! - [`composition`]: Q, K and V composition scores between heads of different layers, from
//!   the weights, and what random heads of the same shapes score.
//! - [`detector`]: TransformerLens's head detector (previous-token, duplicate-token,
//!   induction by its "mul" rule), so scores compare with work that used it.
//! - [`lens`]: the logit lens, every state of the residual stream read through the final
//!   LayerNorm and LM head.
//! - [`history`]: scores through training (`head_history.csv`) and the induction circuit read from
//!   them.
//! - [`patching`]: activation patching of a clean prompt into a corrupted one, site by site,
//!   and path patching from one head into another's Q, K or V; [`patch_report`]: its summary,
//!   `patch.csv`, `patch.json` and `path.csv`.
//! - [`syntax`]: each head's attention on the grammar's dependencies against fixed-offset
//!   rules, the subject trackers and the agreement ablation; [`syntax_report`]: their files
//!   (`syntax.csv`, `agreement.csv`, `syntax.json`) and the text `train` and `heads` print.
//! - [`relations`]: heads on the `relations` corpus: Clark scores for the subject and the
//!   object relation where each word is predicted, and the two forced choices with heads
//!   zeroed.
//! - [`pruning`]: heads removed one at a time in order of gradient importance (Michel et al.
//!   2019), against reverse and random orders; [`prune_report`]: `prune.csv` and its summary.
//! - [`maps`]: attention maps through training (`head_maps.jsonl`).
//! - [`tracker`]: a training observer that records both.
//!
//! Analysis returns data, and its text and CSV/JSON files sit beside it (the `*_report`
//! modules); pictures and pages of it are `headlab-report`'s job, so this crate must not
//! depend on it (or on the CLI).

pub mod analysis;
pub mod attribution;
pub mod attribution_patching;
pub mod circuits;
pub mod composition;
pub mod detector;
pub mod discovery;
pub mod discovery_report;
pub mod history;
pub mod icl;
pub mod lens;
pub mod maps;
pub mod patch_report;
pub mod patching;
pub mod probe;
pub mod prune_report;
pub mod pruning;
pub mod relations;
pub mod scores;
pub mod syntax;
pub mod syntax_report;
pub mod tracker;

pub use analysis::{AttentionMaps, HeadReport, HeadRow, PatternScores, head_report};
pub use attribution::{Attribution, AttributionError, Part, attribute};
pub use composition::{Composition, CompositionTable, Mode, composition_table};
pub use detector::{Detection, DetectorRow, detector_rows};
pub use history::{Circuit, HISTORY_HEADER, HeadHistory, find_circuit};
pub use lens::{LensError, LensStage, logit_lens};
pub use maps::{MAPS_FILE, MapHistory, MapsFileError, MapsHeader};
pub use patching::{
    Metric, PatchError, Patching, PathError, PathPatch, PathPatching, Paths, Sweep, patch_sweeps,
    path_into_heads, path_sweep,
};
pub use probe::Probe;
pub use scores::HeadLabel;
pub use tracker::{HISTORY_FILE, HeadTracker, LEGACY_HISTORY_FILE};

/// What the tests set against TransformerLens share: the exported models and its records.
#[cfg(test)]
mod tl_fixtures {
    use burn::tensor::Device;
    use headlab_interop::Imported;
    use headlab_model::Gpt;

    /// Every folder `tests/fixtures/exports/<file>` has a record for: its name, the export
    /// read back (tokenizer included), the model on flex, and the record.
    pub fn each(file: &str) -> Vec<(String, Imported, Gpt, serde_json::Value)> {
        let exports =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/exports");
        let text = std::fs::read(exports.join(file)).unwrap();
        let record: serde_json::Value = serde_json::from_slice(&text).unwrap();
        let folders = record["folders"].as_object().unwrap();
        assert_eq!(folders.len(), 2, "{file}: char and bpe");
        folders
            .iter()
            .map(|(name, tl)| {
                let imported = headlab_interop::read_gpt2_folder(&exports.join(name)).unwrap();
                let model = imported.build(&Device::flex()).unwrap();
                (name.clone(), imported, model, tl.clone())
            })
            .collect()
    }
}

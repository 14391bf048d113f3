//! `lab induction`: the induction-head phase change (Olsson et al. 2022). A 2-layer
//! attention-only model on the built-in induction corpus forms the previous-token ->
//! induction circuit; the lab finds the two heads in the tracked scores and reports when the
//! circuit formed.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use headlab_heads::history::{Circuit, HeadHistory, find_circuit};
use headlab_heads::{HISTORY_FILE, HeadReport, Probe, head_report};
use headlab_report::{REPORT_FILE, to_table};
use headlab_train::config::RunConfig;

use crate::{LabError, Observers, lab_config, open, publish_run, train_run, write_summary};

/// The shipped config: 2 layers x 2 heads, attention only, 2000 steps.
pub const CONFIG: &str = include_str!("../../../configs/lab-induction.toml");

/// Runs the lab into `out` (which must not hold another lab's files) with `sets` applied to
/// its config: the run in `out/run`, its head table, pictures and page beside it, and
/// `summary.md` (returned), which ends with `reproduce`.
pub fn run(
    out: &Path,
    sets: &[String],
    reproduce: &str,
    observers: Observers<'_>,
) -> Result<String, LabError> {
    let config = lab_config(CONFIG, "configs/lab-induction.toml", sets)?;
    let lab = induction(config, out, observers)?;
    let files = ["heads.png", "loss.png", REPORT_FILE];
    publish_run(out, "headlab lab induction", &lab.report, &files)?;
    write_summary(out, summary(&lab, reproduce))
}

/// What `lab induction` measured.
#[derive(Debug, Clone)]
pub struct InductionLab {
    /// The run's config.
    pub config: RunConfig,
    /// Training time.
    pub seconds: f64,
    /// The circuit read from the tracked scores.
    pub circuit: Circuit,
    /// The final head table and the maps of a repeated sequence.
    pub report: HeadReport,
}

/// Trains the induction run into `dir/run` and reads the circuit out of it.
pub fn induction(
    config: RunConfig,
    dir: &Path,
    observers: Observers<'_>,
) -> Result<InductionLab, LabError> {
    let run_dir = dir.join("run");
    let started = Instant::now();
    train_run(config, run_dir.clone(), observers)?;
    let seconds = started.elapsed().as_secs_f64();
    let path = run_dir.join(HISTORY_FILE);
    let text = std::fs::read_to_string(&path).map_err(|source| LabError::File {
        action: "read",
        path: path.clone(),
        source,
    })?;
    let circuit = find_circuit(&HeadHistory::parse(&text, usize::MAX))
        .ok_or(LabError::NoHeadHistory(path))?;
    let (trained, device, data) = open(&run_dir)?;
    let (cfg, tokenizer) = (&trained.config, &trained.tokenizer);
    let probe = Probe::new(
        &data,
        cfg.model.block_size,
        tokenizer.vocab_size(),
        None,
        cfg.train.seed,
    )?;
    let map_ids: Vec<u32> = probe.repeated[..probe.repeated_len().min(33)].to_vec();
    let report = head_report(&trained.model, tokenizer, &probe, &map_ids, &device);
    Ok(InductionLab {
        config: trained.config,
        seconds,
        circuit,
        report,
    })
}

/// `lab induction`'s summary page.
pub fn summary(lab: &InductionLab, reproduce: &str) -> String {
    let (cfg, c) = (&lab.config, &lab.circuit);
    let mut s = String::from("# lab induction\n\n");
    let _ = writeln!(
        s,
        "A {}-layer attention-only model (d_model {}, {} heads, {} positions) trained for {} steps \
         on the built-in induction corpus (random runs over 62 symbols, each written twice), seed {}, in {:.0} s. Layers and heads count from 0: layer 1 is the second layer.\n",
        cfg.model.n_layers,
        cfg.model.d_model,
        cfg.model.n_heads,
        cfg.model.block_size,
        cfg.train.max_iters,
        cfg.train.seed,
        lab.seconds
    );
    let crossed = c.crossed_at.map_or(" (never above 0.5)".to_string(), |st| {
        format!(", above 0.5 from step {st}")
    });
    let _ = writeln!(
        s,
        "- **induction head**: layer {} head {}, induction score {:.2}{crossed}",
        c.induction_head.0, c.induction_head.1, c.induction_score
    );
    let _ = writeln!(
        s,
        "- **previous-token head**: layer {} head {}, previous-token score {:.2}",
        c.previous_token_head.0, c.previous_token_head.1, c.previous_token_score
    );
    let _ = writeln!(
        s,
        "- **loss on the repeated half**: {:.2} at step 0, {:.2} at the end; steepest fall {:.2} nats in the interval ending at step {}",
        c.repeat_loss.0, c.repeat_loss.1, c.steepest_drop.0, c.steepest_drop.1
    );
    let formed = c.induction_score > 0.5 && c.previous_token_score > 0.5;
    let verdict = if formed {
        "The circuit formed: a first-layer head copies each token's predecessor into its position, and a second-layer head uses it to find the token after the earlier occurrence of the current token."
    } else {
        "No complete circuit formed at these settings (see the scores above)."
    };
    let _ = writeln!(s, "\n{verdict}\n");
    s += "![head scores](heads.png)\n\n![attention maps on a repeated sequence](attention.png)\n\n";
    s += "Watch the circuit form: [report.html](report.html) replays every head's map through \
          training on a step slider, with the scores and the loss at the same step.\n\n";
    let _ = writeln!(
        s,
        "Head table (`heads.csv`, explorer: `heads.html`):\n\n```\n{}```",
        to_table(&lab.report.rows)
    );
    s += &format!("\nReproduce: `{reproduce}`\n");
    s
}

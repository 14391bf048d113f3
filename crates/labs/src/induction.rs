//! `lab induction`: the induction-head phase change (Olsson et al. 2022). A 2-layer
//! attention-only model on the built-in induction corpus forms the previous-token ->
//! induction circuit; the lab finds the two heads in the tracked scores and reports when the
//! circuit formed.

use std::fmt::Write as _;
use std::path::Path;

use headlab_heads::discovery::{DEFAULT_THRESHOLD, Discovery, Method, Receiver, Sender, discover};

use burn::tensor::Device;
use headlab_heads::history::{Circuit, HeadHistory, find_circuit};
use headlab_heads::icl::{ICL_FILE, IclScore, parse_icl_history, steepest_fall};
use headlab_heads::{
    HISTORY_FILE, HeadReport, Metric, Mode, Paths, Probe, head_report, patch_sweeps,
    path_into_heads, path_sweep,
};
use headlab_model::{Gpt, HeadInput};
use headlab_report::{REPORT_FILE, to_table};
use headlab_train::config::RunConfig;

use crate::{LabError, Runs, lab_config, open, publish_run, train_run, write_summary};

/// The shipped config: 2 layers x 2 heads, attention only, 2000 steps.
pub const CONFIG: &str = include_str!("../../../configs/lab-induction.toml");

/// Runs the lab into `out` (which must not hold another lab's files) with `sets` applied to
/// its config: the run in `out/run`, its head table, pictures and page beside it, and
/// `summary.md` (returned), which ends with `reproduce`.
pub fn run(
    out: &Path,
    sets: &[String],
    reproduce: &str,
    runs: Runs<'_>,
) -> Result<String, LabError> {
    let config = lab_config(CONFIG, "configs/lab-induction.toml", sets)?;
    let lab = induction(config, out, runs)?;
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
    /// The circuit tested causally on a repeated run (`None` when the probe had no pair of
    /// runs whose answers differ).
    pub causal: Option<Causal>,
    /// The in-context-learning score at every tracked step (`icl_history.csv`).
    pub icl: Vec<(usize, IclScore)>,
    /// First tracked step at which the induction head's copying score exceeded 0.5
    /// (`head_history.csv`).
    pub copying_crossed_at: Option<usize>,
}

/// The circuit's two heads tested causally: activation patching of a repeated run (clean)
/// into the same run with its first copy replaced by another random run (corrupted).
#[derive(Debug, Clone)]
pub struct Causal {
    /// The clean prompt's length in tokens.
    pub tokens: usize,
    /// Where the answer sits in the first copy: the token after the earlier occurrence of
    /// the last token.
    pub source: usize,
    /// The induction head's output (at every position) from the clean run: share restored.
    pub induction_head: f64,
    /// The stream entering the induction head's layer at `source`: share restored.
    pub source_stream: f64,
    /// The previous-token head's layer's attention output at `source`: share restored (its
    /// "the token before me was X" moves where the induction head looks).
    pub previous_token_write: f64,
    /// `logit(answer) - logit(corrupted answer)` after the last token, clean and corrupted.
    pub metric: (f64, f64),
    /// The previous-token head -> induction head paths (`None` when the run's vocabulary has no
    /// token left to put in place of the earlier occurrence).
    pub paths: Option<KeyPaths>,
    /// The circuit found on the same prompts, by ACDC and by EAP, at
    /// [`DEFAULT_THRESHOLD`].
    pub found: Vec<Discovery>,
}

/// Direct path patching of the circuit's one edge: the clean run against a copy in which only
/// the earlier occurrence of the last token is replaced, so the last token has nothing to find.
/// What the previous-token head writes at the next position ("the token before me was X") is
/// the only thing that differs there; sent into an induction head's K input it should bring
/// the answer back, sent into Q or V it should not.
#[derive(Debug, Clone)]
pub struct KeyPaths {
    /// The replaced position (the earlier occurrence of the last token).
    pub replaced: usize,
    /// `log p(answer)` after the last token, clean and corrupted.
    pub metric: (f64, f64),
    /// The previous-token head's whole clean output (every path at once): share restored.
    pub sender: f64,
    /// For each head of the induction head's layer: the share restored through its query, key
    /// and value inputs.
    pub receivers: Vec<ReceiverPaths>,
    /// The same into every head of that layer at once (its heads may share the work).
    pub together: ReceiverPaths,
}

/// The three paths into one receiving head (or a layer's heads together).
#[derive(Debug, Clone)]
pub struct ReceiverPaths {
    /// The receiving head, `(layer, head)` (for a layer's heads together, the induction
    /// head's).
    pub head: (usize, usize),
    /// Share restored through its query input.
    pub q: f64,
    /// Through its key input.
    pub k: f64,
    /// Through its value input.
    pub v: f64,
}

/// Patches the first of the probe's repeated runs into a copy whose first half comes from the
/// next run, scored by the clean answer's logit against the corrupted one's.
fn causal_test(
    model: &Gpt,
    probe: &Probe,
    circuit: &Circuit,
    device: &Device,
) -> Result<Option<Causal>, LabError> {
    let (len, p) = (probe.repeated_len(), probe.period);
    let runs: Vec<&[u32]> = probe.repeated.chunks(len).collect();
    let Some((clean_run, other)) = runs.windows(2).map(|w| (w[0], w[1])).find(|(a, b)| {
        // The corrupted answer must differ from the clean one.
        a[len - 1 - p] != b[len - 1 - p]
    }) else {
        return Ok(None);
    };
    // Inputs: every token but the last; the last is the answer.
    let clean: Vec<u32> = clean_run[..len - 1].to_vec();
    let mut corrupted = clean.clone();
    corrupted[1..=p].copy_from_slice(&other[1..=p]);
    let source = len - 1 - p;
    let metric = Metric::LogitDiff {
        answer: clean_run[len - 1],
        versus: corrupted[source],
    };
    let result = patch_sweeps(model, &clean, &corrupted, metric, device)?;
    let restored = |site: &str, layer: usize, column: usize| {
        let sweep = result
            .sweeps
            .iter()
            .find(|s| s.site == site)
            .expect("every site");
        sweep.restored[layer * sweep.columns + column]
    };
    let (il, ih) = circuit.induction_head;
    let paths = key_paths(model, &clean, source - 1, circuit, device)?;
    let found = [Method::Acdc, Method::Eap]
        .into_iter()
        .map(|m| {
            discover(
                model,
                &clean,
                &corrupted,
                metric,
                m,
                DEFAULT_THRESHOLD,
                usize::MAX,
                device,
            )
        })
        .collect::<Result<_, _>>()?;
    Ok(Some(Causal {
        tokens: clean.len(),
        source,
        induction_head: restored("head", il, ih),
        source_stream: restored("resid_pre", il, source),
        previous_token_write: restored("attn_out", circuit.previous_token_head.0, source),
        metric: (result.clean, result.corrupted),
        paths,
        found,
    }))
}

/// [`KeyPaths`] on `clean` with the token at `replaced` swapped for the first token of the
/// vocabulary that the prompt does not hold.
fn key_paths(
    model: &Gpt,
    clean: &[u32],
    replaced: usize,
    circuit: &Circuit,
    device: &Device,
) -> Result<Option<KeyPaths>, LabError> {
    let vocab = model.config.vocab_size as u32;
    let Some(absent) = (0..vocab).find(|t| !clean.contains(t)) else {
        return Ok(None);
    };
    let mut corrupted = clean.to_vec();
    corrupted[replaced] = absent;
    let answer = clean[replaced + 1];
    let metric = Metric::LogProb { answer };
    let sweep = path_sweep(
        model,
        clean,
        &corrupted,
        metric,
        Paths::From(circuit.previous_token_head),
        device,
    )?;
    let layer = circuit.induction_head.0;
    let share = |head: (usize, usize), input: HeadInput| {
        sweep
            .paths
            .iter()
            .find(|p| p.receiver == head && p.input == input)
            .map_or(f64::NAN, |p| p.restored)
    };
    let receivers = (0..model.config.n_heads)
        .map(|h| ReceiverPaths {
            head: (layer, h),
            q: share((layer, h), HeadInput::Q),
            k: share((layer, h), HeadInput::K),
            v: share((layer, h), HeadInput::V),
        })
        .collect();
    let all: Vec<usize> = (0..model.config.n_heads).collect();
    let together = |input| {
        let prompts = (clean, &corrupted[..]);
        let sender = circuit.previous_token_head;
        path_into_heads(model, prompts, metric, sender, (layer, &all), input, device)
    };
    let together = ReceiverPaths {
        head: circuit.induction_head,
        q: together(HeadInput::Q)?,
        k: together(HeadInput::K)?,
        v: together(HeadInput::V)?,
    };
    let whole = patch_sweeps(model, clean, &corrupted, metric, device)?;
    let heads = whole
        .sweeps
        .iter()
        .find(|s| s.site == "head")
        .expect("a head sweep");
    let (pl, ph) = circuit.previous_token_head;
    Ok(Some(KeyPaths {
        replaced,
        metric: (sweep.clean, sweep.corrupted),
        sender: heads.restored[pl * heads.columns + ph],
        receivers,
        together,
    }))
}

/// Trains the induction run into `dir/run` and reads the circuit out of it.
pub fn induction(config: RunConfig, dir: &Path, runs: Runs<'_>) -> Result<InductionLab, LabError> {
    let run_dir = dir.join("run");
    let seconds = train_run(config, run_dir.clone(), runs)?.seconds;
    let path = run_dir.join(HISTORY_FILE);
    let text = std::fs::read_to_string(&path).map_err(|source| LabError::File {
        action: "read",
        path: path.clone(),
        source,
    })?;
    let history = HeadHistory::parse(&text, usize::MAX);
    let circuit = find_circuit(&history).ok_or(LabError::NoHeadHistory(path))?;
    let copying_crossed_at =
        history
            .points
            .iter()
            .zip(&history.copying)
            .find_map(|((step, _, scores), copying)| {
                scores
                    .iter()
                    .zip(copying)
                    .any(|(s, c)| (s.layer, s.head) == circuit.induction_head && *c > 0.5)
                    .then_some(*step)
            });
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
    let causal = causal_test(&trained.model, &probe, &circuit, &device)?;
    // Written by the same tracker as the head history, so present wherever that is.
    let icl = std::fs::read_to_string(run_dir.join(ICL_FILE))
        .map(|t| parse_icl_history(&t))
        .unwrap_or_default();
    Ok(InductionLab {
        config: trained.config,
        seconds,
        circuit,
        report,
        causal,
        icl,
        copying_crossed_at,
    })
}

/// The circuit's weights and its cause: the K-composition of the two heads against random
/// heads, and what patching the clean run's activations restores.
fn evidence(lab: &InductionLab) -> String {
    let c = &lab.circuit;
    let table = &lab.report.composition;
    let mut s = String::new();
    let score = |mode: Mode| {
        table
            .scores
            .iter()
            .find(|x| x.mode == mode && x.from == c.previous_token_head && x.to == c.induction_head)
            .map(|x| x.score)
    };
    if let (Some(k), Some(q), Some(v)) = (score(Mode::K), score(Mode::Q), score(Mode::V)) {
        let _ = writeln!(
            s,
            "**Composition** (`composition.csv`): the induction head's keys read what the \
             previous-token head writes with a K-composition score of {k:.2}, against {:.2} for \
             random heads of the same shapes (Q-composition {q:.2}, V-composition {v:.2}; \
             baselines {:.2} and {:.2}).\n",
            table.baseline[1], table.baseline[0], table.baseline[2]
        );
    }
    let row = |at: (usize, usize)| {
        lab.report
            .rows
            .iter()
            .find(|r| (r.scores.layer, r.scores.head) == at)
    };
    if let (Some(ind), Some(prev)) = (row(c.induction_head), row(c.previous_token_head)) {
        let crossed = match (lab.copying_crossed_at, c.crossed_at) {
            (None, _) => " (never above 0.5 while tracked)".to_string(),
            (Some(st), Some(attn)) if st < attn => format!(
                ", above 0.5 from step {st} (its induction score: from step {attn}; what the \
                 head writes settles before where it looks)"
            ),
            (Some(st), _) => format!(", above 0.5 from step {st}"),
        };
        let _ = writeln!(
            s,
            "**What the heads write** (the full OV circuit W_E W_V W_O W_U, LayerNorm weights \
             folded in; `copying` and `ov_top1` in the table): the induction head's copying \
             score is {:.2}{crossed}, and for {:.0}% of tokens its circuit raises the attended \
             token's own logit most, so it copies the token it finds; the previous-token \
             head's is {:.2} ({:.0}%): it writes where it is, not what to say.\n",
            ind.copying,
            100.0 * ind.ov_top1,
            prev.copying,
            100.0 * prev.ov_top1,
        );
    }
    if let Some(p) = &lab.causal {
        let _ = writeln!(
            s,
            "**Patching**: a repeated run of {} tokens (clean) against the same run with its \
             first copy replaced (corrupted), scored by the clean answer's logit minus the \
             corrupted one's after the last token ({:.2} clean, {:.2} corrupted; 0 is the \
             corrupted run, 1 the clean one). The induction head's output from the clean run \
             restores {:.2} (other heads of its layer may share the work: see the table \
             below); the stream entering its layer at position {} (the token after the \
             earlier occurrence of the last token) restores {:.2}; the previous-token head's \
             layer's attention output there restores {:.2} (negative: told that the token \
             before it matches, the induction head copies the corrupted token from there). \
             `headlab patch` runs the same on any prompt.\n",
            p.tokens,
            p.metric.0,
            p.metric.1,
            p.induction_head,
            p.source,
            p.source_stream,
            p.previous_token_write
        );
        if let Some(k) = &p.paths {
            let list = |f: &dyn Fn(&ReceiverPaths) -> f64| {
                let parts: Vec<String> = k
                    .receivers
                    .iter()
                    .map(|r| format!("{}.{} alone {}", r.head.0, r.head.1, share(f(r))))
                    .collect();
                parts.join(", ")
            };
            let (ph, il) = (c.previous_token_head, c.induction_head.0);
            let _ = writeln!(
                s,
                "**Path patching** (`headlab patch --path {}.{}`): the same clean run against a \
                 copy with only position {} (the earlier occurrence of the last token) \
                 replaced, scored by the answer's log-probability ({:.2} clean, {:.2} \
                 corrupted). The previous-token head's whole clean output restores {:.2}. Sent \
                 only into the keys of layer {il}'s heads, all at once, it restores {} ({}); \
                 into their queries {} ({}); into their values {} ({}). The edge the circuit uses is previous-token head -> induction heads' \
                 keys: the key at the next position says \"the token before me matches\", and \
                 the query needs nothing from the first layer.\n",
                ph.0,
                ph.1,
                k.replaced,
                k.metric.0,
                k.metric.1,
                k.sender,
                share(k.together.k),
                list(&|r| r.k),
                share(k.together.q),
                list(&|r| r.q),
                share(k.together.v),
                list(&|r| r.v),
            );
        }
    }
    if let Some(p) = &lab.causal {
        s += &discovery_text(&p.found, c);
    }
    s
}

/// What ACDC and EAP keep on the patching's prompts (every kept edge, the largest score
/// first), and whether the circuit's edge (the previous-token head into the induction head's
/// keys) is among it.
fn discovery_text(found: &[Discovery], c: &Circuit) -> String {
    let (p, i) = (c.previous_token_head, c.induction_head);
    let name = format!("{}.{} -> {}.{} K", p.0, p.1, i.0, i.1);
    let parts: Vec<String> = found
        .iter()
        .map(|d| {
            let kept = d.edges.iter().filter(|e| e.kept).count();
            let head = format!(
                "{} keeps {kept} of {} edges ({:.2} of the gap recovered, {} forward passes)",
                d.method.name().to_uppercase(),
                d.edges.len(),
                d.recovered(),
                d.passes
            );
            let edge = d.edges.iter().find(|e| {
                e.edge.from == Sender::Head(p.0, p.1)
                    && e.edge.to == Receiver::Head(i.0, i.1, HeadInput::K)
            });
            let listed: Vec<String> = d.kept_by_score().iter().map(|e| e.edge.label()).collect();
            let head = format!("{head} [{}]", listed.join(", "));
            match (edge, d.method) {
                (Some(e), _) if e.kept => {
                    format!("{head}, among them {name} (score {:+.2})", e.score)
                }
                (Some(e), Method::Acdc) => format!(
                    "{head}, but not {name}: corrupting it moved the metric by {:+.3} of the \
                     gap when it was tried, under the threshold",
                    e.score
                ),
                (Some(e), Method::Eap) => format!(
                    "{head}, but not {name}: its first-order score, {:+.3}, ranks it below \
                     the edges kept (the gradient is taken at the clean run, where the \
                     induction head's softmax is saturated, so its keys' gradient is small)",
                    e.score
                ),
                (None, _) => head,
            }
        })
        .collect();
    format!(
        "**Circuit discovery** (`headlab circuit`, on the same prompts, threshold \
         {DEFAULT_THRESHOLD} of the gap): {}. Every edge's score and a drawing: `headlab \
         circuit` on the lab's run.\n",
        parts.join("; ")
    )
}

/// A share to two decimals, never "-0.00".
fn share(x: f64) -> String {
    // Rounded first, then + 0.0 turns a -0.0 into 0.0.
    format!("{:.2}", (x * 100.0).round() / 100.0 + 0.0)
}

/// `lab induction`'s summary page.
pub fn summary(lab: &InductionLab, reproduce: &str) -> String {
    let (cfg, c) = (&lab.config, &lab.circuit);
    let mut s = String::from("# lab induction\n\n");
    let _ = writeln!(
        s,
        "A {}-layer attention-only model (d_model {}, {} heads, {} positions) trained for {} steps \
         on the built-in induction corpus (random runs over 62 symbols, each written twice), seed {}, in {:.0} s. Heads are named layer.head, both counted from 0: head 1.0 is the second layer's first head.\n",
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
        "- **induction head**: head {}.{}, induction score {:.2}{crossed}",
        c.induction_head.0, c.induction_head.1, c.induction_score
    );
    let _ = writeln!(
        s,
        "- **previous-token head**: head {}.{}, previous-token score {:.2}",
        c.previous_token_head.0, c.previous_token_head.1, c.previous_token_score
    );
    let _ = writeln!(
        s,
        "- **loss on the repeated half**: {:.2} at step 0, {:.2} at the end; steepest fall {:.2} nats in the interval ending at step {}",
        c.repeat_loss.0, c.repeat_loss.1, c.steepest_drop.0, c.steepest_drop.1
    );
    if let (Some(first), Some(last)) = (lab.icl.first(), lab.icl.last()) {
        let fall = steepest_fall(&lab.icl).map_or(String::new(), |(fall, step)| {
            let beside = c.crossed_at.map_or(
                "; the induction score never passed 0.5".to_string(),
                |st| format!("; the induction score passed 0.5 at step {st}"),
            );
            format!(
                "; it fell fastest, by {fall:.2} nats, in the interval ending at step {step}{beside}"
            )
        });
        let _ = writeln!(
            s,
            "- **in-context learning score** (held-out loss at the last 8 positions minus at \
             positions 2-9, Olsson et al. 2022): {:.2} at step {}, {:.2} at step {}{fall}",
            first.1.score(),
            first.0,
            last.1.score(),
            last.0
        );
    }
    let formed = c.induction_score > 0.5 && c.previous_token_score > 0.5;
    let verdict = if formed {
        "The circuit formed: a first-layer head copies each token's predecessor into its position, and a second-layer head uses it to find the token after the earlier occurrence of the current token."
    } else {
        "No complete circuit formed at these settings (see the scores above)."
    };
    let _ = writeln!(s, "\n{verdict}\n");
    s += &evidence(lab);
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

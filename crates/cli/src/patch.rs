//! `headlab patch`.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use headlab_data::Tokenizer;
use headlab_heads::{Metric, Patching, PathPatching, Paths, Sweep, patch_sweeps, path_sweep};
use headlab_report::heatmap::heatmap_png;
use headlab_report::report_run;

use crate::common::{OnRun, open_run};

/// `headlab patch`.
#[derive(Debug, Args)]
pub struct PatchArgs {
    /// A run directory made by `headlab train` or `headlab import`.
    pub run: PathBuf,
    /// The prompt whose answer is known.
    #[arg(long)]
    pub clean: String,
    /// The same prompt with something changed, of the same length in tokens.
    #[arg(long)]
    pub corrupted: String,
    /// The clean prompt's next token (one token of the run's vocabulary).
    #[arg(long)]
    pub answer: String,
    /// Measure `logit(answer) - logit(versus)` (usually the corrupted prompt's answer);
    /// without it, the answer's log-probability.
    #[arg(long)]
    pub versus: Option<String>,
    /// Patch paths instead of sites: one head's clean write into each later head's Q, K and V
    /// input alone (direct path patching). `L.H` sends from layer L head H (from 0) to every
    /// later head, `L.H:M.G` from it to head M.G only, `all` from every head. Writes path.csv
    /// and path.png.
    #[arg(long, value_name = "L.H | L.H:M.G | all", value_parser = parse_paths)]
    pub path: Option<Paths>,
    /// Largest effects to print.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Where to write patch.csv, patch.json and one PNG per site (default: RUN/patch, which
    /// the run's page, report.html, shows).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// The backend and checkpoint to load.
    #[command(flatten)]
    pub on: OnRun,
}

/// Runs `headlab patch`.
pub fn run(args: PatchArgs) -> Result<()> {
    let (run, trained, device) =
        open_run(&args.run, args.on.backend.as_deref(), args.on.checkpoint)?;
    let tokenizer = &trained.tokenizer;
    let encode = |flag: &str, text: &str| -> Result<Vec<u32>> {
        tokenizer
            .encode(text)
            .with_context(|| format!("encoding {flag}"))
    };
    let one = |flag: &str, text: &str| -> Result<u32> {
        match encode(flag, text)?[..] {
            [id] => Ok(id),
            ref ids => bail!(
                "{flag} {text:?} is {} tokens; give exactly one token of the run's vocabulary",
                ids.len()
            ),
        }
    };
    let clean = encode("--clean", &args.clean)?;
    let corrupted = encode("--corrupted", &args.corrupted)?;
    let answer = one("--answer", &args.answer)?;
    let metric = match &args.versus {
        Some(v) => {
            let versus = one("--versus", v)?;
            if versus == answer {
                bail!(
                    "--answer and --versus are the same token ({:?}): logit(answer) - \
                     logit(versus) is 0 on every run; give --versus the token the corrupted \
                     prompt leads to, or leave it out to score the answer's log-probability",
                    args.answer
                );
            }
            Metric::LogitDiff { answer, versus }
        }
        None => Metric::LogProb { answer },
    };
    if let Some(paths) = args.path {
        return paths_run(
            &args,
            &run.root,
            &trained.model,
            (&clean, &corrupted),
            metric,
            paths,
            &device,
        );
    }
    let result = patch_sweeps(&trained.model, &clean, &corrupted, metric, &device)?;
    let warning = too_close(&result);
    if let Some(w) = &warning {
        eprintln!("warning: {w}");
    }
    let labels = Labels {
        clean: &clean,
        corrupted: &corrupted,
        tokenizer,
    };
    let out = args.out.clone().unwrap_or_else(|| run.root.join("patch"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let csv = out.join("patch.csv");
    std::fs::write(&csv, patch_csv(&result, &labels))
        .with_context(|| format!("writing {}", csv.display()))?;
    let json = page_json(&args, &result, &labels, warning.as_deref());
    let json_path = out.join("patch.json");
    std::fs::write(&json_path, json.to_string() + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    let mut pictures = Vec::new();
    for sweep in &result.sweeps {
        let png = out.join(format!("patch-{}.png", sweep.site));
        let rows: Vec<String> = (0..sweep.layers).map(|l| format!("layer {l}")).collect();
        let columns = labels.columns(sweep);
        let cells: Vec<String> = sweep.restored.iter().map(|r| format!("{r:.1}")).collect();
        let title = format!(
            "{}: share of the clean answer restored (0 corrupted, 1 clean)",
            sweep.site
        );
        heatmap_png(&png, &title, &rows, &columns, &sweep.restored, &cells)?;
        pictures.push(png);
    }
    print!("{}", summary(&result, args.top, &labels));
    eprintln!(
        "wrote {}, patch.json and {} pictures in {}",
        csv.display(),
        pictures.len(),
        out.display()
    );
    // The run's page shows the results kept in RUN/patch.
    if out == run.root.join("patch") {
        let page = report_run(&run.root)?;
        eprintln!("updated {}", page.path.display());
    }
    Ok(())
}

/// Below this gap between the clean and the corrupted metric (in nats, as both metrics are),
/// shares restored are not worth reading. A share is a patch's effect divided by that gap.
/// Under 1 nat the answer is less than e times likelier (against --versus, or at all) after
/// the clean prompt than after the corrupted one: the prompts barely disagree about it, and
/// a patch that moves the metric by a nat for reasons of its own reads as a share of several
/// units (the README's old example: a gap of 0.16 and shares down to -14.8).
const CLOSE_NATS: f64 = 1.0;

/// The warning when the two runs' metrics are too close for shares to mean anything.
fn too_close(result: &Patching) -> Option<String> {
    let gap = result.clean - result.corrupted;
    if gap.abs() >= CLOSE_NATS {
        return None;
    }
    let largest = result
        .sweeps
        .iter()
        .flat_map(|s| &s.restored)
        .copied()
        .max_by(|a, b| a.abs().total_cmp(&b.abs()))
        .unwrap_or(0.0);
    Some(format!(
        "the metric is {:.4} on the clean prompt and {:.4} on the corrupted one, {:.4} apart, \
         under {CLOSE_NATS} nat: the prompts barely disagree about the answer, and every share \
         restored is divided by that gap (the largest here is {largest:+.1}); choose prompts \
         whose next tokens differ, with --answer the clean one's and --versus the corrupted \
         one's",
        result.clean,
        result.corrupted,
        gap.abs()
    ))
}

/// What a position is called: its clean token, and the corrupted one where they differ
/// (`i/m`), so the labels say what the patched activation came from.
struct Labels<'a> {
    clean: &'a [u32],
    corrupted: &'a [u32],
    tokenizer: &'a Tokenizer,
}

impl Labels<'_> {
    /// The clean token at `position`, and the corrupted one if it differs.
    fn tokens(&self, position: usize) -> (String, Option<String>) {
        let (c, k) = (self.clean[position], self.corrupted[position]);
        let shown = |id| shown(self.tokenizer, id);
        (shown(c), (c != k).then(|| shown(k)))
    }

    /// A column heading: `i/m` where the prompts differ, the one token where they agree.
    fn column(&self, position: usize) -> String {
        match self.tokens(position) {
            (clean, Some(corrupted)) => format!("{clean}/{corrupted}"),
            (clean, None) => clean,
        }
    }

    /// Every column of `sweep`: heads, or positions.
    fn columns(&self, sweep: &Sweep) -> Vec<String> {
        if sweep.site == "head" {
            (0..sweep.columns).map(|h| format!("head {h}")).collect()
        } else {
            (0..sweep.columns).map(|p| self.column(p)).collect()
        }
    }
}

/// `patch.json`: what the run's page draws (prompts, metric, every sweep with its labels).
fn page_json(
    args: &PatchArgs,
    result: &Patching,
    labels: &Labels,
    warning: Option<&str>,
) -> serde_json::Value {
    let metric = match &args.versus {
        Some(v) => format!("logit({:?}) - logit({v:?})", args.answer),
        None => format!("log p({:?})", args.answer),
    };
    let sweeps: Vec<serde_json::Value> = result
        .sweeps
        .iter()
        .map(|s| {
            serde_json::json!({
                "site": s.site,
                "layers": s.layers,
                "columns": s.columns,
                "column_labels": labels.columns(s),
                "metric": s.metric,
                "restored": s.restored,
            })
        })
        .collect();
    serde_json::json!({
        "clean_prompt": args.clean,
        "corrupted_prompt": args.corrupted,
        "metric": metric,
        "clean": result.clean,
        "corrupted": result.corrupted,
        "warning": warning,
        "sweeps": sweeps,
    })
}

/// A token as it is printed: its text with newlines and tabs visible.
fn shown(tokenizer: &Tokenizer, id: u32) -> String {
    tokenizer
        .token_text(id)
        .replace('\n', "\\n")
        .replace('\t', "\\t")
}

/// Where a patch went: `layer 1 position 4 ("s")`, `layer 1 position 7 ("i", corrupted
/// "m")` or `layer 1 head 0`.
fn place(site: &str, layer: usize, column: usize, labels: &Labels) -> String {
    if site == "head" {
        return format!("layer {layer} head {column}");
    }
    match labels.tokens(column) {
        (clean, Some(corrupted)) => {
            format!("layer {layer} position {column} ({clean:?}, corrupted {corrupted:?})")
        }
        (clean, None) => format!("layer {layer} position {column} ({clean:?})"),
    }
}

/// The two runs' metric and the largest effects, most restored first.
fn summary(result: &Patching, top: usize, labels: &Labels) -> String {
    let mut s = format!(
        "metric: clean {:.4}, corrupted {:.4}\n",
        result.clean, result.corrupted
    );
    let mut effects: Vec<(f64, String)> = Vec::new();
    for sweep in &result.sweeps {
        for (i, r) in sweep.restored.iter().enumerate() {
            let (l, c) = (i / sweep.columns, i % sweep.columns);
            effects.push((
                *r,
                format!("{:<10}{}", sweep.site, place(sweep.site, l, c, labels)),
            ));
        }
    }
    effects.sort_by(|a, b| b.0.abs().total_cmp(&a.0.abs()));
    let _ = writeln!(s, "largest effects (share of the clean answer restored):");
    for (r, what) in effects.iter().take(top) {
        let _ = writeln!(s, "  {r:>+7.3}  {what}");
    }
    s
}

/// `patch.csv`: one row per site, layer and position (or head), with the clean prompt's
/// token there and the corrupted one's.
fn patch_csv(result: &Patching, labels: &Labels) -> String {
    let mut s = String::from("site,layer,position_or_head,token,corrupted_token,metric,restored\n");
    let quoted = |t: &str| format!("\"{}\"", t.replace('"', "\"\""));
    for sweep in &result.sweeps {
        for (i, (m, r)) in sweep.metric.iter().zip(&sweep.restored).enumerate() {
            let (l, c) = (i / sweep.columns, i % sweep.columns);
            let tokens = if sweep.site == "head" {
                ",".to_string()
            } else {
                let (clean, corrupted) = labels.tokens(c);
                let corrupted = corrupted.unwrap_or_else(|| clean.clone());
                format!("{},{}", quoted(&clean), quoted(&corrupted))
            };
            let _ = writeln!(s, "{},{l},{c},{tokens},{m:.6},{r:.6}", sweep.site);
        }
    }
    s
}

/// `L.H`: a layer and a head, counted from 0.
fn parse_head(text: &str) -> Result<(usize, usize), String> {
    let bad = || format!("{text:?} is not LAYER.HEAD (two numbers from 0, such as 0.1)");
    let (l, h) = text.split_once('.').ok_or_else(bad)?;
    Ok((l.parse().map_err(|_| bad())?, h.parse().map_err(|_| bad())?))
}

/// `--path`: `all`, `L.H` or `L.H:M.G`.
fn parse_paths(text: &str) -> Result<Paths, String> {
    if text == "all" {
        return Ok(Paths::All);
    }
    match text.split_once(':') {
        Some((sender, receiver)) => Ok(Paths::Between(parse_head(sender)?, parse_head(receiver)?)),
        None => Ok(Paths::From(parse_head(text)?)),
    }
}

/// `headlab patch --path`: the sweep, path.csv, path.png and the paths that restore most.
fn paths_run(
    args: &PatchArgs,
    root: &std::path::Path,
    model: &headlab_model::Gpt,
    (clean, corrupted): (&[u32], &[u32]),
    metric: Metric,
    paths: Paths,
    device: &burn::tensor::Device,
) -> Result<()> {
    let result = path_sweep(model, clean, corrupted, metric, paths, device)?;
    if model.config.kv_heads() != model.config.n_heads {
        eprintln!(
            "note: this model's key and value heads are shared between query heads, so only \
             the paths into queries (Q) are patched"
        );
    }
    let out = args.out.clone().unwrap_or_else(|| root.join("patch"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let csv = out.join("path.csv");
    std::fs::write(&csv, path_csv(&result))
        .with_context(|| format!("writing {}", csv.display()))?;
    // One row per (sender, receiver), one column per input.
    let mut rows: Vec<String> = Vec::new();
    let mut cells: Vec<f64> = Vec::new();
    for chunk in result
        .paths
        .chunk_by(|a, b| (a.sender, a.receiver) == (b.sender, b.receiver))
    {
        let (s, r) = (chunk[0].sender, chunk[0].receiver);
        rows.push(format!("{}.{} -> {}.{}", s.0, s.1, r.0, r.1));
        for input in headlab_model::HeadInput::ALL {
            let v = chunk
                .iter()
                .find(|p| p.input == input)
                .map_or(f64::NAN, |p| p.restored);
            cells.push(v);
        }
    }
    let png = out.join("path.png");
    let columns: Vec<String> = ["Q", "K", "V"].map(String::from).to_vec();
    let labels: Vec<String> = cells.iter().map(|r| format!("{r:.2}")).collect();
    heatmap_png(
        &png,
        "path patching: share of the clean answer restored through each input",
        &rows,
        &columns,
        &cells,
        &labels,
    )?;
    print!("{}", path_summary(&result, args.top));
    eprintln!("wrote {} and {}", csv.display(), png.display());
    Ok(())
}

/// The two runs' metric and the paths that restore most.
fn path_summary(result: &PathPatching, top: usize) -> String {
    let mut s = format!(
        "metric: clean {:.4}, corrupted {:.4}\n",
        result.clean, result.corrupted
    );
    let mut paths: Vec<_> = result.paths.iter().collect();
    paths.sort_by(|a, b| b.restored.abs().total_cmp(&a.restored.abs()));
    let _ = writeln!(
        s,
        "largest paths (share of the clean answer restored through one input of one head):"
    );
    for p in paths.iter().take(top) {
        let _ = writeln!(
            s,
            "  {:>+7.3}  head {}.{} -> head {}.{} {}",
            p.restored,
            p.sender.0,
            p.sender.1,
            p.receiver.0,
            p.receiver.1,
            p.input.name()
        );
    }
    s
}

/// `path.csv`: one row per sender, receiver and input.
fn path_csv(result: &PathPatching) -> String {
    let mut s = String::from(
        "sender_layer,sender_head,receiver_layer,receiver_head,input,metric,restored\n",
    );
    for p in &result.paths {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{:.6},{:.6}",
            p.sender.0,
            p.sender.1,
            p.receiver.0,
            p.receiver.1,
            p.input.name(),
            p.metric,
            p.restored
        );
    }
    s
}

//! `headlab patch`.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use headlab_data::Tokenizer;
use headlab_heads::{Metric, Patching, patch_sweeps};
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
        Some(v) => Metric::LogitDiff {
            answer,
            versus: one("--versus", v)?,
        },
        None => Metric::LogProb { answer },
    };
    let result = patch_sweeps(&trained.model, &clean, &corrupted, metric, &device)?;
    let out = args.out.clone().unwrap_or_else(|| run.root.join("patch"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let csv = out.join("patch.csv");
    std::fs::write(&csv, patch_csv(&result, &corrupted, tokenizer))
        .with_context(|| format!("writing {}", csv.display()))?;
    let json = page_json(&args, &result, &corrupted, tokenizer);
    let json_path = out.join("patch.json");
    std::fs::write(&json_path, json.to_string() + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    let mut pictures = Vec::new();
    for sweep in &result.sweeps {
        let png = out.join(format!("patch-{}.png", sweep.site));
        let rows: Vec<String> = (0..sweep.layers).map(|l| format!("layer {l}")).collect();
        let columns: Vec<String> = if sweep.site == "head" {
            (0..sweep.columns).map(|h| format!("head {h}")).collect()
        } else {
            corrupted.iter().map(|&id| shown(tokenizer, id)).collect()
        };
        let cells: Vec<String> = sweep.restored.iter().map(|r| format!("{r:.1}")).collect();
        let title = format!(
            "{}: share of the clean answer restored (0 corrupted, 1 clean)",
            sweep.site
        );
        heatmap_png(&png, &title, &rows, &columns, &sweep.restored, &cells)?;
        pictures.push(png);
    }
    print!("{}", summary(&result, args.top, &corrupted, tokenizer));
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

/// `patch.json`: what the run's page draws (prompts, metric, every sweep with its labels).
fn page_json(
    args: &PatchArgs,
    result: &Patching,
    corrupted: &[u32],
    tk: &Tokenizer,
) -> serde_json::Value {
    let metric = match &args.versus {
        Some(v) => format!("logit({:?}) - logit({v:?})", args.answer),
        None => format!("log p({:?})", args.answer),
    };
    let sweeps: Vec<serde_json::Value> = result
        .sweeps
        .iter()
        .map(|s| {
            let labels: Vec<String> = if s.site == "head" {
                (0..s.columns).map(|h| format!("head {h}")).collect()
            } else {
                corrupted.iter().map(|&id| shown(tk, id)).collect()
            };
            serde_json::json!({
                "site": s.site,
                "layers": s.layers,
                "columns": s.columns,
                "column_labels": labels,
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

/// Where a patch went: `layer 1 position 4 ("s")` or `layer 1 head 0`.
fn place(site: &str, layer: usize, column: usize, corrupted: &[u32], tk: &Tokenizer) -> String {
    if site == "head" {
        format!("layer {layer} head {column}")
    } else {
        format!(
            "layer {layer} position {column} ({:?})",
            shown(tk, corrupted[column])
        )
    }
}

/// The two runs' metric and the largest effects, most restored first.
fn summary(result: &Patching, top: usize, corrupted: &[u32], tk: &Tokenizer) -> String {
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
                format!(
                    "{:<10}{}",
                    sweep.site,
                    place(sweep.site, l, c, corrupted, tk)
                ),
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

/// `patch.csv`: one row per site, layer and position (or head).
fn patch_csv(result: &Patching, corrupted: &[u32], tk: &Tokenizer) -> String {
    let mut s = String::from("site,layer,position_or_head,token,metric,restored\n");
    for sweep in &result.sweeps {
        for (i, (m, r)) in sweep.metric.iter().zip(&sweep.restored).enumerate() {
            let (l, c) = (i / sweep.columns, i % sweep.columns);
            let token = if sweep.site == "head" {
                String::new()
            } else {
                format!("\"{}\"", shown(tk, corrupted[c]).replace('"', "\"\""))
            };
            let _ = writeln!(s, "{},{l},{c},{token},{m:.6},{r:.6}", sweep.site);
        }
    }
    s
}

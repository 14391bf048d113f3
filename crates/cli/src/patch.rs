//! `headlab patch`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use headlab_heads::attribution_patching::attribution_sweeps;
use headlab_heads::patch_report::{
    Labels, Prompts, attribution_comparison, page_json, patch_csv, path_csv, path_summary, summary,
    too_close,
};
use headlab_heads::{Metric, Patching, Paths, patch_sweeps, path_sweep};
use headlab_report::heatmap::heatmap_png;
use headlab_report::report_run;

use crate::common::{OnRun, at_least_one, open_run};

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
    #[arg(long, value_name = "L.H | L.H:M.G | all", value_parser = parse_paths, allow_negative_numbers = true)]
    pub path: Option<Paths>,
    /// Estimate every patch at once by attribution patching (the first-order estimate
    /// `(clean - corrupted) . d metric / d activation`, two forward passes and one backward
    /// pass) instead of patching each site: writes attribution-patch.csv and one PNG per site.
    #[arg(long, conflicts_with = "path")]
    pub attribution: bool,
    /// With --attribution, patch every site exactly too, and write beside both how far the
    /// estimates agree with the exact patches (comparison.txt).
    #[arg(long, requires = "attribution")]
    pub exact: bool,
    /// Largest effects to print.
    #[arg(long, default_value_t = 10, allow_negative_numbers = true, value_parser = at_least_one)]
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
    let (clean, corrupted, metric) = task(
        tokenizer,
        (&args.clean, &args.corrupted),
        &args.answer,
        args.versus.as_deref(),
    )?;
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
    let model = &trained.model;
    // Both measured before anything is written: a refusal leaves nothing behind.
    let started = std::time::Instant::now();
    let exact = (!args.attribution || args.exact)
        .then(|| patch_sweeps(model, &clean, &corrupted, metric, &device))
        .transpose()?;
    let exact_seconds = started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    let estimate = args
        .attribution
        .then(|| attribution_sweeps(model, &clean, &corrupted, metric, &device))
        .transpose()?;
    let estimate_seconds = started.elapsed().as_secs_f64();
    let labels = Labels {
        clean: &clean,
        corrupted: &corrupted,
        tokenizer,
    };
    let out = args.out.clone().unwrap_or_else(|| run.root.join("patch"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    if let Some(estimate) = &estimate {
        if let Some(w) = too_close(estimate) {
            eprintln!("warning: {w}");
        }
        let pictures = write_sweeps(&out, "attribution-patch", estimate, &labels)?;
        println!("attribution patching (first-order estimates):");
        print!("{}", summary(estimate, args.top, &labels));
        eprintln!(
            "attribution patching: 2 forward passes and 1 backward pass in {:.1} ms; \
             wrote attribution-patch.csv and {pictures} pictures in {}",
            estimate_seconds * 1e3,
            out.display()
        );
    }
    let Some(result) = exact else {
        return Ok(());
    };
    if let Some(estimate) = &estimate {
        let passes: usize = result
            .sweeps
            .iter()
            .map(|s| s.layers * s.columns)
            .sum::<usize>()
            + 2;
        let text = attribution_comparison(&result, estimate, args.top, &labels);
        let path = out.join("comparison.txt");
        std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
        println!("exact patching:");
        print!("{text}");
        eprintln!(
            "exact patching: {passes} forward passes in {:.1} ms; wrote {}",
            exact_seconds * 1e3,
            path.display()
        );
    }
    let warning = too_close(&result);
    if let Some(w) = warning.as_ref().filter(|_| estimate.is_none()) {
        eprintln!("warning: {w}");
    }
    let prompts = Prompts {
        clean: &args.clean,
        corrupted: &args.corrupted,
        answer: &args.answer,
        versus: args.versus.as_deref(),
    };
    let json = page_json(&prompts, &result, &labels, warning.as_deref());
    let json_path = out.join("patch.json");
    std::fs::write(&json_path, json.to_string() + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    let pictures = write_sweeps(&out, "patch", &result, &labels)?;
    if estimate.is_none() {
        print!("{}", summary(&result, args.top, &labels));
    }
    eprintln!(
        "wrote patch.csv, patch.json and {pictures} pictures in {}",
        out.display()
    );
    // The run's page shows the results kept in RUN/patch.
    if out == run.root.join("patch") {
        let page = report_run(&run.root)?;
        eprintln!("updated {}", page.path.display());
    }
    Ok(())
}

/// The two prompts' tokens and the metric `--answer` and `--versus` name (shared with
/// `headlab circuit`).
pub fn task(
    tokenizer: &headlab_data::Tokenizer,
    (clean, corrupted): (&str, &str),
    answer: &str,
    versus: Option<&str>,
) -> Result<(Vec<u32>, Vec<u32>, Metric)> {
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
    let clean = encode("--clean", clean)?;
    let corrupted = encode("--corrupted", corrupted)?;
    let answer_id = one("--answer", answer)?;
    let metric = match versus {
        Some(v) => {
            let versus = one("--versus", v)?;
            if versus == answer_id {
                bail!(
                    "--answer and --versus are the same token ({answer:?}): logit(answer) - \
                     logit(versus) is 0 on every run; give --versus the token the corrupted \
                     prompt leads to, or leave it out to score the answer's log-probability"
                );
            }
            Metric::LogitDiff {
                answer: answer_id,
                versus,
            }
        }
        None => Metric::LogProb { answer: answer_id },
    };
    Ok((clean, corrupted, metric))
}

/// `NAME.csv` and one heatmap per sweep (`NAME-SITE.png`) in `out`; returns the pictures'
/// count. `NAME` is `patch` for exact patching, `attribution-patch` for its first-order estimate.
fn write_sweeps(
    out: &std::path::Path,
    name: &str,
    result: &Patching,
    labels: &Labels,
) -> Result<usize> {
    let csv = out.join(format!("{name}.csv"));
    std::fs::write(&csv, patch_csv(result, labels))
        .with_context(|| format!("writing {}", csv.display()))?;
    for sweep in &result.sweeps {
        let png = out.join(format!("{name}-{}.png", sweep.site));
        let rows: Vec<String> = (0..sweep.layers).map(|l| format!("layer {l}")).collect();
        let columns = labels.columns(sweep);
        let cells: Vec<String> = sweep.restored.iter().map(|r| format!("{r:.1}")).collect();
        let what = if name == "attribution-patch" {
            "attribution's estimate of the share restored"
        } else {
            "share of the clean answer restored"
        };
        let title = format!("{}: {what} (0 corrupted, 1 clean)", sweep.site);
        let x_title = labels.x_title(sweep);
        heatmap_png(
            &png,
            (&title, x_title),
            &rows,
            &columns,
            &sweep.restored,
            &cells,
        )?;
    }
    Ok(result.sweeps.len())
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
        (
            "path patching: share of the clean answer restored through each input",
            "the receiving head's input patched: its query, key or value",
        ),
        &rows,
        &columns,
        &cells,
        &labels,
    )?;
    print!("{}", path_summary(&result, args.top));
    eprintln!("wrote {} and {}", csv.display(), png.display());
    Ok(())
}

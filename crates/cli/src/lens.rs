//! `headlab lens`.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use headlab_data::Tokenizer;
use headlab_heads::{LensStage, attribute, logit_lens};
use headlab_report::heatmap::heatmap_png;

use crate::common::{OnRun, open_run, whole_number};

/// `headlab lens`.
#[derive(Debug, Args)]
pub struct LensArgs {
    /// A run directory made by `headlab train` or `headlab import`.
    pub run: PathBuf,
    /// The text to read: every token but the last is an input, every token but the first a
    /// target.
    #[arg(long)]
    pub text: String,
    /// Most likely tokens to list per stage and position.
    #[arg(long, default_value_t = 3, allow_negative_numbers = true, value_parser = whole_number::<usize>)]
    pub top: usize,
    /// Also attribute, after the whole text, this token's logit to each head, MLP and the
    /// embedding (direct logit attribution); writes attribution.csv.
    #[arg(long)]
    pub answer: Option<String>,
    /// With --answer: attribute the difference between its logit and this token's.
    #[arg(long, requires = "answer")]
    pub versus: Option<String>,
    /// Where to write lens.csv, lens.png and attribution.csv (default: RUN/lens).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// The backend and checkpoint to load.
    #[command(flatten)]
    pub on: OnRun,
}

/// Runs `headlab lens`.
pub fn run(args: LensArgs) -> Result<()> {
    if args.top == 0 {
        bail!("--top is 0: give the number of tokens to list, at least 1");
    }
    let (run, trained, device) =
        open_run(&args.run, args.on.backend.as_deref(), args.on.checkpoint)?;
    let tokenizer = &trained.tokenizer;
    let tokens = tokenizer.encode(&args.text).context("encoding --text")?;
    let stages = logit_lens(&trained.model, &tokens, args.top, &device)?;
    let one = |flag: &str, text: &str| -> Result<u32> {
        let ids = tokenizer
            .encode(text)
            .with_context(|| format!("encoding {flag}"))?;
        match ids[..] {
            [id] => Ok(id),
            _ => bail!(
                "{flag} {text:?} is {} tokens; give exactly one token of the run's vocabulary",
                ids.len()
            ),
        }
    };
    let attribution = match &args.answer {
        Some(answer) => {
            let answer = one("--answer", answer)?;
            let versus = args
                .versus
                .as_deref()
                .map(|v| one("--versus", v))
                .transpose()?;
            let a = attribute(&trained.model, &tokens, answer, versus, &device)?;
            Some((a, answer, versus))
        }
        None => None,
    };
    let out = args.out.clone().unwrap_or_else(|| run.root.join("lens"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let csv = out.join("lens.csv");
    std::fs::write(&csv, lens_csv(&stages, &tokens, tokenizer))
        .with_context(|| format!("writing {}", csv.display()))?;
    let png = out.join("lens.png");
    draw(&png, &stages, &tokens, tokenizer)?;
    print!("{}", table(&stages, &tokens, tokenizer));
    eprintln!("wrote {} and {}", csv.display(), png.display());
    if let Some((a, answer, versus)) = attribution {
        let path = out.join("attribution.csv");
        let mut text = String::from("part,direct_logit\n");
        for p in &a.parts {
            let _ = writeln!(text, "{},{:.6}", p.name, p.logit);
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        let what = match versus {
            Some(b) => format!(
                "logit({}) - logit({})",
                shown(tokenizer, answer),
                shown(tokenizer, b)
            ),
            None => format!("logit({})", shown(tokenizer, answer)),
        };
        println!(
            "\ndirect logit attribution of {what} = {:.3} after the whole text; largest parts:",
            a.logit
        );
        let mut parts = a.parts.clone();
        parts.sort_by(|x, y| y.logit.abs().total_cmp(&x.logit.abs()));
        for p in parts.iter().take(8) {
            println!("  {:<24}{:>+9.3}", p.name, p.logit);
        }
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// A token as the table shows it: its text with newlines and tabs visible.
fn shown(tokenizer: &Tokenizer, id: u32) -> String {
    tokenizer
        .token_text(id)
        .replace('\n', "\\n")
        .replace('\t', "\\t")
}

/// One row per stage: its loss, then the most likely next token at each position.
fn table(stages: &[LensStage], tokens: &[u32], tokenizer: &Tokenizer) -> String {
    let t = tokens.len() - 1;
    let mut s = String::new();
    let _ = write!(s, "{:<12}{:>8}  ", "stage", "loss");
    for &id in &tokens[1..] {
        let _ = write!(s, "{:>6}", shown(tokenizer, id));
    }
    s.push('\n');
    for stage in stages {
        let _ = write!(s, "{:<12}{:>8.3}  ", stage.name, stage.loss);
        for p in 0..t {
            let _ = write!(s, "{:>6}", shown(tokenizer, stage.top[p][0].0));
        }
        s.push('\n');
    }
    s
}

/// `lens.csv`: one row per stage and position with the input token, the next token, its
/// log-probability at that stage and the stage's most likely tokens.
fn lens_csv(stages: &[LensStage], tokens: &[u32], tokenizer: &Tokenizer) -> String {
    let quote = |s: String| format!("\"{}\"", s.replace('"', "\"\""));
    let mut s = String::from("stage,position,token,next_token,next_log_prob,loss,top\n");
    for stage in stages {
        for (p, top) in stage.top.iter().enumerate() {
            let top: Vec<String> = top
                .iter()
                .map(|(id, prob)| format!("{} {prob:.4}", shown(tokenizer, *id)))
                .collect();
            let _ = writeln!(
                s,
                "{},{p},{},{},{:.6},{:.6},{}",
                stage.name,
                quote(shown(tokenizer, tokens[p])),
                quote(shown(tokenizer, tokens[p + 1])),
                stage.target_log_prob[p],
                stage.loss,
                quote(top.join("; "))
            );
        }
    }
    s
}

/// `lens.png`: stages down, positions across, each cell shaded by the probability of the
/// next token and labelled with the stage's most likely token.
fn draw(png: &std::path::Path, stages: &[LensStage], tokens: &[u32], tk: &Tokenizer) -> Result<()> {
    let rows: Vec<String> = stages
        .iter()
        .map(|s| format!("{} {:.2}", s.name, s.loss))
        .collect();
    let columns: Vec<String> = tokens[1..].iter().map(|&id| shown(tk, id)).collect();
    let values: Vec<f64> = stages
        .iter()
        .flat_map(|s| s.target_log_prob.iter().map(|l| l.exp()))
        .collect();
    let cells: Vec<String> = stages
        .iter()
        .flat_map(|s| s.top.iter().map(|t| shown(tk, t[0].0)))
        .collect();
    let title = "logit lens: p(next token) at each stage (loss beside it), top token in the cell";
    let x_title = "position: the token to predict there (each stage's top guess in its cell)";
    heatmap_png(png, (title, x_title), &rows, &columns, &values, &cells)?;
    Ok(())
}

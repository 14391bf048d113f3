//! `headlab patch`'s results as text and files: the summary it prints, `patch.csv`,
//! `patch.json` (what the run's page draws) and, for path patching, `path.csv`
//! ([`crate::patching`] measures them).

use std::fmt::Write as _;

use headlab_data::Tokenizer;

use crate::patching::{Patching, PathPatching, Sweep};

/// Below this gap between the clean and the corrupted metric (in nats, as both metrics are),
/// shares restored are not worth reading. A share is a patch's effect divided by that gap.
/// Under 1 nat the answer is less than e times likelier (against --versus, or at all) after
/// the clean prompt than after the corrupted one: the prompts barely disagree about it, and
/// a patch that moves the metric by a nat for reasons of its own reads as a share of several
/// units (the README's old example: a gap of 0.16 and shares down to -14.8).
pub const CLOSE_NATS: f64 = 1.0;

/// The warning when the two runs' metrics are too close for shares to mean anything.
pub fn too_close(result: &Patching) -> Option<String> {
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
pub struct Labels<'a> {
    /// The clean prompt's tokens.
    pub clean: &'a [u32],
    /// The corrupted prompt's tokens.
    pub corrupted: &'a [u32],
    /// The run's tokenizer.
    pub tokenizer: &'a Tokenizer,
}

impl Labels<'_> {
    /// The clean token at `position`, and the corrupted one if it differs.
    pub fn tokens(&self, position: usize) -> (String, Option<String>) {
        let (c, k) = (self.clean[position], self.corrupted[position]);
        let shown = |id| shown(self.tokenizer, id);
        (shown(c), (c != k).then(|| shown(k)))
    }

    /// A column heading: `i/m` where the prompts differ, the one token where they agree.
    pub fn column(&self, position: usize) -> String {
        match self.tokens(position) {
            (clean, Some(corrupted)) => format!("{clean}/{corrupted}"),
            (clean, None) => clean,
        }
    }

    /// What a sweep's columns are, for its picture's x axis: heads for the `head` site
    /// (each head's output at every position), positions for the others.
    pub fn x_title(&self, sweep: &Sweep) -> &'static str {
        if sweep.site == "head" {
            "head of the layer: its whole output patched from the clean run"
        } else {
            "position: the token read there (patched from the clean run)"
        }
    }

    /// Every column of `sweep`: heads, or positions.
    pub fn columns(&self, sweep: &Sweep) -> Vec<String> {
        if sweep.site == "head" {
            (0..sweep.columns).map(|h| format!("head {h}")).collect()
        } else {
            (0..sweep.columns).map(|p| self.column(p)).collect()
        }
    }
}

/// What `headlab patch` was asked: the two prompts, the answer and the token it is set
/// against (none: the answer's log-probability).
pub struct Prompts<'a> {
    /// `--clean`.
    pub clean: &'a str,
    /// `--corrupted`.
    pub corrupted: &'a str,
    /// `--answer`.
    pub answer: &'a str,
    /// `--versus`.
    pub versus: Option<&'a str>,
}

/// `patch.json`: what the run's page draws (prompts, metric, every sweep with its labels).
pub fn page_json(
    args: &Prompts,
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
pub fn shown(tokenizer: &Tokenizer, id: u32) -> String {
    tokenizer
        .token_text(id)
        .replace('\n', "\\n")
        .replace('\t', "\\t")
}

/// Where a patch went: `layer 1 position 4 ("s")`, `layer 1 position 7 ("i", corrupted
/// "m")`, or `1.0` for a head (the site column says `head`).
fn place(site: &str, layer: usize, column: usize, labels: &Labels) -> String {
    if site == "head" {
        return format!("{layer}.{column}");
    }
    match labels.tokens(column) {
        (clean, Some(corrupted)) => {
            format!("layer {layer} position {column} ({clean:?}, corrupted {corrupted:?})")
        }
        (clean, None) => format!("layer {layer} position {column} ({clean:?})"),
    }
}

/// The two runs' metric and the largest effects, most restored first.
pub fn summary(result: &Patching, top: usize, labels: &Labels) -> String {
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
pub fn patch_csv(result: &Patching, labels: &Labels) -> String {
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

/// The two runs' metric and the paths that restore most.
pub fn path_summary(result: &PathPatching, top: usize) -> String {
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
pub fn path_csv(result: &PathPatching) -> String {
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

/// Pearson's correlation of two equally long series; NaN when either is constant.
pub fn correlation(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    if sxx == 0.0 || syy == 0.0 {
        return f64::NAN;
    }
    sxy / (sxx * syy).sqrt()
}

/// `comparison.txt`: exact patching's largest effects, then how attribution patching's
/// estimates of the same patches agree with them: per site (and over all sites) the
/// correlation of the shares restored, and the `top` patches where they differ most.
pub fn attribution_comparison(
    exact: &Patching,
    estimate: &Patching,
    top: usize,
    labels: &Labels,
) -> String {
    let mut s = summary(exact, top, labels);
    let _ = writeln!(
        s,
        "attribution against exact patching (correlation of the shares restored):"
    );
    let (mut all_exact, mut all_estimate) = (Vec::new(), Vec::new());
    let mut apart: Vec<(f64, f64, f64, String)> = Vec::new();
    for (e, a) in exact.sweeps.iter().zip(&estimate.sweeps) {
        let r = correlation(&e.restored, &a.restored);
        let _ = writeln!(
            s,
            "  {:<10}{:>7}  over {} patches",
            e.site,
            if r.is_nan() {
                "n/a".to_string()
            } else {
                format!("{r:+.3}")
            },
            e.restored.len()
        );
        all_exact.extend(&e.restored);
        all_estimate.extend(&a.restored);
        for (i, (x, y)) in e.restored.iter().zip(&a.restored).enumerate() {
            let (l, c) = (i / e.columns, i % e.columns);
            apart.push((
                (y - x).abs(),
                *x,
                *y,
                format!("{:<10}{}", e.site, place(e.site, l, c, labels)),
            ));
        }
    }
    let r = correlation(&all_exact, &all_estimate);
    let _ = writeln!(
        s,
        "  {:<10}{:>+7.3}  over {} patches",
        "all",
        r,
        all_exact.len()
    );
    apart.sort_by(|a, b| b.0.total_cmp(&a.0));
    let _ = writeln!(
        s,
        "largest disagreements (share restored: exact, attribution):"
    );
    for (_, x, y, what) in apart.iter().take(top) {
        let _ = writeln!(s, "  {x:>+7.3} {y:>+7.3}  {what}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 79: patch-head.png's columns are heads, and its x axis says so; the other
    /// sites' columns are positions, labelled by their tokens.
    #[test]
    fn each_sites_axis_names_what_its_columns_are() {
        let tokens = [97, 98, 99];
        let tokenizer = Tokenizer::byte();
        let labels = Labels {
            clean: &tokens,
            corrupted: &tokens,
            tokenizer: &tokenizer,
        };
        let sweep = |site| Sweep {
            site,
            layers: 1,
            columns: 3,
            metric: vec![0.0; 3],
            restored: vec![0.0; 3],
        };
        let head = sweep("head");
        assert_eq!(labels.columns(&head), ["head 0", "head 1", "head 2"]);
        assert!(labels.x_title(&head).starts_with("head"));
        assert!(!labels.x_title(&head).contains("position"));
        let resid = sweep("resid_pre");
        assert!(labels.x_title(&resid).starts_with("position"));
        let columns = labels.columns(&resid);
        assert_eq!(
            columns,
            (0..3).map(|p| labels.column(p)).collect::<Vec<_>>()
        );
        assert!(
            columns.iter().all(|c| !c.starts_with("head")),
            "{columns:?}"
        );
    }
}

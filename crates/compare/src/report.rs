//! `headlab compare`'s files: the report as JSON and markdown, the loss curves, and their
//! gaps to the reference against the tolerance.

use std::path::Path;

use headlab_report::plot::{Series, line_chart};
use headlab_report::{ReportError, write};

use crate::{CompareReport, UNIT_ROUNDOFF, worst_ratio};

/// Writes `compare.json`, `compare.md`, `compare.png` (losses) and `compare-gap.png` (their
/// gaps to the reference against the tolerance) into `out`.
pub fn write_compare(report: &CompareReport, out: &Path) -> Result<(), ReportError> {
    let json = serde_json::to_string_pretty(report).expect("the report serialises");
    write(&out.join("compare.json"), json + "\n")?;
    write(&out.join("compare.md"), compare_markdown(report))?;
    let series: Vec<Series> = report
        .backends
        .iter()
        .filter(|b| b.available)
        .map(|b| Series {
            label: b.backend.clone(),
            points: b
                .losses
                .iter()
                .enumerate()
                .map(|(s, &l)| (s as f64, l))
                .collect(),
            faint: false,
        })
        .collect();
    line_chart(
        &out.join("compare.png"),
        "training loss on each backend (same init, same batches)",
        "step",
        "loss",
        &series,
    )?;

    // The curves coincide to the eye; their gaps, on a log scale, against the tolerance.
    let reference = report
        .backends
        .iter()
        .find(|b| b.backend == report.reference);
    let mut gaps: Vec<Series> = report
        .backends
        .iter()
        .filter(|b| b.available && b.backend != report.reference)
        .filter_map(|b| {
            let r = reference?;
            let points = r
                .losses
                .iter()
                .zip(&b.losses)
                .enumerate()
                // An exact match has no logarithm; show it at the f32 roundoff of the loss.
                .map(|(s, (a, c))| {
                    (
                        s as f64,
                        ((a - c).abs().max(a.abs() * UNIT_ROUNDOFF)).log10(),
                    )
                })
                .collect();
            Some(Series {
                label: format!("{} - {}", b.backend, report.reference),
                points,
                faint: false,
            })
        })
        .collect();
    gaps.push(Series {
        label: "tolerance".into(),
        points: (0..report.steps)
            .map(|s| {
                let tol = report.tolerance.loss(report.max_abs_logit, s);
                (s as f64, tol.log10())
            })
            .collect(),
        faint: true,
    });
    line_chart(
        &out.join("compare-gap.png"),
        "|loss difference| to the reference backend",
        "step",
        "log10 |loss - reference loss| (exact matches at the f32 roundoff)",
        &gaps,
    )
}

/// `compare.md`: the setup in a sentence, one row per backend, every value against the f64
/// truth, and what failed.
pub fn compare_markdown(report: &CompareReport) -> String {
    let m = &report.config.model;
    let mut s = format!(
        "{} steps of a {}-layer, {}-head, d_model {} GPT ({} parameters), batch {} x {} \
         tokens. Each backend's first steps are set against the same model in f64 (flex, \
         Burn's ops; {:.1} s): error = max |value - truth| / rms(truth), bound = {} \
         sqrt(2 ln 2N) u sqrt(K) for N values at the end of reductions of total length K (see \
         the README). Later losses: against {} within the worst-case tolerance {:.2e} at the \
         last step.\n\n",
        report.steps,
        m.n_layers,
        m.n_heads,
        m.d_model,
        report.params,
        report.config.train.batch_size,
        m.block_size,
        report.truth_seconds,
        report.safety,
        report.reference,
        report.final_loss_tolerance,
    );
    s.push_str(
        "| backend | agrees | worst error / bound | max abs loss diff to reference (step) | \
         forward ms | backward ms | optimizer ms | step ms | tokens/s | first step ms | \
         peak RSS MiB | device MiB |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    for b in &report.backends {
        if !b.available {
            s.push_str(&format!(
                "| {} | not available: {} | | | | | | | | | | |\n",
                b.backend,
                b.reason.as_deref().unwrap_or("unknown").replace('|', "/")
            ));
            continue;
        }
        let worst = worst_ratio(&b.checks);
        let step_ms = b.forward_ms + b.backward_ms + b.optimizer_ms;
        s.push_str(&format!(
            "| {} | {} | {:.2} | {:.2e} ({}) | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {} | {} |\n",
            b.backend,
            if b.within_tolerance { "yes" } else { "NO" },
            worst,
            b.max_loss_diff,
            b.max_loss_diff_step,
            b.forward_ms,
            b.backward_ms,
            b.optimizer_ms,
            step_ms,
            report.tokens_per_step as f64 * 1000.0 / step_ms.max(1e-9),
            b.first_step_ms,
            opt(b.peak_rss_mib),
            opt(b.device_reserved_mib),
        ));
    }
    for b in report.backends.iter().filter(|b| b.adapter.is_some()) {
        let adapter = b.adapter.as_deref().unwrap_or_default();
        s.push_str(&format!("\n{} ran on adapter {adapter}.\n", b.backend));
    }
    s.push_str(&truth_table(report));
    let failing: Vec<_> = report
        .backends
        .iter()
        .filter(|b| b.available && !b.failures.is_empty())
        .collect();
    if !failing.is_empty() {
        s.push_str("\nFailures:\n");
        for b in failing {
            for f in &b.failures {
                s.push_str(&format!("- {}: {f}\n", b.backend));
            }
        }
    }
    s
}

/// Every value against the f64 truth: its bound, then each backend's error; `**` marks an
/// error out of its bound.
fn truth_table(report: &CompareReport) -> String {
    let ran: Vec<_> = report.backends.iter().filter(|b| b.available).collect();
    let Some(first) = ran.first() else {
        return String::new();
    };
    let mut s = format!(
        "\nError against f64 (bound):\n\n| value | bound | {} |\n|---|---|{}\n",
        ran.iter()
            .map(|b| b.backend.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(ran.len())
    );
    for (k, check) in first.checks.iter().enumerate() {
        s.push_str(&format!("| {} | {:.1e} |", check.name, check.bound));
        for b in &ran {
            match b.checks.get(k) {
                Some(c) => {
                    let mark = if c.ratio() > 1.0 { "**" } else { "" };
                    let at = match &c.detail {
                        Some(d) if c.name == "gradients" => format!(" ({d})"),
                        _ => String::new(),
                    };
                    s.push_str(&format!(" {mark}{:.1e}{mark}{at} |", c.error));
                }
                None => s.push_str(" - |"),
            }
        }
        s.push('\n');
    }
    s
}

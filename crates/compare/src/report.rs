//! `headlab compare`'s files: the report as JSON, markdown and an HTML page, the loss curves,
//! and their gaps to the reference against the tolerance.

use std::fmt::Write as _;
use std::path::Path;

use headlab_report::page::{escape, png_data_uri, static_page};
use headlab_report::plot::{PALETTE, Series, Style, line_chart_styled};
use headlab_report::{ReportError, write};

use crate::{BackendReport, Check, CompareReport, UNIT_ROUNDOFF, worst_ratio};

/// The page `headlab compare` writes beside its other files.
pub const COMPARE_PAGE: &str = "compare.html";

/// A backend's colour in every picture and on the page: fixed by its name, so a backend
/// looks the same in `compare.png` and `compare-gap.png` whichever backends ran.
pub fn backend_style(backend: &str) -> Style {
    let i = match backend {
        "flex" => 0,
        "wgpu" => 1,
        "ndarray" => 2,
        "flex-burn" => 3,
        other => 4 + other.bytes().map(usize::from).sum::<usize>() % (PALETTE.len() - 4),
    };
    Style::nth(i)
}

/// `compare.png`'s series: each available backend's losses, in its colour.
pub fn loss_series(report: &CompareReport) -> Vec<(Series, Style)> {
    report
        .backends
        .iter()
        .filter(|b| b.available)
        .map(|b| {
            let series = Series {
                label: b.backend.clone(),
                points: b
                    .losses
                    .iter()
                    .enumerate()
                    .map(|(s, &l)| (s as f64, l))
                    .collect(),
                faint: false,
            };
            (series, backend_style(&b.backend))
        })
        .collect()
}

/// `compare-gap.png`'s series: each other backend's gap to the reference, in that backend's
/// colour, and the tolerance in grey.
pub fn gap_series(report: &CompareReport) -> Vec<(Series, Style)> {
    let reference = report
        .backends
        .iter()
        .find(|b| b.backend == report.reference);
    let mut gaps: Vec<(Series, Style)> = report
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
            let series = Series {
                label: format!("{} - {}", b.backend, report.reference),
                points,
                faint: false,
            };
            Some((series, backend_style(&b.backend)))
        })
        .collect();
    let tolerance = Series {
        label: "tolerance".into(),
        points: (0..report.steps)
            .map(|s| {
                let tol = report.tolerance.loss(report.max_abs_logit, s);
                (s as f64, tol.log10())
            })
            .collect(),
        faint: true,
    };
    gaps.push((tolerance, Style::NEUTRAL));
    gaps
}

/// Writes `compare.json`, `compare.md`, `compare.png` (losses), `compare-gap.png` (their
/// gaps to the reference against the tolerance) and `compare.html` (all of it on one page)
/// into `out`.
pub fn write_compare(report: &CompareReport, out: &Path) -> Result<(), ReportError> {
    let json = serde_json::to_string_pretty(report).expect("the report serialises");
    write(&out.join("compare.json"), json + "\n")?;
    write(&out.join("compare.md"), compare_markdown(report))?;
    let (losses, gaps) = (out.join("compare.png"), out.join("compare-gap.png"));
    line_chart_styled(
        &losses,
        "training loss on each backend (same init, same batches)",
        "step",
        "loss",
        &loss_series(report),
    )?;
    // The curves coincide to the eye; their gaps, on a log scale, against the tolerance.
    line_chart_styled(
        &gaps,
        "|loss difference| to the reference backend",
        "step",
        "log10 |loss - reference loss| (exact matches at the f32 roundoff)",
        &gap_series(report),
    )?;
    let pictures = [png_data_uri(&losses)?, png_data_uri(&gaps)?];
    write(&out.join(COMPARE_PAGE), compare_html(report, &pictures))
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

/// The truth table's rows, in every report: each row `k` some backend that ran has, titled by
/// the first backend's check where it has one (bf16 backends add their scale checks).
fn truth_rows<'a>(ran: &[&'a BackendReport]) -> Vec<(usize, &'a Check)> {
    let rows = ran.iter().map(|b| b.checks.len()).max().unwrap_or(0);
    (0..rows)
        .filter_map(|k| Some((k, ran.iter().find_map(|b| b.checks.get(k))?)))
        .collect()
}

/// A cell's own bound where its precision's differs from the row's (bf16 beside f32).
fn own_bound(cell: &Check, row: &Check) -> String {
    if cell.bound == row.bound {
        String::new()
    } else {
        format!(" (bound {:.1e})", cell.bound)
    }
}

/// Every value against the f64 truth: its bound, then each backend's error; `**` marks an
/// error out of its bound.
fn truth_table(report: &CompareReport) -> String {
    let ran: Vec<_> = report.backends.iter().filter(|b| b.available).collect();
    if ran.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\nError against f64 (bound):\n\n| value | bound | {} |\n|---|---|{}\n",
        ran.iter()
            .map(|b| b.backend.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(ran.len())
    );
    for (k, check) in truth_rows(&ran) {
        s.push_str(&format!("| {} | {:.1e} |", check.name, check.bound));
        for b in &ran {
            match b.checks.get(k) {
                Some(c) => {
                    let mark = if c.ratio() > 1.0 { "**" } else { "" };
                    let at = match &c.detail {
                        Some(d) if c.name == "gradients" => format!(" ({d})"),
                        _ => String::new(),
                    };
                    let own = own_bound(c, check);
                    s.push_str(&format!(" {mark}{:.1e}{mark}{at}{own} |", c.error));
                }
                None => s.push_str(" - |"),
            }
        }
        s.push('\n');
    }
    s
}

/// A backend's name with a swatch of its colour in the pictures.
fn named(b: &BackendReport) -> String {
    let c = backend_style(&b.backend).color;
    format!(
        "<span class=\"swatch\" style=\"background: rgb({}, {}, {})\"></span>{}",
        c.0,
        c.1,
        c.2,
        escape(&b.backend)
    )
}

/// `compare.html`: what `compare.md` says, laid out as the run page is: the setup, the
/// verdict per backend, the per-phase times and memory, the two pictures (`pictures`: their
/// data URIs, losses then gaps), and every value against the f64 truth.
pub fn compare_html(report: &CompareReport, pictures: &[String; 2]) -> String {
    let m = &report.config.model;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<p class=\"hint\">{} steps of a {}-layer, {}-head, d_model {} GPT ({} parameters), batch \
         {} x {} tokens, from the same initial weights and batches on every backend. Each \
         backend's first step is set against the same model in f64 (flex, Burn's ops; {:.1} s); \
         later losses against {}, within {:.2e} at the last step.</p>",
        report.steps,
        m.n_layers,
        m.n_heads,
        m.d_model,
        report.params,
        report.config.train.batch_size,
        m.block_size,
        report.truth_seconds,
        escape(&report.reference),
        report.final_loss_tolerance,
    );

    s += "<section id=\"verdict\">\n<h2>Verdict</h2>\n<table>\n<thead><tr><th class=\"txt\">backend\
          </th><th class=\"txt\">verdict</th><th>worst error / bound</th><th>max |loss diff| to \
          the reference</th><th>at step</th><th class=\"txt\">adapter</th></tr></thead>\n<tbody>\n";
    for b in &report.backends {
        if !b.available {
            let why = b.reason.as_deref().unwrap_or("unknown");
            let _ = writeln!(
                s,
                "<tr><td class=\"txt\">{}</td><td class=\"txt\" colspan=\"5\">not available: {}</td></tr>",
                named(b),
                escape(why)
            );
            continue;
        }
        let (class, verdict) = if b.within_tolerance {
            ("good", "agrees")
        } else {
            ("bad", "FAILS")
        };
        let _ = writeln!(
            s,
            "<tr><td class=\"txt\">{}</td><td class=\"txt {class}\">{verdict}</td><td>{:.2}</td>\
             <td>{:.2e}</td><td>{}</td><td class=\"txt\">{}</td></tr>",
            named(b),
            worst_ratio(&b.checks),
            b.max_loss_diff,
            b.max_loss_diff_step,
            escape(b.adapter.as_deref().unwrap_or("-")),
        );
    }
    s += "</tbody>\n</table>\n";
    let failures: Vec<String> = report
        .backends
        .iter()
        .filter(|b| b.available)
        .flat_map(|b| {
            b.failures
                .iter()
                .map(move |f| format!("<li>{}: {}</li>", escape(&b.backend), escape(f)))
        })
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(s, "<ul id=\"failures\">\n{}\n</ul>", failures.join("\n"));
    }
    s += "</section>\n";

    s += "<section id=\"phases\">\n<h2>Time and memory per step</h2>\n<p class=\"hint\">Median \
          milliseconds per step after the first (warm-up) step; the first step apart, as it \
          includes kernel compilation on wgpu. Peak RSS is the process's growth while the \
          backend ran.</p>\n<table>\n<thead><tr><th class=\"txt\">backend</th><th>forward ms</th>\
          <th>backward ms</th><th>optimizer ms</th><th>step ms</th><th>tokens/s</th><th>first \
          step ms</th><th>peak RSS MiB</th><th>device MiB</th></tr></thead>\n<tbody>\n";
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    for b in report.backends.iter().filter(|b| b.available) {
        let step_ms = b.forward_ms + b.backward_ms + b.optimizer_ms;
        let _ = writeln!(
            s,
            "<tr><td class=\"txt\">{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td>\
             <td>{:.0}</td><td>{:.0}</td><td>{}</td><td>{}</td></tr>",
            named(b),
            b.forward_ms,
            b.backward_ms,
            b.optimizer_ms,
            step_ms,
            report.tokens_per_step as f64 * 1000.0 / step_ms.max(1e-9),
            b.first_step_ms,
            opt(b.peak_rss_mib),
            opt(b.device_reserved_mib),
        );
    }
    s += "</tbody>\n</table>\n</section>\n";

    let _ = writeln!(
        s,
        "<section id=\"pictures\">\n<h2>Loss</h2>\n<img src=\"{}\" alt=\"training loss on each \
         backend against step\">\n<p class=\"hint\">The curves coincide to the eye; their gaps to \
         {}, on a log scale, against the tolerance (grey):</p>\n<img src=\"{}\" alt=\"each \
         backend's loss gap to the reference against step, with the tolerance\">\n</section>",
        pictures[0],
        escape(&report.reference),
        pictures[1]
    );

    s += &truth_html(report);
    static_page("headlab compare", &s)
}

/// Every value against the f64 truth as a table: its bound, then each backend's error, out
/// of bound marked.
fn truth_html(report: &CompareReport) -> String {
    let ran: Vec<_> = report.backends.iter().filter(|b| b.available).collect();
    if ran.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "<section id=\"truth\">\n<h2>Against the f64 truth</h2>\n<p class=\"hint\">Error = max \
         |value - truth| / rms(truth) at the first step; red: out of its bound.</p>\n<table>\n\
         <thead><tr><th class=\"txt\">value</th><th>bound</th>",
    );
    for b in &ran {
        let _ = write!(s, "<th>{}</th>", named(b));
    }
    s += "</tr></thead>\n<tbody>\n";
    for (k, check) in truth_rows(&ran) {
        let _ = write!(
            s,
            "<tr><td class=\"txt\">{}</td><td>{:.1e}</td>",
            escape(&check.name),
            check.bound
        );
        for b in &ran {
            match b.checks.get(k) {
                Some(c) => {
                    let class = if c.ratio() > 1.0 {
                        " class=\"bad\""
                    } else {
                        ""
                    };
                    let at = match &c.detail {
                        Some(d) if c.name == "gradients" => format!(" ({})", escape(d)),
                        _ => String::new(),
                    };
                    let own = own_bound(c, check);
                    let _ = write!(s, "<td{class}>{:.1e}{at}{own}</td>", c.error);
                }
                None => s += "<td>-</td>",
            }
        }
        s += "</tr>\n";
    }
    s += "</tbody>\n</table>\n</section>\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Check, Tolerance};
    use headlab_model::GptConfig;
    use headlab_train::config::RunConfig;

    fn backend(name: &str, available: bool) -> BackendReport {
        BackendReport {
            backend: name.into(),
            precision: "f32".into(),
            available,
            reason: (!available).then(|| "no <adapter> & none".into()),
            adapter: None,
            checks: vec![Check {
                name: "logits".into(),
                detail: None,
                error: if name == "ndarray" { 2e-5 } else { 1e-7 },
                bound: 1e-5,
                forward: true,
            }],
            failures: if name == "ndarray" {
                vec!["logits: error 2.0e-5 (bound 1.0e-5)".into()]
            } else {
                Vec::new()
            },
            max_logit_diff: 0.0,
            losses: vec![2.0, 1.9, 1.8],
            max_loss_diff: 0.0,
            max_loss_diff_step: 0,
            within_tolerance: name != "ndarray",
            forward_ms: 1.0,
            backward_ms: 2.0,
            optimizer_ms: 0.5,
            first_step_ms: 9.0,
            peak_rss_mib: Some(12.0),
            device_reserved_mib: None,
        }
    }

    fn report(names: &[&str]) -> CompareReport {
        CompareReport {
            config: RunConfig::default(),
            params: 1000,
            steps: 3,
            tokens_per_step: 64,
            reference: names[0].into(),
            tolerance: Tolerance::of(&GptConfig::new(16)),
            max_abs_logit: 1.0,
            logits_tolerance: 1e-5,
            final_loss_tolerance: 1e-4,
            safety: 2.0,
            truth_seconds: 0.1,
            backends: names.iter().map(|n| backend(n, *n != "wgpu")).collect(),
        }
    }

    /// A backend has one colour in both pictures and whichever backends ran beside it (by
    /// position in the list, ndarray was the third line of compare.png and the first of
    /// compare-gap.png); no two backends share one, and the tolerance is none of theirs.
    #[test]
    fn each_backend_has_one_colour_in_both_pictures() {
        let mut seen = std::collections::BTreeMap::new();
        for names in [
            &["flex", "flex-burn", "ndarray"][..],
            &["flex", "ndarray"],
            &["ndarray", "flex"],
        ] {
            let r = report(names);
            for (series, style) in loss_series(&r).into_iter().chain(gap_series(&r)) {
                let name = series.label.split(" - ").next().unwrap().to_string();
                if name == "tolerance" {
                    assert_eq!(style, Style::NEUTRAL);
                    continue;
                }
                let first = *seen.entry(name.clone()).or_insert(style);
                assert_eq!(style, first, "{name} in {names:?}");
            }
        }
        let colours: std::collections::BTreeSet<_> = seen
            .values()
            .map(|s| (s.color.0, s.color.1, s.color.2))
            .collect();
        assert_eq!(colours.len(), seen.len(), "{seen:?}");
    }

    /// The page: a verdict per backend (an unavailable one with its reason, as text), the
    /// per-phase times, both pictures inline, the truth table with the failing value marked.
    #[test]
    fn the_page_holds_verdicts_phases_pictures_and_the_truth() {
        let r = report(&["flex", "ndarray", "wgpu"]);
        let pictures = [
            "data:image/png;base64,AAAA".into(),
            "data:image/png;base64,BBBB".into(),
        ];
        let page = compare_html(&r, &pictures);
        assert!(
            page.contains("agrees</td>") && page.contains("FAILS</td>"),
            "{page}"
        );
        assert!(
            page.contains("not available: no &lt;adapter&gt; &amp; none"),
            "{page}"
        );
        assert!(
            page.contains("<td>1.0</td><td>2.0</td><td>0.5</td><td>3.5</td>"),
            "{page}"
        );
        assert!(
            page.contains("src=\"data:image/png;base64,AAAA\""),
            "{page}"
        );
        assert!(
            page.contains("src=\"data:image/png;base64,BBBB\""),
            "{page}"
        );
        assert!(page.contains("<td class=\"bad\">2.0e-5</td>"), "{page}");
        assert!(page.contains("<li>ndarray: logits: error 2.0e-5"), "{page}");
        assert_eq!(page.matches("<table>").count(), 3, "{page}");
    }

    /// Issue 79: a bf16 backend's errors stand against its own bounds on the page, as in
    /// compare.md: 4.9e-2 within bf16's 6.0e-2 says that bound, one out of it is red, and its
    /// scale row (which the f32 backends lack) is a row of the page.
    #[test]
    fn a_bf16_row_shows_its_own_bound_and_its_scale_checks() {
        let mut r = report(&["flex", "flex-bf16"]);
        let bf16 = &mut r.backends[1];
        bf16.precision = "bf16".into();
        bf16.checks[0].error = 4.9e-2;
        bf16.checks[0].bound = 6e-2;
        bf16.checks.push(Check {
            name: "block 0 attention scale".into(),
            detail: None,
            error: 1.1e-2,
            bound: 2.8e-3,
            forward: true,
        });
        let page = compare_html(&r, &[String::new(), String::new()]);
        assert!(page.contains("<td>4.9e-2 (bound 6.0e-2)</td>"), "{page}");
        assert!(
            page.contains(
                "block 0 attention scale</td><td>2.8e-3</td><td>-</td><td class=\"bad\">1.1e-2</td>"
            ),
            "{page}"
        );
        let md = compare_markdown(&r);
        assert!(md.contains("4.9e-2 (bound 6.0e-2)"), "{md}");
    }
}

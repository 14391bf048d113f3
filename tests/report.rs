//! `report.html` in headless Chromium: a run's page loads without console errors, the step
//! slider redraws the maps of heads that changed, hovering a token shades its attention,
//! text full of markup stays text, and an older run's page says what it lacks.
//!
//! The page is driven by two test scripts (tests/assets/report-*.js) put into a copy of it:
//! one right after `<head>` records errors, one before `</body>` moves the slider, hovers a
//! token and writes what it saw into `body[data-test]` as JSON.

use std::path::Path;

use headlab_heads::MapHistory;

use crate::common::{TINY_MODEL, chromium, headlab, ok, render_at};

const GUARD: &str = include_str!("assets/report-guard.js");
const DRIVE: &str = include_str!("assets/report-drive.js");

/// Markup a corpus may hold, each of which would run, inject or hide something if the page
/// put text into HTML unescaped.
const HOSTILE: [&str; 6] = [
    "</script>",
    "<!--",
    "<script>window.__pwned=1</script>",
    "<img src=x onerror=\"window.__pwned=1\">",
    "${window.__pwned=1}",
    "--> & &amp; \u{2028}",
];

/// A tiny run trained on `text` with heads tracked every 30 steps.
fn tracked_run(dir: &Path, text: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("page.txt"), text).unwrap();
    let sets = [
        "model.block_size=32",
        "train.max_iters=180",
        "train.eval_interval=60",
        "train.lr=1e-2",
        "train.eval_iters=2",
        "train.warmup_iters=5",
        "train.sample_tokens=40",
        "train.track_heads_every=30",
        "data.path=page.txt",
    ];
    let mut args = vec!["train", "--out", "run"];
    args.extend_from_slice(TINY_MODEL);
    for set in &sets {
        args.extend(["--set", set]);
    }
    let out = headlab(&args, dir);
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("run/report.html"), "{stderr}");
    dir.join("run")
}

/// The page with the test scripts in, rendered in a window 1400 pixels wide (a laptop's);
/// `body[data-test]` parsed.
fn drive(browser: &str, page: &Path, scratch: &Path) -> serde_json::Value {
    let html = std::fs::read_to_string(page).unwrap();
    let html = html
        .replacen("<head>", &format!("<head><script>{GUARD}</script>"), 1)
        .replacen("</body>", &format!("<script>{DRIVE}</script></body>"), 1);
    let copy = scratch.join("driven.html");
    std::fs::write(&copy, html).unwrap();
    let (dom, log) = render_at(browser, &copy, &scratch.join("chrome"), Some((1400, 1000)));
    let body = &dom[dom.find("<body").expect("a body")..];
    let attr = body
        .split("data-test=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("the drive script did not finish:\n{dom}"));
    let json = attr
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&");
    let seen: serde_json::Value = serde_json::from_str(&json).unwrap();
    let console: Vec<&str> = log.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "console output: {console:?}");
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["ready"], "1", "{seen}");
    // Nothing from the data became markup: no image, no comment, no script of its own.
    assert_eq!(seen["pwned"], "undefined", "{seen}");
    assert_eq!(seen["imgs"], 0, "{seen}");
    assert_eq!(seen["comments"], 0, "{seen}");
    assert_eq!(
        seen["page_scripts"],
        serde_json::json!(["report-data|application/json", "|"]),
        "{seen}"
    );
    seen
}

/// `(step, [score per head])` of one score column of `head_history.csv`.
fn tracked_scores(run: &Path, column: usize) -> Vec<(usize, Vec<f64>)> {
    let text = std::fs::read_to_string(run.join("head_history.csv")).unwrap();
    let mut out: Vec<(usize, Vec<f64>)> = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (step, score) = (f[0].parse().unwrap(), f[column].parse().unwrap());
        match out.last_mut() {
            Some((s, v)) if *s == step => v.push(score),
            _ => out.push((step, vec![score])),
        }
    }
    out
}

#[test]
fn the_report_replays_training_and_keeps_markup_as_text() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut text = String::new();
    for i in 0..400 {
        text += "the cat sat on the mat. ";
        text += HOSTILE[i % HOSTILE.len()];
        text += "\n";
    }
    let run = tracked_run(dir, &text);
    for file in [
        "report.html",
        "head_maps.jsonl",
        "sample.txt",
        "heads/heads.json",
    ] {
        assert!(run.join(file).is_file(), "{file} missing");
    }
    // `headlab patch` with markup in its prompts: the page shows its results as text.
    let (clean, corrupted) = (
        "the cat sat on the mat. <!--",
        "the dog sat on the mat. <!--",
    );
    let patch = [
        "patch",
        "run",
        "--clean",
        clean,
        "--corrupted",
        corrupted,
        "--answer",
        " ",
        "--versus",
        "t",
    ];
    ok(&headlab(&patch, dir));
    // The sample as every piece of markup at once, exactly; the page redrawn on demand.
    let sample = HOSTILE.join("\n");
    std::fs::write(run.join("sample.txt"), &sample).unwrap();
    let out = headlab(&["report", "run"], dir);
    ok(&out);
    let page = run.join("report.html");
    let bytes = std::fs::metadata(&page).unwrap().len();
    assert!(bytes < 2 << 20, "{bytes} bytes");

    let Some(browser) = chromium() else { return };
    let seen = drive(&browser, &page, dir);
    assert!(seen["exception"].is_null(), "{seen}");
    assert_eq!(
        seen["sample"],
        sample.as_str(),
        "the sample is shown as text, exactly"
    );
    // The patching section: one grid per site (resid_pre, attn_out, mlp_out: 2 layers x 28
    // positions; head: 2 layers x 2 heads), the prompts as text.
    assert_eq!(seen["patch"]["visible"], true, "{seen}");
    assert_eq!(seen["patch"]["tables"], 4, "{seen}");
    let cells = 3 * 2 * (clean.len() + 1) + 2 * (2 + 1);
    assert_eq!(seen["patch"]["cells"], cells, "{seen}");
    let info = seen["patch"]["info"].as_str().unwrap();
    assert!(info.contains(clean) && info.contains(corrupted), "{info}");
    // At 1400 pixels the page does not scroll sideways: the 29-column grids scroll inside
    // their column; and every chart's title (the longest read "... at step 180") fits whole,
    // clear of the legend.
    // The window is 1400 pixels wide; a vertical scrollbar takes its share of that.
    let width = seen["layout"]["width"].as_u64().unwrap();
    assert!((1360..=1400).contains(&width), "{seen}");
    assert_eq!(seen["layout"]["page_overflow"], 0, "{seen}");
    assert_eq!(seen["layout"]["patch_past_edge"], 0, "{seen}");
    assert_eq!(
        seen["layout"]["clipped_text"],
        serde_json::json!([]),
        "{seen}"
    );

    // Seven tracked steps, 0 to 180; the slider starts at the last.
    assert_eq!(seen["slider"]["max"], "6", "{seen}");
    assert_eq!(seen["first"]["label"], "step 0");
    assert_eq!(seen["last"]["label"], "step 180");
    assert_eq!(seen["first"]["loss_marker"], "0");
    assert_eq!(seen["last"]["loss_marker"], "180");
    assert_eq!(seen["last"]["score_marker"], "180");
    // The map of the head whose previous-token score moved most was redrawn differently.
    let prev = tracked_scores(&run, 3);
    let (first, last) = (&prev[0].1, &prev[prev.len() - 1].1);
    let moved = (0..first.len())
        .max_by(|&a, &b| {
            (last[a] - first[a])
                .abs()
                .total_cmp(&(last[b] - first[b]).abs())
        })
        .unwrap();
    assert!((last[moved] - first[moved]).abs() > 0.01, "{prev:?}");
    let digest = |at: &str| seen[at]["maps"][moved]["digest"].as_f64().unwrap();
    assert_ne!(digest("first"), digest("last"), "head {moved}: {seen}");
    assert_eq!(seen["last"]["maps"][moved]["step"], "180");
    assert_eq!(seen["maps_redrawn"], true);

    // Hovering token 5 shades tokens 0..=5 by the selected head's (0.0) weights from query 5
    // at the last step, in the maps' colour scale, read here from head_maps.jsonl; leaving
    // clears it.
    assert_eq!(seen["hover"], "5");
    let maps = std::fs::read_to_string(run.join("head_maps.jsonl")).unwrap();
    let maps = MapHistory::parse(&maps, usize::MAX).unwrap();
    let (step, bytes) = maps.steps.last().unwrap();
    assert_eq!(*step, 180);
    let t = maps.header.tokens.len();
    for j in 0..=5 {
        let s = (f64::from(bytes[5 * t + j]) / 255.0).sqrt();
        let c = |k: f64| (255.0 - k * s) as u8;
        let expected = format!("rgb({}, {}, {})", c(247.0), c(207.0), c(148.0));
        assert_eq!(
            seen["backgrounds"][j],
            expected.as_str(),
            "token {j}: {seen}"
        );
    }
    assert_eq!(seen["hover_after_leave"], "-1");
    assert_ne!(seen["background_after_leave"], seen["backgrounds"][0]);
    // Four heads in the table, each a row.
    assert_eq!(seen["table_rows"], 4);

    // The loss chart draws every batch of metrics.csv beside the evaluations, and its toggle
    // switches the scale to log and back.
    let metrics = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    let rows = |split: &str| {
        metrics
            .lines()
            .filter(|l| l.split(',').nth(1) == Some(split))
            .count()
    };
    let (batches, evals) = (rows("iter"), rows("val"));
    assert!(
        batches > evals && evals > 1,
        "{batches} batches, {evals} evaluations"
    );
    let series = seen["loss"]["series"].as_str().unwrap();
    for part in [
        format!("batch:{batches}"),
        format!("train:{evals}"),
        format!("val:{evals}"),
    ] {
        assert!(
            series.split(',').any(|s| s == part),
            "{part} not in {series}"
        );
    }
    assert_eq!(seen["loss"]["scale"], "linear", "{seen}");
    assert_eq!(seen["loss_log"]["scale"], "log", "{seen}");
    assert_eq!(seen["loss_log"]["series"], seen["loss"]["series"], "{seen}");
    assert_eq!(seen["loss_back"]["scale"], "linear", "{seen}");
    // Every probe chart says what it measures; the repeated half names chance for this
    // vocabulary.
    let captions = seen["probe_captions"].as_array().unwrap();
    // Six scores, the repeated half, every head's gradient norm and its copying score.
    assert_eq!(captions.len(), 9, "{seen}");
    assert!(
        captions.iter().all(|c| c.as_str().unwrap().len() > 40),
        "{seen}"
    );
    // head_history.csv's copying column, charted last: a fraction of the spectrum's mass at
    // every tracked step, step 0 included (it needs only the weights).
    let copying = tracked_scores(&run, 11);
    assert!(
        copying
            .iter()
            .all(|(_, c)| c.iter().all(|x| (-1.0..=1.0).contains(x))),
        "{copying:?}"
    );
    assert!(captions[8].as_str().unwrap().contains("copying score"));
    // head_history.csv's grad_norm column: each head's gradient norm from the step before each
    // tracked step (none at step 0), finite and positive after it.
    let grads = tracked_scores(&run, 10);
    assert!(grads[0].1.iter().all(|g| g.is_nan()), "{grads:?}");
    assert!(
        grads[1..]
            .iter()
            .all(|(_, g)| g.iter().all(|x| x.is_finite() && *x > 0.0)),
        "{grads:?}"
    );
    // A char vocabulary: one token per distinct character of the text.
    let v = std::collections::BTreeSet::<char>::from_iter(text.chars()).len();
    let repeat = captions[6].as_str().unwrap();
    assert!(
        repeat.contains(&format!("Chance is ln {v} = {:.2}", (v as f64).ln())),
        "{repeat}"
    );
}

/// A run made before maps were kept (no `head_maps.jsonl`) and before the head table still
/// gets a page: `headlab report` says what it lacks and draws the rest.
#[test]
fn an_older_run_gets_a_page_that_says_what_it_lacks() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let run = tracked_run(dir, &"a small text to learn from.\n".repeat(300));
    std::fs::remove_file(run.join("head_maps.jsonl")).unwrap();
    std::fs::remove_dir_all(run.join("heads")).unwrap();
    std::fs::remove_file(run.join("report.html")).unwrap();
    let out = headlab(&["report", "run"], dir);
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for part in [
        "no tracked maps",
        "train.track_heads_every",
        "no head table",
        "headlab heads run",
    ] {
        assert!(stderr.contains(part), "{part:?} missing from:\n{stderr}");
    }
    let Some(browser) = chromium() else { return };
    let seen = drive(&browser, &run.join("report.html"), dir);
    // Scores through training are still there: the slider moves their markers.
    assert_eq!(seen["last"]["score_marker"], "180", "{seen}");
    // No maps: no token strip to hover.
    assert_eq!(seen["n_tokens"], 0, "{seen}");
}

/// `headlab report RUN --beside OTHER`: OTHER's model sampled as RUN's sample was (prompt,
/// tokens, temperature, seed) is what `headlab sample` prints for OTHER with those settings,
/// and the page shows it beside RUN's own.
#[test]
fn a_sample_beside_another_runs_is_that_runs_sample_with_the_same_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let run = tracked_run(dir, &"a small text to learn from.\n".repeat(300));
    std::fs::write(
        dir.join("other.txt"),
        "another text, other words.\n".repeat(300),
    )
    .unwrap();
    let mut args = vec!["train", "--out", "other"];
    args.extend_from_slice(TINY_MODEL);
    for set in [
        "train.max_iters=60",
        "train.eval_interval=60",
        "train.eval_iters=2",
        "data.path=other.txt",
    ] {
        args.extend(["--set", set]);
    }
    ok(&headlab(&args, dir));
    ok(&headlab(&["report", "run", "--beside", "other"], dir));
    let beside: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("beside.json")).unwrap()).unwrap();
    // tracked_run samples 40 tokens at temperature 1 with seed 1337, after a newline.
    let expected = ok(&headlab(
        &[
            "sample",
            "other",
            "--max-new-tokens",
            "40",
            "--temperature",
            "1",
            "--seed",
            "1337",
        ],
        dir,
    ));
    assert_eq!(
        format!("\n{}\n", beside["sample"].as_str().unwrap()),
        expected
    );
    assert_eq!(beside["tokens"], 40);
    assert_eq!(beside["temperature"], 1.0);

    // Beside a run that does not exist: one line naming it, exit 2, the page left as it was.
    let page = std::fs::read(run.join("report.html")).unwrap();
    let out = headlab(&["report", "run", "--beside", "missing"], dir);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing"));
    assert_eq!(std::fs::read(run.join("report.html")).unwrap(), page);

    let Some(browser) = chromium() else { return };
    let seen = drive(&browser, &run.join("report.html"), dir);
    assert_eq!(seen["beside"]["visible"], true, "{seen}");
    assert_eq!(seen["beside"]["title"], "other", "{seen}");
    assert_eq!(seen["beside"]["text"], beside["sample"], "{seen}");
    let info = seen["beside"]["info"].as_str().unwrap();
    assert!(
        info.contains("temperature 1") && info.contains("seed 1337"),
        "{info}"
    );
}

/// The lab pages committed under docs/ were drawn by the current page templates: each
/// report.html holds today's report.js and each heads.html today's explorer.js, verbatim, and
/// each heads.csv has today's columns. A change to a template or a column fails here until the
/// labs are run again and their pages copied into docs/lab-* (README, "The labs' results").
#[test]
fn the_committed_lab_pages_come_from_the_current_templates() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let asset =
        |name: &str| std::fs::read_to_string(repo.join("crates/report/assets").join(name)).unwrap();
    let (report_js, explorer_js) = (asset("report.js"), asset("explorer.js"));
    let header = "layer,head,label,previous_token,induction,duplicate_token,first_token,\
                  mean_distance,entropy,ablation_zero,ablation_mean,grad_importance,copying,ov_top1,\
                  roles";
    for lab in ["lab-induction", "lab-ambiguity"] {
        let dir = repo.join("docs").join(lab);
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(
            read("report.html").contains(&report_js),
            "docs/{lab}/report.html was drawn by an older report.js: run `headlab lab {}` and \
             copy its files into docs/{lab}",
            &lab[4..]
        );
        assert!(
            read("heads.html").contains(&explorer_js),
            "docs/{lab}/heads.html was drawn by an older explorer.js"
        );
        assert_eq!(
            read("heads.csv").lines().next(),
            Some(header),
            "docs/{lab}/heads.csv"
        );
    }
    let relations =
        |name: &str| std::fs::read_to_string(repo.join("docs/lab-relations").join(name)).unwrap();
    assert!(
        relations("report.html").contains(&report_js),
        "docs/lab-relations/report.html was drawn by an older report.js: run `headlab lab \
         relations` and copy its files into docs/lab-relations"
    );
    assert!(
        relations("heads.html").contains(&explorer_js),
        "docs/lab-relations/heads.html was drawn by an older explorer.js"
    );
    let summary = std::fs::read_to_string(repo.join("docs/lab-induction/summary.md")).unwrap();
    for part in [
        "**in-context learning score**",
        "**Composition**",
        "**Patching**",
        "**Path patching**",
        "**What the heads write**",
    ] {
        assert!(
            summary.contains(part),
            "docs/lab-induction/summary.md lacks {part}"
        );
    }
    // The copying scores the summary states are the head table's (heads.csv, by column name).
    let after = |text: &str| -> String {
        let at = summary.find(text).unwrap_or_else(|| panic!("{text}")) + text.len();
        summary[at..]
            .split([' ', ',', ';', '('])
            .next()
            .unwrap()
            .to_string()
    };
    let id = after("- **induction head**: head ");
    let (head, head_index) = id.split_once('.').unwrap();
    let csv = std::fs::read_to_string(repo.join("docs/lab-induction/heads.csv")).unwrap();
    let columns: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = columns.iter().position(|c| *c == "copying").unwrap();
    let row = csv
        .lines()
        .find(|l| l.starts_with(&format!("{head},{head_index},")))
        .unwrap();
    let want: f64 = row.split(',').nth(col).unwrap().parse().unwrap();
    let stated: f64 = after("the induction head's copying score is ")
        .parse()
        .unwrap();
    assert!(
        (stated - want).abs() <= 0.005,
        "summary says the induction head {head}.{head_index} copies {stated}, heads.csv {want}"
    );
    assert!(want > 0.5, "an induction head copies: {want}");
}

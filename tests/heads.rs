//! End-to-end tests of `headlab heads` and `headlab lab`: the head table, the pictures, and
//! the HTML explorer rendered in headless Chromium.

use std::path::Path;

use crate::common::{TINY, chromium, headlab, headlab_reader_leaves, ok, render, render_at, tiny};
use headlab_kernels::to_host;

/// `heads --text` on a tracked run: every file, a page that renders every head, and columns
/// that do not depend on the text.
#[test]
fn heads_writes_the_table_pictures_and_a_page_that_renders_every_head() {
    let dir = tempfile::tempdir().unwrap();
    let mut train = vec!["train", "--out", "g"];
    train.extend(tiny(&[
        "--set",
        "model.block_size=24",
        "--set",
        "train.max_iters=30",
        "--set",
        "train.eval_interval=30",
        "--set",
        "train.eval_iters=2",
        "--set",
        "train.sample_tokens=10",
        "--set",
        "train.track_heads_every=10",
        "--set",
        "data.builtin_chars=20000",
    ]));
    ok(&headlab(&train, dir.path()));
    let run = dir.path().join("g");
    // Tracking wrote one row per head at steps 0, 10, 20, 30.
    let tracked = std::fs::read_to_string(run.join("head_history.csv")).unwrap();
    assert_eq!(tracked.lines().count(), 1 + 4 * 4, "{tracked}");
    assert!(run.join("heads.png").is_file());

    let table = ok(&headlab(
        &["heads", "g", "--text", "the spy sees the dogs."],
        dir.path(),
    ));
    assert_eq!(table.lines().count(), 1 + 4, "{table}");
    let out = run.join("heads");
    for f in [
        "heads.csv",
        "heads.json",
        "composition.csv",
        "detector.csv",
        "attention.png",
        "heads.html",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    // Modes Q, K, V x (2 writers in layer 0 x 2 readers in layer 1); scores and the random
    // baseline are fractions.
    let composition = std::fs::read_to_string(out.join("composition.csv")).unwrap();
    let lines: Vec<&str> = composition.lines().collect();
    assert_eq!(
        lines[0],
        "mode,from_layer,from_head,to_layer,to_head,score,random_baseline"
    );
    assert_eq!(lines.len(), 1 + 3 * 4, "{composition}");
    let detector = std::fs::read_to_string(out.join("detector.csv")).unwrap();
    let rows: Vec<&str> = detector.lines().collect();
    assert_eq!(
        rows[0],
        "layer,head,previous_token_head,duplicate_token_head,induction_head"
    );
    assert_eq!(rows.len(), 1 + 4, "{detector}");
    for line in &lines[1..] {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!((f[1], f[3]), ("0", "1"), "{line}");
        for v in &f[5..] {
            let v: f64 = v.parse().unwrap();
            assert!(v > 0.0 && v <= 1.0, "{line}");
        }
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("heads.json")).unwrap()).unwrap();
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        for key in ["previous_token", "induction", "first_token", "entropy"] {
            let v = r[key].as_f64().unwrap();
            assert!((0.0..=1.0 + 1e-6).contains(&v), "{key} = {v}");
        }
        // Barely trained, no head matters much yet: the ablations are only finite here
        // (ablating_a_head_moves_the_loss_as_much_as_the_head_matters checks what they mean).
        for key in ["ablation_zero", "ablation_mean"] {
            assert!(r[key].as_f64().unwrap().is_finite(), "{key}");
        }
        assert!(r["grad_importance"].as_f64().unwrap() >= 0.0);
        let copying = r["copying"].as_f64().unwrap();
        assert!((-1.0..=1.0).contains(&copying), "copying = {copying}");
        let top1 = r["ov_top1"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&top1), "ov_top1 = {top1}");
    }
    // The text chooses the maps and the scores read on text; ablation, importance and the
    // repeated-sequence scores come from the run's own probes, the same without it.
    ok(&headlab(&["heads", "g", "--out", "plain"], dir.path()));
    let plain: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("plain/heads.json")).unwrap(),
    )
    .unwrap();
    for (with, without) in rows.iter().zip(plain.as_array().unwrap()) {
        for key in [
            "ablation_zero",
            "ablation_mean",
            "grad_importance",
            "induction",
            "duplicate_token",
        ] {
            assert_eq!(with[key], without[key], "{key}: {with} vs {without}");
        }
    }

    let Some(browser) = chromium() else { return };
    let page = out.join("heads.html");
    let (dom, _) = render(&browser, &page, &dir.path().join("chrome"));
    assert!(
        dom.contains("data-ready=\"1\""),
        "the page script did not finish:\n{dom}"
    );
    for layer in 0..2 {
        for head in 0..2 {
            let panel = dom
                .split("<div ")
                .find(|d| {
                    d.starts_with("class=\"panel")
                        && d.contains(&format!("data-layer=\"{layer}\""))
                        && d.contains(&format!("data-head=\"{head}\""))
                })
                .unwrap_or_else(|| panic!("no panel for layer {layer} head {head}"));
            let cells: usize = panel
                .split("data-cells=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert!(cells > 0, "layer {layer} head {head} drew no cells");
        }
    }
    // The head table has a row per head (as has the relation table below it, on this grammar
    // run), and the token strip every token.
    let table = dom.split("id=\"table\"").nth(1).unwrap();
    let table = &table[..table.find("</table>").unwrap()];
    assert_eq!(table.matches("<tr data-layer").count(), 4);
    assert_eq!(dom.matches("<tr data-layer").count(), 8);
    assert_eq!(
        dom.matches("class=\"tok").count(),
        "the spy sees the dogs.".len()
    );
    // In a 1400-pixel window the head table fits, its last column (roles) in view, and each
    // score column has one format: three decimals on every row (0.000, never a bare 0).
    let probe = "<script>addEventListener('load', () => { const t = \
        document.getElementById('table'); document.body.dataset.test = JSON.stringify({ \
        overflow: t.scrollWidth - t.clientWidth, right: t.getBoundingClientRect().right, \
        width: document.documentElement.clientWidth, top1: [...document.querySelectorAll(\
        'td.ov_top1')].map(c => c.textContent) }); });</script></body>";
    let copy = out.join("probed.html");
    let html = std::fs::read_to_string(&page).unwrap();
    std::fs::write(&copy, html.replacen("</body>", probe, 1)).unwrap();
    let (dom, _) = render_at(
        &browser,
        &copy,
        &dir.path().join("chrome2"),
        Some((1400, 1000)),
    );
    let attr = dom
        .split("data-test=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("the probe did not run:\n{dom}"))
        .replace("&quot;", "\"");
    let seen: serde_json::Value = serde_json::from_str(&attr).unwrap();
    assert_eq!(seen["overflow"], 0, "{seen}");
    assert!(
        seen["right"].as_f64().unwrap() <= seen["width"].as_f64().unwrap(),
        "{seen}"
    );
    let top1 = seen["top1"].as_array().unwrap();
    assert_eq!(top1.len(), 4, "{seen}");
    for (cell, row) in top1.iter().zip(rows) {
        assert_eq!(
            cell.as_str().unwrap(),
            format!("{:.3}", row["ov_top1"].as_f64().unwrap()),
            "{seen}"
        );
    }
}

/// Lines of two interleaved runs of letters, each letter the one two places before it moved
/// one step on in `a..j`, the runs starting at pseudo-random letters (a fixed LCG): the letter
/// before a position says what comes next, the letter at it says nothing.
fn lag_two_text() -> String {
    let mut state: u64 = 1;
    let mut letter = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) % 10) as u8
    };
    let mut text = String::new();
    for _ in 0..1500 {
        let (a, b) = (letter(), letter());
        for k in 0..12 {
            text.push((b'a' + (a + k) % 10) as char);
            text.push((b'a' + (b + k) % 10) as char);
        }
        text.push('\n');
    }
    text
}

/// One layer of two heads trained on [`lag_two_text`] must carry the previous letter with a
/// head. Without it the model has no cue to the next letter (a uniform guess costs
/// ln 10 = 2.3 nats), so ablating that head, zeroed or replaced by its mean output, must raise
/// the val loss by over 1 nat; this seed leaves the other head almost unused, and ablating it
/// must move the loss by under 0.25 nats. Measured (seed 2, 400 steps, val loss 0.50):
/// previous-token head (score 0.75) +3.52 zeroed, +3.66 mean; the other (score 0.30) +0.033
/// and +0.034. The heads are told apart by their attention patterns, not by the ablations.
#[test]
fn ablating_a_head_moves_the_loss_as_much_as_the_head_matters() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lag2.txt"), lag_two_text()).unwrap();
    let mut train = vec!["train", "--out", "p", "--seed", "2"];
    train.extend(tiny(&[
        "--set",
        "data.path=lag2.txt",
        "--set",
        "model.block_size=24",
        "--set",
        "model.n_layers=1",
        "--set",
        "train.batch_size=16",
        "--set",
        "train.max_iters=400",
        "--set",
        "train.lr=2e-3",
        "--set",
        "train.eval_interval=400",
        "--set",
        "train.eval_iters=2",
        "--set",
        "train.sample_tokens=10",
    ]));
    ok(&headlab(&train, dir.path()));
    let table = ok(&headlab(&["heads", "p"], dir.path()));
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("p/heads/heads.json")).unwrap(),
    )
    .unwrap();
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{table}");
    let value = |r: &serde_json::Value, key: &str| r[key].as_f64().unwrap();
    let (previous, other) =
        if value(&rows[0], "previous_token") >= value(&rows[1], "previous_token") {
            (&rows[0], &rows[1])
        } else {
            (&rows[1], &rows[0])
        };
    assert!(
        value(previous, "previous_token") > 0.5,
        "no previous-token head:\n{table}"
    );
    for key in ["ablation_zero", "ablation_mean"] {
        assert!(
            value(previous, key) > 1.0,
            "{key} of the previous-token head is below 1 nat:\n{table}"
        );
        assert!(
            value(other, key).abs() < 0.25,
            "{key} of the unused head is not below 0.25 nats:\n{table}"
        );
    }
}

#[test]
fn heads_work_on_a_bpe_run_and_label_tokens_with_visible_whitespace() {
    let dir = tempfile::tempdir().unwrap();
    let text = "the spy with binoculars follows the detective. ".repeat(200);
    std::fs::write(dir.path().join("t.txt"), text).unwrap();
    let mut train = vec!["train", "--out", "b"];
    train.extend(tiny(&[
        "--set",
        "data.path=t.txt",
        "--set",
        "data.tokenizer=bpe",
        "--set",
        "data.vocab_size=300",
        "--set",
        "train.batch_size=4",
        "--set",
        "train.max_iters=20",
        "--set",
        "train.eval_interval=20",
        "--set",
        "train.eval_iters=2",
        "--set",
        "train.sample_tokens=5",
        "--set",
        "train.track_heads_every=10",
    ]));
    ok(&headlab(&train, dir.path()));
    let table = ok(&headlab(
        &["heads", "b", "--text", "the spy follows the detective."],
        dir.path(),
    ));
    assert_eq!(table.lines().count(), 1 + 4, "{table}");
    let page = std::fs::read_to_string(dir.path().join("b/heads/heads.html")).unwrap();
    // Tokens are labelled with their decoded text, spaces shown as a middle dot.
    assert!(
        page.contains("·the") || page.contains("·spy") || page.contains("·follows"),
        "no visible-whitespace labels"
    );
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("b/heads/heads.json")).unwrap(),
    )
    .unwrap();
    for r in json.as_array().unwrap() {
        for key in ["previous_token", "induction"] {
            let v = r[key].as_f64().unwrap();
            assert!((0.0..=1.0 + 1e-6).contains(&v), "{key} = {v}");
        }
    }
}

/// A reduced `lab syntax` (1 and 2 heads, one seed, 60 steps): syntax.csv holds, per run and
/// relation, the best head of that run's own heads/syntax.csv (found here by a loop over its
/// rows: the most accurate head, the first on a tie) with its rule and role; the summary has a
/// row per run; the 2-head runs are pruned and the summary's pruning row agrees with their
/// prune.csv; a head count that does not divide d_model is refused with nothing written.
#[test]
fn a_reduced_lab_syntax_reports_each_runs_best_head_per_relation() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "lab",
        "syntax",
        "--out",
        "s",
        "--heads",
        "1,2",
        "--seeds",
        "1",
        "--set",
        "train.max_iters=60",
        "--set",
        "train.track_heads_every=20",
        "--set",
        "data.builtin_chars=200000",
    ];
    ok(&headlab(&args, dir.path()));
    let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
    let csv = read("s/syntax.csv");
    assert_eq!(
        csv.lines().next().unwrap(),
        "n_heads,seed,relation,layer,head,accuracy,baseline_offset,baseline_accuracy,role,\
         syntactic,formed_at"
    );
    assert_eq!(csv.lines().count(), 1 + 2 * 5, "{csv}");
    for h in [1, 2] {
        let rows = read(&format!("s/h{h}-s1/heads/syntax.csv"));
        for relation in [
            "subject",
            "determiner",
            "antecedent",
            "object",
            "preposition",
        ] {
            let mut best: Option<Vec<&str>> = None;
            for line in rows.lines().skip(1) {
                let f: Vec<&str> = line.split(',').collect();
                if f[2] != relation || f[3] == "0" {
                    continue;
                }
                let acc: f64 = f[4].parse().unwrap();
                if best
                    .as_ref()
                    .is_none_or(|b| acc > b[4].parse::<f64>().unwrap())
                {
                    best = Some(f);
                }
            }
            let b = best.unwrap();
            let want = format!(
                "{h},1,{relation},{},{},{},{},{},{},",
                b[0], b[1], b[4], b[6], b[7], b[8]
            );
            assert!(
                csv.lines().any(|l| l.starts_with(&want)),
                "{want} not in\n{csv}"
            );
        }
    }
    let summary = read("s/summary.md");
    for row in ["| 1 | 1 | ", "| 2 | 1 | "] {
        assert!(summary.contains(row), "{summary}");
    }
    assert!(dir.path().join("s/syntax.png").is_file());

    // The runs with the most heads (2 a layer) are pruned, the others not; the summary's
    // counts of heads removed at no cost are counted again here from prune.csv's rows.
    assert!(!dir.path().join("s/h1-s1/prune").exists());
    let prune = read("s/h2-s1/prune/prune.csv");
    let rows: Vec<Vec<&str>> = prune
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(
        rows.len(),
        5 * 5,
        "5 orders of 4 removals and the intact model:\n{prune}"
    );
    let free = |order: &str| -> usize {
        let of: Vec<&Vec<&str>> = rows.iter().filter(|r| r[0] == order).collect();
        let (loss, agreement): (f64, f64) = (of[0][4].parse().unwrap(), of[0][5].parse().unwrap());
        of[1..]
            .iter()
            .take_while(|r| {
                r[4].parse::<f64>().unwrap() <= loss * 1.01
                    && r[5].parse::<f64>().unwrap() >= agreement - 0.01
            })
            .count()
    };
    let want = format!(
        "| {} / {} / {}, {}, {} |",
        free("importance"),
        free("reverse"),
        free("random-1"),
        free("random-2"),
        free("random-3")
    );
    let section = summary
        .split("## Pruning the 2-head models")
        .nth(1)
        .unwrap_or_else(|| panic!("no pruning section:\n{summary}"));
    let row = section.lines().find(|l| l.starts_with("| 1 | ")).unwrap();
    assert!(row.contains(&want), "{want} not in {row}");
    let last: Vec<&str> = rows
        .iter()
        .filter(|r| r[0] == "importance")
        .rev()
        .take(3)
        .map(|r| r[2])
        .collect();
    assert!(row.contains(&last.join(", ")), "{last:?} not in {row}");
    assert!(dir.path().join("s/prune.png").is_file());
    // The page shown is the pruned run's, with its pruning curves.
    assert_eq!(read("s/report.html"), read("s/h2-s1/report.html"));
    assert_eq!(read("s/heads.html"), read("s/h2-s1/heads/heads.html"));
    assert!(read("s/report.html").contains("\"pruning\":[{"));

    let out = headlab(
        &["lab", "syntax", "--out", "bad", "--heads", "3"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--heads 3 does not divide d_model = 128"),
        "{stderr}"
    );
    assert!(!dir.path().join("bad").exists());
}

/// A reduced `lab relations` (1 and 2 heads, one seed, 60 steps), twice: relations.csv is the
/// same byte for byte, and so is the summary but for its time; each run's row of the summary
/// names as carrier the head whose zeroing lowers the relation's forced choice most, found
/// here by a loop over relations.csv; bad settings are refused with nothing written.
#[test]
fn a_reduced_lab_relations_is_deterministic_and_names_each_relations_carrier() {
    let dir = tempfile::tempdir().unwrap();
    let args = |out: &'static str| {
        [
            "lab",
            "relations",
            "--out",
            out,
            "--heads",
            "1,2",
            "--seeds",
            "1",
            "--set",
            "train.max_iters=60",
            "--set",
            "data.builtin_chars=200000",
        ]
    };
    ok(&headlab(&args("a"), dir.path()));
    ok(&headlab(&args("b"), dir.path()));
    let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
    let csv = read("a/relations.csv");
    assert_eq!(csv, read("b/relations.csv"));
    // The times and the command line differ; every table and figure is the same.
    let timeless = |s: String| -> String {
        s.lines()
            .filter(|l| !l.starts_with("Reproduce") && !l.contains(" s of training"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        timeless(read("a/summary.md")),
        timeless(read("b/summary.md"))
    );
    assert_eq!(
        csv.lines().next().unwrap(),
        "n_heads,seed,val_loss,layer,head,relation,accuracy,baseline_offset,\
         baseline_accuracy,role,choice_intact,choice_zeroed,margin_intact,margin_zeroed"
    );
    // 2 layers x (1 + 2) heads x 2 relations.
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 2 * 3 * 2, "{csv}");
    let summary = read("a/summary.md");
    for h in ["1", "2"] {
        for relation in ["subject", "object"] {
            let of: Vec<&Vec<&str>> = rows
                .iter()
                .filter(|r| r[0] == h && r[5] == relation)
                .collect();
            let intact: f64 = of[0][10].parse().unwrap();
            // The first of the largest falls.
            let mut carrier = of[0];
            for r in &of {
                if r[11].parse::<f64>().unwrap() < carrier[11].parse::<f64>().unwrap() {
                    carrier = r;
                }
            }
            let zeroed: f64 = carrier[11].parse().unwrap();
            let want = format!("| {h} | 1 | {relation} | {intact:.2} |");
            let line = summary
                .lines()
                .find(|l| l.starts_with(&want))
                .unwrap_or_else(|| panic!("{want} not in\n{summary}"));
            let named = format!(
                "| {}.{} | {intact:.2} -> {zeroed:.2} |",
                carrier[3], carrier[4]
            );
            assert!(line.contains(&named), "{named} not in {line}");
        }
    }
    assert!(dir.path().join("a/choices.png").is_file());
    assert!(dir.path().join("a/zeroing.png").is_file());
    assert!(read("a/report.html").contains("<html"));

    for (bad, says) in [
        (
            vec!["--heads", "3"],
            "--heads 3 does not divide d_model = 128",
        ),
        (
            vec!["--relations", "subject,antecedent"],
            "--relations antecedent is not a relation",
        ),
        (vec!["--seeds", ""], "is not a whole number"),
    ] {
        let mut args = vec!["lab", "relations", "--out", "bad"];
        args.extend(bad);
        let out = headlab(&args, dir.path());
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        // One line says it (clap adds its "--help" hint below its own).
        let first = stderr.lines().next().unwrap_or_default();
        assert!(first.contains(says), "{says} not in {stderr}");
        assert!(!dir.path().join("bad").exists());
    }
}

/// A reduced `lab grokking` (p = 31, 70% of the pairs, 600 steps at lr 5e-3) still groks:
/// it starts at chance, fits its training pairs, and only several times as many steps later
/// the held-out ones, with an embedding whose norm sits in a few frequencies. The summary's
/// steps are read back from grokking.csv.
#[test]
fn a_reduced_lab_grokking_memorises_then_generalises() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "lab",
        "grokking",
        "--out",
        "g",
        "--p",
        "31",
        "--fraction",
        "0.7",
        // Memorises at 128, generalises at 450 (Zen 4, 2026-12-05); 800 steps at lr 3e-3 took
        // a third longer for the same story.
        "--steps",
        "600",
        "--lr",
        "5e-3",
    ];
    ok(&headlab(&args, dir.path()));
    let out = dir.path().join("g");
    let csv = std::fs::read_to_string(out.join("grokking.csv")).unwrap();
    let rows: Vec<Vec<f64>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(|x| x.parse().unwrap()).collect())
        .collect();
    // step, train_loss, train_acc, test_loss, test_acc
    let first = &rows[0];
    assert_eq!(first[0], 0.0);
    // 32 tokens (0..31 and "="): a fresh model is near log(32) nats and near 1/31 right.
    assert!((first[1] - 32f64.ln()).abs() < 0.3, "{first:?}");
    assert!(first[2] < 0.15 && first[4] < 0.15, "{first:?}");
    let at = |col: usize, level: f64| rows.iter().find(|r| r[col] >= level).map(|r| r[0] as usize);
    let memorised = at(2, 0.99).expect("never memorised");
    let generalised = at(4, 0.95).expect("never generalised");
    assert!(
        generalised >= 3 * memorised,
        "memorised {memorised}, generalised {generalised}"
    );
    assert_eq!(rows.last().unwrap()[0], 600.0);
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    for part in [
        "673 pairs trained on, 288 held out".to_string(),
        format!("**memorised** (train accuracy >= 99%): step {memorised}\n"),
        format!("**generalised** (test accuracy >= 95%): step {generalised}\n"),
        "The model grokked".to_string(),
        "Reproduce: `headlab lab grokking --out g --p 31".to_string(),
    ] {
        assert!(summary.contains(&part), "{part:?} missing from:\n{summary}");
    }
    let fourier = std::fs::read_to_string(out.join("fourier.csv")).unwrap();
    let mut shares: Vec<(usize, f64)> = fourier
        .lines()
        .skip(1)
        .map(|l| {
            let (k, s) = l.split_once(',').unwrap();
            (k.parse().unwrap(), s.parse().unwrap())
        })
        .collect();
    assert_eq!(
        shares.iter().map(|s| s.0).collect::<Vec<_>>(),
        (1..=15).collect::<Vec<_>>()
    );
    let total: f64 = shares.iter().map(|s| s.1).sum();
    assert!((total - 1.0).abs() < 1e-4, "{total}");
    shares.sort_by(|a, b| b.1.total_cmp(&a.1));
    // Spread evenly, two of 15 frequencies would hold 13%.
    assert!(shares[0].1 + shares[1].1 > 0.5, "{shares:?}");
    assert!(
        summary.contains(&format!("`fourier.csv`): {} (", shares[0].0)),
        "{summary}"
    );
    for png in ["grokking.png", "loss.png", "fourier.png"] {
        assert!(
            std::fs::metadata(out.join(png)).unwrap().len() > 1000,
            "{png}"
        );
    }
}

/// The reduced `lab induction` (600 of its 2000 steps, seed 1337) forms the circuit: a
/// second-layer head with induction score above 0.5 and a first-layer previous-token head
/// above 0.5, and the loss on the repeated half falls below half its starting value.
#[test]
fn a_short_lab_induction_run_forms_an_induction_head() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "lab",
        "induction",
        "--out",
        "lab",
        "--set",
        "train.max_iters=600",
        "--set",
        "train.eval_interval=300",
    ];
    // Its log's reader goes away after the first line (`headlab lab induction 2>&1 | head
    // -1`): the lab still trains to the end, writes every file below and exits 0. (A lab
    // ended at its next line, SIGPIPE's default, losing its runs.)
    let (status, _) = headlab_reader_leaves(&args, dir.path());
    assert!(status.success(), "headlab {args:?} ended: {status}");
    let history = std::fs::read_to_string(dir.path().join("lab/run/head_history.csv")).unwrap();
    let last_step = history
        .lines()
        .last()
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .to_string();
    let rows: Vec<Vec<String>> = history
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    let score = |r: &Vec<String>, i: usize| r[i].parse::<f64>().unwrap();
    let last: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == last_step).collect();
    let induction = last
        .iter()
        .filter(|r| r[1] == "1")
        .map(|r| score(r, 4))
        .fold(0.0, f64::max);
    let previous = last
        .iter()
        .filter(|r| r[1] == "0")
        .map(|r| score(r, 3))
        .fold(0.0, f64::max);
    assert!(
        induction > 0.5,
        "no induction head: best layer-1 induction score {induction}"
    );
    assert!(
        previous > 0.5,
        "no previous-token head: best layer-0 score {previous}"
    );
    let (first_loss, last_loss) = (score(&rows[0], 9), score(last[0], 9));
    assert!(
        last_loss < first_loss / 2.0,
        "repeated-half loss {first_loss} -> {last_loss}"
    );
    let summary = std::fs::read_to_string(dir.path().join("lab/summary.md")).unwrap();
    assert!(summary.contains("The circuit formed"), "{summary}");

    // The in-context-learning score at every tracked step of the head history: near 0 at
    // step 0 (a fresh model uses no context), well below once the circuit formed; its
    // steepest fall, found here by a loop over the file, is the step the summary names.
    let icl = std::fs::read_to_string(dir.path().join("lab/run/icl_history.csv")).unwrap();
    let icl: Vec<(usize, f64, f64, f64)> = icl
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<f64> = l.split(',').map(|v| v.parse().unwrap()).collect();
            (f[0] as usize, f[1], f[2], f[3])
        })
        .collect();
    let mut tracked: Vec<usize> = rows.iter().map(|r| r[0].parse().unwrap()).collect();
    tracked.dedup();
    assert_eq!(icl.iter().map(|r| r.0).collect::<Vec<_>>(), tracked);
    for &(_, early, late, score) in &icl {
        assert!((score - (late - early)).abs() < 2e-4, "{icl:?}");
    }
    assert!(icl[0].3.abs() < 0.1, "{icl:?}");
    assert!(icl.last().unwrap().3 < -0.5, "{icl:?}");
    // From the two losses as written (the lab reads those, not the rounded difference); the
    // last of equal falls, as the lab takes it.
    let (mut fall, mut at) = (0.0, 0);
    for w in icl.windows(2) {
        let drop = (w[0].2 - w[0].1) - (w[1].2 - w[1].1);
        if drop > 0.0 && drop >= fall {
            (fall, at) = (drop, w[1].0);
        }
    }
    let said = format!("it fell fastest, by {fall:.2} nats, in the interval ending at step {at}");
    assert!(summary.contains(&said), "{said}: {summary}");
    // The number after `key` in the summary.
    let after = |key: &str| -> f64 {
        let rest = summary
            .split(key)
            .nth(1)
            .unwrap_or_else(|| panic!("{key}: {summary}"));
        let num: String = rest
            .chars()
            .skip_while(|c| !c.is_ascii_digit() && *c != '-')
            .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-')
            .collect();
        num.trim_end_matches('.').parse().unwrap()
    };
    // The induction head's keys read the previous-token head above the random baseline, and
    // patching the clean stream where the answer sits restores most of the answer.
    let (k, baseline) = (after("K-composition score of"), after("against"));
    assert!(
        k > baseline,
        "K-composition {k} vs random {baseline}: {summary}"
    );
    let restored = after("the token after the earlier occurrence of the last token) restores");
    assert!(restored > 0.5, "patching restored {restored}: {summary}");
    // Path patching: the previous-token head's write sent into the induction layer's keys
    // brings most of the answer back; into its queries or values, close to nothing. Each
    // head alone carries part of it.
    let alone = |from: &str, to: &str| -> Vec<f64> {
        let part = summary
            .split(from)
            .nth(1)
            .and_then(|rest| rest.split(to).next())
            .unwrap_or_else(|| panic!("{from}: {summary}"));
        part.split(" alone ")
            .skip(1)
            .map(|p| p.split([',', ')']).next().unwrap().parse().unwrap())
            .collect()
    };
    let keys = after("all at once, it restores");
    let (queries, values) = (after("; into their queries"), after("; into their values"));
    assert!(keys > 0.5, "K path {keys}: {summary}");
    // (A short run's value paths carry a little: 0.13 at 600 steps, 0.00 at 2000.)
    assert!(queries.abs() < 0.2 && values.abs() < 0.2, "{summary}");
    assert!(keys > queries.max(values) + 0.5, "{summary}");
    let each_key = alone("all at once, it restores", "; into their queries");
    let each_query = alone("; into their queries", "; into their values");
    let each_value = alone("; into their values", ". The edge");
    assert_eq!(each_key.len(), 2, "{summary}");
    assert_eq!((each_query.len(), each_value.len()), (2, 2), "{summary}");
    for share in each_query.iter().chain(&each_value) {
        assert!(share.abs() < 0.2, "{summary}");
    }
    let best_key = each_key.iter().copied().fold(f64::MIN, f64::max);
    assert!(keys >= best_key - 0.05, "{summary}");
    let whole = after("The previous-token head's whole clean output restores");
    assert!(
        whole >= best_key - 0.05,
        "whole head {whole} vs K path {best_key}"
    );
    // The induction head copies what it finds: its copying score (head_history.csv's last
    // column) starts below 0.5, first passes it at the step the summary names, and at one
    // tracked step (the best checkpoint's, which the lab's head table is of) is the table's.
    let id = summary
        .split("- **induction head**: head ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("{summary}"));
    let (layer, head) = id.split_once('.').unwrap();
    let copying: Vec<(usize, f64)> = rows
        .iter()
        .filter(|r| r[1] == layer && r[2] == head)
        .map(|r| (r[0].parse().unwrap(), score(r, 11)))
        .collect();
    let crossed = copying
        .iter()
        .find(|c| c.1 > 0.5)
        .expect("copying above 0.5")
        .0;
    assert!(copying[0].1 < 0.5, "{copying:?}");
    let table: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("lab/heads.json")).unwrap())
            .unwrap();
    let row = table
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["layer"].as_u64() == layer.parse().ok() && r["head"].as_u64() == head.parse().ok()
        })
        .unwrap();
    let final_copying = row["copying"].as_f64().unwrap();
    assert!(
        copying.iter().any(|c| (final_copying - c.1).abs() < 1e-4),
        "{final_copying} vs {copying:?}"
    );
    let said = format!("copying score is {final_copying:.2}, above 0.5 from step {crossed}");
    assert!(summary.contains(&said), "{said}: {summary}");
    // Its "Reproduce" line repeats the overrides, not the 2000-step default.
    let reproduce = "Reproduce: `headlab lab induction --out lab --set train.max_iters=600 --set \
                     train.eval_interval=300`";
    assert!(summary.contains(reproduce), "{summary}");
    for f in ["heads.png", "attention.png", "heads.html"] {
        assert!(dir.path().join("lab").join(f).is_file(), "{f} missing");
    }
    // Circuit discovery on the patching's prompts, by both methods, names the circuit's edge.
    let found = summary
        .split("**Circuit discovery**")
        .nth(1)
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        found.contains("ACDC keeps") && found.contains("EAP keeps"),
        "{found}"
    );
}

/// A run exported to Hugging Face's format and imported back is the same model to every
/// command: `eval` gives the same loss on a text, `heads` the same pattern scores.
#[test]
fn an_exported_and_reimported_run_has_the_same_loss_and_head_scores() {
    let dir = tempfile::tempdir().unwrap();
    let mut train = vec!["train", "--out", "g"];
    train.extend(tiny(&[
        "--set",
        "model.block_size=24",
        "--set",
        "model.n_heads=4",
        "--set",
        "model.bias=false",
        "--set",
        "train.max_iters=30",
        "--set",
        "train.eval_interval=30",
        "--set",
        "train.eval_iters=2",
        "--set",
        "train.sample_tokens=10",
        "--set",
        "data.builtin_chars=20000",
    ]));
    ok(&headlab(&train, dir.path()));
    ok(&headlab(&["export", "hf", "g", "--out", "hf"], dir.path()));
    ok(&headlab(
        &["import", "hf", "hf", "--out", "back"],
        dir.path(),
    ));
    let text = "the spy sees the dogs. the dog sees the spy.";
    std::fs::write(dir.path().join("t.txt"), text).unwrap();
    let loss = |run: &str| ok(&headlab(&["eval", run, "--file", "t.txt"], dir.path()));
    let (before, after) = (loss("g"), loss("back"));
    assert!(before.contains("loss"), "{before}");
    assert_eq!(before, after);
    let scores = |run: &str| -> Vec<f64> {
        let out = headlab(&["heads", run, "--text", text], dir.path());
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            stderr.contains("this run was imported and has no training text"),
            run == "back",
            "{stderr}"
        );
        ok(&out);
        let path = dir.path().join(run).join("heads/heads.json");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        json.as_array()
            .unwrap()
            .iter()
            .flat_map(|r| {
                ["previous_token", "first_token", "entropy"].map(|k| r[k].as_f64().unwrap())
            })
            .collect()
    };
    let (before, after) = (scores("g"), scores("back"));
    assert_eq!(before.len(), 2 * 4 * 3);
    for (b, a) in before.iter().zip(&after) {
        assert!((b - a).abs() < 1e-6, "{before:?}\n{after:?}");
    }
    // `compare --run` checks the imported weights on a backend against the f64 truth, with
    // the run's own tokenizer, on a text given for it.
    std::fs::write(dir.path().join("long.txt"), text.repeat(20)).unwrap();
    let compared = ok(&headlab(
        &[
            "compare",
            "--run",
            "back",
            "--backends",
            "flex",
            "--steps",
            "2",
            "--set",
            "data.path=long.txt",
            "--out",
            "cmp",
        ],
        dir.path(),
    ));
    assert!(compared.contains("flex"), "{compared}");
}

/// A reduced `lab heads` (1 and 2 heads, one seed, 300 steps): every number in its table comes
/// from its runs (the val loss from each run's own metrics.csv, the accuracy recomputed here
/// from the run's model with a plain loop over the rule), and the same seed gives the same
/// table.
#[test]
fn a_short_lab_heads_table_comes_from_its_runs_and_repeats() {
    use burn::tensor::{Int, Tensor, TensorData};
    use headlab_data::Split;
    use headlab_data::corpus::{LOOKUP_ALPHABET, lookup_rule};
    use headlab_train::run::open_trained;
    use headlab_train::trainer::load_dataset;

    let dir = tempfile::tempdir().unwrap();
    let args = |out: &'static str| {
        [
            "lab",
            "heads",
            "--out",
            out,
            "--heads",
            "1,2",
            "--seeds",
            "5",
            "--set",
            "train.max_iters=300",
            "--set",
            "train.eval_interval=300",
        ]
    };
    ok(&headlab(&args("a"), dir.path()));
    ok(&headlab(&args("b"), dir.path()));
    let table = |out: &str| summary_table(&dir.path().join(out));
    let (a, b) = (table("a"), table("b"));
    assert!(a.len() > 6, "{a:?}");
    assert_eq!(a, b, "the same seeds gave different tables");

    let csv = std::fs::read_to_string(dir.path().join("a/val_loss.csv")).unwrap();
    let rows: Vec<Vec<String>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), 2);
    for row in rows {
        let run = dir.path().join(format!("a/h{}-s{}", row[0], row[2]));
        let metrics = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
        let val = metrics.lines().rfind(|l| l.contains(",val,")).unwrap();
        let logged: f64 = val.split(',').nth(2).unwrap().parse().unwrap();
        let listed: f64 = row[3].parse().unwrap();
        assert!((logged - listed).abs() < 1e-5, "{logged} vs {listed}");
        assert!(
            a.iter().any(|l| l.contains(&format!("{listed:.4}"))),
            "{a:?}"
        );

        // The accuracy, from the checkpoint the lab measured, by the corpus's rule.
        let (dir_run, trained, device) = open_trained(&run, None, "best").unwrap();
        let data = load_dataset(&dir_run, &trained.config, trained.tokenizer.clone()).unwrap();
        let block = trained.config.model.block_size;
        let tokens = data.tokens(Split::Val).to_vec(0..data.len(Split::Val));
        let letter = |id: u32| {
            let c = trained.tokenizer.decode(&[id]).into_bytes()[0];
            LOOKUP_ALPHABET.iter().position(|&a| a == c).unwrap() as u8
        };
        let (mut hits, mut total) = (0usize, 0usize);
        for w in 0..(tokens.len() / block).min(64) {
            let window = &tokens[w * block..(w + 1) * block];
            let input = Tensor::<2, Int>::from_data(
                TensorData::new(window.iter().map(|&t| i64::from(t)).collect(), [1, block]),
                &device,
            );
            let logits = to_host::<f32, _>(trained.model.forward(input));
            let vocab = logits.len() / block;
            // Position p predicts p + 1, whose sources are 2 and 6 back from it.
            for p in 5..block - 1 {
                let row = &logits[p * vocab..(p + 1) * vocab];
                let mut best = 0;
                for v in 1..vocab {
                    if row[v] > row[best] {
                        best = v;
                    }
                }
                let rule = lookup_rule(letter(window[p - 1]), letter(window[p - 5]));
                hits += usize::from(letter(best as u32) == rule);
                total += 1;
            }
        }
        let listed: f64 = row[4].parse().unwrap();
        let measured = hits as f64 / total as f64;
        assert!((measured - listed).abs() < 1e-4, "{measured} vs {listed}");

        // With 2 heads, the "fits near, ablated" cell of head 0.0: zero it, and count the
        // guesses some far letter would turn into under the rule's near letter.
        if row[0] != "2" {
            continue;
        }
        let mask = Tensor::<2>::from_data(TensorData::new(vec![0.0f32, 1.0], [1, 2]), &device);
        let (mut fits, mut total) = (0usize, 0usize);
        for w in 0..(tokens.len() / block).min(64) {
            let window = &tokens[w * block..(w + 1) * block];
            let input = Tensor::<2, Int>::from_data(
                TensorData::new(window.iter().map(|&t| i64::from(t)).collect(), [1, block]),
                &device,
            );
            let options = headlab_model::ForwardOptions {
                head_mask: Some(mask.clone()),
                ..Default::default()
            };
            let logits = to_host::<f32, _>(trained.model.forward_with(input, options).logits);
            let vocab = logits.len() / block;
            for p in 5..block - 1 {
                let row = &logits[p * vocab..(p + 1) * vocab];
                let best = (0..vocab).fold(0, |b, v| if row[v] > row[b] { v } else { b });
                let near = letter(window[p - 1]);
                let guess = letter(best as u32);
                fits += usize::from((0..16u8).any(|x| lookup_rule(near, x) == guess));
                total += 1;
            }
        }
        let measured = fits as f64 / total as f64;
        let cell = a
            .iter()
            .find(|l| l.starts_with("| 5 | 0.0 |"))
            .expect("the 2-head table has seed 5, head 0.0");
        let listed: f64 = cell.split('|').nth(7).unwrap().trim().parse().unwrap();
        assert!(
            (measured - listed).abs() < 1e-3,
            "{measured} vs {listed}: {cell}"
        );
    }
}

/// A reduced `lab ambiguity` (300 steps): its agreement column is recomputed here from the
/// run's checkpoint with a loop of its own over the same probe sentences, and the same seed
/// gives the same table.
#[test]
fn a_short_lab_ambiguity_table_comes_from_its_run_and_repeats() {
    use burn::tensor::{Int, Tensor, TensorData};
    use headlab_data::corpus::{Attachment, HOLD_VERBS, attach_sentences};
    use headlab_train::run::open_trained;

    let dir = tempfile::tempdir().unwrap();
    let args = |out: &'static str| {
        [
            "lab",
            "ambiguity",
            "--out",
            out,
            "--set",
            "train.max_iters=300",
            "--set",
            "train.track_heads_every=0",
        ]
    };
    ok(&headlab(&args("a"), dir.path()));
    ok(&headlab(&args("b"), dir.path()));
    let table = |out: &str| summary_table(&dir.path().join(out));
    let (a, b) = (table("a"), table("b"));
    assert_eq!(a, b, "the same seed gave different tables");

    // The instrument row's agreement: the share of the first 100 instrument sentences (subject
    // and object of different number) where the subject's number of "hide(s)" etc. gets more
    // probability after "and" than the other number.
    let (_, trained, device) = open_trained(&dir.path().join("a/run"), None, "best").unwrap();
    let tok = &trained.tokenizer;
    let first = |w: &str| tok.encode(&format!(" {w}")).unwrap()[0] as usize;
    let (layers, heads) = (trained.config.model.n_layers, trained.config.model.n_heads);
    // The share with the heads `zeroed` (`layer * n_heads + head`) masked out.
    let agreement = |zeroed: &[usize]| -> f64 {
        let mut mask = vec![1.0f32; layers * heads];
        zeroed.iter().for_each(|&k| mask[k] = 0.0);
        let mask = Tensor::<2>::from_data(TensorData::new(mask, [layers, heads]), &device);
        let (mut agree, mut n) = (0usize, 0usize);
        let seed = trained.config.train.seed.wrapping_add(99);
        for s in attach_sentences(seed, 60_000) {
            if s.ambiguous
                || s.attachment != Attachment::Verb
                || s.subject_plural == s.object_plural
            {
                continue;
            }
            if n == 100 {
                break;
            }
            let words: Vec<&str> = s.text.split(' ').collect();
            let and = tok.encode(&words[..=s.and].join(" ")).unwrap().len() - 1;
            let ids = tok.encode(&s.text).unwrap();
            let t = ids.len();
            let input = Tensor::<2, Int>::from_data(
                TensorData::new(ids.iter().map(|&i| i64::from(i)).collect(), [1, t]),
                &device,
            );
            let options = headlab_model::ForwardOptions {
                head_mask: Some(mask.clone()),
                ..Default::default()
            };
            let logits = to_host::<f32, _>(trained.model.forward_with(input, options).logits);
            let vocab = logits.len() / t;
            let at = |id: usize| f64::from(logits[and * vocab + id]).exp();
            let singular: f64 = HOLD_VERBS.iter().map(|v| at(first(v.singular))).sum();
            let plural: f64 = HOLD_VERBS.iter().map(|v| at(first(v.plural))).sum();
            agree += usize::from((plural > singular) == s.subject_plural);
            n += 1;
        }
        agree as f64 / n as f64
    };
    // A cell of the first row starting `row` at or after the table whose header starts `from`.
    let cell_after = |from: &str, row: &str, column: usize| -> f64 {
        let start = a.iter().position(|l| l.starts_with(from)).unwrap_or(0);
        let line = a[start..]
            .iter()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no row {row} in {a:?}"));
        line.split('|').nth(column).unwrap().trim().parse().unwrap()
    };
    let cell = |row: &str, column: usize| cell_after("| reading |", row, column);
    let zeroing = |row: &str| cell_after("| zeroed |", row, 2);
    let measured = agreement(&[]);
    let listed = cell("| instrument (verb) |", 3);
    assert!((measured - listed).abs() < 1e-3, "{measured} vs {listed}");
    // The zeroing table: nothing zeroed is the agreement table's, and each head's instrument
    // column is the loop's with that head masked.
    assert!((zeroing("| nothing | ") - listed).abs() < 1e-3);
    for k in [0, heads + 1] {
        let name = format!("| {}.{} | ", k / heads, k % heads);
        let zeroed = zeroing(&name);
        let measured = agreement(&[k]);
        assert!(
            (measured - zeroed).abs() < 1e-3,
            "{name}: {measured} vs {zeroed}"
        );
    }
}

/// The table rows (`| ... |` lines) of a lab's `summary.md` in `out`.
fn summary_table(out: &Path) -> Vec<String> {
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    summary
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(str::to_string)
        .collect()
}

/// `headlab lens` on an exported model imported back: one row per stage in the table, a CSV
/// row per stage and position, the picture; a one-token text and a post-norm run are refused
/// with exit 2, writing nothing.
#[test]
fn lens_reads_every_stage_and_refuses_what_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    import_char_export(dir.path());
    let text = "the spy sees the spy.";
    let table = ok(&headlab(&["lens", "imp", "--text", text], dir.path()));
    let stages: Vec<&str> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(stages, ["0_pre", "0_mid", "1_pre", "1_mid", "final_post"]);
    let csv = std::fs::read_to_string(dir.path().join("imp/lens/lens.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 5 * (text.len() - 1));
    assert!(dir.path().join("imp/lens/lens.png").is_file());

    // Direct logit attribution: the parts in attribution.csv add up to the total printed.
    let args = [
        "lens",
        "imp",
        "--text",
        "the spy sees the sp",
        "--answer",
        "y",
        "--versus",
        "e",
    ];
    let printed = ok(&headlab(&args, dir.path()));
    let total: f64 = printed
        .lines()
        .find_map(|l| l.split("logit(e) = ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no total in {printed}"));
    let parts = std::fs::read_to_string(dir.path().join("imp/lens/attribution.csv")).unwrap();
    // The embedding, 2 layers x (2 heads, an attention bias, an MLP), the final LayerNorm's
    // shift.
    assert_eq!(parts.lines().count(), 1 + 1 + 2 * 4 + 1, "{parts}");
    let sum: f64 = parts
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert!((sum - total).abs() < 2e-3, "parts {sum} vs total {total}");
    let two = headlab(
        &["lens", "imp", "--text", "the", "--answer", "yy"],
        dir.path(),
    );
    assert_eq!(two.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&two.stderr).contains("is 2 tokens"));

    let short = headlab(&["lens", "imp", "--text", "t"], dir.path());
    assert_eq!(short.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&short.stderr);
    assert!(stderr.contains("at least 2"), "{stderr}");

    let mut train = vec!["train", "--out", "post", "--set", "model.norm=post"];
    train.extend_from_slice(&TINY);
    ok(&headlab(&train, dir.path()));
    let post = headlab(&["lens", "post", "--text", "the dog"], dir.path());
    assert_eq!(post.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&post.stderr);
    assert!(stderr.contains("post-norm"), "{stderr}");
    assert!(!dir.path().join("post/lens").exists());
}

/// Imports the committed char export (tests/fixtures/exports/char) as the run `imp` in `dir`.
fn import_char_export(dir: &Path) {
    let export = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/exports/char");
    ok(&headlab(
        &["import", "hf", export.to_str().unwrap(), "--out", "imp"],
        dir,
    ));
}

/// The clean and corrupted prompts the patching tests ask of the char export, and the
/// answers they set against each other.
const SPY_PAIR: [&str; 8] = [
    "--clean",
    "the spy sees the sp",
    "--corrupted",
    "the dog sees the sp",
    "--answer",
    "y",
    "--versus",
    "e",
];

/// `headlab patch` on an exported model imported back: every site's sweep in patch.csv with
/// the normalisation TransformerLens uses (the clean run's own activations restore all of
/// it), a picture per site; prompts of different lengths and a two-token answer are refused
/// with exit 2, writing nothing.
#[test]
fn patch_sweeps_every_site_and_refuses_prompts_that_do_not_line_up() {
    let dir = tempfile::tempdir().unwrap();
    import_char_export(dir.path());
    let (clean, corrupted) = ("the spy sees the sp", "the dog sees the sp");
    let args = [
        "patch",
        "imp",
        "--clean",
        clean,
        "--corrupted",
        corrupted,
        "--answer",
        "y",
        "--versus",
        "e",
    ];
    let printed = ok(&headlab(&args, dir.path()));
    assert!(printed.starts_with("metric: clean "), "{printed}");
    let csv = std::fs::read_to_string(dir.path().join("imp/patch/patch.csv")).unwrap();
    let t = clean.len();
    // resid_pre, attn_out, mlp_out: 2 layers x t positions; head: 2 layers x 2 heads.
    assert_eq!(csv.lines().count(), 1 + 3 * 2 * t + 2 * 2, "{csv}");
    // The last position's stream entering layer 0 is the token itself, the same in both
    // prompts ("p"), so patching it restores nothing; where they differ ("s" vs "d") it can.
    let restored = |site: &str, layer: &str, column: usize| -> f64 {
        csv.lines()
            .find(|l| l.starts_with(&format!("{site},{layer},{column},")))
            .and_then(|l| l.rsplit(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    assert!(restored("resid_pre", "0", t - 1).abs() < 1e-6);
    for site in ["resid_pre", "attn_out", "mlp_out", "head"] {
        assert!(
            dir.path()
                .join(format!("imp/patch/patch-{site}.png"))
                .is_file()
        );
    }

    let uneven = headlab(
        &[
            "patch",
            "imp",
            "--clean",
            "the spy",
            "--corrupted",
            "the dogs",
            "--answer",
            "y",
            "--out",
            "u",
        ],
        dir.path(),
    );
    assert_eq!(uneven.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&uneven.stderr);
    assert!(stderr.contains("same length"), "{stderr}");
    assert!(!dir.path().join("u").exists());
    let two = headlab(
        &[
            "patch",
            "imp",
            "--clean",
            "ab",
            "--corrupted",
            "cd",
            "--answer",
            "yy",
        ],
        dir.path(),
    );
    assert_eq!(two.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&two.stderr).contains("is 2 tokens"));
    // A token outside the vocabulary, and a run without weights: one line, exit 2.
    let unknown = headlab(
        &[
            "patch",
            "imp",
            "--clean",
            "ab",
            "--corrupted",
            "cd",
            "--answer",
            "Z",
        ],
        dir.path(),
    );
    assert_eq!(unknown.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains("'Z'") && stderr.contains("vocabulary"),
        "{stderr}"
    );
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let empty = headlab(
        &[
            "patch",
            "empty",
            "--clean",
            "ab",
            "--corrupted",
            "cd",
            "--answer",
            "a",
        ],
        dir.path(),
    );
    assert_eq!(empty.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&empty.stderr).lines().count(), 1);
    assert!(!dir.path().join("empty/patch").exists());
}

/// `headlab patch --attribution --exact` on the exported char model: attribution-patch.csv has a
/// row for every patch of patch.csv, at the same sites; comparison.txt's correlations equal
/// Pearson's, recomputed here from the two CSVs; two runs write the same estimates; and
/// `--exact` without `--attribution` or with `--path` is refused with exit 2.
#[test]
fn attribution_patching_estimates_every_patch_and_says_how_well() {
    let dir = tempfile::tempdir().unwrap();
    import_char_export(dir.path());
    let patch = |extra: &[&str], out: &str| {
        let mut args = vec!["patch", "imp"];
        args.extend_from_slice(&SPY_PAIR);
        args.extend_from_slice(&["--out", out]);
        args.extend_from_slice(extra);
        headlab(&args, dir.path())
    };
    ok(&patch(&["--attribution", "--exact"], "both"));
    let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
    let (exact, estimate) = (read("both/patch.csv"), read("both/attribution-patch.csv"));
    let rows = |csv: &str| -> Vec<(String, f64)> {
        csv.lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f[..3].join(","), f[f.len() - 1].parse().unwrap())
            })
            .collect()
    };
    let (e, a) = (rows(&exact), rows(&estimate));
    assert_eq!(e.len(), a.len());
    let pearson = |x: &[f64], y: &[f64]| {
        let n = x.len() as f64;
        let mx = x.iter().sum::<f64>() / n;
        let my = y.iter().sum::<f64>() / n;
        let cov: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
        let vx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
        let vy: f64 = y.iter().map(|b| (b - my).powi(2)).sum();
        cov / (vx * vy).sqrt()
    };
    let comparison = read("both/comparison.txt");
    for site in ["resid_pre", "attn_out", "mlp_out", "head", "all"] {
        let (x, y): (Vec<f64>, Vec<f64>) = e
            .iter()
            .zip(&a)
            .filter(|(p, q)| {
                assert_eq!(p.0, q.0);
                site == "all" || p.0.starts_with(&format!("{site},"))
            })
            .map(|(p, q)| (p.1, q.1))
            .unzip();
        let want = format!(
            "  {site:<10}{:>+7.3}  over {} patches",
            pearson(&x, &y),
            x.len()
        );
        assert!(comparison.contains(&want), "{want:?} not in\n{comparison}");
    }
    assert!(dir.path().join("both/attribution-patch-head.png").is_file());
    ok(&patch(&["--attribution"], "again"));
    assert_eq!(read("again/attribution-patch.csv"), estimate);
    assert!(!dir.path().join("again/patch.csv").exists());

    for extra in [&["--exact"][..], &["--attribution", "--path", "all"]] {
        let out = patch(extra, "bad");
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(!dir.path().join("bad").exists());
    }
}

/// `headlab circuit` on the exported char model (2 layers of 2 heads with MLPs): circuit.csv
/// has one row per edge of the graph (counted here from the architecture), ACDC keeps exactly
/// the edges whose score reached the threshold and EAP the edges of largest |score|, the
/// summary's count and the drawing's curves agree with the CSV, two runs write the same
/// file; the built-in tasks score what patching scores on their prompts and build the
/// induction prompts as said; and a threshold out of range, a task with prompts besides, an edge budget too small, prompts with no difference
/// and an unknown method get exit 2 with nothing written.
#[test]
fn circuit_discovery_keeps_edges_by_its_rule_and_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    import_char_export(dir.path());
    // The spy pair turned round: this model favours "y" over "e" a little more after "spy"
    // (0.13 apart), so turned round the gap points the wrong way.
    let turned = [
        "--clean",
        "the dog sees the sp",
        "--corrupted",
        "the spy sees the sp",
        "--answer",
        "y",
        "--versus",
        "e",
    ];
    let circuit = |extra: &[&str], out: &str| {
        let mut args = vec!["circuit", "imp"];
        args.extend_from_slice(&SPY_PAIR);
        args.extend_from_slice(&["--out", out]);
        args.extend_from_slice(extra);
        headlab(&args, dir.path())
    };
    // Issue 79: a gap that points the wrong way is refused, nothing written; one under a nat
    // is searched with patch's warning, on the terminal and in summary.txt.
    let mut wrong = vec!["circuit", "imp"];
    wrong.extend_from_slice(&turned);
    wrong.extend_from_slice(&["--out", "bad"]);
    let refused = headlab(&wrong, dir.path());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the gap points the wrong way"), "{stderr}");
    assert!(!dir.path().join("bad").exists());
    let warned = circuit(&[], "w");
    let stderr = String::from_utf8_lossy(&warned.stderr);
    assert!(warned.status.success(), "{stderr}");
    assert!(stderr.contains("warning: the metric is"), "{stderr}");
    assert!(stderr.contains("under 1 nat"), "{stderr}");
    let summary = std::fs::read_to_string(dir.path().join("w/summary.txt")).unwrap();
    assert!(summary.contains("warning: the metric is"), "{summary}");
    // Senders before each receiver: layer 0's 6 inputs read the embedding; mlp 0 reads it and
    // layer 0's heads; layer 1's inputs read those and mlp 0; mlp 1 and the logits more.
    let (layers, heads) = (2, 2);
    let mut edges = 0;
    for l in 0..layers {
        let before = 1 + l * (heads + 1);
        edges += 3 * heads * before + before + heads;
    }
    edges += 1 + layers * (heads + 1);
    let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
    // EAP's first-order scores are loose on this small gap: at 0.05 it keeps every edge, at
    // 0.4 it leaves some out, so its rule is put to the test.
    for (method, out, threshold) in [("acdc", "a", "0.05"), ("eap", "e", "0.4")] {
        let printed = ok(&circuit(
            &["--method", method, "--threshold", threshold],
            out,
        ));
        let csv = read(&format!("{out}/circuit.csv"));
        let rows: Vec<(f64, bool)> = csv
            .lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f[3].parse().unwrap(), f[4] == "true")
            })
            .collect();
        assert_eq!(
            csv.lines().next().unwrap(),
            "sender,receiver,input,score,kept"
        );
        assert_eq!(rows.len(), edges, "{csv}");
        let kept = rows.iter().filter(|r| r.1).count();
        assert!(
            printed.contains(&format!("{kept} of {edges} edges kept")),
            "{printed}"
        );
        if method == "acdc" {
            for (score, k) in &rows {
                assert_eq!(*k, *score >= 0.05, "{score} {k}");
            }
        } else {
            let smallest_kept = rows
                .iter()
                .filter(|r| r.1)
                .map(|r| r.0.abs())
                .fold(f64::MAX, f64::min);
            let largest_dropped = rows
                .iter()
                .filter(|r| !r.1)
                .map(|r| r.0.abs())
                .fold(0.0, f64::max);
            assert!(kept < edges, "{printed}");
            assert!(smallest_kept >= largest_dropped, "{csv}");
            // The fewest top edges within the threshold of the whole model.
            let recovered: f64 = printed
                .split(" of the gap)")
                .next()
                .and_then(|t| t.rsplit('(').next())
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("{printed}"));
            assert!((recovered - 1.0).abs() <= 0.4, "{printed}");
        }
        let svg = read(&format!("{out}/circuit.svg"));
        assert_eq!(svg.matches("<path ").count(), kept);
        ok(&circuit(
            &["--method", method, "--threshold", threshold],
            "again",
        ));
        assert_eq!(read("again/circuit.csv"), csv);
    }
    for extra in [
        &["--threshold", "1.5"][..],
        &["--threshold", "-0.1"],
        &["--max-edges", "3"],
        &["--method", "magic"],
        &["--task", "magic"],
    ] {
        let out = circuit(extra, "bad");
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(!dir.path().join("bad").exists(), "{extra:?}");
    }
    // The built-in tasks. Agreement on characters: the whole model and the empty circuit
    // score what exact patching's two runs score on the same prompts. This small model
    // favours "s" after "the men ..." more than after "the man ...": the gap points the
    // wrong way, so circuit refuses, naming the two numbers patching measures.
    let refused = headlab(
        &["circuit", "imp", "--task", "agreement", "--out", "t"],
        dir.path(),
    );
    assert_eq!(refused.status.code(), Some(2));
    let printed = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(printed.contains("points the wrong way"), "{printed}");
    assert!(!dir.path().join("t").exists());
    let patched = ok(&headlab(
        &[
            "patch",
            "imp",
            "--clean",
            "the man near the cats sleep",
            "--corrupted",
            "the men near the cats sleep",
            "--answer",
            "s",
            "--versus",
            ".",
            "--out",
            "p",
        ],
        dir.path(),
    ));
    let number = |text: &str, after: &str| -> f64 {
        let rest = text
            .split(after)
            .nth(1)
            .unwrap_or_else(|| panic!("{after}: {text}"));
        rest.split([',', ' ', '\n', '('])
            .find(|w| !w.is_empty())
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(
        number(&printed, "the metric is "),
        number(&patched, "metric: clean ")
    );
    assert_eq!(
        number(&printed, "on the clean prompt and "),
        number(&patched, ", corrupted ")
    );
    // Induction: this model, no induction model, favours the corrupted run's token, so the
    // task is refused the same way (the prompts' shape is the library's unit test,
    // discovery::tests).
    let refused = headlab(
        &["circuit", "imp", "--task", "induction", "--out", "i"],
        dir.path(),
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("points the wrong way"));
    assert!(!dir.path().join("i").exists());
    let mixed = headlab(
        &[
            "circuit",
            "imp",
            "--task",
            "induction",
            "--clean",
            "ab",
            "--out",
            "bad",
        ],
        dir.path(),
    );
    assert_eq!(mixed.status.code(), Some(2));
    assert!(!dir.path().join("bad").exists());

    let same = headlab(
        &[
            "circuit",
            "imp",
            "--clean",
            "the spy",
            "--corrupted",
            "the spy",
            "--answer",
            "y",
            "--out",
            "bad",
        ],
        dir.path(),
    );
    assert_eq!(same.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&same.stderr).contains("nothing for"));
    assert!(!dir.path().join("bad").exists());
}

/// `headlab patch --path all` on the exported char model: path.csv holds every sender ->
/// later receiver x Q/K/V path with the metric TransformerLens 4.3's direct path patching
/// measured on the same prompts (tools/tl-path.py); a head that does not exist, a receiver
/// not after its sender, a sender in the last layer and a malformed head are refused with
/// one line and exit 2, writing nothing.
#[test]
fn patch_paths_match_transformer_lens_and_refuse_paths_that_do_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/exports");
    let export = fixtures.join("char");
    ok(&headlab(
        &["import", "hf", export.to_str().unwrap(), "--out", "imp"],
        dir.path(),
    ));
    let patch = |path: &str, out: &str| {
        headlab(
            &[
                "patch",
                "imp",
                "--clean",
                "the spy sees the sp",
                "--corrupted",
                "the dog sees the sp",
                "--answer",
                "y",
                "--versus",
                "e",
                "--path",
                path,
                "--out",
                out,
            ],
            dir.path(),
        )
    };
    let printed = ok(&patch("all", "all"));
    assert!(printed.contains("largest paths"), "{printed}");
    assert!(dir.path().join("all/path.png").is_file());
    let csv = std::fs::read_to_string(dir.path().join("all/path.csv")).unwrap();
    let tl: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("tl-path.json")).unwrap())
            .unwrap();
    let theirs = tl["folders"]["char"]["paths"].as_array().unwrap();
    // 2 senders in layer 0 x 2 receivers in layer 1 x Q, K, V.
    assert_eq!(theirs.len(), 12);
    assert_eq!(csv.lines().count(), 1 + theirs.len(), "{csv}");
    for t in theirs {
        let head = |k: &str| format!("{},{}", t[k][0], t[k][1]);
        let key = format!(
            "{},{},{},",
            head("sender"),
            head("receiver"),
            t["input"].as_str().unwrap()
        );
        let row = csv
            .lines()
            .find(|l| l.starts_with(&key))
            .unwrap_or_else(|| panic!("{key}: {csv}"));
        let metric: f64 = row.split(',').nth(5).unwrap().parse().unwrap();
        let want = t["metric"].as_f64().unwrap();
        assert!(
            (metric - want).abs() < 1e-4,
            "{key}: {metric} vs TransformerLens {want}"
        );
    }
    for (path, says) in [
        ("5.0", "does not exist"),
        ("0.7", "does not exist"),
        ("1.0:0.1", "must be after the sender's"),
        ("0.0:0.1", "must be after the sender's"),
        ("1.1", "last layer"),
        ("x", "is not LAYER.HEAD"),
        ("0.1:1", "is not LAYER.HEAD"),
    ] {
        let refused = patch(path, "bad");
        assert_eq!(refused.status.code(), Some(2), "--path {path}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains(says), "--path {path}: {stderr}");
        let errors = stderr.lines().filter(|l| l.starts_with("error")).count();
        assert_eq!(errors, 1, "--path {path}: {stderr}");
        assert!(!dir.path().join("bad").exists(), "--path {path}");
    }
}

/// A reduced `lab symmetry` (100 steps, tracked every 25): the identical starts stay
/// identical bit for bit on flex and on ndarray at every checked step, the perturbed and
/// random ones differ from the start, and every run's history holds gradient norms. Resumed,
/// it keeps its finished runs and gives the same table.
#[test]
fn a_short_lab_symmetry_keeps_identical_heads_identical() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "lab",
        "symmetry",
        "--out",
        "sym",
        "--set",
        "train.max_iters=100",
        "--set",
        "train.track_heads_every=25",
    ];
    ok(&headlab(&args, dir.path()));
    let csv = std::fs::read_to_string(dir.path().join("sym/symmetry.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 6, "{csv}");
    for r in &rows {
        // Steps 0, 25, 50, 75, 100.
        assert_eq!(r[2], "5", "{csv}");
        let identical = r[3].is_empty();
        assert_eq!(identical, r[0] == "identical", "{csv}");
    }
    assert_eq!((rows[0][1], rows[1][1]), ("flex", "ndarray"));
    // Each model's val loss against chance, ln 26 on the grammar corpus: learned means 0.5
    // or more below it, and separation is measured on models that learn. Even at 100 steps
    // every one has (val 1.77-1.87 against 3.26).
    for r in &rows {
        let (val, chance): (f64, f64) = (r[5].parse().unwrap(), r[6].parse().unwrap());
        assert!((chance - 26f64.ln()).abs() < 1e-4, "{csv}");
        assert!(val <= chance - 0.5, "{csv}");
        assert_eq!(r[7], "true", "{csv}");
    }
    let summary = std::fs::read_to_string(dir.path().join("sym/summary.md")).unwrap();
    assert!(summary.contains("stay identical, bit for bit"), "{summary}");
    assert!(summary.contains("Chance is ln 26 = 3.258"), "{summary}");
    assert!(!summary.contains("did not learn"), "{summary}");
    assert!(dir.path().join("sym/symmetry.png").is_file());
    let history =
        std::fs::read_to_string(dir.path().join("sym/random-flex/head_history.csv")).unwrap();
    let last = history.lines().last().unwrap();
    let column = |name: &str| -> f64 {
        let header: Vec<&str> = history.lines().next().unwrap().split(',').collect();
        let at = header.iter().position(|c| *c == name).unwrap();
        last.split(',').nth(at).unwrap().parse().unwrap()
    };
    let grad = column("grad_norm");
    assert!(grad.is_finite() && grad > 0.0, "{last}");
    let copying = column("copying");
    assert!((-1.0..=1.0).contains(&copying), "{last}");

    // `--resume` keeps each finished run with its checks; one without its checks (as a run
    // stopped before the end leaves it) trains again from step 0, to the same row.
    std::fs::remove_file(dir.path().join("sym/random-flex/symmetry_checks.json")).unwrap();
    let mut again = args.to_vec();
    again.push("--resume");
    let out = headlab(&again, dir.path());
    ok(&out);
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(log.matches("finished before: kept").count(), 5, "{log}");
    assert!(
        log.contains("sym/random-flex: no checks saved (symmetry_checks.json"),
        "{log}"
    );
    let resumed = std::fs::read_to_string(dir.path().join("sym/symmetry.csv")).unwrap();
    assert_eq!(resumed, csv);
}

/// `heads` on a grammar run: syntax.txt is the val split cut to whole sentences (cut again
/// here), syntax.csv's `n` and baseline columns are the arcs of that text's parse and the
/// fixed-offset rule on them, its `role` follows from its columns, and every row of
/// agreement.csv is the library's forced choice with those heads zeroed. The context (128)
/// holds every sentence whole, so no arc is left out of the scores.
#[test]
fn heads_on_a_grammar_run_scores_syntax_against_its_parse_and_the_forced_choice() {
    use headlab_data::dataset::split_text;
    use headlab_data::load_text;
    use headlab_data::syntax::{BASELINE_MAX_OFFSET, Relation, fixed_offset_baseline, parse_text};
    use headlab_heads::syntax::{HeadId, ROLE_MARGIN, ROLE_MIN_ARCS, SyntaxProbe, forced_choice};
    use headlab_train::run::open_trained;

    let dir = tempfile::tempdir().unwrap();
    let mut train = vec!["train", "--out", "g"];
    train.extend(TINY.iter().copied());
    train.extend([
        "--set",
        "model.block_size=128",
        "--set",
        "data.builtin_chars=20000",
        "--set",
        "train.track_heads_every=2",
    ]);
    let out = headlab(&train, dir.path());
    ok(&out);
    let trained_err = String::from_utf8_lossy(&out.stderr).into_owned();
    let history = std::fs::read_to_string(dir.path().join("g/syntax_history.csv")).unwrap();
    let trained_sweep = std::fs::read_to_string(dir.path().join("g/heads/agreement.csv")).unwrap();
    let out = headlab(&["heads", "g"], dir.path());
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let heads_dir = dir.path().join("g/heads");

    // The text: the val split from after its first "." to its last whole sentence (fewer
    // than 300 in 2,000 characters).
    let (_, trained, device) = open_trained(&dir.path().join("g"), None, "best").unwrap();
    let config = &trained.config;
    let (corpus, _) = load_text(&config.data, config.train.seed).unwrap();
    let (_, val) = split_text(&corpus, config.data.val_fraction);
    let after = val[val.find('.').unwrap() + 1..].trim_start();
    let sentences: Vec<&str> = after
        .split_inclusive('.')
        .filter(|s| s.ends_with('.'))
        .collect();
    assert!(sentences.len() > 20 && sentences.len() < 300);
    assert!(sentences.iter().all(|s| s.trim().len() < 128));
    let text = sentences.concat();
    assert_eq!(
        std::fs::read_to_string(heads_dir.join("syntax.txt")).unwrap(),
        format!("{text}\n")
    );
    let said = format!(
        "syntax: measured on the run's val split, first {} sentences",
        sentences.len()
    );
    assert!(err.contains(&said), "{err}");
    assert!(err.contains("subject trackers"), "{err}");
    // Training wrote the head table: heads without -o says it replaces it.
    assert!(
        err.contains("note: replacing the head table in g/heads (training wrote it"),
        "{err}"
    );
    assert!(
        trained_err.contains(&format!(
            "syntax, measured on {} val sentences:\n",
            sentences.len()
        )),
        "{trained_err}"
    );
    // Training ends with a short block, not one long line: each row of its sweep (intact,
    // tracked, controls) with its forced choice, well-formed and agreeing shares side by
    // side, read back against the agreement.csv it wrote; agreeing is among the well-formed.
    let block: Vec<&str> = trained_err
        .lines()
        .skip_while(|l| !l.starts_with("syntax, measured on"))
        .take_while(|l| l.starts_with("syntax") || l.starts_with("  "))
        .collect();
    assert!(block.iter().all(|l| l.len() <= 120), "{block:#?}");
    assert!(
        block.iter().any(|l| l.contains("forced choice")
            && l.contains("well-formed")
            && l.contains("agreeing")),
        "{block:#?}"
    );
    for line in trained_sweep.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let name = match f[1] {
            "intact" => "intact ".to_string(),
            "tracked" => format!("{} zeroed ", f[0]),
            // "(control)", or "(control, other layer)" where the layer has too few heads.
            _ => format!("{} zeroed (control", f[0]),
        };
        let share = |x: f64| format!("{}%", (100.0 * x).round());
        let formed: f64 = f[6].parse().unwrap();
        let row: Vec<String> = block
            .iter()
            .find(|l| l.trim_start().starts_with(&name))
            .unwrap_or_else(|| panic!("no row {name:?} in {block:#?}"))
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let n = row.len();
        let accuracy: f64 = f[3].parse().unwrap();
        assert_eq!(row[n - 3], format!("{accuracy:.2}"), "{line}: {row:?}");
        assert_eq!(row[n - 2], share(formed), "{line}: {row:?}");
        // Issue 79: agreement.csv's `agreeing` is the terminal's share, of the well-formed
        // sentences (it was of all of them); empty where none is well-formed.
        let among = match f[7] {
            "" => "-".to_string(),
            agreeing => share(agreeing.parse().unwrap()),
        };
        assert_eq!(row[n - 1], among, "{line}: {row:?}");
    }

    let syntax = parse_text(&text).unwrap();
    let csv = std::fs::read_to_string(heads_dir.join("syntax.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "layer,head,relation,n,accuracy,mass,baseline_offset,baseline_accuracy,role"
    );
    assert_eq!(lines.len(), 1 + 4 * Relation::ALL.len(), "{csv}");
    for (i, line) in lines[1..].iter().enumerate() {
        let f: Vec<&str> = line.split(',').collect();
        let relation = Relation::ALL[i % Relation::ALL.len()];
        let head = i / Relation::ALL.len();
        assert_eq!(
            (f[0], f[1], f[2]),
            (
                (head / 2).to_string().as_str(),
                (head % 2).to_string().as_str(),
                relation.name()
            ),
            "{line}"
        );
        let n = syntax
            .arcs
            .iter()
            .filter(|a| a.relation == relation)
            .count();
        assert!(n > 0, "{relation}");
        assert_eq!(f[3], n.to_string(), "{line}");
        let base = fixed_offset_baseline(relation, &syntax.arcs, BASELINE_MAX_OFFSET);
        assert_eq!(f[6], base.offset.to_string(), "{line}");
        let num = |k: usize| f[k].parse::<f64>().unwrap();
        assert!((num(7) - base.accuracy).abs() < 1e-6, "{line}");
        let (accuracy, mass) = (num(4), num(5));
        assert!(
            (0.0..=1.0).contains(&accuracy) && (0.0..=1.0).contains(&mass),
            "{line}"
        );
        let edge = accuracy - base.accuracy - ROLE_MARGIN;
        if edge.abs() > 1e-5 {
            let role = n >= ROLE_MIN_ARCS && edge > 0.0;
            assert_eq!(f[8], role.to_string(), "{line}");
        }
    }

    // agreement.csv: intact first, then the tracked heads and the controls, each the
    // library's forced choice on the same text with its heads zeroed.
    let probe = SyntaxProbe::new(&trained.tokenizer, &text).unwrap();
    let asked = syntax
        .agreements
        .iter()
        .filter(|a| a.attractor_mismatch(&syntax.words))
        .count();
    assert!(asked > 0);
    let csv = std::fs::read_to_string(heads_dir.join("agreement.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "ablated,kind,n,accuracy,mean_p_right,sampled,well_formed,agreeing,n_prepositional,\
         accuracy_prepositional,n_relative,accuracy_relative,n_nothing,accuracy_nothing,\
         agreeing_prepositional,agreeing_relative,agreeing_nothing"
    );
    assert!(lines.len() >= 3, "{csv}");
    assert!(lines[1].starts_with("none,intact,"), "{csv}");
    for line in &lines[1..] {
        let f: Vec<&str> = line.split(',').collect();
        let heads: Vec<HeadId> = if f[0] == "none" {
            Vec::new()
        } else {
            f[0].split('+')
                .map(|h| {
                    let (l, h) = h.split_once('.').unwrap();
                    (l.parse().unwrap(), h.parse().unwrap())
                })
                .collect()
        };
        let fc =
            forced_choice(&trained.model, &trained.tokenizer, &probe, &heads, &device).unwrap();
        assert_eq!(f[2], asked.to_string(), "{line}");
        assert_eq!(fc.n, asked);
        let num = |k: usize| f[k].parse::<f64>().unwrap();
        assert!(
            (num(3) - fc.accuracy).abs() < 1e-6,
            "{line}: {}",
            fc.accuracy
        );
        assert!(
            (num(4) - fc.mean_p_right).abs() < 1e-6,
            "{line}: {}",
            fc.mean_p_right
        );
        // Split by what stands between subject and verb, classified here by the words' forms:
        // "that" opens a relative clause, a preposition a prepositional phrase.
        let mut by = [(0usize, 0usize); 3];
        for c in &fc.choices {
            let a = &syntax.agreements[c.agreement];
            let between: Vec<&str> = syntax.words[a.subject + 1..a.verb]
                .iter()
                .map(|w| w.form.as_str())
                .collect();
            let k = if between.contains(&"that") {
                1
            } else if between
                .iter()
                .any(|w| ["near", "behind", "beside", "with"].contains(w))
            {
                0
            } else {
                2
            };
            by[k].0 += 1;
            by[k].1 += usize::from(c.right > c.wrong);
        }
        assert_eq!(by.iter().map(|b| b.0).sum::<usize>(), asked);
        for (k, (n, right)) in by.iter().enumerate() {
            assert_eq!(f[8 + 2 * k], n.to_string(), "{line}");
            if *n == 0 {
                assert_eq!(f[9 + 2 * k], "", "{line}");
            } else {
                let got: f64 = f[9 + 2 * k].parse().unwrap();
                assert!((got - *right as f64 / *n as f64).abs() < 1e-6, "{line}");
            }
        }
        // The sentences sampled with those heads zeroed: 100 (the default
        // train.grammar_sentences, 200, capped), shares in [0, 1], agreeing a share of the
        // well-formed (empty when none is).
        assert_eq!(f[5], "100", "{line}");
        assert!((0.0..=1.0).contains(&num(6)), "{line}");
        assert_eq!(f[7].is_empty(), num(6) == 0.0, "{line}");
        assert!(f[7].is_empty() || (0.0..=1.0).contains(&num(7)), "{line}");
        if heads.is_empty() {
            // Intact: what the grammar checker says of the model's own samples.
            let g = headlab_train::grammar::grammaticality(
                &trained.model,
                &trained.tokenizer,
                100,
                config.train.seed,
            )
            .unwrap();
            assert!((num(6) - g.well_formed).abs() < 1e-6, "{line}: {g:?}");
            if g.well_formed > 0.0 {
                assert!(
                    (num(7) - g.agreeing / g.well_formed).abs() < 1e-6,
                    "{line}: {g:?}"
                );
            } else {
                assert_eq!(f[7], "", "{line}: {g:?}");
            }
            for (k, (verbs, agree)) in g.by_construction.iter().enumerate() {
                if *verbs == 0 {
                    assert_eq!(f[14 + k], "", "{line}");
                } else {
                    let share = *agree as f64 / *verbs as f64;
                    assert!((num(14 + k) - share).abs() < 1e-6, "{line}: {g:?}");
                }
            }
        }
        for k in 14..17 {
            assert!(f[k].is_empty() || (0.0..=1.0).contains(&num(k)), "{line}");
        }
    }
    assert!(lines.iter().any(|l| l.contains(",tracked,")), "{csv}");
    assert!(lines.iter().any(|l| l.contains(",control,")), "{csv}");

    // syntax_history.csv: the tracked steps 0, 2 and the last, 4, a row per head, on
    // the same text: each relation's baseline column is the rule's accuracy on its parse.
    let rows: Vec<Vec<&str>> = history
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(
        history.lines().next().unwrap(),
        "step,layer,head,subject_mass,attractor_mass,subject,determiner,antecedent,object,\
         preposition,subject_baseline,determiner_baseline,antecedent_baseline,\
         object_baseline,preposition_baseline"
    );
    let steps: Vec<usize> = rows.iter().map(|r| r[0].parse().unwrap()).collect();
    assert_eq!(steps, [0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4], "{history}");
    for r in &rows {
        assert_eq!(r.len(), 15, "{r:?}");
        for (k, relation) in Relation::ALL.into_iter().enumerate() {
            let base = fixed_offset_baseline(relation, &syntax.arcs, BASELINE_MAX_OFFSET);
            let got: f64 = r[10 + k].parse().unwrap();
            assert!((got - base.accuracy).abs() < 1e-4, "{relation}: {r:?}");
        }
        for v in &r[3..10] {
            assert!((0.0..=1.0).contains(&v.parse::<f64>().unwrap()), "{r:?}");
        }
    }
    // At step 0 every head of a fresh model spreads its attention: the mass on the subject
    // and on the attractor are both well inside (0, 1).
    for r in &rows[..4] {
        let (subject, attractor): (f64, f64) = (r[3].parse().unwrap(), r[4].parse().unwrap());
        assert!(subject > 0.01 && subject < 0.9, "{r:?}");
        assert!(attractor > 0.01 && attractor < 0.9, "{r:?}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(heads_dir.join("syntax.json")).unwrap())
            .unwrap();
    assert_eq!(json["sentences"], sentences.len());
    assert_eq!(
        json["sweep"].as_array().unwrap().len(),
        lines.len() - 1,
        "{json}"
    );

    // Deterministic: the same run measured again gives the same files, byte for byte.
    ok(&headlab(&["heads", "g", "-o", "again"], dir.path()));
    for file in ["syntax.csv", "agreement.csv", "syntax.txt"] {
        assert_eq!(
            std::fs::read(heads_dir.join(file)).unwrap(),
            std::fs::read(dir.path().join("again").join(file)).unwrap(),
            "{file}"
        );
    }

    // The run's page shows the syntactic heads: a row per head, the sweep, and the charts
    // through training with the slider's marker; and a head's roles in the head table (this
    // tiny model has none, so one is written into heads.json).
    let table_path = heads_dir.join("heads.json");
    let mut table: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&table_path).unwrap()).unwrap();
    assert!(
        table
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["roles"] == serde_json::json!([]))
    );
    table[1]["roles"] = serde_json::json!(["determiner", "object"]);
    std::fs::write(&table_path, table.to_string()).unwrap();
    // Nor a syntactic head: one is named in syntax.json, as a run with one has it.
    let json_path = heads_dir.join("syntax.json");
    let mut named: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert!(named["syntactic"].is_null() && named["syntactic_line"].is_null());
    named["syntactic"] = "1.1".into();
    named["syntactic_line"] = "the syntactic head, 1.1 <b>".into();
    std::fs::write(&json_path, named.to_string()).unwrap();
    ok(&headlab(&["report", "g"], dir.path()));
    let Some(browser) = chromium() else { return };
    let (dom, _) = render(
        &browser,
        &dir.path().join("g/report.html"),
        &dir.path().join("chrome"),
    );
    assert!(dom.contains("data-ready=\"1\""), "{dom}");
    let section = dom
        .split("<section id=\"syntax-section\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no syntax section:\n{dom}"));
    let section = &section[..section.find("</section>").unwrap()];
    assert!(!section.starts_with(" hidden"), "{section}");
    assert_eq!(section.matches("<tr data-layer=").count(), 4, "{section}");
    // The syntactic head's row is marked and its line shown, as text.
    let row = section
        .split("<tr data-layer=\"1\" data-head=\"1\"")
        .nth(1)
        .unwrap();
    assert!(
        row.starts_with(" class=\"syntactic\"><td class=\"txt\">1.1 (syntactic head"),
        "{row}"
    );
    assert_eq!(
        section.matches("class=\"syntactic\"").count(),
        1,
        "{section}"
    );
    assert!(
        section.contains("<p id=\"syntax-syntactic\">the syntactic head, 1.1 &lt;b&gt;</p>"),
        "{section}"
    );
    assert_eq!(
        section.matches("<tr>").count(),
        // The baseline row, the sweep's header row and its rows.
        1 + 1 + (lines.len() - 1) + 1,
        "{section}"
    );
    // The sweep's forced choice by construction, as syntax.json holds it: "0.50 (12)", or a
    // dash where no verb of it was asked.
    let syntax: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(heads_dir.join("syntax.json")).unwrap())
            .unwrap();
    let sweep_table = section.split("id=\"syntax-sweep\"").nth(1).unwrap();
    assert!(
        sweep_table.contains("<th>across a clause</th>"),
        "{sweep_table}"
    );
    for row in syntax["sweep"].as_array().unwrap() {
        for b in row["by_construction"].as_array().unwrap() {
            let n = b["n"].as_u64().unwrap();
            if n > 0 {
                // JavaScript's toFixed rounds an exact half up, Rust's format to even.
                let a = b["accuracy"].as_f64().unwrap();
                let cells = [a, a + 1e-9].map(|x| format!("<td>{x:.2} ({n})</td>"));
                assert!(
                    cells.iter().any(|c| sweep_table.contains(c)),
                    "{cells:?}: {sweep_table}"
                );
            }
        }
    }
    let head_table = dom.split("id=\"head-table\"").nth(1).unwrap();
    let head_table = &head_table[..head_table.find("</table>").unwrap()];
    assert!(
        head_table.contains("<th class=\"txt\">roles</th>"),
        "{head_table}"
    );
    assert!(
        head_table.contains("<td class=\"txt\">determiner, object</td>"),
        "{head_table}"
    );
    let icl = dom.split("id=\"icl-chart\"").nth(1).unwrap();
    let icl = &icl[..icl.find('>').unwrap()];
    assert!(
        icl.contains("data-marker-step=\"4\"") && !icl.contains("hidden"),
        "{icl}"
    );
    for id in [
        "syntax-subject_mass",
        "syntax-subject",
        "syntax-preposition",
    ] {
        let canvas = dom
            .split(&format!("id=\"{id}\""))
            .nth(1)
            .unwrap_or_else(|| panic!("no {id}"));
        let tag = &canvas[..canvas.find('>').unwrap()];
        assert!(tag.contains("data-marker-step=\"4\""), "{id}: {tag}");
    }

    // heads.html (written by `heads`, before syntax.json was edited above) has the relation
    // table too: the baseline row, then a row per head with syntax.csv's accuracies.
    let (dom, _) = render(
        &browser,
        &heads_dir.join("heads.html"),
        &dir.path().join("chrome"),
    );
    assert!(dom.contains("data-ready=\"1\""), "{dom}");
    let rel = dom
        .split("id=\"relations\"")
        .nth(1)
        .expect("a relation table");
    let rel = &rel[..rel.find("</table>").unwrap()];
    assert_eq!(rel.matches("<tr data-layer=").count(), 4, "{rel}");
    assert!(
        rel.contains("<td class=\"label\">fixed-offset rule</td>"),
        "{rel}"
    );
    for line in std::fs::read_to_string(heads_dir.join("syntax.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("1,1,"))
    {
        let accuracy: f64 = line.split(',').nth(4).unwrap().parse().unwrap();
        let cells = [accuracy, accuracy + 1e-9].map(|x| format!(">{x:.2}</t"));
        assert!(cells.iter().any(|c| rel.contains(c)), "{cells:?}: {rel}");
    }
    assert!(
        dom.contains("<p id=\"syntactic\">No head beats its rule by that much.</p>"),
        "{dom}"
    );
}

/// `headlab prune` on a grammar run: every order removes every head once, down to none (where
/// the orders meet); the importance order's first removal is the head of least gradient
/// importance in the head table, and its val loss is the head table's zero ablation of that
/// head alone (Michel et al.'s first step is zeroing one head); the intact agreement is
/// agreement.csv's. The same run pruned twice gives the same file; a model of one head is
/// refused with nothing written.
#[test]
fn prune_removes_heads_by_importance_and_its_first_step_is_zeroing_one_head() {
    let dir = tempfile::tempdir().unwrap();
    let mut train = vec!["train", "--out", "g"];
    train.extend(TINY.iter().copied());
    train.extend([
        "--set",
        "model.block_size=64",
        "--set",
        "data.builtin_chars=20000",
    ]);
    ok(&headlab(&train, dir.path()));
    ok(&headlab(&["heads", "g"], dir.path()));
    let out = headlab(&["prune", "g", "--seeds", "4,5"], dir.path());
    ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("pruning 4 heads one at a time"), "{stdout}");
    // Every order ends at the same headless model: its loss is said once (issue 79).
    assert_eq!(
        stdout.matches("with every head removed").count(),
        1,
        "{stdout}"
    );
    let csv = std::fs::read_to_string(dir.path().join("g/prune/prune.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(
        csv.lines().next().unwrap(),
        "order,step,removed,heads_left,val_loss,agreement,agreement_prepositional,\
         agreement_relative,agreement_nothing"
    );
    let orders = ["importance", "reverse", "random-4", "random-5"];
    assert_eq!(rows.len(), orders.len() * 5, "{csv}");
    let num = |r: &[&str], k: usize| r[k].parse::<f64>().unwrap();
    let mut last_losses = Vec::new();
    for (o, order) in orders.iter().enumerate() {
        let curve = &rows[o * 5..(o + 1) * 5];
        assert!(curve.iter().all(|r| r[0] == *order), "{csv}");
        let mut removed: Vec<&str> = curve[1..].iter().map(|r| r[2]).collect();
        removed.sort();
        assert_eq!(removed, ["0.0", "0.1", "1.0", "1.1"], "{order}");
        for (k, r) in curve.iter().enumerate() {
            assert_eq!(r[1], k.to_string());
            assert_eq!(r[3], (4 - k).to_string());
        }
        last_losses.push(num(&curve[4], 4));
    }
    assert!(
        last_losses
            .iter()
            .all(|l| (l - last_losses[0]).abs() < 1e-6),
        "{last_losses:?}"
    );

    // Against the head table of the same checkpoint and held-out batches.
    let table: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("g/heads/heads.json")).unwrap(),
    )
    .unwrap();
    let heads = table.as_array().unwrap();
    let least = heads
        .iter()
        .min_by(|a, b| {
            let g = |r: &serde_json::Value| r["grad_importance"].as_f64().unwrap();
            g(a).total_cmp(&g(b))
        })
        .unwrap();
    let name = format!("{}.{}", least["layer"], least["head"]);
    assert_eq!(rows[1][2], name, "{csv}");
    let zeroed = num(&rows[1], 4) - num(&rows[0], 4);
    let ablation = least["ablation_zero"].as_f64().unwrap();
    assert!((zeroed - ablation).abs() < 1e-5, "{zeroed} vs {ablation}");
    let sweep = std::fs::read_to_string(dir.path().join("g/heads/agreement.csv")).unwrap();
    let intact: Vec<&str> = sweep.lines().nth(1).unwrap().split(',').collect();
    assert_eq!(intact[0], "none");
    assert!((num(&rows[0], 5) - intact[3].parse::<f64>().unwrap()).abs() < 1e-6);
    // Per construction, as agreement.csv splits it (empty where no verb of it was asked).
    for k in 0..3 {
        assert_eq!(rows[0][6 + k], intact[9 + 2 * k], "{csv}\n{sweep}");
    }

    // prune.json holds the same curves for the run's page, which prune redrew with them.
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("g/prune/prune.json")).unwrap(),
    )
    .unwrap();
    for (o, order) in orders.iter().enumerate() {
        assert_eq!(json[o]["order"], *order);
        assert_eq!(json[o]["random"], order.starts_with("random"));
        let steps = json[o]["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 5);
        for (k, step) in steps.iter().enumerate() {
            let row = &rows[o * 5 + k];
            assert_eq!(step["removed"].as_str().unwrap_or(""), row[2]);
            assert!((step["val_loss"].as_f64().unwrap() - num(row, 4)).abs() < 1e-6);
            assert!((step["agreement"].as_f64().unwrap() - num(row, 5)).abs() < 1e-6);
        }
    }
    if let Some(browser) = chromium() {
        let (dom, _) = render(
            &browser,
            &dir.path().join("g/report.html"),
            &dir.path().join("chrome"),
        );
        assert!(dom.contains("data-ready=\"1\""), "{dom}");
        let section = dom
            .split("<section id=\"prune-section\"")
            .nth(1)
            .unwrap_or_else(|| panic!("no prune section:\n{dom}"));
        let section = &section[..section.find("</section>").unwrap()];
        assert!(!section.starts_with(" hidden"), "{section}");
        for id in ["prune-loss", "prune-agreement"] {
            let tag = section.split(&format!("id=\"{id}\"")).nth(1).unwrap();
            let tag = &tag[..tag.find('>').unwrap()];
            let drawn = "data-series=\"importance:5,reverse:5,random-4:5,random-5:5\"";
            assert!(tag.contains(drawn), "{id}: {tag}");
        }
    }

    ok(&headlab(
        &["prune", "g", "--seeds", "4,5", "--out", "again"],
        dir.path(),
    ));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("again/prune.csv")).unwrap(),
        csv
    );

    let mut one = vec!["train", "--out", "one"];
    one.extend(TINY.iter().copied());
    one.extend(["--set", "model.n_layers=1", "--set", "model.n_heads=1"]);
    ok(&headlab(&one, dir.path()));
    let out = headlab(&["prune", "one"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .starts_with("error: this model has one head (model.n_layers = 1, model.n_heads = 1)"),
        "{stderr}"
    );
    assert!(!dir.path().join("one/prune").exists());
}

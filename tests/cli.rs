//! End-to-end tests of the `headlab` binary on tiny configs (seconds each, on flex).

use std::path::Path;
use std::sync::LazyLock;

use crate::common::{headlab, headlab_env, ok, tiny, trained_on};

/// The tests' tiny model (tests/common) with this file's schedule and data.
static TINY: LazyLock<Vec<&str>> = LazyLock::new(|| {
    tiny(&[
        "--set",
        "train.eval_iters=4",
        "--set",
        "train.log_interval=1",
        "--set",
        "train.warmup_iters=5",
        "--set",
        "train.sample_tokens=40",
        "--set",
        "data.builtin_chars=20000",
    ])
});

fn train(dir: &Path, out: &str, extra: &[&str]) -> String {
    let mut args = vec!["train", "--out", out];
    args.extend_from_slice(&TINY);
    args.extend_from_slice(extra);
    ok(&headlab(&args, dir))
}

/// (step, split, loss) rows of metrics.csv.
fn metrics(run: &Path) -> Vec<(usize, String, String)> {
    let text = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("step,split,loss,lr,tokens_per_s,elapsed_s,bpc,well_formed,agreeing,train_s")
    );
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 10, "{l}");
            // Seconds in training steps: never more than the wall time since the start.
            let (elapsed, train): (f64, f64) = (f[5].parse().unwrap(), f[9].parse().unwrap());
            assert!((0.0..=elapsed).contains(&train), "{l}");
            // A grammar run's val rows carry the shares of sampled sentences that parse and
            // that agree (a subset of those); other rows leave them empty.
            if f[1] == "val" && !f[7].is_empty() {
                let (w, a): (f64, f64) = (f[7].parse().unwrap(), f[8].parse().unwrap());
                assert!((0.0..=1.0).contains(&w) && a <= w, "{l}");
            } else {
                assert_eq!((f[7], f[8]), ("", ""), "{l}");
            }
            (f[0].parse().unwrap(), f[1].to_string(), f[2].to_string())
        })
        .collect()
}

fn val_losses(run: &Path) -> Vec<f64> {
    metrics(run)
        .into_iter()
        .filter(|r| r.1 == "val")
        .map(|r| r.2.parse().unwrap())
        .collect()
}

#[test]
fn train_writes_a_run_whose_loss_falls_and_prints_a_sample() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = train(
        dir.path(),
        "run",
        &[
            "--set",
            "train.max_iters=100",
            "--set",
            "train.eval_interval=25",
        ],
    );
    let run = dir.path().join("run");
    for file in [
        "config.toml",
        "tokenizer.json",
        "metrics.csv",
        "loss.png",
        "last/model.bpk",
        "last/optim.safetensors",
        "best/model.bpk",
    ] {
        assert!(run.join(file).is_file(), "{file} missing");
    }
    let val = val_losses(&run);
    let csv = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    let val_rows: Vec<&str> = csv.lines().filter(|l| l.contains(",val,")).collect();
    assert!(
        val_rows.iter().all(|l| !l.ends_with(",,")),
        "a grammar run measures its sentences at every evaluation:\n{csv}"
    );
    assert_eq!(
        val.len(),
        5,
        "evals at 0, 25, 50, 75, 100: {:?}",
        metrics(&run)
    );
    // Char-level grammar text starts near ln(vocab) ~ 3.3 and must drop well below it.
    assert!(val[4] < val[0] - 0.8, "val loss did not fall: {val:?}");
    let sample = stdout
        .split("--- sample ---")
        .nth(1)
        .expect("a sample is printed");
    assert!(sample.trim().len() >= 20, "sample too short: {sample:?}");
    let png = std::fs::read(run.join("loss.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");

    // The same run again is refused without --force, and nothing is touched.
    let before = std::fs::read(run.join("metrics.csv")).unwrap();
    let out = headlab(&["train", "--out", "run"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    assert_eq!(std::fs::read(run.join("metrics.csv")).unwrap(), before);

    // sample and eval read the run.
    let sample = [
        "sample",
        "run",
        "--prompt",
        "the ",
        "--max-new-tokens",
        "30",
        "--seed",
        "3",
    ];
    let text = ok(&headlab(&sample, dir.path()));
    assert!(text.starts_with("the ") && text.len() > 30, "{text:?}");
    let again = ok(&headlab(&sample, dir.path()));
    assert_eq!(text, again, "same seed, different sample");
    let eval = ok(&headlab(&["eval", "run"], dir.path()));
    let loss: f64 = eval
        .split("loss ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let ppl: f64 = eval
        .split("perplexity ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    // A grammar run is also judged by the sentences it writes.
    assert!(eval.contains("grammar: of 200 sampled sentences"), "{eval}");
    assert!((ppl - loss.exp()).abs() < 1e-2 * ppl, "{eval}");
    assert!(
        (loss - val[3]).abs() < 0.3,
        "eval loss {loss} far from training's val estimate {}",
        val[3]
    );
}

#[test]
fn a_tiny_model_overfits_a_short_text() {
    let dir = tempfile::tempdir().unwrap();
    let text = "the quick brown fox jumps over the lazy dog.\n".repeat(8);
    std::fs::write(dir.path().join("fox.txt"), &text).unwrap();
    train(
        dir.path(),
        "fox",
        &[
            "--set",
            "data.path=fox.txt",
            "--set",
            "train.max_iters=300",
            "--set",
            "train.eval_interval=300",
            "--set",
            "train.lr=3e-3",
            "--set",
            "train.min_lr=3e-3",
            "--set",
            "train.weight_decay=0",
        ],
    );
    let rows = metrics(&dir.path().join("fox"));
    let final_train: f64 = rows
        .iter()
        .rev()
        .find(|r| r.1 == "train")
        .unwrap()
        .2
        .parse()
        .unwrap();
    assert!(
        final_train < 0.15,
        "train loss {final_train} is not near zero"
    );
}

#[test]
fn same_seed_same_losses_and_resume_continues_exactly() {
    let dir = tempfile::tempdir().unwrap();
    // One schedule for all: a run stopped at 20 must have the same learning rates as one
    // that goes to 30.
    let straight = [
        "--set",
        "train.max_iters=30",
        "--set",
        "train.eval_interval=10",
        "--set",
        "train.lr_decay_iters=30",
    ];
    train(dir.path(), "a", &straight);
    train(dir.path(), "b", &straight);
    let (a, b) = (
        metrics(&dir.path().join("a")),
        metrics(&dir.path().join("b")),
    );
    assert_eq!(a, b, "same seed gave different losses");

    let c_args = [
        "--set",
        "train.max_iters=20",
        "--set",
        "train.eval_interval=10",
        "--set",
        "train.lr_decay_iters=30",
    ];
    train(dir.path(), "c", &c_args);
    ok(&headlab(
        &["train", "--resume", "c", "--set", "train.max_iters=30"],
        dir.path(),
    ));
    let c = metrics(&dir.path().join("c"));
    assert_eq!(c, a, "resumed run differs from the straight run");

    let mut seeded = straight.to_vec();
    seeded.extend(["--seed", "7"]);
    let other = train(dir.path(), "d", &seeded);
    assert!(!other.is_empty());
    assert_ne!(metrics(&dir.path().join("d")), a, "the seed is ignored");
}

/// With dropout the masks come from `(seed, step)` too: the same seed gives the same losses,
/// a stopped run resumes to the straight run's losses, and dropout changes them.
#[test]
fn dropout_runs_repeat_and_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let schedule = |steps: &'static str| {
        [
            "--set",
            steps,
            "--set",
            "train.eval_interval=10",
            "--set",
            "train.lr_decay_iters=20",
            "--set",
            "model.dropout=0.2",
        ]
    };
    train(dir.path(), "a", &schedule("train.max_iters=20"));
    train(dir.path(), "b", &schedule("train.max_iters=20"));
    let a = metrics(&dir.path().join("a"));
    assert_eq!(a, metrics(&dir.path().join("b")), "same seed, other losses");
    train(dir.path(), "c", &schedule("train.max_iters=10"));
    ok(&headlab(
        &["train", "--resume", "c", "--set", "train.max_iters=20"],
        dir.path(),
    ));
    assert_eq!(metrics(&dir.path().join("c")), a, "resumed run differs");
    let mut off = schedule("train.max_iters=20").to_vec();
    off.extend(["--set", "model.dropout=0"]);
    train(dir.path(), "d", &off);
    assert_ne!(metrics(&dir.path().join("d")), a, "dropout changed nothing");
}

#[test]
fn byte_tokenizer_trains_on_any_utf8() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("u.txt"),
        "héllo wörld — ünïcode ✓\n".repeat(40),
    )
    .unwrap();
    train(
        dir.path(),
        "u",
        &[
            "--set",
            "data.path=u.txt",
            "--set",
            "data.tokenizer=byte",
            "--set",
            "train.max_iters=5",
            "--set",
            "train.eval_interval=5",
        ],
    );
    let tok = std::fs::read_to_string(dir.path().join("u/tokenizer.json")).unwrap();
    assert!(tok.to_lowercase().contains("byte"), "{tok}");
    let out = ok(&headlab(
        &["sample", "u", "--prompt", "ö", "--max-new-tokens", "8"],
        dir.path(),
    ));
    assert!(out.starts_with('ö'));
}

#[test]
fn char_prompt_outside_the_vocabulary_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    train(
        dir.path(),
        "g",
        &[
            "--set",
            "train.max_iters=2",
            "--set",
            "train.eval_interval=2",
        ],
    );
    let out = headlab(&["sample", "g", "--prompt", "Z€"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains('Z') || err.contains('€'), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn without_out_a_new_run_gets_a_fresh_directory_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["train"];
    args.extend_from_slice(&TINY);
    args.extend_from_slice(&[
        "--set",
        "train.max_iters=2",
        "--set",
        "train.eval_interval=2",
    ]);
    ok(&headlab(&args, dir.path()));
    let first = std::fs::read(dir.path().join("runs/default/metrics.csv")).unwrap();
    ok(&headlab(&args, dir.path()));
    assert!(dir.path().join("runs/default-2/metrics.csv").is_file());
    assert_eq!(
        std::fs::read(dir.path().join("runs/default/metrics.csv")).unwrap(),
        first
    );
}

/// `--resume` honours `--backend` as it honours `--set train.backend` (it used to keep the
/// run's backend), and the change is saved with the run.
#[test]
fn resume_moves_a_run_to_another_backend() {
    let dir = tempfile::tempdir().unwrap();
    train(
        dir.path(),
        "run",
        &[
            "--set",
            "train.max_iters=6",
            "--set",
            "train.eval_interval=3",
        ],
    );
    assert_eq!(trained_on(&dir.path().join("run/last")).0, "flex");
    let out = headlab(
        &[
            "train",
            "--resume",
            "run",
            "--backend",
            "ndarray",
            "--set",
            "train.max_iters=9",
        ],
        dir.path(),
    );
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("on ndarray"), "{stderr}");
    let config = std::fs::read_to_string(dir.path().join("run/config.toml")).unwrap();
    assert!(config.contains("backend = \"ndarray\""), "{config}");
    // Each checkpoint names the backend its weights were trained on.
    assert_eq!(trained_on(&dir.path().join("run/last")).0, "ndarray");
}

/// stderr of a command that must succeed.
fn stderr_of(dir: &Path, args: &[&str]) -> String {
    let out = headlab(args, dir);
    ok(&out);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Issue 41: what trains but not as meant is said once, naming the key and a fix that works.
/// A warm-up as long as the run is warned about (the rate it ends at is lr * 10 / 5001: the
/// ramp is lr (it + 1) / (warmup + 1)); a resume that extends the run names train.max_iters
/// as what moved the cosine, and the `--set` it offers keeps the rate where it was; a resume
/// with another batch size names train.batch_size.
#[test]
fn what_trains_but_not_as_meant_names_the_key_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut args = vec!["train", "--out", "w"];
    args.extend_from_slice(&TINY);
    args.extend([
        "--set",
        "train.max_iters=10",
        "--set",
        "train.eval_interval=10",
        "--set",
        "train.warmup_iters=5000",
    ]);
    let stderr = stderr_of(d, &args);
    let warning = format!(
        "warning: train.warmup_iters = 5000 is not shorter than the run (train.max_iters = 10): \
         the rate climbs towards train.lr = 0.004 but ends at {:.2e}, never reaching it; set \
         train.warmup_iters below 10",
        4e-3 * 10.0 / 5001.0
    );
    assert!(stderr.contains(&warning), "{stderr}");
    assert_eq!(stderr.matches("warning:").count(), 1, "{stderr}");

    // A run of 10 steps with the cosine ending at max_iters, stopped there and extended.
    train(
        d,
        "r",
        &[
            "--set",
            "train.max_iters=10",
            "--set",
            "train.eval_interval=10",
        ],
    );
    let copy = |to: &str| {
        let out = std::process::Command::new("cp")
            .args(["-r", "r", to])
            .current_dir(d)
            .output()
            .unwrap();
        assert!(out.status.success());
    };
    copy("fixed");
    copy("batch");
    // A run whose cosine ends at step 100: at step 10 only a new train.lr moves the rate,
    // and the line says so without blaming, or offering, train.lr_decay_iters.
    train(
        d,
        "lr",
        &[
            "--set",
            "train.max_iters=10",
            "--set",
            "train.eval_interval=10",
            "--set",
            "train.lr_decay_iters=100",
        ],
    );
    let stderr = stderr_of(
        d,
        &[
            "train",
            "--resume",
            "lr",
            "--set",
            "train.max_iters=12",
            "--set",
            "train.lr=2e-3",
        ],
    );
    assert!(
        stderr.contains("note: resuming at step 10, the learning rate is"),
        "{stderr}"
    );
    assert!(
        stderr.contains(": train.lr is 0.002 (was 0.004)\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("lr_decay_iters"), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let stderr = stderr_of(
        d,
        &["train", "--resume", "r", "--set", "train.max_iters=12"],
    );
    let moved = "the cosine decay follows train.max_iters, so it now ends at step 12 instead of \
                 10; to keep the old decay add --set train.lr_decay_iters=10";
    assert!(stderr.contains("warning: resuming at step 10"), "{stderr}");
    assert!(stderr.contains(moved), "{stderr}");
    let stderr = stderr_of(
        d,
        &[
            "train",
            "--resume",
            "fixed",
            "--set",
            "train.max_iters=12",
            "--set",
            "train.lr_decay_iters=10",
        ],
    );
    assert!(!stderr.contains("learning rate"), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let stderr = stderr_of(
        d,
        &[
            "train",
            "--resume",
            "batch",
            "--set",
            "train.max_iters=12",
            "--set",
            "train.lr_decay_iters=10",
            "--set",
            "train.batch_size=4",
        ],
    );
    assert!(
        stderr.contains("warning: train.batch_size is 4 (was 8) from step 10 on"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("warning:").count(), 1, "{stderr}");
}

/// `headlab --help` lists every lab `headlab lab --help` offers, and no help text quotes a
/// measured time: times go stale and named no CPU (issue 41), then disagreed with the
/// README's (issue 79), which alone keeps them, with the CPU.
#[test]
fn help_lists_every_lab_and_quotes_no_measured_time() {
    let dir = tempfile::tempdir().unwrap();
    let help = |args: &[&str]| ok(&headlab(args, dir.path()));
    let top = help(&["--help"]);
    let labs = help(&["lab", "--help"]);
    // The subcommands under "Commands:", but help itself.
    let names: Vec<String> = labs
        .split("Commands:")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|n| n != "help")
        .collect();
    assert_eq!(names.len(), 7, "{labs}");
    let lab_line = top
        .lines()
        .find(|l| l.trim_start().starts_with("lab "))
        .unwrap();
    for name in &names {
        assert!(lab_line.contains(name.as_str()), "{name}: {lab_line}");
    }
    let mut texts = vec![top, help(&["train", "--help"])];
    for name in &names {
        texts.push(help(&["lab", name, "--help"]));
    }
    let mut times = 0;
    for text in &texts {
        // Sentences (help wraps lines: join them first).
        let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for sentence in joined.split(". ") {
            let words: Vec<&str> = sentence.split(' ').collect();
            let quotes_time = words.windows(2).any(|w| {
                w[0].trim_start_matches('(')
                    .split('-')
                    .all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
                    && ["s", "s)", "s;", "s,", "minutes"].contains(&w[1])
            });
            if quotes_time {
                times += 1;
                eprintln!("a measured time in the help: {sentence}");
            }
            for cpu in ["AMD EPYC", "Intel Xeon", "Zen "] {
                assert!(!sentence.contains(cpu), "a CPU's time: {sentence}");
            }
        }
    }
    assert_eq!(times, 0, "the help quotes measured times (see above)");
}

/// An imported model's dropout is said on import, with what headlab does with it.
#[test]
fn import_says_what_the_models_dropout_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let hf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf-gpt2-tiny");
    let stderr = stderr_of(d, &["import", "hf", hf.to_str().unwrap(), "--out", "zero"]);
    assert!(!stderr.contains("dropout"), "{stderr}");
    std::fs::create_dir(d.join("drop")).unwrap();
    for f in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(hf.join(f), d.join("drop").join(f)).unwrap();
    }
    let config = std::fs::read_to_string(hf.join("config.json")).unwrap();
    let config = config.replace("\"resid_pdrop\": 0.0", "\"resid_pdrop\": 0.1");
    std::fs::write(d.join("drop/config.json"), config).unwrap();
    let stderr = stderr_of(d, &["import", "hf", "drop", "--out", "imp"]);
    assert!(
        stderr.contains("note: the model's dropout is 0.1 (model.dropout in imp/config.toml)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("only while fine-tuning") && stderr.contains("--set model.dropout=0"),
        "{stderr}"
    );
    let saved = std::fs::read_to_string(d.join("imp/config.toml")).unwrap();
    assert!(saved.contains("dropout = 0.1"), "{saved}");
    // --force replaces a run, and an export, in place.
    let again = [
        "import",
        "hf",
        hf.to_str().unwrap(),
        "--out",
        "imp",
        "--force",
    ];
    stderr_of(d, &again);
    let saved = std::fs::read_to_string(d.join("imp/config.toml")).unwrap();
    assert!(!saved.contains("dropout = 0.1"), "{saved}");
    let export = ["export", "hf", "imp", "--out", "hf"];
    stderr_of(d, &export);
    assert_eq!(headlab(&export, d).status.code(), Some(2));
    let forced = ["export", "hf", "imp", "--out", "hf", "--force"];
    stderr_of(d, &forced);
    assert!(d.join("hf/model.safetensors").is_file());
}

/// `headlab patch` on a small trained model (the char export in tests/fixtures, imported):
/// positions are labelled with the clean prompt's tokens, and the corrupted one's where they
/// differ; a warning is printed exactly when the two metrics are under 1 nat apart, as read
/// from the printed metric line. The README's old example ("the dog sees" / "the dogs see",
/// the log-probability of " ") is such a pair; "spy" against "spi" (of "spies"), scored by
/// "." against "e", is not (4.3 nats apart on this small model).
#[test]
fn patch_labels_clean_tokens_and_warns_when_the_prompts_barely_differ() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let export = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/exports/char");
    ok(&headlab(
        &["import", "hf", export.to_str().unwrap(), "--out", "imp"],
        d,
    ));
    let patch = |clean: &str, corrupted: &str, answer: &[&str], out: &str| {
        let mut args = vec!["patch", "imp", "--clean", clean, "--corrupted", corrupted];
        args.extend_from_slice(answer);
        args.extend(["--out", out]);
        let output = headlab(&args, d);
        let stdout = ok(&output);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        // "metric: clean X, corrupted Y"
        let line = stdout.lines().next().unwrap();
        let numbers: Vec<f64> = line
            .split([' ', ','])
            .filter_map(|w| w.parse().ok())
            .collect();
        let gap = (numbers[0] - numbers[1]).abs();
        (gap, stdout, stderr)
    };
    let (gap, _, stderr) = patch("the dog sees", "the dogs see", &["--answer", " "], "near");
    assert!(
        gap < 1.0,
        "the old example is no longer a close pair: {gap}"
    );
    assert_eq!(stderr.matches("warning:").count(), 1, "{stderr}");
    assert!(
        stderr.contains("under 1 nat: the prompts barely disagree about the answer"),
        "{stderr}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("near/patch.json")).unwrap()).unwrap();
    assert!(
        json["warning"].as_str().unwrap().contains("under 1 nat"),
        "{json}"
    );

    let (clean, corrupted) = ("the dog sees the spy", "the dog sees the spi");
    let (gap, stdout, stderr) = patch(clean, corrupted, &["--answer", ".", "--versus", "e"], "far");
    assert!(gap >= 1.0, "{gap}: {stdout}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("far/patch.json")).unwrap()).unwrap();
    assert!(json["warning"].is_null(), "{json}");
    // Column labels: the clean token, "y/i" where the prompts differ (position 19). A space
    // is drawn visibly, whichever mark the tokenizer uses, so letters are compared.
    let labels: Vec<&str> = json["sweeps"][0]["column_labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(labels.len(), clean.len());
    for (i, (a, b)) in clean.chars().zip(corrupted.chars()).enumerate() {
        if a != b {
            assert_eq!(labels[i], format!("{a}/{b}"));
        } else if a != ' ' {
            assert_eq!(labels[i], a.to_string());
        } else {
            assert!(!labels[i].contains('/'), "{labels:?}");
        }
    }
    assert_eq!(labels[19], "y/i");
    let csv = std::fs::read_to_string(d.join("far/patch.csv")).unwrap();
    assert!(
        csv.starts_with("site,layer,position_or_head,token,corrupted_token,metric,restored\n"),
        "{csv}"
    );
    assert!(csv.contains("\nresid_pre,0,19,\"y\",\"i\","), "{csv}");
    assert!(csv.contains("\nresid_pre,0,4,\"d\",\"d\","), "{csv}");
}

#[test]
fn the_end_of_run_loss_reads_at_most_train_final_eval_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let result = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(name).join("result.json")).unwrap())
            .unwrap()
    };
    let run = |name: &str, extra: &[&str]| {
        let mut args = vec!["train", "--out", name];
        args.extend_from_slice(&TINY);
        args.extend_from_slice(&["--set", "train.max_iters=4"]);
        args.extend_from_slice(extra);
        let out = headlab(&args, dir);
        ok(&out);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // By default all of the val split: every token but the first is predicted.
    let whole = run("whole", &[]);
    let r = result("whole");
    let split = r["val_split_tokens"].as_u64().unwrap();
    assert!(split > 1000, "{r}");
    assert_eq!(r["val_full_tokens"].as_u64(), Some(split - 1));
    assert!(
        whole.contains(&format!(
            "the whole val split ({} tokens, windows of 16): ",
            split - 1
        )),
        "{whole}"
    );

    // 100 tokens: six windows of 16 and one of 4.
    let capped = run("capped", &["--set", "train.final_eval_tokens=100"]);
    let r = result("capped");
    assert_eq!(r["val_full_tokens"].as_u64(), Some(100));
    assert!(
        capped.contains(&format!(
            "the val split's first 100 of {split} tokens (train.final_eval_tokens, windows \
                 of 16): "
        )),
        "{capped}"
    );
    assert_ne!(r["val_full_loss"], result("whole")["val_full_loss"]);

    let skipped = run("skipped", &["--set", "train.final_eval_tokens=0"]);
    assert!(result("skipped")["val_full_loss"].is_null());
    assert!(!skipped.contains("measuring the loss over"), "{skipped}");
}

/// With stderr not a terminal (a log, a CI job) training prints a progress line between
/// evaluations (every 15 s; the test hook makes it every step): each names its step of the
/// total and the loss metrics.csv records for that step.
#[test]
fn training_into_a_log_prints_progress_lines_with_the_recorded_losses() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["train", "--out", "r"];
    args.extend(tiny(&[
        "--set",
        "train.max_iters=6",
        "--set",
        "train.eval_interval=6",
        "--set",
        "train.eval_iters=1",
        "--set",
        "train.log_interval=1",
        "--set",
        "train.sample_tokens=0",
        "--set",
        "data.builtin_chars=4000",
    ]));
    let out = headlab_env(
        &args,
        dir.path(),
        &[("HEADLAB_TEST_PROGRESS_EVERY_MS", "0")],
    );
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    let metrics = std::fs::read_to_string(dir.path().join("r/metrics.csv")).unwrap();
    // `step,split,loss,...`: each step's batch loss, on its `iter` row.
    let recorded: Vec<(usize, f64)> = metrics
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f.get(1) == Some(&"iter")).then(|| (f[0].parse().unwrap(), f[2].parse().unwrap()))
        })
        .collect();
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("step ") && l.contains("/6: loss "))
        .collect();
    assert_eq!(lines.len(), 6, "{err}");
    for (k, line) in lines.iter().enumerate() {
        assert!(
            line.starts_with(&format!("step {}/6: loss ", k + 1)),
            "{line}"
        );
        let loss: f64 = line["step 1/6: loss ".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let (_, want) = recorded
            .iter()
            .find(|(s, _)| *s == k + 1)
            .unwrap_or_else(|| panic!("no iter row {} in {metrics}", k + 1));
        assert!((loss - want).abs() < 6e-5, "{line} vs {want}");
        assert!(line.ends_with(" s"), "{line}");
    }
}

/// `train.precision = "bf16"` trains with bf16 products where the CPU has AVX512-BF16 (says
/// so; its val losses are near f32's but not equal: the products really changed) and is
/// refused with the instruction set named, nothing written, where it does not.
#[test]
fn bf16_precision_trains_near_f32_or_is_refused_naming_the_instructions() {
    let dir = tempfile::tempdir().unwrap();
    train(dir.path(), "f32", &[]);
    let mut args = vec!["train", "--out", "bf16"];
    args.extend_from_slice(&TINY);
    args.extend_from_slice(&["--set", "train.precision=bf16"]);
    let out = headlab(&args, dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !headlab_kernels::bf16::supported() {
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("AVX512-BF16"), "{stderr}");
        assert!(!dir.path().join("bf16").exists());
        return;
    }
    ok(&out);
    assert!(stderr.contains("products in bf16"), "{stderr}");
    let (a, b) = (
        val_losses(&dir.path().join("f32")),
        val_losses(&dir.path().join("bf16")),
    );
    assert_eq!(a.len(), b.len());
    assert_ne!(a, b);
    // Before any update only the forward's rounding differs: bf16's 2^-8 on each operand,
    // averaged over the loss's tokens. Updates then take the two runs apart, as any change of
    // rounding does in training, but not far in a few steps.
    assert!((a[0] - b[0]).abs() < 1e-3 * a[0], "{a:?} vs {b:?}");
    let (last_a, last_b) = (a[a.len() - 1], b[b.len() - 1]);
    assert!((last_a - last_b).abs() < 0.05 * last_a, "{a:?} vs {b:?}");
}

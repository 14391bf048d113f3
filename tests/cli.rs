//! End-to-end tests of the `headlab` binary on tiny configs (seconds each, on flex).

use std::path::Path;
use std::sync::LazyLock;

use crate::common::{headlab, headlab_env, ok, tiny};

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

/// The backend and adapter a checkpoint's manifest records.
fn trained_on(checkpoint: &Path) -> (String, Option<String>) {
    let text = std::fs::read_to_string(checkpoint.join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let on = &manifest["trained_on"];
    let backend = on["backend"].as_str().unwrap_or_else(|| panic!("{text}"));
    (
        backend.to_string(),
        on["adapter"].as_str().map(String::from),
    )
}

/// A wgpu run records the adapter it trained on, where `compare` already does.
#[test]
fn a_wgpu_run_names_its_adapter() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["train", "--out", "run"];
    args.extend_from_slice(&TINY);
    let short = ["train.max_iters=2", "train.eval_iters=1"];
    args.extend(["--backend", "wgpu", "--set", short[0], "--set", short[1]]);
    let out = headlab(&args, dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let required = std::env::var("HEADLAB_REQUIRE_WGPU").is_ok_and(|v| v == "1");
    if !out.status.success() && stderr.contains("no working GPU adapter") && !required {
        eprintln!("skipped: no wgpu adapter");
        return;
    }
    ok(&out);
    let (backend, adapter) = trained_on(&dir.path().join("run/last"));
    assert_eq!(backend, "wgpu");
    let adapter = adapter.expect("a wgpu checkpoint names its adapter");
    assert!(!adapter.trim().is_empty());
    assert!(
        stderr.contains(&format!("wgpu: adapter {adapter}")),
        "{stderr}"
    );

    // Its weights export where no Vulkan adapter exists: export reads them on flex.
    let hidden = [
        ("VK_DRIVER_FILES", "/nonexistent/icd.json"),
        ("VK_ICD_FILENAMES", "/nonexistent/icd.json"),
    ];
    let out = headlab_env(&["export", "hf", "run", "--out", "hf"], dir.path(), &hidden);
    ok(&out);
    assert!(dir.path().join("hf/model.safetensors").is_file());
    if cfg!(target_os = "linux") {
        // The same export asked to read on wgpu finds no adapter: Vulkan really is hidden.
        let out = headlab_env(
            &[
                "export",
                "hf",
                "run",
                "--out",
                "hf-wgpu",
                "--backend",
                "wgpu",
            ],
            dir.path(),
            &hidden,
        );
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

//! `headlab compare` end to end: identical initialisation on every backend, losses within the
//! f32-rounding tolerance, and the same losses `headlab train` reports.

use std::path::Path;

use crate::common::{headlab_env, ok};

/// Small enough that lavapipe compiles its kernels in under a minute.
const TINY: &[&str] = &[
    "--set",
    "model.block_size=16",
    "--set",
    "model.d_model=24",
    "--set",
    "model.n_layers=1",
    "--set",
    "model.n_heads=2",
    "--set",
    "train.batch_size=4",
    "--set",
    "train.lr=1e-2",
    "--set",
    "train.warmup_iters=2",
    // Two micro-batches per step: compare must accumulate as train does.
    "--set",
    "train.grad_accum=2",
    "--set",
    "data.builtin_chars=5000",
    // The schedule's length: compare takes the first `--steps` steps of this run.
    "--set",
    "train.max_iters=8",
];
const STEPS: usize = 8;
/// Kernel autotuning is what makes wgpu's first step slow on lavapipe; timings are not
/// checked here.
const ENV: &[(&str, &str)] = &[("CUBECL_AUTOTUNE_LEVEL", "minimal")];

fn wgpu_required() -> bool {
    std::env::var("HEADLAB_REQUIRE_WGPU").is_ok_and(|v| v == "1")
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

#[test]
fn backends_start_identical_agree_within_tolerance_and_match_train() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let steps = STEPS.to_string();
    let mut args = vec![
        "compare",
        "--backends",
        "flex,ndarray,wgpu",
        "--steps",
        &steps,
        "--out",
        "cmp",
    ];
    args.extend_from_slice(TINY);
    let table = ok(&headlab_env(&args, dir, ENV));
    let report = json(&dir.join("cmp/compare.json"));
    assert_eq!(report["reference"], "flex");
    let logits_tol = f(&report["logits_tolerance"]);
    let loss_tol = f(&report["final_loss_tolerance"]);
    assert!(logits_tol > 0.0 && logits_tol < 1e-2, "{logits_tol}");

    let backends = report["backends"].as_array().unwrap();
    let names: Vec<&str> = backends
        .iter()
        .map(|b| b["backend"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["flex", "ndarray", "wgpu"]);
    let mut losses = Vec::new();
    for b in backends {
        let name = b["backend"].as_str().unwrap();
        if b["available"] != true {
            assert_eq!(name, "wgpu", "{b}");
            assert!(
                !wgpu_required(),
                "HEADLAB_REQUIRE_WGPU=1 but compare says: {b}"
            );
            eprintln!("skipped wgpu: {}", b["reason"]);
            continue;
        }
        assert!(table.contains(&format!("| {name} |")), "{table}");
        assert_eq!(b["within_tolerance"], true, "{name}: {b}");
        assert!(f(&b["max_logit_diff"]) <= logits_tol, "{name}: {b}");
        assert!(f(&b["max_loss_diff"]) <= loss_tol, "{name}: {b}");
        let l: Vec<f64> = b["losses"].as_array().unwrap().iter().map(f).collect();
        assert_eq!(l.len(), STEPS);
        // Every backend trains: the loss falls from the uniform guess.
        assert!(l[STEPS - 1] < l[0] - 0.3, "{name} did not train: {l:?}");
        for key in ["forward_ms", "backward_ms", "optimizer_ms"] {
            assert!(f(&b[key]) > 0.0, "{name} {key}: {b}");
        }
        losses.push(l);
    }
    for file in ["compare.md", "compare.png", "init.safetensors"] {
        assert!(dir.join("cmp").join(file).is_file(), "{file}");
    }

    // Independently, `headlab train` on the same config takes the same steps on flex: same
    // initial weights, same batches, same updates, so the same losses (metrics.csv keeps 6
    // decimals; row `s + 1` holds the loss of step `s`).
    let mut args = vec![
        "train",
        "--out",
        "run",
        "--set",
        "train.log_interval=1",
        "--set",
        "train.eval_iters=1",
        "--set",
        "train.track_heads_every=0",
        "--set",
        "train.sample_tokens=10",
    ];
    args.extend_from_slice(TINY);
    ok(&headlab_env(&args, dir, &[]));
    let csv = std::fs::read_to_string(dir.join("run/metrics.csv")).unwrap();
    let trained: Vec<f64> = csv
        .lines()
        .filter(|l| l.split(',').nth(1) == Some("iter"))
        .map(|l| l.split(',').nth(2).unwrap().parse().unwrap())
        .collect();
    assert_eq!(trained.len(), STEPS);
    for (s, (a, b)) in trained.iter().zip(&losses[0]).enumerate() {
        assert!((a - b).abs() < 2e-6, "step {s}: train {a}, compare {b}");
    }
}

#[test]
fn bad_backend_lists_are_errors_that_name_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    for (list, expected) in [
        ("flex,cuda", "unknown backend \"cuda\""),
        ("flex,flex", "lists flex twice"),
    ] {
        let out = headlab_env(&["compare", "--backends", list], tmp.path(), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(expected), "{err}");
        assert!(
            !tmp.path().join("runs").exists(),
            "nothing is written on bad input"
        );
    }
}

//! `headlab-bench --quick`: the harness behind `cargo xtask bench` runs end to end and writes
//! every section. Speeds are not checked (tests never time anything).

use std::process::Command;

// Over 80 lines on purpose: one scenario: the stand-in files it writes first are what the assertions after the run check.
#[test]
fn quick_bench_writes_every_section_and_ratios_against_a_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A stand-in for bench/reference/bench.py's output: the ratios must use its medians.
    let torch = serde_json::json!({
        "environment": {"torch": "stand-in", "threads": 1, "cpu_capability": "AVX512"},
        "quick": true,
        "matmul": [{"n": 256, "timing": {"median_ms": 1.0, "min_ms": 1.0, "max_ms": 1.0}, "gflops": 33.5}],
        "attention": [{"pass": "forward", "b": 4, "h": 4, "d_k": 32, "t": 64,
                        "timing": {"median_ms": 0.5, "min_ms": 0.5, "max_ms": 0.5}}],
    });
    std::fs::write(dir.join("torch.json"), torch.to_string()).unwrap();
    // A stand-in for bench.py's step task: eager takes 10 ms in its first round and 20 in its
    // second (a count in a file), fused 5 ms, fused under bf16 autocast 4 ms, and both compile
    // modes fail, as they may on a machine without a C++ compiler.
    let python = dir.join("python");
    std::fs::write(
        &python,
        r#"#!/bin/sh
set -e
[ "$2" = step ] || { echo "stand-in: unexpected $*" >&2; exit 1; }
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
n=$(cat "$(dirname "$0")/calls" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$(dirname "$0")/calls"
cat > "$out" <<END
{"environment": {"torch": "stand-in", "threads": 1, "cpu_capability": "AVX512",
  "config": "  - BLAS_INFO=stand-in-blas", "parallel_info": "ATen parallel backend: OpenMP"},
 "steps": {"eager": {"timing": {"median_ms": $((n * 10)), "min_ms": 1, "max_ms": 30, "samples": 3}},
           "fused": {"timing": {"median_ms": 5.0, "min_ms": 5.0, "max_ms": 5.0, "samples": 3}},
           "compile": {"error": "stand-in: no compiler"},
           "fused-bf16": {"timing": {"median_ms": 4.0, "min_ms": 4.0, "max_ms": 4.0, "samples": 3}},
           "compile-bf16": {"error": "stand-in: no compiler"}}}
END
"#,
    )
    .unwrap();
    std::fs::set_permissions(&python, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_headlab-bench"))
        .args([
            "--quick",
            "--backends",
            "flex",
            "--data",
            "/nonexistent/input.txt",
        ])
        .arg("--results")
        .arg(dir.join("results"))
        .arg("--criterion-dir")
        .arg(dir.join("criterion"))
        .arg("--torch-json")
        .arg(dir.join("torch.json"))
        .arg("--torch-python")
        .arg(&python)
        .args(["--step-threads", "1"])
        // The thread count would change the file name.
        .env_remove("RAYON_NUM_THREADS")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");

    let files: Vec<_> = std::fs::read_dir(dir.join("results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let json_path = files
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("a results .json");
    assert!(json_path.to_string_lossy().ends_with("-quick.json"));
    let md = std::fs::read_to_string(json_path.with_extension("md")).unwrap();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json_path).unwrap()).unwrap();

    let median = |row: &serde_json::Value| row["timing"]["median_ms"].as_f64().unwrap();
    for section in ["matmul", "attention", "heads", "generation"] {
        let rows = report[section].as_array().unwrap();
        assert!(!rows.is_empty(), "{section} is empty");
        for row in rows {
            assert_eq!(row["backend"], "flex", "{section}: {row}");
            assert!(median(row) > 0.0, "{section}: {row}");
        }
    }
    let attention = report["attention"].as_array().unwrap();
    for (pass, kernel) in [
        ("forward", "naive"),
        ("forward", "fused"),
        ("forward_backward", "naive"),
    ] {
        assert!(
            attention
                .iter()
                .any(|r| r["pass"] == pass && r["kernel"] == kernel && r["t"] == 64)
        );
    }
    let heads = report["heads"].as_array().unwrap();
    for mode in ["batched", "loop"] {
        assert!(heads.iter().any(|r| r["mode"] == mode && r["h"] == 4));
    }
    let generation = report["generation"].as_array().unwrap();
    for cache in [true, false] {
        assert!(generation.iter().any(|r| r["kv_cache"] == cache));
    }
    let step = &report["train_step"];
    // nanoGPT's estimate for the recipe model, by hand: N = 4 layers x 12 d^2 + the 65 x 128
    // token table + LayerNorm gains (4 x 2 x 128 + 128), without the position table;
    // FLOPs/token = 6 N + 12 L d T; 12 x 64 tokens a step.
    let n: u64 = 4 * 12 * 128 * 128 + 65 * 128 + 4 * 2 * 128 + 128;
    let flops = ((6 * n + 12 * 4 * 128 * 64) * 12 * 64) as f64;
    let shape = &step["shapes"][0];
    assert_eq!(shape["shape"], "recipe");
    assert_eq!(shape["flops_per_step"].as_f64().unwrap(), flops);
    let rows = step["rows"].as_array().unwrap();
    let cell = |column: &str, round: u64| {
        rows.iter()
            .find(|r| r["column"] == column && r["round"] == round && r["threads"] == 1)
            .unwrap_or_else(|| panic!("no {column} in round {round}: {step}"))
    };
    // Two rounds of every column, headlab's from the worker, PyTorch's from the stand-in.
    for round in [1, 2] {
        for column in ["flex", "flex-burn"] {
            assert!(median(cell(column, round)) > 0.0, "{step}");
        }
        assert_eq!(median(cell("torch eager", round)), 10.0 * round as f64);
        assert_eq!(median(cell("torch fused", round)), 5.0);
        assert_eq!(
            cell("torch compile", round)["error"],
            "stand-in: no compiler"
        );
    }
    assert!(
        md.contains("Failed: torch compile, 1 thread(s): stand-in: no compiler"),
        "{md}"
    );
    // headlab / PyTorch per round: against eager the rounds differ (10 then 20 ms); PyTorch's
    // best is fused in bf16, its fastest column in each round, where compile failed.
    let ratios = |theirs: &dyn Fn(u64) -> f64| -> (f64, f64, f64) {
        let r: Vec<f64> = [1, 2]
            .iter()
            .map(|&k| median(cell("flex", k)) / theirs(k))
            .collect();
        let (lo, hi) = (r[0].min(r[1]), r[0].max(r[1]));
        ((lo + hi) / 2.0, lo, hi)
    };
    let (m_e, lo_e, hi_e) = ratios(&|k| 10.0 * k as f64);
    let (m_f, lo_f, hi_f) = ratios(&|_| 5.0);
    let (m_b, lo_b, hi_b) = ratios(&|_| 4.0);
    let verdict = if hi_b < 1.0 {
        "headlab faster"
    } else if lo_b > 1.0 {
        "headlab slower"
    } else {
        "level"
    };
    let row = format!(
        "| 1 | flex | {m_e:.2} ({lo_e:.2}-{hi_e:.2}) | {m_f:.2} ({lo_f:.2}-{hi_f:.2}) | - | \
         {m_b:.2} ({lo_b:.2}-{hi_b:.2}) | - | {m_b:.2} ({lo_b:.2}-{hi_b:.2}) | {verdict} |"
    );
    assert!(md.contains(&row), "{row} missing:\n{md}");
    // MFU: the model's FLOPs over the median of the round medians, against the FMA peak of
    // one thread; every column shares that denominator.
    let peak = step["fma_peak"][0]["gflops"].as_f64().unwrap();
    assert_eq!(step["fma_peak"][0]["threads"], 1);
    let fused_gflops = flops / (5.0 * 1e-3) / 1e9;
    let fused_row = format!(
        "| 1 | torch fused | 5.00 (5.00-5.00) | {fused_gflops:.1} | {:.1}% |",
        100.0 * fused_gflops / peak
    );
    assert!(md.contains(&fused_row), "{fused_row} missing:\n{md}");
    // The bf16 autocast column divides by the bf16 peak where the CPU has one (and flex-bf16,
    // flex with its products in bf16, runs beside flex there), and gets no MFU elsewhere.
    let bf16_gflops = flops / (4.0 * 1e-3) / 1e9;
    let bf16_mfu = match step["bf16_peak"][0]["gflops"].as_f64() {
        Some(peak) => {
            assert_eq!(step["bf16_peak"][0]["threads"], 1);
            for round in [1, 2] {
                assert!(median(cell("flex-bf16", round)) > 0.0, "{step}");
            }
            format!("{:.1}%", 100.0 * bf16_gflops / peak)
        }
        None => {
            assert!(!rows.iter().any(|r| r["column"] == "flex-bf16"), "{step}");
            "-".to_string()
        }
    };
    let bf16_row =
        format!("| 1 | torch fused-bf16 | 4.00 (4.00-4.00) | {bf16_gflops:.1} | {bf16_mfu} |");
    assert!(md.contains(&bf16_row), "{bf16_row} missing:\n{md}");
    assert!(md.contains("- BLAS_INFO=stand-in-blas"), "{md}");
    assert!(
        report["recipe"]["skipped"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/input.txt")
    );
    assert_eq!(report["torch"], torch);

    // --render redraws the report from the JSON alone, the same text.
    let copy = dir.join("copy.json");
    std::fs::copy(json_path, &copy).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_headlab-bench"))
        .arg("--render")
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(copy.with_extension("md")).unwrap(),
        md
    );

    // The CPU is named in both files, as /proc/cpuinfo's first "model name" line has it.
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
        let model = info
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim());
        if let Some(model) = model {
            assert_eq!(report["cpu"]["model"], model);
            assert!(md.contains(&format!("cores of {model}")), "{md}");
        }
    }

    for heading in [
        "## Matmul peak",
        "## Attention op",
        "## All heads in one batched matmul",
        "## Training step",
        "### recipe",
        "## PyTorch's build",
        "## Generation",
        "## nanoGPT CPU recipe end to end",
    ] {
        assert!(md.contains(heading), "{heading} missing:\n{md}");
    }
    // headlab / PyTorch uses the reference's medians.
    let fwd64 = attention
        .iter()
        .find(|r| r["pass"] == "forward" && r["t"] == 64)
        .unwrap();
    let attn_ratio = format!("| 0.50 | {:.2} |", median(fwd64) / 0.5);
    assert!(md.contains(&attn_ratio), "{attn_ratio} missing:\n{md}");
}

/// tools/gpu-check.sh, the command prepared for a lent GPU, dry-run on whatever adapter wgpu
/// finds here (lavapipe in CI): it refuses a CPU adapter unless told, and with
/// `--allow-cpu-adapter --tiny` runs every step, compare against the f64 truth and the training
/// step with the first step timed apart, interleaved with a stand-in for PyTorch on CUDA.
// Over 80 lines on purpose: one scenario: the script's dry run, then each file it writes.
#[test]
fn the_gpu_check_runs_end_to_end_on_a_cpu_adapter() {
    if headlab_kernels::wgpu_for_tests().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_headlab-bench"))
        .parent()
        .unwrap();
    // crates/cli's binary: `cargo test --workspace` (the README's command) builds it too.
    assert!(
        bin.join("headlab").is_file(),
        "the GPU check runs headlab beside headlab-bench in {}: run the tests with --workspace",
        bin.display()
    );
    // A stand-in Python whose torch has CUDA: the step task reports a 7 ms step after a
    // 900 ms first one, on whatever device it is given.
    let python = dir.join("python");
    std::fs::write(
        &python,
        r#"#!/bin/sh
[ "$1" = -c ] && exit 0
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; [ "$1" = --device ] && device=$2; shift; done
cat > "$out" <<END
{"environment": {"torch": "stand-in", "device": "stand-in GPU", "threads": 1, "parallel_info": ""},
 "device": "$device",
 "steps": {"eager": {"timing": {"median_ms": 7.0, "min_ms": 7.0, "max_ms": 7.0, "samples": 3}, "first_ms": 900.0},
           "fused": {"timing": {"median_ms": 7.0, "min_ms": 7.0, "max_ms": 7.0, "samples": 3}, "first_ms": 900.0},
           "compile": {"error": "stand-in: no compiler"}}}
END
"#,
    )
    .unwrap();
    std::fs::set_permissions(&python, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = root.join("tools/gpu-check.sh");
    let results = dir.join("results");
    let check = |results: &std::path::Path, extra: &[&str]| {
        let out = Command::new("bash")
            .arg(&script)
            .args(["--tiny", "--bin"])
            .arg(bin)
            .arg("--results")
            .arg(results)
            .arg("--python")
            .arg(&python)
            .args(extra)
            .env("XDG_RUNTIME_DIR", dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stderr)
    };
    // The refusal and the dry run at once, each into its own folder: each waits mostly on its
    // own process's adapter start-up and kernel compiles.
    let refused = dir.join("refused");
    let ((refused_code, refused_stderr), (code, stderr)) = std::thread::scope(|s| {
        let refusal = s.spawn(|| check(&refused, &[]));
        let dry_run = check(&results, &["--allow-cpu-adapter"]);
        (refusal.join().unwrap(), dry_run)
    });
    let physical = refused_stderr.contains("(a card: true)");
    if !physical {
        assert_eq!(refused_code, Some(2), "{refused_stderr}");
        assert!(
            refused_stderr.contains("--allow-cpu-adapter"),
            "{refused_stderr}"
        );
        assert!(!refused.exists(), "a refused check writes nothing");
    }
    assert_eq!(code, Some(0), "{stderr}");
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let find = |suffix: &str| {
        files
            .iter()
            .find(|p| p.to_string_lossy().ends_with(suffix))
            .unwrap_or_else(|| panic!("no *{suffix} in {files:?}"))
            .clone()
    };
    let summary = std::fs::read_to_string(find("-check.md")).unwrap();
    for part in [
        "- compare-default: ran in",
        "- compare-gpt2-small: skipped: --tiny runs one shape",
        "- train-step: ran in",
        "## compare-default",
        "wgpu",
    ] {
        assert!(summary.contains(part), "{part:?} missing:\n{summary}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(find(".json")).unwrap()).unwrap();
    let step = &json["train_step"];
    assert_eq!(step["torch_device"], "cuda", "{step}");
    let rows = step["rows"].as_array().unwrap();
    let wgpu: Vec<&serde_json::Value> = rows.iter().filter(|r| r["column"] == "wgpu").collect();
    assert_eq!(wgpu.len(), 1, "one round of the tiny shape: {step}");
    for r in &wgpu {
        assert_eq!(r["shape"], "tiny");
        let (first, median) = (
            r["first_ms"].as_f64().unwrap(),
            r["timing"]["median_ms"].as_f64().unwrap(),
        );
        assert!(first > 0.0 && median > 0.0, "{r}");
    }
    assert!(rows.iter().any(|r| r["column"] == "torch eager"), "{step}");
    let md = std::fs::read_to_string(find(".json").with_extension("md")).unwrap();
    assert!(md.contains("First step of each round"), "{md}");
    assert!(md.contains("### tiny"), "{md}");
}

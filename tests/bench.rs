//! `headlab-bench --quick`: the harness behind `cargo xtask bench` runs end to end and writes
//! every section. Speeds are not checked (tests never time anything).

use std::process::Command;

#[test]
fn quick_bench_writes_every_section_and_ratios_against_a_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A stand-in for bench/reference/bench.py's output: the ratios must use its medians.
    let torch = serde_json::json!({
        "torch": "stand-in", "threads": 1, "quick": true,
        "matmul": [{"n": 256, "timing": {"median_ms": 1.0, "min_ms": 1.0, "max_ms": 1.0}, "gflops": 33.5}],
        "attention": [{"pass": "forward", "b": 4, "h": 4, "d_k": 32, "t": 64,
                        "timing": {"median_ms": 0.5, "min_ms": 0.5, "max_ms": 0.5}}],
        "train_step": [{"timing": {"median_ms": 2.0, "min_ms": 2.0, "max_ms": 2.0},
                         "tokens_per_s": 384000.0, "achieved_gflops": 1.0, "mfu": 0.03}],
    });
    std::fs::write(dir.join("torch.json"), torch.to_string()).unwrap();
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
    for section in ["matmul", "attention", "heads", "train_step", "generation"] {
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
    let step = &report["train_step"][0];
    // nanoGPT's estimate for the recipe model, by hand: N = 4 layers x 12 d^2 + the 65 x 128
    // token table + LayerNorm gains (4 x 2 x 128 + 128), without the position table;
    // FLOPs/token = 6 N + 12 L d T.
    let n = 4 * 12 * 128 * 128 + 65 * 128 + 4 * 2 * 128 + 128;
    let flops = 6 * n + 12 * 4 * 128 * 64;
    assert_eq!(step["flops_per_token"].as_f64().unwrap(), flops as f64);
    // Both matmuls are measured on flex; MFU is taken against the faster one.
    let matmuls = report["matmul"].as_array().unwrap();
    for kernel in ["burn", "headlab"] {
        assert!(matmuls.iter().any(|r| r["kernel"] == kernel), "{kernel}");
    }
    // MFU from first principles: the training step's matmul FLOPs, counted layer by layer
    // from the recipe's shapes, over the reported step time, against the faster square matmul
    // (2 n^3 FLOPs over its reported time). Not nanoGPT's 6 N + 12 L d T: that counts the
    // LayerNorm gains as matmul weights, 0.13% more FLOPs than the matmuls here.
    assert!(
        step["config"]
            .as_str()
            .unwrap()
            .contains("4 layers, 4 heads, d_model 128, T 64, B 12, vocab 65"),
        "{step}"
    );
    let (layers, d, t, b, vocab) = (4.0, 128.0, 64.0, 12.0, 65.0);
    // A multiply-add is 2 FLOPs. Per token and layer: the q, k, v and output projections
    // (4 of d x d), the MLP (d x 4d and 4d x d), scores q.k over t keys and the weighted sum
    // of t values (d wide over all heads, every key counted as nanoGPT does); then the tied
    // LM head (d x vocab). Backward costs twice the forward.
    let per_layer = 2.0 * (4.0 * d * d + 2.0 * d * 4.0 * d) + 2.0 * (t * d + t * d);
    let forward_per_token = layers * per_layer + 2.0 * d * vocab;
    let flops_per_step = 3.0 * forward_per_token * b * t;
    let step_s = median(step) * 1e-3;
    let achieved = flops_per_step / step_s;
    let peak = matmuls
        .iter()
        .map(|r| {
            let n = r["n"].as_f64().unwrap();
            2.0 * n * n * n / (median(r) * 1e-3)
        })
        .fold(0.0, f64::max);
    let expected = achieved / peak;
    let mfu = step["mfu"].as_f64().unwrap();
    // Measured: mfu / expected = 1.0013, the LayerNorm gains. Both sides divide the same
    // reported times, so the ratio does not depend on the machine's speed; 1% is 7 times the
    // gap, and a FLOP count off by a factor is far outside it.
    assert!(
        (mfu / expected - 1.0).abs() < 0.01,
        "MFU {mfu} reported, {expected} from the shapes and reported times: {step}"
    );
    let gflops = step["achieved_gflops"].as_f64().unwrap();
    assert!(
        (gflops / (achieved / 1e9) - 1.0).abs() < 0.01,
        "{gflops} GFLOP/s reported, {} from the shapes: {step}",
        achieved / 1e9
    );
    assert!(
        report["recipe"]["skipped"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/input.txt")
    );
    assert_eq!(report["torch"], torch);

    // The CPU is named in both files, as /proc/cpuinfo's first "model name" line has it.
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
        let model = info
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim());
        if let Some(model) = model {
            assert_eq!(report["cpu"]["model"], model);
            assert!(md.contains(&format!("cores of {model} (")), "{md}");
        }
    }

    for heading in [
        "## Matmul peak",
        "## Attention op",
        "## All heads in one batched matmul",
        "## Training step",
        "## Generation",
        "## nanoGPT CPU recipe end to end",
    ] {
        assert!(md.contains(heading), "{heading} missing:\n{md}");
    }
    // headlab / PyTorch uses the reference's medians.
    let step_ratio = format!("| 2.00 | {:.2} |", median(step) / 2.0);
    assert!(md.contains(&step_ratio), "{step_ratio} missing:\n{md}");
    let fwd64 = attention
        .iter()
        .find(|r| r["pass"] == "forward" && r["t"] == 64)
        .unwrap();
    let attn_ratio = format!("| 0.50 | {:.2} |", median(fwd64) / 0.5);
    assert!(md.contains(&attn_ratio), "{attn_ratio} missing:\n{md}");
}

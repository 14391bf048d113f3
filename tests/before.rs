//! Every shipped config trains exactly as it did before the speedrun's switches: each new
//! switch defaults to the old behaviour, so a short run of each config must reproduce the
//! losses, rates and bits per character an older build wrote (tests/fixtures/before, made by
//! tools/before-fixtures.sh with commit 7092141's binary), to every printed digit. One
//! exception: lab-symmetry.csv was made again (commit 9352076's binary, the same command) when
//! issue #41 moved that lab to the grammar corpus, where its models learn. The speedrun's
//! config, made of the new switches, has no before: shakespeare-char-speedrun.csv holds it to
//! the commit that gave Newton-Schulz its Gram form (`git log` of that file; before it, commit
//! f4f5286, Newton-Schulz on headlab's gemm), whose losses differ from the ones before it in
//! the seventh digit, so a change to its numerics is seen here. The long track's config
//! (shakespeare-char-long) is those switches at another shape and has no fixture. The default
//! config moved to word tokens (issue #66): its old run is configs/grammar-char.toml, held to
//! the old default.csv (copied as grammar-char.csv), and default.csv was made again from the
//! word config (commit after 66b0f36, the same command with the config's name). lab
//! syntax's config (issue #66) came after all of these; lab-syntax.csv holds it to the
//! losses of the commit that added this sentence, made the same way. All of these are
//! AVX-512 CPUs' digits; on a CPU without AVX-512, gemm's AVX2 kernels give others, held to
//! tests/fixtures/before-avx2 (made on a Zen 3 on 2026-12-07, tools/before-fixtures.sh).

use std::path::{Path, PathBuf};

use crate::common::{headlab, ok};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// metrics.csv's step, split, loss, lr and bpc columns: what tools/before-fixtures.sh keeps.
fn kept_columns(metrics: &str) -> String {
    metrics
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            format!("{},{},{},{},{}\n", f[0], f[1], f[2], f[3], f[6])
        })
        .collect()
}

#[test]
fn shipped_configs_train_digit_for_digit_as_before_the_speedrun_switches() {
    let tmp = tempfile::tempdir().unwrap();
    // gemm picks AVX-512 kernels where the CPU has them, which block the products otherwise
    // than its AVX2 ones: each kind of CPU has its digits (tools/before-fixtures.sh).
    let avx512 = {
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx512f")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    };
    let fixtures = repo().join(if avx512 {
        "tests/fixtures/before"
    } else {
        "tests/fixtures/before-avx2"
    });
    let mut names: Vec<String> = std::fs::read_dir(&fixtures)
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    assert_eq!(names.len(), 10, "{names:?}");
    for name in names {
        let config = repo().join("configs").join(format!("{name}.toml"));
        let out_dir = tmp.path().join(&name);
        let args = [
            "train",
            "--config",
            config.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
            // As tools/before-fixtures.sh sets them.
            "--set",
            "train.max_iters=30",
            "--set",
            "train.eval_interval=10",
            "--set",
            "train.eval_iters=2",
            "--set",
            "train.log_interval=5",
            "--set",
            "train.sample_tokens=0",
            "--set",
            "train.track_heads_every=0",
            "--set",
            "train.grammar_sentences=0",
            // Not in the script: the whole-split loss after training goes to result.json, not
            // metrics.csv, and the older binaries the fixtures come from lack the key.
            "--set",
            "train.final_eval_tokens=0",
        ];
        ok(&headlab(&args, &repo()));
        let metrics = std::fs::read_to_string(out_dir.join("metrics.csv")).unwrap();
        let expected = std::fs::read_to_string(fixtures.join(format!("{name}.csv"))).unwrap();
        assert_eq!(kept_columns(&metrics), expected, "{name}");
    }
}

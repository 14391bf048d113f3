//! What a new user tried after the README (issue 36): stopped and imported runs, what resume
//! accepts, and options that do nothing. Each test failed on the binary before its fix.

use std::path::{Path, PathBuf};

use crate::common::{TINY, headlab, ok};

fn train(dir: &Path, name: &str, extra: &[&str]) -> (PathBuf, String) {
    let mut args = vec!["train", "--out", name];
    args.extend_from_slice(&TINY);
    args.extend_from_slice(extra);
    let out = headlab(&args, dir);
    ok(&out);
    (
        dir.join(name),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Exit code 2 with every part in stderr; returns stderr.
fn refused(dir: &Path, args: &[&str], parts: &[&str]) -> String {
    let out = headlab(args, dir);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "headlab {args:?}:\n{stderr}");
    for part in parts {
        assert!(
            stderr.contains(part),
            "headlab {args:?}: {part:?} missing:\n{stderr}"
        );
    }
    stderr
}

/// `headlab report RUN`'s notes (stderr).
fn report_notes(dir: &Path, run: &str) -> String {
    let out = headlab(&["report", run], dir);
    ok(&out);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn report_takes_the_step_from_the_last_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (run, _) = train(dir, "g", &[]);
    // Finished at 4 of 4, with its evaluations gone: not "stopped at step 0".
    std::fs::remove_file(run.join("metrics.csv")).unwrap();
    let notes = report_notes(dir, "g");
    assert!(!notes.contains("stopped at step"), "{notes}");
    // The same checkpoint under a larger max_iters is a run stopped at 4.
    let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
    let longer = config.replace("max_iters = 4\n", "max_iters = 10\n");
    assert_ne!(config, longer, "config.toml spells max_iters = 4");
    std::fs::write(run.join("config.toml"), longer).unwrap();
    let notes = report_notes(dir, "g");
    assert!(notes.contains("stopped at step 4 of 10"), "{notes}");
    // A finished run whose sample was deleted has not "not finished".
    std::fs::remove_file(run.join("sample.txt")).unwrap();
    let notes = report_notes(dir, "g");
    assert!(
        notes.contains("no sample (the run has not finished)"),
        "{notes}"
    );
    std::fs::write(run.join("config.toml"), config).unwrap();
    let notes = report_notes(dir, "g");
    assert!(
        notes.contains("no sample (sample.txt is missing)"),
        "{notes}"
    );
}

#[test]
fn resume_refuses_a_new_tokenizer_and_names_a_new_text() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    train(dir, "g", &[]);
    let tokenizer = std::fs::read(dir.join("g/tokenizer.json")).unwrap();
    for (set, parts) in [
        (
            "data.tokenizer=byte",
            [
                "--resume cannot change data.tokenizer",
                "data.tokenizer = char",
            ],
        ),
        (
            "data.tokenizer=bpe",
            ["--resume cannot change data.tokenizer", "tokenizer.json"],
        ),
    ] {
        refused(
            dir,
            &[
                "train",
                "--resume",
                "g",
                "--set",
                set,
                "--set",
                "train.max_iters=6",
            ],
            &parts,
        );
    }
    assert_eq!(
        std::fs::read(dir.join("g/tokenizer.json")).unwrap(),
        tokenizer
    );
    assert!(
        std::fs::read_to_string(dir.join("g/config.toml"))
            .unwrap()
            .contains("tokenizer = \"char\""),
        "config.toml kept"
    );
    // The user's own --set of the text is named as such, not as a file edited on disk.
    let out = headlab(
        &[
            "train",
            "--resume",
            "g",
            "--set",
            "data.builtin_chars=5000",
            "--set",
            "train.max_iters=6",
        ],
        dir,
    );
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("your --set changes the run's text (data.builtin_chars: 4000 -> 5000)"),
        "{stderr}"
    );
    assert!(!stderr.contains("restore the original file"), "{stderr}");
}

#[test]
fn resume_of_a_bpe_run_refuses_another_vocabulary_size() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bpe = [
        "--set",
        "data.tokenizer=bpe",
        "--set",
        "data.vocab_size=300",
    ];
    train(dir, "b", &bpe);
    refused(
        dir,
        &["train", "--resume", "b", "--set", "data.vocab_size=400"],
        &[
            "--resume cannot change data.vocab_size",
            "data.vocab_size = 300",
        ],
    );
}

#[test]
fn a_bpe_vocabulary_smaller_than_asked_is_noted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // 4000 characters of the grammar corpus have far fewer than 4000 pairs to merge.
    let (run, stderr) = train(
        dir,
        "b",
        &[
            "--set",
            "data.tokenizer=bpe",
            "--set",
            "data.vocab_size=4000",
        ],
    );
    let line = stderr
        .lines()
        .find(|l| l.starts_with("note: BPE stopped at"))
        .unwrap_or_else(|| panic!("no note:\n{stderr}"));
    let tokenizer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("tokenizer.json")).unwrap())
            .unwrap();
    let n = tokenizer["huggingface"]["model"]["vocab"]
        .as_object()
        .unwrap()
        .len();
    assert!(n < 4000, "{n}");
    assert!(
        line.contains(&format!("at {n} tokens of the 4000 asked")),
        "{line}"
    );
}

#[test]
fn an_imported_run_gets_hints_that_work() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf-gpt2-tiny");
    ok(&headlab(
        &["import", "hf", hf.to_str().unwrap(), "--out", "imp"],
        dir,
    ));
    let notes = report_notes(dir, "imp");
    assert!(notes.contains("--set data.path=FILE"), "{notes}");
    assert!(!notes.contains("continues it"), "{notes}");
    refused(
        dir,
        &["train", "--resume", "imp"],
        &[
            "was imported and has no training text",
            "--set data.path=FILE",
        ],
    );
    let stderr = refused(dir, &["eval", "imp"], &["was imported", "--file FILE"]);
    assert!(!stderr.contains("restore it"), "{stderr}");
    // The hint works: fine-tuning on a text of the fixture's vocabulary, named relative to
    // the folder headlab runs in.
    let text = dir.join("text.txt");
    std::fs::write(&text, "The keeper climbed the stairs at dusk. ".repeat(40)).unwrap();
    let out = headlab(
        &[
            "train",
            "--resume",
            "imp",
            "--set",
            "data.path=text.txt",
            "--set",
            "train.max_iters=2",
            "--set",
            "train.eval_interval=1",
            "--set",
            "train.eval_iters=1",
            "--set",
            "train.batch_size=2",
            "--set",
            "train.track_heads_every=0",
        ],
        dir,
    );
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("your --set changes"),
        "an import had no text: {stderr}"
    );
    // The run now has a text of its own, recorded absolutely and in data.json: from another
    // folder, eval reads it without a warning and report treats it as a run like any other.
    let config = std::fs::read_to_string(dir.join("imp/config.toml")).unwrap();
    let canonical = std::fs::canonicalize(&text).unwrap();
    assert!(
        config.contains(&format!("path = \"{}\"", canonical.display())),
        "{config}"
    );
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let run = dir.join("imp");
    let out = headlab(&["eval", run.to_str().unwrap()], &elsewhere);
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    let notes = report_notes(&elsewhere, run.to_str().unwrap());
    assert!(!notes.contains("imported weights"), "{notes}");
}

#[test]
fn options_that_would_do_nothing_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    train(dir, "g", &[]);
    refused(
        dir,
        &["sample", "g", "--num-samples", "0"],
        &["--num-samples is 0"],
    );
    let stderr = refused(
        dir,
        &["heads", "g", "--file", "missing.txt"],
        &["--file", "cannot read the text file missing.txt"],
    );
    assert!(!stderr.contains("dataset"), "{stderr}");
}

#[test]
fn each_lab_says_what_it_trains_and_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (lab, parts) in [
        ("induction", ["attention only", "summary.md", "report.html"]),
        ("heads", ["d_k = 64/h", "val_loss.csv", "--seeds"]),
        ("ambiguity", ["attach corpus", "summary.md", "report.html"]),
        (
            "relations",
            ["relations corpus", "relations.csv", "--relations"],
        ),
    ] {
        let help = ok(&headlab(&["lab", lab, "--help"], tmp.path()));
        for part in parts {
            assert!(
                help.contains(part),
                "lab {lab}: {part:?} missing from:\n{help}"
            );
        }
        // The steps it names are the shipped config's.
        let config = std::fs::read_to_string(root.join(format!("configs/lab-{lab}.toml"))).unwrap();
        let steps = config
            .lines()
            .find_map(|l| l.strip_prefix("max_iters = "))
            .unwrap();
        assert!(
            help.contains(&format!("{steps} steps")),
            "lab {lab}: {steps} steps:\n{help}"
        );
        assert_eq!(
            help.contains("--seeds"),
            matches!(lab, "heads" | "relations"),
            "{help}"
        );
    }
}

//! Byte-level BPE (`data.tokenizer = "bpe"`): lossless on any UTF-8, deterministic, saved
//! with the run and reloaded by every command, and bits per character that compare across
//! tokenizers.

use headlab_kernels::to_host;
use std::process::Output;
use std::sync::LazyLock;

use headlab_data::batch_tensors;
use headlab_data::bits_per_char;
use headlab_data::corpus::grammar;
use headlab_data::{Tokenizer, TokenizerKind};
use headlab_kernels::BackendKind;
use headlab_train::run::RunDir;

use crate::common::{TINY_MODEL, headlab, ok};

/// The grammar text every run here trains on.
static CORPUS: LazyLock<String> = LazyLock::new(|| grammar(3, 20_000));

/// Fails with a message (exit code 2) that contains every one of `parts`, and no panic.
fn fails_with(out: &Output, parts: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for part in parts {
        assert!(stderr.contains(part), "{part:?} missing from {stderr}");
    }
}

/// A 2-layer BPE model on `text.txt`, small enough to train in seconds.
fn train_args<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["train", "--out", out];
    // First: its data.tokenizer gives way to this file's.
    args.extend_from_slice(TINY_MODEL);
    args.extend_from_slice(&[
        "--set",
        "data.path=text.txt",
        "--set",
        "data.tokenizer=bpe",
        "--set",
        "data.vocab_size=320",
        "--set",
        "train.eval_iters=4",
        "--set",
        "train.warmup_iters=5",
        "--set",
        "train.sample_tokens=20",
        "--set",
        "train.max_iters=20",
        "--set",
        "train.eval_interval=10",
    ]);
    args.extend_from_slice(extra);
    args
}

/// Total next-token loss in nats over `tokens`, by hand: a log-softmax in f64 of the logits
/// of each window of at most `t` tokens (the windows `headlab eval` uses).
fn nats_by_hand(model: &headlab_model::Gpt, tokens: &[u32], t: usize) -> f64 {
    let device = BackendKind::Flex.device().unwrap();
    let mut nats = 0.0;
    let mut start = 0;
    while start + 1 < tokens.len() {
        let len = t.min(tokens.len() - 1 - start);
        let x = &tokens[start..start + len];
        let y = &tokens[start + 1..start + 1 + len];
        let (x, _) = batch_tensors(x, y, 1, len, &device);
        let logits: Vec<f32> = to_host::<f32, _>(model.forward(x));
        let v = logits.len() / len;
        for (row, &target) in logits.chunks(v).zip(y) {
            let max = row.iter().fold(f64::NEG_INFINITY, |m, &l| m.max(l as f64));
            let sum: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum();
            nats += max + sum.ln() - row[target as usize] as f64;
        }
        start += len;
    }
    nats
}

/// The number after `key` in `text`.
fn number_before(text: &str, key: &str) -> f64 {
    let before = text.split(key).next().unwrap().trim_end();
    before
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("no number before {key:?} in {text:?}: {e}"))
}

#[test]
fn a_bpe_run_trains_resumes_samples_and_reports_bits_per_char() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("text.txt"), CORPUS.as_str()).unwrap();
    let stdout = ok(&headlab(&train_args("run", &[]), dir.path()));
    assert!(stdout.contains("--- sample ---"), "{stdout}");
    let run = dir.path().join("run");

    // The tokenizer is saved, and trained on the training split: the same as training
    // one by hand on the first 90% of the characters.
    let saved = std::fs::read_to_string(run.join("tokenizer.json")).unwrap();
    let tokenizer = Tokenizer::load(run.join("tokenizer.json")).unwrap();
    assert_eq!(tokenizer.kind(), TokenizerKind::Bpe);
    let (train_text, _) = headlab_data::dataset::split_text(&CORPUS, 0.1);
    assert_eq!(tokenizer, Tokenizer::train_bpe(train_text, 320).unwrap());
    assert_eq!(tokenizer.vocab_size(), 320);

    // Another process trains the identical tokenizer.
    ok(&headlab(
        &train_args("again", &["--set", "train.max_iters=1"]),
        dir.path(),
    ));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("again/tokenizer.json")).unwrap(),
        saved
    );

    // metrics.csv: bits per character = loss * tokens / chars / ln 2, the same factor
    // for every row of a split.
    let metrics = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    let mut lines = metrics.lines();
    assert_eq!(
        lines.next(),
        Some("step,split,loss,lr,tokens_per_s,elapsed_s,bpc,well_formed,agreeing,train_s")
    );
    let mut factors = std::collections::HashMap::<String, Vec<f64>>::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        let (loss, bpc): (f64, f64) = (f[2].parse().unwrap(), f[6].parse().unwrap());
        assert!(bpc.is_finite() && bpc > 0.0, "{line}");
        factors
            .entry(f[1].to_string())
            .or_default()
            .push(bpc / loss);
    }
    for split in ["train", "val", "iter"] {
        let f = &factors[split];
        // A BPE token holds several characters: fewer bits per char than nats per token.
        assert!(f[0] < 1.0 / std::f64::consts::LN_2 / 2.0, "{split}: {f:?}");
        assert!(
            f.iter().all(|x| (x - f[0]).abs() < 1e-4 * f[0]),
            "{split}: {f:?}"
        );
    }

    // Resume reads the saved tokenizer and never retrains it, even when the text changed.
    let changed = CORPUS.replace("the", "zyx");
    std::fs::write(dir.path().join("text.txt"), &changed).unwrap();
    ok(&headlab(
        &["train", "--resume", "run", "--set", "train.max_iters=30"],
        dir.path(),
    ));
    assert_eq!(
        std::fs::read_to_string(run.join("tokenizer.json")).unwrap(),
        saved
    );
    assert!(
        metrics.len()
            < std::fs::read_to_string(run.join("metrics.csv"))
                .unwrap()
                .len()
    );

    // Sample with a prompt no training text has.
    let prompt = "Zoë 🙂 ";
    let text = ok(&headlab(
        &[
            "sample",
            "run",
            "--prompt",
            prompt,
            "--max-new-tokens",
            "12",
        ],
        dir.path(),
    ));
    assert!(text.starts_with(prompt), "{text:?}");

    // eval on unseen text: bits per character as computed by hand.
    let unseen = "Zoë's naïve café sells crème brûlée ☕ to the cat.\nthe dog 🙂 barks.\n";
    std::fs::write(dir.path().join("unseen.txt"), unseen).unwrap();
    let eval = ok(&headlab(
        &[
            "eval",
            "run",
            "--file",
            "unseen.txt",
            "--checkpoint",
            "last",
        ],
        dir.path(),
    ));
    let bpc_printed = number_before(&eval, " bits/char");
    let chars_printed = number_before(&eval, " chars,");

    let rd = RunDir::open(&run).unwrap();
    let config = rd.config().unwrap();
    let gpt = config.model.clone().with_vocab_size(tokenizer.vocab_size());
    let (model, _) = rd
        .load_model("last", &gpt, &BackendKind::Flex.device().unwrap())
        .unwrap();
    let tokens = tokenizer.encode(unseen).unwrap();
    assert!(tokens.len() > config.model.block_size, "several windows");
    let nats = nats_by_hand(&model, &tokens, config.model.block_size);
    // The first token is never predicted: count the characters after its bytes.
    let first = tokenizer.decode_token_bytes(&tokens[..1]).len();
    let chars = unseen.char_indices().filter(|&(i, _)| i >= first).count();
    assert_eq!(chars_printed as usize, chars, "{eval}");
    let bpc = nats / chars as f64 / std::f64::consts::LN_2;
    assert!((bits_per_char(nats, chars) - bpc).abs() < 1e-12);
    assert!(
        (bpc - bpc_printed).abs() < 2e-4,
        "by hand {bpc:.6}, eval says {bpc_printed}: {eval}"
    );
    let loss = number_before(&eval, " nats/token");
    assert!(
        (loss - nats / (tokens.len() - 1) as f64).abs() < 2e-4,
        "{eval}"
    );

    // The val split too: its characters are the text after the 90% cut.
    let eval = ok(&headlab(&["eval", "run", "--split", "val"], dir.path()));
    let (_, val_text) = headlab_data::dataset::split_text(&changed, 0.1);
    let val_tokens = tokenizer.encode(val_text).unwrap();
    let first = tokenizer.decode_token_bytes(&val_tokens[..1]).len();
    let val_chars = val_text.char_indices().filter(|&(i, _)| i >= first).count();
    assert_eq!(
        number_before(&eval, " chars,") as usize,
        val_chars,
        "{eval}"
    );
}

#[test]
fn a_corrupt_or_missing_tokenizer_json_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("text.txt"), CORPUS.as_str()).unwrap();
    ok(&headlab(
        &train_args(
            "run",
            &[
                "--set",
                "train.max_iters=2",
                "--set",
                "train.sample_tokens=0",
            ],
        ),
        dir.path(),
    ));
    let path = dir.path().join("run/tokenizer.json");
    let good = std::fs::read_to_string(&path).unwrap();

    let sample = ["sample", "run", "--max-new-tokens", "5"];
    let eval = ["eval", "run"];
    let resume = ["train", "--resume", "run", "--set", "train.max_iters=4"];

    // Cut short, not JSON, or a BPE that lost a byte token.
    let mut no_newline: serde_json::Value = serde_json::from_str(&good).unwrap();
    let vocab = no_newline["huggingface"]["model"]["vocab"]
        .as_object_mut()
        .unwrap();
    let id = vocab.remove("Ċ").expect("the newline byte has a token");
    // Keep ids contiguous by moving the last token into the gap, and drop the merges that
    // spell the newline.
    let last = vocab
        .iter()
        .max_by_key(|(_, v)| v.as_u64().unwrap())
        .map(|(k, _)| k.clone())
        .unwrap();
    vocab[&last] = id;
    no_newline["huggingface"]["model"]["merges"]
        .as_array_mut()
        .unwrap()
        .retain(|m| !m.to_string().contains('Ċ'));
    let mut no_pre_tokenizer: serde_json::Value = serde_json::from_str(&good).unwrap();
    no_pre_tokenizer["huggingface"]["pre_tokenizer"] = serde_json::Value::Null;
    for (body, why) in [
        (good[..good.len() / 3].to_string(), "EOF"),
        ("tokenizer".to_string(), "expected"),
        (
            r#"{"kind":"bpe","huggingface":{"model":{"type":"BPE"}}}"#.to_string(),
            "vocab",
        ),
        (no_pre_tokenizer.to_string(), "pre-tokenizer"),
        (no_newline.to_string(), "0x0A"),
    ] {
        std::fs::write(&path, &body).unwrap();
        for args in [&sample[..], &eval[..], &resume[..]] {
            let out = headlab(args, dir.path());
            fails_with(&out, &["run/tokenizer.json", "corrupt", why]);
        }
    }

    std::fs::remove_file(&path).unwrap();
    for args in [&sample[..], &eval[..], &resume[..]] {
        fails_with(&headlab(args, dir.path()), &["tokenizer.json", "missing"]);
    }
    std::fs::write(&path, &good).unwrap();
    ok(&headlab(&sample, dir.path()));
}

//! Bad input never crashes `headlab` and never changes a file: every case below runs the
//! binary, expects exit code 2 and a message that names the field, file or value (and says
//! what to do), checks that no panic or backtrace reaches the user, and compares the whole
//! working directory (paths and contents) before and after.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::common::{TINY, headlab_within};

/// `headlab` with `env`, and a backtrace on that would show if anything panicked. Every
/// case here fails fast: one still running after five minutes has hung.
fn headlab_env(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Output {
    let mut with = vec![("RUST_BACKTRACE", "1")];
    with.extend_from_slice(env);
    headlab_within(args, cwd, &with, Duration::from_secs(300))
}

fn headlab(args: &[&str], cwd: &Path) -> Output {
    headlab_env(args, cwd, &[])
}

/// Every file and folder under `dir`, with file contents.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(dir).unwrap().to_path_buf();
            if path.is_dir() {
                out.insert(rel, None);
                stack.push(path);
            } else {
                out.insert(rel, Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// Runs `headlab args` in `dir` and checks: exit code 2, every part in the message, no
/// panic or backtrace, and no file or folder created, changed or removed. Returns stderr.
fn fails_env(dir: &Path, args: &[&str], env: &[(&str, &str)], parts: &[&str]) -> String {
    let before = snapshot(dir);
    let out = headlab_env(args, dir, env);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(2),
        "headlab {args:?}: expected exit code 2, got {}:\n{stderr}",
        out.status
    );
    for part in parts {
        assert!(
            stderr.contains(part),
            "headlab {args:?}: {part:?} missing from:\n{stderr}"
        );
    }
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE"] {
        assert!(!stderr.contains(bad), "headlab {args:?}: {bad}:\n{stderr}");
    }
    assert!(
        stderr.trim_start().starts_with("error: "),
        "headlab {args:?}: {stderr}"
    );
    let after = snapshot(dir);
    if before != after {
        let changed: Vec<_> = before
            .keys()
            .chain(after.keys())
            .filter(|k| before.get(*k) != after.get(*k))
            .collect();
        panic!("headlab {args:?} changed {changed:?}:\n{stderr}");
    }
    stderr
}

fn fails(dir: &Path, args: &[&str], parts: &[&str]) -> String {
    fails_env(dir, args, &[], parts)
}

/// `train --out run` with TINY and `extra`.
fn train_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["train", "--out", "run"];
    args.extend_from_slice(&TINY);
    args.extend_from_slice(extra);
    args
}

/// A finished tiny run in `dir/name`.
fn trained(dir: &Path, name: &str) -> PathBuf {
    let mut args = vec!["train", "--out", name];
    args.extend_from_slice(&TINY);
    let out = headlab(&args, dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join(name)
}

#[test]
fn config_errors_name_the_key_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();

    fails(
        dir,
        &["train", "--config", "missing.toml"],
        &["missing.toml", "--config"],
    );
    write("syntax.toml", "[model]\nd_model = 32\n[train\n");
    fails(
        dir,
        &["train", "--config", "syntax.toml"],
        &["syntax.toml", "line 3", "column"],
    );
    write("unknown.toml", "[train]\nlr = 1e-3\nlrr = 2\n");
    fails(
        dir,
        &["train", "--config", "unknown.toml"],
        &[
            "unknown.toml",
            "line 3",
            "lrr",
            "batch_size",
            "min_lr",
            "did you mean `lr`?",
        ],
    );
    write("type.toml", "[model]\nd_model = \"big\"\n");
    fails(
        dir,
        &["train", "--config", "type.toml"],
        &["type.toml", "line 2", "d_model", "usize"],
    );
    write("negative.toml", "[model]\nn_layers = -2\n");
    fails(
        dir,
        &["train", "--config", "negative.toml"],
        &["negative.toml", "line 2", "n_layers", "-2"],
    );

    let cases: &[(&[&str], &[&str])] = &[
        (
            &["model.d_model=33"],
            &[
                "model.d_model = 33",
                "not divisible by model.n_heads = 2",
                "use model.n_heads = 1 or 3",
            ],
        ),
        (
            &["model.n_kv_heads=3"],
            &[
                "model.n_kv_heads = 3",
                "model.n_heads = 2",
                "model.n_kv_heads = 1 or 2",
            ],
        ),
        (
            &["model.n_layers=0"],
            &["model.n_layers is 0", "at least 1"],
        ),
        (
            &["model.block_size=0"],
            &["model.block_size is 0", "at least 1"],
        ),
        (&["train.batch_size=0"], &["train.batch_size is 0"]),
        (
            &["train.max_iters=0"],
            &["train.max_iters is 0", "at least 1"],
        ),
        (&["train.max_iters=-5"], &["train.max_iters", "-5", "usize"]),
        (&["model.d_model=-32"], &["model.d_model", "-32", "usize"]),
        (&["train.lr=0"], &["train.lr = 0", "greater than 0"]),
        (
            &["train.lr=-0.001"],
            &["train.lr = -0.001", "greater than 0"],
        ),
        (&["train.lr=nan"], &["train.lr = NaN"]),
        (
            &["model.block_size=5000"],
            &["model.block_size = 5000", "at most", "data.builtin_chars"],
        ),
        (
            &["model.positional=rope", "model.d_model=34"],
            &["rope", "34 / 2 = 17", "model.n_heads"],
        ),
        (
            &["train.lr"],
            &["\"train.lr\"", "expected key=value", "train.lr=3e-4"],
        ),
        (&["=3"], &["expected key=value"]),
        (
            &["train.lrr=1"],
            &[
                "\"lrr\"",
                "[train]",
                "valid keys",
                "batch_size",
                "did you mean train.lr?",
            ],
        ),
        (&["optim.lr=1"], &["\"optim\"", "model, train, data"]),
        (&["lr=1"], &["did you mean train.lr?"]),
        (
            &["model.positional=alibi"],
            &["model.positional", "alibi", "rope"],
        ),
    ];
    for (sets, parts) in cases {
        let mut extra = Vec::new();
        for kv in *sets {
            extra.extend(["--set", *kv]);
        }
        fails(dir, &train_args(&extra), parts);
    }
}

/// A size set to 0 quotes the default run's value, read here from configs/default.toml (the
/// file that spells the defaults out), not from the code that prints it: `model.n_layers=0`
/// used to say "(default 4)" where the default is 2.
#[test]
fn a_zero_size_quotes_the_default_runs_value() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let defaults = std::fs::read_to_string(root.join("configs/default.toml")).unwrap();
    // `key = value` in `[section]` of the file.
    let value = |section: &str, key: &str| -> String {
        let body = defaults
            .split(&format!("[{section}]\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no [{section}]"));
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {section}.{key}"))
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    for (section, key) in [
        ("model", "n_layers"),
        ("model", "n_heads"),
        ("model", "d_model"),
        ("model", "block_size"),
        ("train", "batch_size"),
        ("train", "max_iters"),
        ("data", "builtin_chars"),
    ] {
        let set = format!("{section}.{key}=0");
        let expected = format!(
            "{section}.{key} is 0 but must be at least 1 (default {})",
            value(section, key)
        );
        let stderr = fails(dir, &train_args(&["--set", &set]), &[&expected]);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}

#[test]
fn data_errors_name_the_file_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("empty.txt"), "").unwrap();
    std::fs::write(dir.join("latin1.txt"), b"ab\ncaf\xe9 au lait\n").unwrap();
    std::fs::write(dir.join("short.txt"), "abcdefghij").unwrap();

    fails(
        dir,
        &train_args(&["--set", "data.path=nope.txt"]),
        &["nope.txt", "current directory"],
    );
    fails(
        dir,
        &train_args(&["--set", "data.path=empty.txt"]),
        &["empty.txt", "empty"],
    );
    fails(
        dir,
        &train_args(&["--set", "data.path=latin1.txt"]),
        &["latin1.txt", "UTF-8", "byte offset 6", "line 2", "iconv"],
    );
    fails(
        dir,
        &train_args(&["--set", "data.path=short.txt"]),
        &[
            "split has",
            "model.block_size = 16",
            "at least 17",
            "more data",
        ],
    );

    // A prompt with characters the char vocabulary lacks.
    trained(dir, "g");
    fails(
        dir,
        &["sample", "g", "--prompt", "Z€"],
        &["--prompt", "'Z'", "vocabulary"],
    );
}

/// The word tokenizer refuses a text of more distinct words than its bound, and a prompt
/// word its vocabulary lacks, naming it and what to do instead.
#[test]
fn word_tokenizer_errors_name_the_word_or_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let many: String = (0..5000).map(|i| format!("w{i} x{} y.\n", i % 7)).collect();
    std::fs::write(dir.join("many.txt"), many).unwrap();
    fails(
        dir,
        &train_args(&[
            "--set",
            "data.path=many.txt",
            "--set",
            "data.tokenizer=word",
        ]),
        &["distinct words", "4096", "data.tokenizer = \"bpe\""],
    );
    let mut args = vec!["train", "--out", "w"];
    args.extend_from_slice(&TINY);
    args.extend_from_slice(&["--set", "data.tokenizer=word"]);
    let out = headlab(&args, dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fails(
        dir,
        &["sample", "w", "--prompt", "the zebra"],
        &[
            "--prompt",
            "word \" zebra\"",
            "column 4",
            "data.tokenizer = \"bpe\"",
        ],
    );
    fails(
        dir,
        &["sample", "w", "--prompt", "the spy "],
        &["whitespace \" \"", "end the text with a word"],
    );
}

#[test]
fn run_and_checkpoint_errors_name_the_file_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    // Run directory missing.
    for args in [
        &["sample", "nope"][..],
        &["eval", "nope"],
        &["train", "--resume", "nope"],
    ] {
        fails(
            dir,
            args,
            &["nope", "not a headlab run directory", "no such directory"],
        );
    }

    let run = trained(dir, "g");
    // Already exists.
    let mut again = vec!["train", "--out", "g"];
    again.extend_from_slice(&TINY);
    fails(dir, &again, &["g already exists", "--force", "--resume g"]);

    let last = run.join("last");
    let keep = |file: &str| std::fs::read(last.join(file)).unwrap();
    let (model, optim) = (keep("model.bpk"), keep("optim.safetensors"));
    let resume: &[&str] = &["train", "--resume", "g", "--set", "train.max_iters=8"];

    // Truncated weights.
    std::fs::write(last.join("model.bpk"), &model[..model.len() / 2]).unwrap();
    for args in [
        &["sample", "g", "--checkpoint", "last"][..],
        &["eval", "g", "--checkpoint", "last"],
        resume,
    ] {
        fails(
            dir,
            args,
            &[
                "last/model.bpk",
                "damaged",
                "bytes",
                "manifest.json",
                "--checkpoint best",
            ],
        );
    }
    std::fs::write(last.join("model.bpk"), &model).unwrap();

    // One flipped byte in the optimizer state.
    let mut bad = optim.clone();
    let i = bad.len() - 3;
    bad[i] ^= 0x40;
    std::fs::write(last.join("optim.safetensors"), &bad).unwrap();
    fails(
        dir,
        resume,
        &["last/optim.safetensors", "damaged", "SHA-256"],
    );
    std::fs::write(last.join("optim.safetensors"), &optim).unwrap();

    // No manifest: not a complete checkpoint.
    let manifest = keep("manifest.json");
    std::fs::remove_file(last.join("manifest.json")).unwrap();
    fails(
        dir,
        resume,
        &["manifest.json is missing", "cannot be verified"],
    );
    std::fs::write(last.join("manifest.json"), &manifest).unwrap();

    // A checkpoint from a different config: changed on resume, or config.toml edited.
    fails(
        dir,
        &["train", "--resume", "g", "--set", "model.d_model=64"],
        &[
            "model.d_model is 32 in the checkpoint but 64 in the config",
            "config.toml",
        ],
    );
    let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
    let edited = config.replace("n_layers = 2", "n_layers = 3");
    assert_ne!(edited, config);
    std::fs::write(run.join("config.toml"), edited).unwrap();
    fails(
        dir,
        &["sample", "g"],
        &["model.n_layers is 2 in the checkpoint but 3 in the config"],
    );
    std::fs::write(run.join("config.toml"), &config).unwrap();

    // Tokenizer missing.
    let tokenizer = std::fs::read(run.join("tokenizer.json")).unwrap();
    std::fs::remove_file(run.join("tokenizer.json")).unwrap();
    for args in [&["sample", "g"][..], &["train", "--resume", "g"]] {
        fails(dir, args, &["tokenizer.json is missing"]);
    }
    std::fs::write(run.join("tokenizer.json"), tokenizer).unwrap();

    // Everything restored: the run works again.
    let out = headlab(&["sample", "g", "--max-new-tokens", "5"], dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn cli_errors_name_the_option_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let backend = ["unknown backend \"cuda\"", "flex, flex-burn, ndarray, wgpu"];
    fails(dir, &train_args(&["--backend", "cuda"]), &backend);
    fails(dir, &train_args(&["--set", "train.backend=cuda"]), &backend);

    trained(dir, "g");
    fails(dir, &["sample", "g", "--backend", "cuda"], &backend);
    fails(dir, &["eval", "g", "--backend", "cuda"], &backend);
    fails(
        dir,
        &["sample", "g", "--temperature=-1"],
        &["--temperature", ">= 0", "-1"],
    );
    fails(
        dir,
        &["sample", "g", "--temperature=nan"],
        &["--temperature"],
    );
    for p in ["0", "1.5", "-0.2"] {
        let arg = format!("--top-p={p}");
        fails(dir, &["sample", "g", &arg], &["--top-p", "(0, 1]", p]);
    }
    fails(
        dir,
        &["sample", "g", "--top-k", "0"],
        &["--top-k", "at least 1"],
    );
    // The same token twice is named as such, not as two prompts with the same metric.
    let patch = [
        "patch",
        "g",
        "--clean",
        "the dog sees",
        "--corrupted",
        "the cat sees",
        "--answer",
        " ",
        "--versus",
        " ",
    ];
    let stderr = fails(
        dir,
        &patch,
        &[
            "--answer and --versus are the same token (\" \")",
            "give --versus the token the corrupted prompt leads to",
        ],
    );
    assert!(!stderr.contains("same metric"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// wgpu with every Vulkan driver hidden: no adapter, said at once. OpenGL stays visible, as
/// on a machine with Mesa's GL but no Vulkan driver: wgpu used to fall back to it, where
/// training crawled or hung after step 0. Where an adapter is still found on a Metal or DX12
/// machine, the case is skipped; on Linux that is a failure.
#[test]
fn wgpu_without_an_adapter_says_why_and_how_to_get_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hidden = [
        ("VK_DRIVER_FILES", "/nonexistent/icd.json"),
        ("VK_ICD_FILENAMES", "/nonexistent/icd.json"),
    ];
    let args = train_args(&["--backend", "wgpu"]);
    let probe = headlab_env(&args, dir, &hidden);
    // On Linux nothing but Vulkan may serve: a run that trained went through OpenGL.
    if probe.status.success() {
        if cfg!(target_os = "linux") {
            let stderr = String::from_utf8_lossy(&probe.stderr);
            panic!("wgpu trained with Vulkan hidden (OpenGL?):\n{stderr}");
        }
        eprintln!("skipped: wgpu found an adapter with the Vulkan drivers hidden");
        return;
    }
    std::fs::remove_dir_all(dir.join("run")).ok();
    let err = fails_env(
        dir,
        &args,
        &hidden,
        &[
            "wgpu backend found no working GPU adapter",
            "mesa-vulkan-drivers",
            "--backend flex",
        ],
    );
    assert!(!err.contains("RecvError"), "{err}");
}

/// Resuming a run that already reached train.max_iters (or a max_iters below its step) says
/// where it is and how to extend it, with exit 2 and nothing written. It used to print
/// "done: train loss NaN" and exit 0.
#[test]
fn resuming_a_finished_run_says_how_to_extend_it_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    trained(dir, "g");
    let msg = ["already at step 4", "train.max_iters is 4", "--resume g"];
    fails(dir, &["train", "--resume", "g"], &msg);
    fails(
        dir,
        &["train", "--resume", "g", "--set", "train.max_iters=2"],
        &["already at step 4", "train.max_iters is 2"],
    );
}

/// Arguments are checked before any backend starts: a bad --steps is the only thing said,
/// with none of the noise wgpu's start makes (here: EGL's complaint about an unset
/// XDG_RUNTIME_DIR).
#[test]
fn compare_checks_its_arguments_before_starting_a_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let err = fails_env(
        dir,
        &["compare", "--backends", "flex,wgpu", "--steps", "0"],
        &[("XDG_RUNTIME_DIR", "")],
        &["--steps must be at least 1"],
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// `--init` that is missing, or holds another model's weights, is refused before anything is
/// written, naming the file and what to give instead.
#[test]
fn compare_init_weights_must_exist_and_fit_the_config() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let compare = [
        "compare",
        "--backends",
        "flex",
        "--steps",
        "1",
        "--out",
        "cmp",
    ];
    let mut args = compare.to_vec();
    args.extend(["--init", "missing.bpk"]);
    fails(
        dir,
        &args,
        &["--init missing.bpk: no such file", "last/model.bpk"],
    );
    let run = trained(dir, "small");
    let weights = run.join("last/model.bpk");
    let mut args = compare.to_vec();
    args.extend(["--init", weights.to_str().unwrap()]);
    // The default config's model is wider than TINY's.
    fails(dir, &args, &["do not fit this model", "has shape"]);
    assert!(!dir.join("cmp").exists(), "nothing is written on bad input");
}

/// Options that do not apply are refused, and a checkpoint folder given as a run says which
/// option picks it.
#[test]
fn misplaced_options_and_paths_say_what_to_use_instead() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fails(
        dir,
        &["lab", "induction", "--seeds", "1,2"],
        &[
            "--seeds and --heads are for `lab heads`",
            "--set train.seed=N",
        ],
    );
    trained(dir, "g");
    fails(
        dir,
        &["sample", "g/last"],
        &["checkpoint folder", "--checkpoint last"],
    );
}

/// `lab --resume` needs the lab's folder and takes no --force; a lab's folder that exists is
/// kept, and the error says how to continue the lab in it.
#[test]
fn lab_resume_and_an_existing_folder_say_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fails(
        dir,
        &["lab", "heads", "--out", "nowhere", "--resume"],
        &[
            "nothing to resume: nowhere does not exist",
            "leave out --resume",
        ],
    );
    std::fs::create_dir(dir.join("keep")).unwrap();
    std::fs::write(dir.join("keep/notes.txt"), "mine").unwrap();
    fails(
        dir,
        &["lab", "heads", "--out", "keep", "--resume", "--force"],
        &["--resume", "--force", "cannot be used with"],
    );
    fails(
        dir,
        &[
            "lab",
            "symmetry",
            "--out",
            "keep",
            "--set",
            "train.max_iters=9",
        ],
        &[
            "keep already exists",
            "pass --force to replace it",
            "continue a lab stopped there with: headlab lab symmetry --out keep --set \
             train.max_iters=9 --resume",
        ],
    );
}

/// `lab grokking`'s modulus must be a prime its vocabulary can hold, and its other settings
/// in range; each is refused by name before anything is written or, under --force, removed.
#[test]
fn grokking_settings_are_checked_before_anything_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("keep")).unwrap();
    std::fs::write(dir.join("keep/notes.txt"), "mine").unwrap();
    let grok = |extra: &[&'static str]| {
        let mut args = vec!["lab", "grokking", "--out", "keep", "--force"];
        args.extend_from_slice(extra);
        args
    };
    fails(
        dir,
        &grok(&["--p", "91"]),
        &["p = 91 is not prime (7 x 13)", "such as 53"],
    );
    fails(dir, &grok(&["--p", "401"]), &["p = 401 is outside 3..=211"]);
    fails(dir, &grok(&["--p", "2"]), &["p = 2 is outside 3..=211"]);
    fails(
        dir,
        &grok(&["--fraction", "1"]),
        &["train fraction 1 must be in (0, 1)"],
    );
    fails(
        dir,
        &grok(&["--steps", "0"]),
        &["--steps 0 must be at least 1"],
    );
    fails(
        dir,
        &grok(&["--lr", "-1"]),
        &["--lr -1 must be a positive number"],
    );
    fails(
        dir,
        &grok(&["--weight-decay", "NaN"]),
        &["--weight-decay NaN must be 0 or more"],
    );
    // Too few pairs to learn from, or to test on: refused, with the fractions that work.
    fails(
        dir,
        &grok(&["--fraction", "0.0001"]),
        &[
            "gives 0 training and 2809 held-out pairs",
            "at least p = 53",
            "between 0.019 and 0.981",
        ],
    );
    fails(
        dir,
        &grok(&["--fraction", "0.99"]),
        &["gives 2781 training and 28 held-out pairs"],
    );
    // A negative number is a value out of range, not an unknown flag.
    fails(
        dir,
        &grok(&["--seed", "-1"]),
        &["-1 is negative: give a whole number of 0 or more"],
    );
    fails(
        dir,
        &grok(&["--steps", "-5"]),
        &["-5 is negative: give a whole number of 0 or more"],
    );
}

/// Every unsigned flag takes `-1` as a value out of its range (clap took it for an unknown
/// flag), and `patch --path` a negative head as a head that does not parse.
#[test]
fn negative_numbers_get_the_range_message() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let negative = "-1 is negative: give a whole number of 0 or more";
    fails(dir, &train_args(&["--seed", "-1"]), &[negative]);
    fails(
        dir,
        &["lab", "heads", "--out", "h", "--seeds", "1,-2"],
        &["-2 is negative"],
    );
    fails(dir, &["compare", "--steps", "-3"], &["-3 is negative"]);
    let run = trained(dir, "run");
    assert!(run.is_dir());
    fails(dir, &["sample", "run", "--seed", "-1"], &[negative]);
    fails(
        dir,
        &["sample", "run", "--num-samples", "-2"],
        &["-2 is negative"],
    );
    fails(
        dir,
        &["lens", "run", "--text", "the spy.", "--top", "-1"],
        &[negative],
    );
    // Issue 79: `--top 0` printed an empty list.
    fails(
        dir,
        &[
            "patch",
            "run",
            "--clean",
            "the spy",
            "--corrupted",
            "the spa",
            "--answer",
            "s",
            "--top",
            "0",
        ],
        &["--top", "0 asks for nothing: give 1 or more"],
    );
    // A file of the run given for the run: named as a file, its folder suggested.
    fails(
        dir,
        &[
            "patch",
            "run/config.toml",
            "--clean",
            "the spy",
            "--corrupted",
            "the spa",
            "--answer",
            "s",
        ],
        &["run/config.toml", "it is a file", "perhaps run)"],
    );
    fails(
        dir,
        &[
            "patch",
            "run",
            "--clean",
            "the spy",
            "--corrupted",
            "the spa",
            "--answer",
            "s",
            "--path",
            "-1.0",
        ],
        &["\"-1.0\" is not LAYER.HEAD"],
    );
}

/// A text of one character repeated (letters or NUL bytes) has nothing to predict: refused
/// before anything is written, naming the character.
#[test]
fn a_text_of_one_repeated_character_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("a.txt"), "a".repeat(20_000)).unwrap();
    std::fs::write(dir.join("nul.txt"), vec![0u8; 20_000]).unwrap();
    for (file, shown) in [("a.txt", "('a')"), ("nul.txt", "('\\0')")] {
        for tokenizer in ["char", "byte", "bpe"] {
            let path = format!("data.path={}", dir.join(file).display());
            let kind = format!("data.tokenizer={tokenizer}");
            fails(
                dir,
                &train_args(&["--set", &path, "--set", &kind]),
                &[
                    "holds one distinct character",
                    shown,
                    "nothing to predict",
                    "more than one distinct character",
                ],
            );
        }
    }
    // Nor may a run continue on such a text.
    let run = trained(dir, "run");
    let path = format!("data.path={}", dir.join("a.txt").display());
    fails(
        dir,
        &["train", "--resume", "run", "--set", &path],
        &["holds one distinct character ('a')", "nothing to predict"],
    );
    assert!(run.join("last").is_dir());
}

#[test]
fn export_errors_name_the_key_or_folder_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut args = vec!["train", "--out", "rope"];
    args.extend_from_slice(&TINY);
    args.extend_from_slice(&["--set", "model.positional=rope"]);
    let out = headlab(&args, dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fails(
        dir,
        &["export", "hf", "rope", "--out", "hf"],
        &["[model] positional = rope", "learned"],
    );
    let run = trained(dir, "plain");
    assert!(run.is_dir());
    std::fs::create_dir(dir.join("taken")).unwrap();
    std::fs::write(dir.join("taken/mine.txt"), "keep").unwrap();
    fails(
        dir,
        &["export", "hf", "plain", "--out", "taken"],
        &["taken", "not empty", "--out", "--force"],
    );
    // --force replaces a previous export only: a folder with anything else is kept.
    fails(
        dir,
        &["export", "hf", "plain", "--out", "taken", "--force"],
        &[
            "taken holds mine.txt",
            "--force replaces only a previous export",
        ],
    );
    fails(
        dir,
        &["export", "hf", "nowhere", "--out", "hf"],
        &["nowhere"],
    );
    // And a good export writes the three files.
    let out = headlab(&["export", "hf", "plain", "--out", "hf"], dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for file in ["config.json", "model.safetensors", "tokenizer.json"] {
        assert!(dir.join("hf").join(file).is_file(), "{file}");
    }
}

/// `import` refuses what it cannot read with one line that names the file and the fix, and
/// leaves no run behind.
#[test]
fn import_errors_name_the_file_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let hf = fixtures.join("hf-gpt2-tiny");
    let copy = |name: &str| {
        let to = dir.join(name);
        std::fs::create_dir(&to).unwrap();
        for f in ["config.json", "model.safetensors", "tokenizer.json"] {
            std::fs::copy(hf.join(f), to.join(f)).unwrap();
        }
        to
    };
    let truncated = copy("truncated");
    let bytes = std::fs::read(truncated.join("model.safetensors")).unwrap();
    std::fs::write(truncated.join("model.safetensors"), &bytes[..1000]).unwrap();
    let pickled = copy("pickled");
    std::fs::rename(
        pickled.join("model.safetensors"),
        pickled.join("pytorch_model.bin"),
    )
    .unwrap();
    let llama = copy("llama");
    let config = std::fs::read_to_string(llama.join("config.json")).unwrap();
    std::fs::write(
        llama.join("config.json"),
        config.replace("\"gpt2\"", "\"llama\""),
    )
    .unwrap();
    let wide = copy("wide");
    let config = std::fs::read_to_string(wide.join("config.json")).unwrap();
    std::fs::write(
        wide.join("config.json"),
        config.replace("\"n_embd\": 32", "\"n_embd\": 64"),
    )
    .unwrap();
    let nano = fixtures.join("nanogpt-tiny");
    let ckpt = nano.join("ckpt.pt");
    let evil = nano.join("evil-meta.pkl");
    // The fixture's checkpoint alone in a folder: valid, only its vocabulary is elsewhere.
    std::fs::create_dir(dir.join("bare")).unwrap();
    std::fs::copy(&ckpt, dir.join("bare/ckpt.pt")).unwrap();
    // The same checkpoint with one weight's slot holding a call of os.system
    // (tools/make-evil-ckpt.py).
    let evil_ckpt = nano.join("evil-ckpt.pt");
    let run = trained(dir, "g");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        (
            vec!["hf".into(), "nowhere".into()],
            vec!["nowhere", "folder"],
        ),
        (
            vec!["hf".into(), "truncated".into()],
            vec!["model.safetensors cannot be read", "download it again"],
        ),
        (
            vec!["hf".into(), "pickled".into()],
            vec![
                "pytorch_model.bin",
                "never unpickles",
                "safe_serialization=True",
            ],
        ),
        (
            vec!["hf".into(), "llama".into()],
            vec!["model_type = \"llama\"", "GPT-2-family"],
        ),
        (
            vec!["hf".into(), "wide".into()],
            vec!["transformer.wte.weight", "[300, 32]", "[300, 64]"],
        ),
        (
            vec!["nanogpt".into(), s(&ckpt), "--meta".into(), s(&evil)],
            vec!["evil-meta.pkl", "posix.system", "ran nothing"],
        ),
        (
            vec!["nanogpt".into(), s(&hf.join("model.safetensors"))],
            vec!["model.safetensors", "not a PyTorch checkpoint"],
        ),
        (
            vec!["nanogpt".into(), "bare/ckpt.pt".into()],
            vec![
                "bare/ckpt.pt holds no vocabulary and there is no meta.pkl beside it",
                "pass --meta data/<dataset>/meta.pkl",
            ],
        ),
        (
            vec![
                "nanogpt".into(),
                s(&evil_ckpt),
                "--meta".into(),
                s(&nano.join("meta.pkl")),
            ],
            vec![
                "evil-ckpt.pt is refused",
                "model['_orig_mod.transformer.h.0.attn.c_attn.weight'] is a Python object \
                 (posix.system)",
                "ran nothing",
            ],
        ),
        (
            vec!["hf".into(), s(&run)],
            vec![
                "is a headlab run (config.toml), not a Hugging Face folder",
                "headlab export hf",
            ],
        ),
    ];
    for (rest, parts) in cases {
        let mut args = vec!["import"];
        args.extend(rest.iter().map(String::as_str));
        args.extend(["--out", "imported"]);
        let stderr = fails(dir, &args, &parts);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            !stderr.contains("is not a nanoGPT checkpoint"),
            "{args:?}: {stderr}"
        );
    }
    // A run in the way is refused too (and kept); --force replaces only a run.
    std::fs::create_dir(dir.join("taken")).unwrap();
    std::fs::write(dir.join("taken/mine.txt"), "keep").unwrap();
    fails(
        dir,
        &["import", "hf", hf.to_str().unwrap(), "--out", "taken"],
        &["taken", "already exists", "--force"],
    );
    fails(
        dir,
        &[
            "import",
            "hf",
            hf.to_str().unwrap(),
            "--out",
            "taken",
            "--force",
        ],
        &["taken exists and is not a headlab run", "pass a new --out"],
    );
}

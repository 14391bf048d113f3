//! The README and the guide quote what headlab prints: each quoted `$ headlab ...` command is
//! run, and every line quoted after it must be in its output (a line ending in `...` as a
//! prefix), so a changed message shows up here rather than in a reader's terminal.

use std::path::Path;
use std::time::Duration;

use crate::common::headlab_within;

/// One quoted command and the lines quoted as its output.
#[derive(Debug)]
struct Quoted {
    file: &'static str,
    command: String,
    lines: Vec<String>,
}

/// Every `$ headlab` line inside a fenced block of `text`, with the lines up to the next
/// command or the fence's end.
fn quoted(file: &'static str, text: &str) -> Vec<Quoted> {
    let mut found: Vec<Quoted> = Vec::new();
    let mut fenced = false;
    // Whether the last command found is in the block being read.
    let mut open = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            open = false;
            continue;
        }
        if !fenced {
            continue;
        }
        if let Some(command) = line.strip_prefix("$ headlab ") {
            found.push(Quoted {
                file,
                command: command.to_string(),
                lines: Vec::new(),
            });
            open = true;
        } else if line.starts_with('$') {
            // Another program's command ends the previous one's output.
            open = false;
        } else if let Some(last) = found.last_mut().filter(|_| open)
            && !line.trim().is_empty()
        {
            last.lines.push(line.to_string());
        }
    }
    found
        .into_iter()
        .filter(|q| !q.command.is_empty() && !q.lines.is_empty())
        .collect()
}

/// A command line's words, as a POSIX shell splits them when quotes are the only special
/// characters: `--text "the spy ."` is two words.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut word, mut quote, mut started) = (String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => (quote, started) = (Some(c), true),
            (None, c) if c.is_whitespace() => {
                if started {
                    out.push(std::mem::take(&mut word));
                }
                started = false;
            }
            (None, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(word);
    }
    out
}

fn matches(expected: &str, output: &str) -> bool {
    match expected.strip_suffix("...") {
        Some(prefix) => output.lines().any(|l| l.starts_with(prefix.trim_end())),
        None => output.lines().any(|l| l == expected),
    }
}

#[test]
fn quoted_output_in_the_docs_is_what_headlab_prints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut checked = 0;
    for file in ["README.md", "docs/guide.md"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for q in quoted(file, &text) {
            let tmp = tempfile::tempdir().unwrap();
            let words = words(&q.command);
            let args: Vec<&str> = words.iter().map(String::as_str).collect();
            let out = headlab_within(&args, tmp.path(), &[], Duration::from_secs(300));
            let output = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            for line in &q.lines {
                assert!(
                    matches(line, &output),
                    "{}: `headlab {}` no longer prints\n  {line}\nIt printed:\n{output}",
                    q.file,
                    q.command
                );
            }
            checked += 1;
        }
    }
    assert!(
        checked > 0,
        "no quoted command found: the parser missed them"
    );
}

#[test]
fn the_parser_finds_commands_and_their_lines() {
    let text = "x\n```\n$ headlab train --set a=1\nerror: one ...\n\n$ ls\nfoo\n```\n\
                $ headlab outside\n```sh\n$ headlab eval r\nloss 1\n```\n```\nnot output\n```\n";
    let found = quoted("t", text);
    let pairs: Vec<(&str, Vec<&str>)> = found
        .iter()
        .map(|q| {
            (
                q.command.as_str(),
                q.lines.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            ("train --set a=1", vec!["error: one ..."]),
            ("eval r", vec!["loss 1"])
        ]
    );
    assert_eq!(
        words(r#"heads r --text "the spy ." --x '' a"#),
        ["heads", "r", "--text", "the spy .", "--x", "", "a"]
    );
    assert!(matches("error: one ...", "x\nerror: one two\n"));
    assert!(!matches("error: one ...", "error: on\n"));
    assert!(!matches("loss 1", "loss 12\n"));
}

/// The guide's word on the logit lens's first row holds for a model with tied embeddings
/// (the default): `0_pre` reads the current token back, a copy, so it is no bigram guess;
/// checked on a trained tied model, whose `0_pre` top token is the token at the position
/// nearly everywhere, and its loss far above a uniform guess's. (The guide called the row "a
/// bigram guess from the current token".)
#[test]
fn the_guide_says_what_the_lens_first_row_is_with_tied_embeddings() {
    use crate::common::{headlab, ok, tiny};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let guide = std::fs::read_to_string(root.join("docs/guide.md")).unwrap();
    assert!(
        !guide.contains("bigram guess from the current"),
        "the old claim"
    );
    let lens = &guide[guide
        .find("### What the stream holds after each layer")
        .unwrap()..];
    let lens = &lens[..lens.find("\n### ").unwrap()];
    for said in ["is not a bigram guess", "a\ncopy", "tie_embeddings = false"] {
        let said = said.replace('\n', " ");
        assert!(
            lens.replace('\n', " ").contains(&said),
            "the lens section lacks {said:?}"
        );
    }

    let tmp = tempfile::tempdir().unwrap();
    let mut args = vec!["train", "--out", "run"];
    let sets = tiny(&[
        "--set",
        "train.max_iters=60",
        "--set",
        "train.eval_interval=60",
        "--set",
        "data.builtin_chars=20000",
        "--set",
        "train.sample_tokens=0",
    ]);
    args.extend(sets.iter().copied());
    ok(&headlab(&args, tmp.path()));
    // Texts of the model's 16-token context.
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut csv = String::new();
    for text in ["the dogs see the", " cat. the spy ru", "ns near the dogs"] {
        ok(&headlab(&["lens", "run", "--text", text], tmp.path()));
        csv = std::fs::read_to_string(tmp.path().join("run/lens/lens.csv")).unwrap();
        rows.extend(
            csv.lines()
                .skip(1)
                .filter(|l| l.starts_with("0_pre,"))
                .map(|l| l.splitn(7, ',').map(str::to_string).collect::<Vec<_>>()),
        );
    }
    assert_eq!(rows.len(), 3 * 15);
    let text = "the dogs see the cat. the spy runs near the dogs";
    let copies = rows
        .iter()
        .filter(|r| {
            let top = r[6]
                .trim_matches('"')
                .split(' ')
                .next()
                .unwrap()
                .to_string();
            let token = r[2].trim_matches('"').to_string();
            top == token || (token == " " && top.is_empty())
        })
        .count();
    assert!(
        copies * 10 >= rows.len() * 9,
        "{copies} of {}:\n{csv}",
        rows.len()
    );
    let loss: f64 = rows[0][5].parse().unwrap();
    let vocab = text
        .chars()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert!(loss > (vocab as f64).ln(), "0_pre loss {loss}");
}

/// The README's shares for the default run's seeds hold the guide's share for seed 1337 (its
/// row of the default run's seeds in section 7): the README once said 91-94% agreeing while
/// seed 1337 gave 95%.
#[test]
fn the_readme_and_the_guide_agree_on_the_default_runs_grammar() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let guide = std::fs::read_to_string(root.join("docs/guide.md")).unwrap();
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    let after = flat
        .split("with seeds 1337, 1 and 2")
        .nth(1)
        .expect("the README's seeds sentence");
    let range = |what: &str| -> (f64, f64) {
        let end = after
            .find(&format!("% {what}"))
            .unwrap_or_else(|| panic!("{what}"));
        let text = after[..end].rsplit(' ').next().unwrap();
        let (lo, hi) = text.split_once('-').unwrap_or((text, text));
        (lo.parse().unwrap(), hi.parse().unwrap())
    };
    let row = guide
        .lines()
        .find(|l| l.starts_with("| 1337 | "))
        .expect("the guide's row for seed 1337");
    let shares: Vec<f64> = row
        .split('|')
        .nth(3)
        .unwrap()
        .split('/')
        .map(|s| s.trim().trim_end_matches('%').parse().unwrap())
        .collect();
    let (formed, agreeing) = (range("of sentences well-formed"), range("agreeing"));
    assert!(
        (formed.0..=formed.1).contains(&shares[0])
            && (agreeing.0..=agreeing.1).contains(&shares[1]),
        "README: {formed:?} well-formed, {agreeing:?} agreeing; guide, seed 1337: {shares:?}"
    );
}

/// The README's performance section leads with one record, named, that exists under
/// bench/results, and keeps its history in bench/NOTES.md (it was a dated log).
#[test]
fn the_readme_leads_its_performance_section_with_one_named_record() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = &readme[readme.find("## Performance and quality").unwrap()..];
    let records: Vec<&str> = section
        .split("(bench/results/")
        .skip(1)
        .map(|r| r.split(')').next().unwrap())
        .collect();
    assert!(!records.is_empty(), "no record named");
    assert!(
        root.join("bench/results").join(records[0]).is_file(),
        "{}",
        records[0]
    );
    let table = section.find("\n| ").unwrap();
    assert!(
        section.find(records[0]).unwrap() < table,
        "the record is named after its table"
    );
    for dated in ["again after", "Latest run"] {
        assert!(
            !section.contains(dated),
            "{dated:?}: history belongs in bench/NOTES.md"
        );
    }
}

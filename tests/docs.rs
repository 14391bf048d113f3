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

//! `cargo xtask architecture`: the crate diagram of docs/architecture.md drawn from
//! `cargo metadata`, so the picture cannot drift from the code, and the size rule (no crate
//! holds more than a quarter of the workspace's Rust lines).
//!
//! The diagram sits between two marker lines in the doc. Each crate is drawn on the layer one
//! above its highest dependency, top layer first, with its path, its one-line `description`
//! from Cargo.toml and the workspace crates it depends on (normal dependencies; dev- and
//! build-dependencies are left out). Arrows can then only point down.
//!
//! Within a crate the same holds for its top-level modules: no two may name each other,
//! directly or around a circle, so each module can be read knowing only those below it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The doc the diagram lives in, relative to the workspace root.
pub const DOC: &str = "docs/architecture.md";
/// The line before the diagram.
pub const BEGIN: &str = "<!-- crate diagram: drawn by `cargo xtask architecture --write` from cargo metadata; the tests fail when it is stale -->";
/// The line after it.
pub const END: &str = "<!-- end of crate diagram -->";
/// The largest share of the workspace's Rust lines one crate may hold.
pub const MAX_SHARE: f64 = 0.25;

/// A workspace crate: its name, folder, one-line job and workspace dependencies.
#[derive(Debug, Clone, PartialEq)]
pub struct Crate {
    pub name: String,
    pub dir: String,
    pub description: String,
    pub deps: Vec<String>,
}

/// The workspace's crates as `cargo metadata --no-deps` lists them.
pub fn crates(root: &Path) -> Result<Vec<Crate>> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let meta: Value = serde_json::from_slice(&out.stdout).context("cargo metadata's JSON")?;
    parse_metadata(&meta, root)
}

/// [`crates`] from cargo metadata's JSON.
pub fn parse_metadata(meta: &Value, root: &Path) -> Result<Vec<Crate>> {
    let packages = meta["packages"].as_array().context("no packages")?;
    let names: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut out = Vec::new();
    for p in packages {
        let name = p["name"].as_str().context("a package without a name")?;
        let manifest = Path::new(p["manifest_path"].as_str().context("no manifest_path")?);
        let dir = manifest.parent().context("a manifest without a folder")?;
        let dir = dir.strip_prefix(&root).unwrap_or(dir).display().to_string();
        let mut deps: Vec<String> = p["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str())
            .filter(|d| names.contains(d))
            .map(String::from)
            .collect();
        deps.sort();
        deps.dedup();
        out.push(Crate {
            name: name.to_string(),
            dir,
            description: p["description"].as_str().unwrap_or("").to_string(),
            deps,
        });
    }
    Ok(out)
}

/// Each crate's layer: 0 for a crate without workspace dependencies, else one above its
/// highest dependency. Fails on a dependency cycle.
fn layers(crates: &[Crate]) -> Result<BTreeMap<String, usize>> {
    let by_name: BTreeMap<&str, &Crate> = crates.iter().map(|c| (c.name.as_str(), c)).collect();
    let mut layer = BTreeMap::new();
    fn visit<'a>(
        name: &'a str,
        by_name: &BTreeMap<&'a str, &'a Crate>,
        layer: &mut BTreeMap<String, usize>,
        path: &mut Vec<&'a str>,
    ) -> Result<usize> {
        if let Some(&l) = layer.get(name) {
            return Ok(l);
        }
        if path.contains(&name) {
            bail!("import circle: {} -> {name}", path.join(" -> "));
        }
        path.push(name);
        let mut l = 0;
        for dep in &by_name[name].deps {
            l = l.max(1 + visit(dep, by_name, layer, path)?);
        }
        path.pop();
        layer.insert(name.to_string(), l);
        Ok(l)
    }
    for c in crates {
        visit(&c.name, &by_name, &mut layer, &mut Vec::new())?;
    }
    Ok(layer)
}

/// The diagram: layers top to bottom, crates by name within a layer.
pub fn diagram(crates: &[Crate]) -> Result<String> {
    let layer = layers(crates)?;
    let top = layer.values().copied().max().unwrap_or(0);
    let short = |n: &str| n.strip_prefix("headlab-").unwrap_or(n).to_string();
    let mut s = String::from("```text\n");
    for l in (0..=top).rev() {
        s += &format!(
            "-- layer {l} {}\n",
            "-".repeat(80 - 13 - l.to_string().len())
        );
        let mut here: Vec<&Crate> = crates.iter().filter(|c| layer[&c.name] == l).collect();
        here.sort_by(|a, b| a.name.cmp(&b.name));
        for c in here {
            s += &format!("{:<26}{}\n", c.name, c.dir);
            for line in wrap(&c.description, 72) {
                s += &format!("    {line}\n");
            }
            if !c.deps.is_empty() {
                let deps: Vec<String> = c.deps.iter().map(|d| short(d)).collect();
                for (i, line) in wrap(&deps.join(", "), 68).iter().enumerate() {
                    let arrow = if i == 0 { "--> " } else { "    " };
                    s += &format!("    {arrow}{line}\n");
                }
            }
        }
    }
    s += "```\n";
    Ok(s)
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let last = lines.last_mut().expect("one line");
        if !last.is_empty() && last.len() + 1 + word.len() > width {
            lines.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines
}

/// The doc with its diagram replaced by `diagram`.
pub fn with_diagram(doc: &str, diagram: &str) -> Result<String> {
    let (Some(begin), Some(end)) = (doc.find(BEGIN), doc.find(END)) else {
        bail!("{DOC} lacks the marker lines around the crate diagram:\n{BEGIN}\n{END}");
    };
    let after_begin = begin + BEGIN.len();
    if end < after_begin {
        bail!("{DOC}: the diagram's end marker comes before its begin marker");
    }
    Ok(format!("{}\n{diagram}{}", &doc[..after_begin], &doc[end..]))
}

/// Each workspace crate's share of the Rust lines under its folder (the root tests/ counts as
/// the CLI's, whose end-to-end tests they are), largest first.
pub fn shares(root: &Path, crates: &[Crate]) -> Result<Vec<(String, usize, f64)>> {
    fn lines(dir: &Path) -> usize {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        let mut n = 0;
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && p.file_name().is_some_and(|f| f != "target") {
                n += lines(&p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                n += std::fs::read_to_string(&p).map_or(0, |t| t.lines().count());
            }
        }
        n
    }
    let mut counts: Vec<(String, usize)> = crates
        .iter()
        .map(|c| {
            let mut n = lines(&root.join(&c.dir));
            if c.dir == "crates/cli" {
                n += lines(&root.join("tests"));
            }
            (c.name.clone(), n)
        })
        .collect();
    let total: usize = counts.iter().map(|c| c.1).sum();
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    Ok(counts
        .into_iter()
        .map(|(n, l)| (n, l, l as f64 / total.max(1) as f64))
        .collect())
}

/// The arrows between the top-level modules of the crate whose sources are in `src`: each
/// module (`m.rs`, or a folder `m/`) to the other modules its code names as `crate::m` or
/// in `use crate::{m, ...}`. Comments are skipped, and so is a file from its first
/// `#[cfg(test)]` on: a test may reach into any module.
pub fn module_arrows(src: &Path) -> Result<BTreeMap<String, BTreeSet<String>>> {
    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
        for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let p = e?.path();
            if p.is_dir() {
                files(&p, out)?;
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut paths = Vec::new();
    files(src, &mut paths)?;
    let module = |p: &Path| -> String {
        let first = p.strip_prefix(src).unwrap_or(p).components().next();
        let name = first.map_or(String::new(), |c| c.as_os_str().to_string_lossy().into());
        name.strip_suffix(".rs").unwrap_or(&name).to_string()
    };
    let modules: BTreeSet<String> = paths
        .iter()
        .map(|p| module(p))
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut arrows: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in &paths {
        let from = module(path);
        if !modules.contains(&from) {
            continue;
        }
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let code: String = text
            .lines()
            .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let to = arrows.entry(from.clone()).or_default();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                // `crate::{a, b::X, c::{Y, Z}}`: the first segment of each top-level part.
                Some(list) => {
                    let (mut depth, mut end) = (0, list.len());
                    for (i, ch) in list.char_indices() {
                        match ch {
                            '{' => depth += 1,
                            '}' if depth == 0 => {
                                end = i;
                                break;
                            }
                            '}' => depth -= 1,
                            _ => {}
                        }
                    }
                    let mut parts = Vec::new();
                    let (mut depth, mut start) = (0, 0);
                    for (i, ch) in list[..end].char_indices() {
                        match ch {
                            '{' => depth += 1,
                            '}' => depth -= 1,
                            ',' if depth == 0 => {
                                parts.push(&list[start..i]);
                                start = i + 1;
                            }
                            _ => {}
                        }
                    }
                    parts.push(&list[start..end]);
                    parts
                }
                None => vec![rest],
            };
            for name in names {
                let name = name.trim_start();
                let end = name
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(name.len());
                let name = &name[..end];
                if name != from && modules.contains(name) {
                    to.insert(name.to_string());
                }
            }
        }
    }
    Ok(arrows)
}

/// The first circle among `arrows` as `a -> b -> a`, if there is one.
pub fn module_circle(arrows: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    fn visit<'a>(
        name: &'a str,
        arrows: &'a BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<&'a str>,
        path: &mut Vec<&'a str>,
    ) -> Option<String> {
        if let Some(at) = path.iter().position(|p| *p == name) {
            return Some(format!("{} -> {name}", path[at..].join(" -> ")));
        }
        if !done.insert(name) {
            return None;
        }
        path.push(name);
        for next in arrows.get(name).into_iter().flatten() {
            if let Some(circle) = visit(next, arrows, done, path) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    arrows
        .keys()
        .find_map(|m| visit(m, arrows, &mut done, &mut Vec::new()))
}

/// Problems: a stale diagram (with the fix), a crate above [`MAX_SHARE`], an import
/// circle among a crate's modules.
pub fn check(root: &Path) -> Result<Vec<String>> {
    let crates = crates(root)?;
    let mut problems = Vec::new();
    let path = root.join(DOC);
    let doc = std::fs::read_to_string(&path).with_context(|| format!("reading {DOC}"))?;
    if with_diagram(&doc, &diagram(&crates)?)? != doc {
        problems.push(format!(
            "{DOC}'s crate diagram differs from the crate graph in cargo metadata: run \
             `cargo xtask architecture --write` and check the change"
        ));
    }
    for (name, lines, share) in shares(root, &crates)? {
        if share > MAX_SHARE {
            problems.push(format!(
                "{name} holds {lines} lines, {:.1}% of the workspace's Rust (at most {:.0}%): \
                 split it",
                share * 100.0,
                MAX_SHARE * 100.0
            ));
        }
    }
    for c in &crates {
        let src = root.join(&c.dir).join("src");
        if !src.is_dir() {
            continue;
        }
        if let Some(circle) = module_circle(&module_arrows(&src)?) {
            problems.push(format!(
                "{}: import circle among its modules: {circle}; move what both need into a \
                 module of its own",
                c.name
            ));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn krate(name: &str, deps: &[&str]) -> Crate {
        Crate {
            name: name.into(),
            dir: format!("crates/{name}"),
            description: format!("the {name} crate"),
            deps: deps.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn layers_put_every_crate_above_its_dependencies_and_find_circles() {
        let crates = [
            krate("a", &["b", "c"]),
            krate("b", &["c"]),
            krate("c", &[]),
            krate("d", &["c"]),
        ];
        let l = layers(&crates).unwrap();
        assert_eq!((l["a"], l["b"], l["c"], l["d"]), (2, 1, 0, 1));
        let circle = [krate("a", &["b"]), krate("b", &["a"])];
        let err = layers(&circle).unwrap_err().to_string();
        assert!(err.contains("import circle: a -> b -> a"), "{err}");
    }

    #[test]
    fn a_dependency_added_or_removed_makes_the_diagram_differ() {
        let crates = vec![krate("x", &["y"]), krate("y", &[])];
        let drawn = diagram(&crates).unwrap();
        assert!(drawn.contains("--> y"), "{drawn}");
        let doc = with_diagram(&format!("intro\n{BEGIN}\nold\n{END}\nrest\n"), &drawn).unwrap();
        assert_eq!(with_diagram(&doc, &drawn).unwrap(), doc);
        let mut changed = crates.clone();
        changed[0].deps.clear();
        assert_ne!(
            with_diagram(&doc, &diagram(&changed).unwrap()).unwrap(),
            doc
        );
        assert!(with_diagram("no markers", &drawn).is_err());
    }

    /// Module arrows come from `crate::m` paths and `use crate::{..}` lists, not from
    /// comments, root items or tests; a circle is named, a one-way chain is not one.
    #[test]
    fn module_arrows_follow_crate_paths_and_circles_are_named() {
        let dir = std::env::temp_dir().join(format!("xtask-modules-{}", std::process::id()));
        let src = dir.as_path();
        std::fs::create_dir_all(src.join("d")).unwrap();
        for (file, text) in [
            (
                "lib.rs",
                "pub mod a; pub mod b; pub mod c; pub mod d;\npub struct Root;\n",
            ),
            (
                "a.rs",
                "use crate::{Root, b::X, c::{Y, Z}};\n// crate::d in a comment\n",
            ),
            (
                "b.rs",
                "fn f() -> crate::c::Y { todo!() }\n#[cfg(test)]\nuse crate::a::T;\n",
            ),
            ("c.rs", "pub struct Y;\n"),
            ("d/mod.rs", "mod e;\n"),
            ("d/e.rs", "use crate::a::A;\n"),
        ] {
            std::fs::write(src.join(file), text).unwrap();
        }
        let arrows = module_arrows(src).unwrap();
        let names = |m: &str| arrows[m].iter().cloned().collect::<Vec<_>>();
        assert_eq!(names("a"), ["b", "c"]);
        assert_eq!(names("b"), ["c"]);
        assert_eq!(names("d"), ["a"]);
        assert!(!arrows.contains_key("lib"));
        assert_eq!(module_circle(&arrows), None);
        std::fs::write(src.join("c.rs"), "use crate::d::E;\n").unwrap();
        let circle = module_circle(&module_arrows(src).unwrap()).unwrap();
        std::fs::remove_dir_all(src).unwrap();
        assert_eq!(circle, "a -> b -> c -> d -> a");
    }

    /// The real workspace: docs/architecture.md's diagram is the crate graph of cargo
    /// metadata, no crate holds more than a quarter of the Rust lines, and no crate's modules
    /// import each other in a circle.
    #[test]
    fn the_architecture_doc_draws_the_crate_graph_and_no_crate_is_too_big() {
        let problems = check(&crate::root()).unwrap();
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}

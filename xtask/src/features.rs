//! `cargo xtask features`: the README's second command (`cargo test --release --workspace`)
//! builds again only what the test build's backends change. Compared unit by unit, as cargo
//! decides what to build: a unit is its package, target, mode, features, platform and profile
//! and, recursively, the units it depends on, so that a dependency built with one more
//! feature rebuilds everything above it even where `cargo tree`'s feature lists agree (issue
//! 43: itertools' `default` did that to cubecl's core and Burn's backend layer).

use std::collections::{BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{cargo, root};

/// The crates that the `wgpu` and `ndarray` features must change: Burn's dispatch layer,
/// where a backend is a variant of the device. It and the crates above it (burn-tensor,
/// burn-core, burn, burn-nn, burn-optim, burn-store, headlab's own) are all the test build
/// compiles again; everything below it (burn-backend, burn-flex, burn-ndarray,
/// burn-autodiff, gemm, cubecl's core) is shared, which crates/workspace-hack arranges.
pub const BACKEND_CHANGES: [&str; 1] = ["burn-dispatch"];

/// One compilation cargo plans.
#[derive(Debug, Clone)]
struct Unit {
    /// "name@version".
    package: String,
    /// headlab's own crates: their `test-hooks` feature is meant to differ.
    own: bool,
    /// What it compiles, for messages: "lib build", "build-script run", ...
    what: String,
    features: Vec<String>,
    /// The unit and everything it depends on, hashed: equal only for a unit cargo reuses.
    identity: u64,
    /// The units it depends on, as indices into the same plan.
    deps: Vec<usize>,
}

/// Cargo's plan for `args` (`--unit-graph`: nothing is compiled). It is a nightly flag:
/// RUSTC_BOOTSTRAP lets this stable cargo print it, and since nothing is compiled no
/// fingerprint sees the variable.
fn unit_graph(root: &Path, args: &[&str]) -> Result<Vec<Unit>> {
    let out = cargo()
        .current_dir(root)
        .env("RUSTC_BOOTSTRAP", "1")
        .args(args)
        .args(["--locked", "--unit-graph", "-Z", "unstable-options"])
        .output()
        .context("running cargo --unit-graph")?;
    if !out.status.success() {
        bail!(
            "cargo {} --unit-graph failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let graph: Value = serde_json::from_slice(&out.stdout).context("parsing cargo's unit graph")?;
    let raw = graph["units"]
        .as_array()
        .context("cargo's unit graph has no units")?;
    let mut identities: Vec<Option<u64>> = vec![None; raw.len()];
    fn identity(i: usize, raw: &[Value], memo: &mut Vec<Option<u64>>) -> u64 {
        if let Some(h) = memo[i] {
            return h;
        }
        let u = &raw[i];
        let mut deps: Vec<u64> = u["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["index"].as_u64())
            .map(|d| identity(d as usize, raw, memo))
            .collect();
        deps.sort_unstable();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        // A path package's id names its checkout: only its name and version count.
        package_of(u).hash(&mut h);
        for key in ["target", "mode", "features", "platform", "profile"] {
            u[key].to_string().hash(&mut h);
        }
        deps.hash(&mut h);
        memo[i] = Some(h.finish());
        memo[i].unwrap_or_default()
    }
    let mut units = Vec::with_capacity(raw.len());
    for (i, u) in raw.iter().enumerate() {
        let id = identity(i, raw, &mut identities);
        let kinds: Vec<&str> = u["target"]["kind"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        units.push(Unit {
            package: package_of(u),
            own: u["pkg_id"].as_str().is_some_and(|p| p.starts_with("path+")),
            what: format!("{} {}", kinds.join(","), u["mode"].as_str().unwrap_or("?")),
            features: u["features"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(String::from))
                .collect(),
            identity: id,
            deps: u["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["index"].as_u64().map(|d| d as usize))
                .collect(),
        });
    }
    Ok(units)
}

/// "name@version" of a unit's package.
fn package_of(unit: &Value) -> String {
    let id = unit["pkg_id"].as_str().unwrap_or_default();
    id.rsplit_once('#').map_or(id, |(_, p)| p).to_string()
}

fn name(package: &str) -> &str {
    package.split('@').next().unwrap_or(package)
}

/// The units of `a` that `b` would compile again although everything they depend on is
/// shared: the causes of a rebuild (the units above them follow).
fn root_causes<'a>(a: &'a [Unit], b: &[Unit]) -> Vec<&'a Unit> {
    let shared: HashSet<u64> = b.iter().map(|u| u.identity).collect();
    a.iter()
        .filter(|u| !shared.contains(&u.identity))
        .filter(|u| u.deps.iter().all(|&d| shared.contains(&a[d].identity)))
        .collect()
}

/// One line per cause: the package, what it compiles and its features in both builds.
fn explain(unit: &Unit, a_name: &str, b: &[Unit], b_name: &str) -> String {
    let other: BTreeSet<String> = b
        .iter()
        .filter(|o| o.package == unit.package && o.what == unit.what)
        .map(|o| format!("[{}]", o.features.join(",")))
        .collect();
    let other = match other.len() {
        0 => "not at all".to_string(),
        _ => other.into_iter().collect::<Vec<_>>().join(" and "),
    };
    format!(
        "{} ({}): [{}] for {a_name}, {other} for {b_name}",
        unit.package,
        unit.what,
        unit.features.join(",")
    )
}

/// What would make the test build compile again what `cargo run` compiled, beyond Burn's
/// dispatch layer and headlab's crates, or make `cargo run --features wgpu,ndarray` differ
/// from the test build, one line each.
pub fn drift(root: &Path) -> Result<Vec<String>> {
    let run = unit_graph(root, &["build", "--release", "-p", "headlab"])?;
    let run_gpu = unit_graph(
        root,
        &[
            "build",
            "--release",
            "-p",
            "headlab",
            "--features",
            "wgpu,ndarray",
        ],
    )?;
    let test = unit_graph(root, &["test", "--release", "--workspace", "--no-run"])?;
    if run.is_empty() {
        bail!("cargo planned no unit for the headlab binary");
    }
    let causes = root_causes(&run, &test);
    let mut drift: Vec<String> = causes
        .iter()
        .filter(|u| !u.own && !BACKEND_CHANGES.contains(&name(&u.package)))
        .map(|u| explain(u, "`cargo run`", &test, "`cargo test`"))
        .collect();
    drift.extend(
        root_causes(&run_gpu, &test)
            .iter()
            .filter(|u| !u.own)
            .map(|u| {
                explain(
                    u,
                    "`cargo run --features wgpu,ndarray`",
                    &test,
                    "`cargo test`",
                )
            }),
    );
    // The exemption must stay true: each crate in it really is changed by the backends.
    let changed: HashSet<&str> = causes.iter().map(|u| name(&u.package)).collect();
    for crate_name in BACKEND_CHANGES {
        if !changed.contains(crate_name) {
            drift.push(format!(
                "{crate_name}: built alike for both commands, so BACKEND_CHANGES in \
                 xtask/src/features.rs should not list it"
            ));
        }
    }
    // Sorted, each line once: a cause compiled for several targets or platforms says the
    // same thing.
    drift.sort();
    drift.dedup();
    Ok(drift)
}

/// `cargo xtask features`.
pub fn features() -> Result<()> {
    let drift = drift(&root())?;
    if drift.is_empty() {
        println!(
            "features: `cargo test` compiles again nothing of `cargo run` but Burn's dispatch \
             layer ({}) and what stands on it, and `cargo run --features wgpu,ndarray` plans \
             the test build's units",
            BACKEND_CHANGES.join(", ")
        );
        return Ok(());
    }
    bail!(
        "the test build would compile these again, and everything above them:\n  {}\nadd the \
         test build's features to crates/workspace-hack/Cargo.toml",
        drift.join("\n  ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(package: &str, features: &[&str], identity: u64, deps: Vec<usize>) -> Unit {
        Unit {
            package: package.into(),
            own: false,
            what: "lib build".into(),
            features: features.iter().map(|f| f.to_string()).collect(),
            identity,
            deps,
        }
    }

    /// A crate with one more feature is the cause; the crate above it, rebuilt only because
    /// of it, is not listed.
    #[test]
    fn the_cause_is_the_lowest_unit_that_differs() {
        let run = vec![
            unit("itertools@0.15.0", &[], 1, vec![]),
            unit("cubecl-ir@0.11.3", &[], 2, vec![0]),
            unit("libc@0.2.0", &[], 3, vec![]),
        ];
        let test = vec![
            unit("itertools@0.15.0", &["default"], 4, vec![]),
            unit("cubecl-ir@0.11.3", &[], 5, vec![0]),
            unit("libc@0.2.0", &[], 3, vec![]),
        ];
        let causes = root_causes(&run, &test);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].package, "itertools@0.15.0");
        assert_eq!(
            explain(causes[0], "run", &test, "test"),
            "itertools@0.15.0 (lib build): [] for run, [default] for test"
        );
    }

    /// The README's two commands share Burn's backends: a dev-dependency or bench-only crate
    /// that turns on a feature of a shared crate fails here, before anyone waits for burn-flex
    /// and burn-ndarray to compile a second time.
    #[test]
    fn run_and_test_share_every_unit_but_the_backends() {
        let drift = drift(&root()).unwrap();
        assert!(
            drift.is_empty(),
            "add these to crates/workspace-hack/Cargo.toml:\n{}",
            drift.join("\n")
        );
    }
}

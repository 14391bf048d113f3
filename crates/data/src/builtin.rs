//! The built-in corpora by name (`data.builtin`): the one list every message and doc quotes,
//! and each one's generator.

use std::fmt;
use std::str::FromStr;

use crate::corpus::{attach, copy, grammar, induction, lookup};

/// A built-in corpus (`data.builtin` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BuiltinCorpus {
    Grammar,
    Induction,
    Copy,
    Lookup,
    Attach,
    Relations,
}

/// An unknown corpus name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown built-in corpus {name:?}; valid corpora: {}",
    BuiltinCorpus::names()
)]
pub struct UnknownCorpus {
    pub name: String,
}

impl BuiltinCorpus {
    pub const ALL: [BuiltinCorpus; 6] = [
        BuiltinCorpus::Grammar,
        BuiltinCorpus::Induction,
        BuiltinCorpus::Copy,
        BuiltinCorpus::Lookup,
        BuiltinCorpus::Attach,
        BuiltinCorpus::Relations,
    ];

    /// Every corpus's name, comma-separated: the one list every message and doc quotes.
    pub fn names() -> String {
        Self::ALL.map(Self::name).join(", ")
    }

    pub fn name(self) -> &'static str {
        match self {
            BuiltinCorpus::Grammar => "grammar",
            BuiltinCorpus::Induction => "induction",
            BuiltinCorpus::Copy => "copy",
            BuiltinCorpus::Lookup => "lookup",
            BuiltinCorpus::Attach => "attach",
            BuiltinCorpus::Relations => "relations",
        }
    }

    /// Generates about `n_chars` characters (whole lines or sentences only, so the text is
    /// at least `n_chars` long unless `n_chars` is 0). `seq_len` is the sequence length of
    /// `induction` and the longest string of `copy`; `grammar` ignores it.
    pub fn generate(self, seed: u64, n_chars: usize, seq_len: usize) -> String {
        match self {
            BuiltinCorpus::Grammar => grammar(seed, n_chars),
            BuiltinCorpus::Induction => induction(seed, n_chars, seq_len),
            BuiltinCorpus::Copy => copy(seed, n_chars, seq_len),
            BuiltinCorpus::Lookup => lookup(seed, n_chars),
            BuiltinCorpus::Attach => attach(seed, n_chars),
            BuiltinCorpus::Relations => crate::relations::relations(seed, n_chars),
        }
    }
}

impl fmt::Display for BuiltinCorpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BuiltinCorpus {
    type Err = UnknownCorpus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownCorpus {
                name: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped default config and the README name every corpus the code generates, as
    /// the error messages do (they quote `BuiltinCorpus::names`).
    #[test]
    fn every_list_of_corpora_is_the_codes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let config = std::fs::read_to_string(root.join("configs/default.toml")).unwrap();
        let line = config.lines().find(|l| l.starts_with("builtin =")).unwrap();
        assert!(
            line.contains(&BuiltinCorpus::names()),
            "configs/default.toml: {line}"
        );
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        let quoted = BuiltinCorpus::ALL.map(|c| format!("\"{c}\"")).join(" | ");
        assert!(readme.contains(&quoted), "README.md does not list {quoted}");
        for corpus in BuiltinCorpus::ALL {
            assert_eq!(corpus.name().parse::<BuiltinCorpus>(), Ok(corpus));
        }
        // The message quotes the list, written out here by hand.
        assert_eq!(
            UnknownCorpus { name: "x".into() }.to_string(),
            "unknown built-in corpus \"x\"; valid corpora: grammar, induction, copy, lookup, attach, relations"
        );
    }

    #[test]
    fn names_round_trip_and_unknown_lists_valid() {
        for c in BuiltinCorpus::ALL {
            assert_eq!(c.to_string().parse::<BuiltinCorpus>().unwrap(), c);
        }
        assert_eq!(
            "induction".parse::<BuiltinCorpus>(),
            Ok(BuiltinCorpus::Induction)
        );
        let msg = "grammer".parse::<BuiltinCorpus>().unwrap_err().to_string();
        for part in ["grammer", "grammar", "induction", "copy"] {
            assert!(msg.contains(part), "{part} missing from {msg}");
        }
    }

    #[test]
    fn same_seed_same_text_other_seed_other_text() {
        for c in BuiltinCorpus::ALL {
            let a = c.generate(7, 5_000, 16);
            assert_eq!(a, c.generate(7, 5_000, 16), "{c}");
            assert_ne!(a, c.generate(8, 5_000, 16), "{c}");
            assert!(a.len() >= 5_000 && a.len() < 5_200, "{c}: {}", a.len());
            assert!(a.is_ascii(), "{c}");
        }
        assert_eq!(grammar(3, 0), "");
    }
}

//! How well a model trained on the built-in grammar corpus writes it: sentences sampled from
//! the model, parsed by the corpus's own parser (`headlab_data::corpus`).

use headlab_data::Tokenizer;
use headlab_data::corpus::{parse_sentence, well_formed};
use headlab_data::syntax::parse_text;
use headlab_model::{Gpt, Sampling};

use crate::config::RunConfig;

/// The shares of sampled sentences the grammar accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grammaticality {
    /// Sentences sampled.
    pub sentences: usize,
    /// Share with the grammar's structure, whatever the number of their words.
    pub well_formed: f64,
    /// Share that are well-formed and whose every determiner and verb agrees.
    pub agreeing: f64,
    /// In the well-formed sentences, per construction (what stands between a verb and its
    /// subject, [`headlab_data::syntax::Construction::ALL`]'s order): verbs, and of them those
    /// that agree.
    pub by_construction: [(usize, usize); 3],
}

/// A share as a whole percentage, halves rounded up: the one rule of the terminal, the run
/// page (`Math.round` in assets/report.js) and every summary that prints a grammar share, so
/// 0.945 reads 95% everywhere.
pub fn percent(share: f64) -> String {
    format!("{}%", (100.0 * share).round())
}

/// `n` sentences, each sampled after ".\n" (the end of a sentence, as the corpus separates
/// them) at temperature 1, seeded, until its first "." or newline, then parsed. A sentence
/// cut by a newline, or still open after twice the context (the corpus's longest are about
/// 80 characters), is counted as neither. `None` where the tokenizer has no single token for "\n"
/// or "." (the grammar corpus's char and byte tokenizers both have).
pub fn grammaticality(
    model: &Gpt,
    tokenizer: &Tokenizer,
    n: usize,
    seed: u64,
) -> Option<Grammaticality> {
    let single = |s: &str| match tokenizer.encode(s).ok()?.as_slice() {
        [token] => Some(*token),
        _ => None,
    };
    let (newline, dot) = (single("\n")?, single(".")?);
    if n == 0 {
        return None;
    }
    let sampling = Sampling {
        seed,
        ..Sampling::default()
    };
    let max_new = 2 * model.config.block_size;
    let rows = model
        .generate_rows(&[dot, newline], n, max_new, &sampling, &[dot, newline])
        .ok()?;
    let (mut formed, mut agreeing) = (0usize, 0usize);
    let mut by_construction = [(0usize, 0usize); 3];
    for row in &rows {
        let text = tokenizer.decode(row);
        let sentence = text.trim_start_matches(' ');
        if row.last() != Some(&dot) {
            continue;
        }
        if well_formed(sentence) {
            formed += 1;
            agreeing += usize::from(parse_sentence(sentence).is_ok());
            if let Ok(syntax) = parse_text(sentence) {
                for (total, counts) in by_construction.iter_mut().zip(syntax.agreement_counts()) {
                    total.0 += counts.0;
                    total.1 += counts.1;
                }
            }
        }
    }
    Some(Grammaticality {
        sentences: n,
        well_formed: formed as f64 / n as f64,
        agreeing: agreeing as f64 / n as f64,
        by_construction,
    })
}

/// Whether `config` trains on the built-in grammar corpus, the text [`grammaticality`] parses.
pub fn is_grammar_run(config: &RunConfig) -> bool {
    config.data.path.is_none() && config.data.builtin.as_deref() == Some("grammar")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_halves_up_as_the_page_does() {
        // 100 * 0.945 is 94.5 in f64; `{:.0}` would print 94 (half to even), JS's
        // Math.round 95.
        assert_eq!(100.0 * 0.945, 94.5);
        assert_eq!(percent(0.945), "95%");
        assert_eq!(percent(0.944), "94%");
        assert_eq!(percent(0.0), "0%");
        assert_eq!(percent(1.0), "100%");
    }
}

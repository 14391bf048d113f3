//! The dependencies of grammar text, from the corpus's own parser: every word's place in the
//! text, what each word depends on, and where each verb writes its number. What
//! `headlab-heads` scores attention heads against (Clark et al. 2019, "What does BERT look
//! at?").
//!
//! Offsets are byte offsets into the text given; the grammar is ASCII, so they are also
//! character indices, the positions of a char-level model.
//!
//! A causal model's word can only look back, so every dependency is written from the later
//! word (`from`, the query) to the earlier one (`to`, the key), whichever of the two is the
//! head in the grammar's tree:
//!
//! | relation | from -> to | example |
//! |---|---|---|
//! | `subject` | a verb -> the noun it agrees with | "the dog near the cats **runs**" -> dog |
//! | `determiner` | a noun -> its determiner | "every tall **spy**" -> every |
//! | `antecedent` | a relative clause's verb -> the noun the clause modifies | "the dogs that the cat **sees**" -> dogs |
//! | `object` | an object noun -> its verb | "sees the **cat**" -> sees |
//! | `preposition` | a preposition's object -> the preposition | "near the **cats**" -> near; "with **binoculars**" -> with |
//!
//! Agreement is read per verb ([`Agreement`]): its subject, its attractor (the nearest noun
//! before it in its sentence that is not its subject: "cats" in "the dog near the cats runs",
//! "dogs" for "sees" in "the dogs that the cat sees run"), and where its number is written.

use std::fmt;
use std::ops::Range;

use serde::Serialize;

use crate::corpus::{
    GrammarError, INTRANSITIVE_VERBS, Inflected, NOUNS, PREPOSITIONS, SentenceKind,
    TRANSITIVE_VERBS, inflection, parse_parts,
};

/// A dependency, named by what the later word finds (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Relation {
    /// A verb -> the head noun of its subject (the noun it agrees with).
    Subject,
    /// A noun -> its determiner.
    Determiner,
    /// A relative clause's verb -> the noun before "that".
    Antecedent,
    /// An object noun -> its verb.
    Object,
    /// The last word of a prepositional phrase -> its preposition ("near", "with").
    Preposition,
}

impl Relation {
    pub const ALL: [Relation; 5] = [
        Relation::Subject,
        Relation::Determiner,
        Relation::Antecedent,
        Relation::Object,
        Relation::Preposition,
    ];

    /// The name files and labels use.
    pub fn name(self) -> &'static str {
        match self {
            Relation::Subject => "subject",
            Relation::Determiner => "determiner",
            Relation::Antecedent => "antecedent",
            Relation::Object => "object",
            Relation::Preposition => "preposition",
        }
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A word's class in the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WordClass {
    Determiner,
    Adjective,
    Noun,
    Verb,
    /// "that", opening a relative clause.
    That,
    /// "near", "behind", "beside" or "with".
    Preposition,
    /// A word of the fixed phrase after "with" ("a", "telescope"; the grammar does not parse it).
    Attribute,
}

/// One word of the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    pub form: String,
    pub class: WordClass,
    /// Byte offset of its first character.
    pub start: usize,
    /// One past its last character: the offset of its boundary, the space or "." after it.
    pub end: usize,
    /// Number of a noun or verb as written; `None` for other words.
    pub plural: Option<bool>,
    /// Index of its sentence in [`Syntax::sentences`].
    pub sentence: usize,
}

impl Word {
    /// The word's characters and its boundary, `start..end + 1`: where a char-level model
    /// keeps what it read of the word. (On the default run, the head that carries the
    /// subject's number to the verb puts its attention on the space after the subject noun,
    /// not on the noun's letters.)
    pub fn with_boundary(&self) -> Range<usize> {
        self.start..self.end + 1
    }
}

/// A dependency between two words, by index into [`Syntax::words`]: `from` is the later word
/// (the query), `to` the earlier one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Arc {
    pub relation: Relation,
    pub from: usize,
    pub to: usize,
}

/// One verb's agreement: what it agrees with, what could mislead it, where its number goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agreement {
    /// The verb's word index.
    pub verb: usize,
    /// Whether it is the main verb (else a relative clause's).
    pub main: bool,
    /// The word index of the noun it agrees with.
    pub subject: usize,
    /// The nearest noun before the verb in its sentence that is not its subject, if any.
    pub attractor: Option<usize>,
    /// The number of the subject: the form that agrees is `forms.form(subject_plural)`.
    pub subject_plural: bool,
    /// The verb's two forms.
    pub forms: Inflected,
    /// Where the verb's number is written: the offset of the first character at which the
    /// singular and plural forms differ (the "s" of "runs", or the boundary after "run"; the
    /// "e" of "watches"). Both forms share everything before it, the stem.
    pub number_at: usize,
}

impl Agreement {
    /// The last character of the stem, `number_at - 1`: the position whose next-character
    /// prediction writes the number, so where attention must already have fetched the
    /// subject's number (a causal model predicts the character at `i + 1` from position `i`).
    pub fn decision_at(&self) -> usize {
        self.number_at - 1
    }

    /// Whether the attractor's number differs from the subject's: the cases that test agreement.
    pub fn attractor_mismatch(&self, words: &[Word]) -> bool {
        self.attractor
            .is_some_and(|a| words[a].plural != Some(self.subject_plural))
    }

    /// What stands between the verb's subject and the verb ([`Construction`]).
    pub fn construction(&self, words: &[Word]) -> Construction {
        let between = || words[(self.subject + 1).min(self.verb)..self.verb].iter();
        if between().any(|w| w.class == WordClass::That) {
            Construction::Relative
        } else if between().any(|w| w.class == WordClass::Preposition) {
            Construction::Prepositional
        } else {
            Construction::Nothing
        }
    }
}

impl Syntax {
    /// Per [`Construction`] in [`Construction::ALL`]'s order: the verbs of the text, and how
    /// many of them agree with their subject as written (a parse does not check numbers, so
    /// a sentence that disagrees counts its verbs too).
    pub fn agreement_counts(&self) -> [(usize, usize); 3] {
        let mut counts = [(0, 0); 3];
        for a in &self.agreements {
            let construction = a.construction(&self.words);
            let k = Construction::ALL
                .iter()
                .position(|&c| c == construction)
                .expect("every construction is listed");
            counts[k].0 += 1;
            counts[k].1 += usize::from(self.words[a.verb].plural == Some(a.subject_plural));
        }
        counts
    }
}

/// What stands between a verb and its subject: agreement across it is what a head must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Construction {
    /// A relative clause: "the dog that the cats see RUNS".
    Relative,
    /// A prepositional phrase: "the dog near the cats RUNS".
    Prepositional,
    /// Nothing but adjectives: "the quiet dog RUNS", or a relative clause's own subject and
    /// verb.
    Nothing,
}

impl Construction {
    /// Every construction, in the order files list them.
    pub const ALL: [Construction; 3] = [
        Construction::Prepositional,
        Construction::Relative,
        Construction::Nothing,
    ];

    /// The name files and labels use.
    pub fn name(self) -> &'static str {
        match self {
            Construction::Relative => "relative",
            Construction::Prepositional => "prepositional",
            Construction::Nothing => "nothing",
        }
    }
}

/// One sentence of the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentenceSpan {
    pub kind: SentenceKind,
    /// Byte offsets of its first character and one past its ".".
    pub bytes: Range<usize>,
    /// Its words, as indices into [`Syntax::words`].
    pub words: Range<usize>,
}

/// The parse of a grammar text: its words, dependencies and agreements, with word indices
/// that run over the whole text (so "the word k back" may be in the sentence before).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Syntax {
    pub words: Vec<Word>,
    /// In text order of `from`, then relation.
    pub arcs: Vec<Arc>,
    /// One per verb, in text order.
    pub agreements: Vec<Agreement>,
    pub sentences: Vec<SentenceSpan>,
}

/// Why a text could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    #[error("sentence {index} at byte {offset} ({sentence:?}) is not in the grammar: {source}")]
    Grammar {
        index: usize,
        offset: usize,
        sentence: String,
        #[source]
        source: GrammarError,
    },
    #[error("the text ends inside a sentence, at byte {offset}: {rest:?}")]
    Unfinished { offset: usize, rest: String },
    #[error("expected one sentence, found {found}")]
    NotOneSentence { found: usize },
}

/// Parses one sentence (ending in ".").
pub fn parse_syntax(sentence: &str) -> Result<Syntax, SyntaxError> {
    let syntax = parse_text(sentence)?;
    match syntax.sentences.len() {
        1 => Ok(syntax),
        found => Err(SyntaxError::NotOneSentence { found }),
    }
}

/// Parses grammar text: sentences ending in ".", separated by whitespace, as
/// [`crate::corpus::grammar`] writes them. Structure only: a sentence whose verb disagrees
/// still has its dependencies (each [`Agreement`] says which form would agree). Every
/// sentence must be in the grammar, so cut a text at sentence ends.
pub fn parse_text(text: &str) -> Result<Syntax, SyntaxError> {
    let mut syntax = Syntax::default();
    let mut at = 0;
    loop {
        at += text[at..].len() - text[at..].trim_start().len();
        if at == text.len() {
            return Ok(syntax);
        }
        let Some(dot) = text[at..].find('.').map(|i| at + i) else {
            return Err(SyntaxError::Unfinished {
                offset: at,
                rest: text[at..].to_string(),
            });
        };
        add_sentence(&mut syntax, text, at..dot + 1)?;
        at = dot + 1;
    }
}

/// `(start, end)` byte offsets of the whitespace-separated words of `text[range]`.
fn word_offsets(text: &str, range: Range<usize>) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text[range.clone()].char_indices() {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(range.start + i),
            (true, Some(s)) => {
                out.push((s, range.start + i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, range.end));
    }
    out
}

fn add_sentence(syntax: &mut Syntax, text: &str, bytes: Range<usize>) -> Result<(), SyntaxError> {
    let index = syntax.sentences.len();
    let sentence = &text[bytes.clone()];
    let (parse, parts) = parse_parts(sentence, false).map_err(|source| SyntaxError::Grammar {
        index,
        offset: bytes.start,
        sentence: sentence.to_string(),
        source,
    })?;
    // The "." is the last word's boundary, not a word.
    let offsets = word_offsets(text, bytes.start..bytes.end - 1);
    let base = syntax.words.len();
    for &(start, end) in &offsets {
        let form = &text[start..end];
        let class = if form == "that" {
            WordClass::That
        } else if form == "with" || PREPOSITIONS.contains(&form) {
            WordClass::Preposition
        } else {
            // Nouns, determiners, adjectives and verbs are set from the parse below.
            WordClass::Attribute
        };
        syntax.words.push(Word {
            form: form.to_string(),
            class,
            start,
            end,
            plural: None,
            sentence: index,
        });
    }
    let words = &mut syntax.words[base..];
    for &(det, noun) in &parts.phrases {
        words[det].class = WordClass::Determiner;
        for adjective in &mut words[det + 1..noun] {
            adjective.class = WordClass::Adjective;
        }
        words[noun].class = WordClass::Noun;
        words[noun].plural = inflection(&NOUNS, &words[noun].form);
    }
    let forms = |word: &str| {
        TRANSITIVE_VERBS
            .iter()
            .chain(&INTRANSITIVE_VERBS)
            .find(|f| f.singular == word || f.plural == word)
            .copied()
            .expect("the parser accepted it as a verb")
    };
    for &verb in &parts.verbs {
        words[verb].class = WordClass::Verb;
        words[verb].plural = Some(forms(&words[verb].form).plural == words[verb].form);
    }

    // Dependencies, in the sentence's own word indices; `parts` lists the subject's phrase
    // first and the main verb last.
    let noun = |phrase: usize| parts.phrases[phrase].1;
    let main = *parts.verbs.last().expect("every sentence has a main verb");
    let mut arcs = Vec::new();
    let mut subjects = vec![(main, noun(0))];
    for &(det, n) in &parts.phrases {
        arcs.push((Relation::Determiner, n, det));
    }
    match parse.kind {
        SentenceKind::SubjectRelative => {
            let relative = parts.verbs[0];
            subjects.push((relative, noun(0)));
            arcs.push((Relation::Antecedent, relative, noun(0)));
            arcs.push((Relation::Object, noun(1), relative));
        }
        SentenceKind::ObjectRelative => {
            let relative = parts.verbs[0];
            subjects.push((relative, noun(1)));
            arcs.push((Relation::Antecedent, relative, noun(0)));
        }
        SentenceKind::PrepositionalSubject => {
            // "near" follows the subject noun directly.
            arcs.push((Relation::Preposition, noun(1), noun(0) + 1));
        }
        _ => {}
    }
    // The main verb's object, when it has one, is the phrase after it.
    if let Some(&(_, object)) = parts.phrases.iter().find(|&&(det, _)| det > main) {
        arcs.push((Relation::Object, object, main));
        if let Some(with) = (object + 1..words.len()).find(|&i| words[i].form == "with") {
            arcs.push((Relation::Preposition, words.len() - 1, with));
        }
    }
    for &(verb, subject) in &subjects {
        arcs.push((Relation::Subject, verb, subject));
    }
    arcs.sort_by_key(|&(relation, from, _)| (from, relation));
    syntax
        .arcs
        .extend(arcs.into_iter().map(|(relation, from, to)| Arc {
            relation,
            from: base + from,
            to: base + to,
        }));

    subjects.sort_unstable();
    for (verb, subject) in subjects {
        let attractor = (0..verb)
            .rev()
            .find(|&i| i != subject && words[i].class == WordClass::Noun);
        let forms = forms(&words[verb].form);
        let stem = forms
            .singular
            .bytes()
            .zip(forms.plural.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        syntax.agreements.push(Agreement {
            verb: base + verb,
            main: verb == main,
            subject: base + subject,
            attractor: attractor.map(|a| base + a),
            subject_plural: words[subject].plural.expect("a noun has a number"),
            forms,
            number_at: words[verb].start + stem,
        });
    }
    syntax.sentences.push(SentenceSpan {
        kind: parse.kind,
        bytes,
        words: base..syntax.words.len(),
    });
    Ok(())
}

/// The longest "attend k words back" of [`fixed_offset_baseline`].
pub const BASELINE_MAX_OFFSET: usize = 8;

/// The best fixed-offset rule for one relation, Clark et al.'s baseline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Baseline {
    pub relation: Relation,
    /// The rule "attend to the word `offset` back" that scores best (the nearest on ties).
    pub offset: usize,
    /// The share of the relation's arcs it gets right (0 when there are none).
    pub accuracy: f64,
    /// Arcs of the relation counted.
    pub n: usize,
}

/// The best "attend to the word k back" rule (`k` in `1..=max_offset`) for the arcs of
/// `relation` among `arcs`, from the parse alone. Only backward offsets: the later word is
/// the query, and a causal model cannot look forward. k counts words, across sentences.
pub fn fixed_offset_baseline<'a>(
    relation: Relation,
    arcs: impl IntoIterator<Item = &'a Arc>,
    max_offset: usize,
) -> Baseline {
    let mut hits = vec![0usize; max_offset + 1];
    let mut n = 0;
    for arc in arcs.into_iter().filter(|a| a.relation == relation) {
        n += 1;
        let k = arc.from - arc.to;
        if k <= max_offset {
            hits[k] += 1;
        }
    }
    // Index 0 (attend to oneself) is never a dependency; max_by_key keeps the last maximum,
    // so walk from the far end to get the nearest.
    let (offset, &best) = hits
        .iter()
        .enumerate()
        .skip(1)
        .rev()
        .max_by_key(|&(_, h)| h)
        .unwrap_or((1, &0));
    Baseline {
        relation,
        offset,
        accuracy: if n == 0 { 0.0 } else { best as f64 / n as f64 },
        n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpus::grammar;

    use Relation::*;

    /// Verbs counted per construction and, of them, those that agree, read by hand off
    /// sentences that agree and sentences that do not.
    #[test]
    fn agreement_counts_count_verbs_that_agree_per_construction() {
        // PP: "runs" agrees, "run" does not; RC: "sees"/"see" (nothing between) and the main
        // verb across the clause; nothing: "sleeps".
        let text = "the dog near the cats runs. the dog near the cats run. the dogs that the \
                    spy see run. the quiet spy sleeps.";
        let s = parse_text(text).unwrap();
        // [prepositional, relative, nothing]: (verbs, agreeing).
        assert_eq!(s.agreement_counts(), [(2, 1), (1, 1), (2, 1)]);
    }

    /// Each verb's construction, read by hand off sentences of each kind.
    #[test]
    fn constructions_name_what_stands_between_subject_and_verb() {
        let text = "the dog near the cats runs. the dogs that the spy sees run. the quiet \
                    spy runs. the child that the quiet spy follows finds the dogs.";
        let s = parse_text(text).unwrap();
        let got: Vec<(&str, Construction)> = s
            .agreements
            .iter()
            .map(|a| (s.words[a.verb].form.as_str(), a.construction(&s.words)))
            .collect();
        use Construction::*;
        assert_eq!(
            got,
            [
                ("runs", Prepositional),
                ("sees", Nothing),
                ("run", Relative),
                ("runs", Nothing),
                ("follows", Nothing),
                ("finds", Relative),
            ]
        );
    }

    /// `(relation, from word, to word)` of a parse, words by their form and index.
    fn arcs_of(s: &Syntax) -> Vec<(Relation, usize, usize)> {
        s.arcs.iter().map(|a| (a.relation, a.from, a.to)).collect()
    }

    fn spans(s: &Syntax) -> Vec<(&str, usize, usize)> {
        s.words
            .iter()
            .map(|w| (w.form.as_str(), w.start, w.end))
            .collect()
    }

    /// `(verb, subject, attractor, number_at)` of every verb.
    fn agreements(s: &Syntax) -> Vec<(usize, usize, Option<usize>, usize)> {
        s.agreements
            .iter()
            .map(|a| (a.verb, a.subject, a.attractor, a.number_at))
            .collect()
    }

    // Each sentence below is parsed by hand: spans counted from the text, word indices from 0.

    #[test]
    fn intransitive() {
        // "the dogs run."  t0-3 d4-8 r9-12 .12
        let s = parse_syntax("the dogs run.").unwrap();
        assert_eq!(s.sentences[0].kind, SentenceKind::Intransitive);
        assert_eq!(spans(&s), [("the", 0, 3), ("dogs", 4, 8), ("run", 9, 12)]);
        assert_eq!(arcs_of(&s), [(Determiner, 1, 0), (Subject, 2, 1)]);
        // "run" / "runs" differ at the fourth letter: offset 9 + 3.
        assert_eq!(agreements(&s), [(2, 1, None, 12)]);
        assert_eq!(s.agreements[0].decision_at(), 11);
        assert!(s.agreements[0].main && s.agreements[0].subject_plural);
        assert_eq!(s.words[1].with_boundary(), 4..9);
    }

    #[test]
    fn transitive() {
        // "a tall cat sees the birds."
        //  a0-1 tall2-6 cat7-10 sees11-15 the16-19 birds20-25
        let s = parse_syntax("a tall cat sees the birds.").unwrap();
        assert_eq!(s.sentences[0].kind, SentenceKind::Transitive);
        assert_eq!(
            spans(&s),
            [
                ("a", 0, 1),
                ("tall", 2, 6),
                ("cat", 7, 10),
                ("sees", 11, 15),
                ("the", 16, 19),
                ("birds", 20, 25)
            ]
        );
        assert_eq!(
            s.words.iter().map(|w| w.class).collect::<Vec<_>>(),
            [
                WordClass::Determiner,
                WordClass::Adjective,
                WordClass::Noun,
                WordClass::Verb,
                WordClass::Determiner,
                WordClass::Noun
            ]
        );
        assert_eq!(
            arcs_of(&s),
            [
                (Determiner, 2, 0),
                (Subject, 3, 2),
                (Determiner, 5, 4),
                (Object, 5, 3)
            ]
        );
        // "sees" / "see": the "s" at 11 + 3.
        assert_eq!(agreements(&s), [(3, 2, None, 14)]);
        assert!(!s.agreements[0].subject_plural);
    }

    #[test]
    fn subject_relative() {
        // "the dogs that see the cat run."
        //  the0-3 dogs4-8 that9-13 see14-17 the18-21 cat22-25 run26-29
        let s = parse_syntax("the dogs that see the cat run.").unwrap();
        assert_eq!(s.sentences[0].kind, SentenceKind::SubjectRelative);
        assert_eq!(
            spans(&s),
            [
                ("the", 0, 3),
                ("dogs", 4, 8),
                ("that", 9, 13),
                ("see", 14, 17),
                ("the", 18, 21),
                ("cat", 22, 25),
                ("run", 26, 29)
            ]
        );
        assert_eq!(s.words[2].class, WordClass::That);
        assert_eq!(
            arcs_of(&s),
            [
                (Determiner, 1, 0),
                (Subject, 3, 1),
                (Antecedent, 3, 1),
                (Determiner, 5, 4),
                (Object, 5, 3),
                (Subject, 6, 1)
            ]
        );
        // "see": no other noun before it. "run": the relative clause's "cat" is the attractor.
        assert_eq!(agreements(&s), [(3, 1, None, 17), (6, 1, Some(5), 29)]);
        assert!(!s.agreements[0].main && s.agreements[1].main);
        assert!(s.agreements[1].attractor_mismatch(&s.words));
    }

    #[test]
    fn object_relative() {
        // "the dogs that the cat sees run."
        //  the0-3 dogs4-8 that9-13 the14-17 cat18-21 sees22-26 run27-30
        let s = parse_syntax("the dogs that the cat sees run.").unwrap();
        assert_eq!(s.sentences[0].kind, SentenceKind::ObjectRelative);
        assert_eq!(
            spans(&s),
            [
                ("the", 0, 3),
                ("dogs", 4, 8),
                ("that", 9, 13),
                ("the", 14, 17),
                ("cat", 18, 21),
                ("sees", 22, 26),
                ("run", 27, 30)
            ]
        );
        assert_eq!(
            arcs_of(&s),
            [
                (Determiner, 1, 0),
                (Determiner, 4, 3),
                (Subject, 5, 4),
                (Antecedent, 5, 1),
                (Subject, 6, 1)
            ]
        );
        // "sees" agrees with "cat", and "dogs" could mislead it; "run" the other way round.
        assert_eq!(agreements(&s), [(5, 4, Some(1), 25), (6, 1, Some(4), 30)]);
        assert!(!s.agreements[0].subject_plural && s.agreements[1].subject_plural);
    }

    #[test]
    fn prepositional_subject() {
        // "every spy near some children watches the man."
        //  every0-5 spy6-9 near10-14 some15-19 children20-28 watches29-36 the37-40 man41-44
        let s = parse_syntax("every spy near some children watches the man.").unwrap();
        assert_eq!(s.sentences[0].kind, SentenceKind::PrepositionalSubject);
        assert_eq!(
            spans(&s),
            [
                ("every", 0, 5),
                ("spy", 6, 9),
                ("near", 10, 14),
                ("some", 15, 19),
                ("children", 20, 28),
                ("watches", 29, 36),
                ("the", 37, 40),
                ("man", 41, 44)
            ]
        );
        assert_eq!(s.words[2].class, WordClass::Preposition);
        assert_eq!(
            arcs_of(&s),
            [
                (Determiner, 1, 0),
                (Determiner, 4, 3),
                (Preposition, 4, 2),
                (Subject, 5, 1),
                (Determiner, 7, 6),
                (Object, 7, 5)
            ]
        );
        // "watches" / "watch" differ at the sixth letter, the "e": 29 + 5.
        assert_eq!(agreements(&s), [(5, 1, Some(4), 34)]);
        assert_eq!(s.words[4].plural, Some(true));
    }

    #[test]
    fn attachment_ambiguity() {
        // "the detective follows the spy with binoculars."
        //  the0-3 detective4-13 follows14-21 the22-25 spy26-29 with30-34 binoculars35-45
        let s = parse_syntax("the detective follows the spy with binoculars.").unwrap();
        assert_eq!(s.sentences[0].kind, SentenceKind::AttachmentAmbiguity);
        assert_eq!(
            spans(&s),
            [
                ("the", 0, 3),
                ("detective", 4, 13),
                ("follows", 14, 21),
                ("the", 22, 25),
                ("spy", 26, 29),
                ("with", 30, 34),
                ("binoculars", 35, 45)
            ]
        );
        assert_eq!(s.words[6].class, WordClass::Attribute);
        assert_eq!(
            arcs_of(&s),
            [
                (Determiner, 1, 0),
                (Subject, 2, 1),
                (Determiner, 4, 3),
                (Object, 4, 2),
                (Preposition, 6, 5)
            ]
        );
        assert_eq!(agreements(&s), [(2, 1, None, 20)]);
        // A two-word attribute: the preposition arc comes from its last word.
        let s = parse_syntax("two men watch a bird with a telescope.").unwrap();
        assert_eq!(
            s.arcs.last().map(|a| (a.relation, a.from, a.to)),
            Some((Preposition, 7, 5))
        );
    }

    #[test]
    fn a_text_runs_its_indices_across_sentences() {
        // "the dog runs. two cats sleep.\n" : the second sentence starts at byte 14, word 3.
        let s = parse_text("the dog runs. two cats sleep.\n").unwrap();
        assert_eq!(s.sentences.len(), 2);
        assert_eq!(s.sentences[1].bytes, 14..29);
        assert_eq!(s.sentences[1].words, 3..6);
        assert_eq!(
            spans(&s)[3..],
            [("two", 14, 17), ("cats", 18, 22), ("sleep", 23, 28)]
        );
        assert_eq!(arcs_of(&s)[2..], [(Determiner, 4, 3), (Subject, 5, 4)]);
        // The attractor stays inside the verb's own sentence: "dog" is not one for "sleep".
        assert_eq!(agreements(&s), [(2, 1, None, 11), (5, 4, None, 28)]);
        assert_eq!(s.words[4].sentence, 1);
    }

    #[test]
    fn broken_text_is_an_error_that_says_where() {
        let err = parse_text("the dog runs. the dog runs the cat.").unwrap_err();
        assert!(
            matches!(
                err,
                SyntaxError::Grammar {
                    index: 1,
                    offset: 14,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            parse_text("the dog runs. the cat").unwrap_err(),
            SyntaxError::Unfinished {
                offset: 14,
                rest: "the cat".into()
            }
        );
        assert_eq!(
            parse_syntax("the dog runs. the cat runs.").unwrap_err(),
            SyntaxError::NotOneSentence { found: 2 }
        );
        // Disagreement is no error here: the parse keeps its structure.
        let s = parse_syntax("the dog near the cats run.").unwrap();
        assert!(!s.agreements[0].subject_plural);
    }

    /// Every generated sentence parses, with one agreement per verb and every arc pointing
    /// back inside its sentence; its verb's number position holds the form's distinguishing
    /// letter or the boundary.
    #[test]
    fn generated_text_parses_whole() {
        let text = grammar(4, 20_000);
        let s = parse_text(&text).unwrap();
        assert!(s.sentences.len() > 300);
        for arc in &s.arcs {
            assert!(arc.to < arc.from);
            assert_eq!(s.words[arc.to].sentence, s.words[arc.from].sentence);
        }
        for a in &s.agreements {
            let verb = &s.words[a.verb];
            let at = text.as_bytes()[a.number_at];
            let written = if verb.plural == Some(true) {
                a.forms.plural
            } else {
                a.forms.singular
            };
            assert_eq!(verb.form, written);
            assert!(matches!(at, b's' | b'e' | b' ' | b'.'), "{}", verb.form);
            assert_eq!(a.subject_plural, verb.plural.unwrap(), "the corpus agrees");
        }
        let kinds: std::collections::HashSet<_> = s.sentences.iter().map(|x| x.kind).collect();
        assert_eq!(kinds.len(), 6);
    }

    /// The baseline set against a count written out: for "subject" on three sentences the
    /// subject is 1, 1 and 4 words back, so "attend 1 back" wins with 2 of 3.
    #[test]
    fn fixed_offset_baseline_counts_the_best_offset() {
        let s = parse_text("the dog runs. two cats sleep. the dog near the cats runs.").unwrap();
        let b = fixed_offset_baseline(Subject, &s.arcs, BASELINE_MAX_OFFSET);
        assert_eq!((b.offset, b.n), (1, 3));
        assert!((b.accuracy - 2.0 / 3.0).abs() < 1e-12);
        // Out of reach: the only arc ("cats" -> "near") is 2 back.
        let b = fixed_offset_baseline(Preposition, &s.arcs, 1);
        assert_eq!((b.n, b.accuracy), (1, 0.0));
        let b = fixed_offset_baseline(Antecedent, &s.arcs, 8);
        assert_eq!((b.n, b.accuracy), (0, 0.0));
        // Ties go to the nearer offset: determiners are 1 back (no adjective) or 2.
        let s = parse_text("the tall dog runs. the dog runs.").unwrap();
        let b = fixed_offset_baseline(Determiner, &s.arcs, 8);
        assert_eq!((b.offset, b.n, b.accuracy), (1, 2, 0.5));
    }
}

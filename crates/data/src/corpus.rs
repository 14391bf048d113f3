//! Built-in synthetic corpora, generated from a seed so runs need no downloads and every
//! run with the same seed sees the same text.
//!
//! Each corpus exists to make one kind of attention head appear in a small model:
//! - `grammar`: a toy English whose verbs agree with their subject across relative clauses
//!   and prepositional phrases, plus PP-attachment ambiguities ("follows the spy with
//!   binoculars"), for heads that link verbs to subjects and phrases to what they modify;
//! - `induction`: random letters repeated once per line, for induction heads;
//! - `copy`: `string|string` lines, for heads that copy from a fixed offset;
//! - `lookup`: letters each set by two earlier ones at different distances, for a task that
//!   needs two attention lookups at once (`headlab lab heads`);
//! - `attach`: "the detectives follow the spy with the camera and hide it.", where what "with"
//!   attaches to decides the number of the last verb (`headlab lab ambiguity`);
//! - `relations`: "the dog near the cats chases one of the red mice.", where the verb's
//!   number comes from its subject and the object's class from the verb
//!   ([`crate::relations`], `headlab lab relations`).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use crate::words::{
    ADJECTIVES, INTRANSITIVE_VERBS, Inflected, NEUTRAL_DETERMINERS, NOUNS, PLURAL_DETERMINERS,
    PREPOSITIONS, SINGULAR_DETERMINERS, TRANSITIVE_VERBS,
};
pub(crate) use crate::words::{inflection, w};

// ---------------------------------------------------------------------------------------
// Grammar
// ---------------------------------------------------------------------------------------

/// What follows "with" in an attachment ambiguity: instruments (binoculars modify the
/// verb) and attributes (a hat modifies the object); the text never says which.
pub const WITH_PHRASES: [&str; 6] = [
    "binoculars",
    "a telescope",
    "a camera",
    "a hat",
    "a scarf",
    "an umbrella",
];

/// The shape of a grammar sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SentenceKind {
    /// "the dogs run"
    Intransitive,
    /// "a cat sees the birds"
    Transitive,
    /// "the dogs that see the cat run": the head noun is the relative verb's subject.
    SubjectRelative,
    /// "the dogs that the cat sees run": the relative verb agrees with the inner subject
    /// and the main verb with the head noun across it.
    ObjectRelative,
    /// "the dog near the cats runs"
    PrepositionalSubject,
    /// "the detective follows the spy with binoculars"
    AttachmentAmbiguity,
}

/// One generated sentence with the facts a probe or test needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrammarSentence {
    /// Space-separated words ending in "." (no separator after it).
    pub text: String,
    pub kind: SentenceKind,
    /// Number of the head noun of the subject.
    pub subject_plural: bool,
    /// Index of the main verb among the whitespace-separated words of `text`.
    pub main_verb: usize,
}

/// `n_chars` or more characters of grammar text: sentences end in "." and are separated
/// by a space or (one time in four) a newline.
pub fn grammar(seed: u64, n_chars: usize) -> String {
    generate_grammar(seed, n_chars).0
}

/// The sentences of [`grammar`] with the same seed, in order.
pub fn grammar_sentences(seed: u64, n_chars: usize) -> Vec<GrammarSentence> {
    generate_grammar(seed, n_chars).1
}

fn generate_grammar(seed: u64, n_chars: usize) -> (String, Vec<GrammarSentence>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut text = String::with_capacity(n_chars + 64);
    let mut sentences = Vec::new();
    while text.len() < n_chars {
        if !text.is_empty() {
            text.push(if rng.random_range(0..4) == 0 {
                '\n'
            } else {
                ' '
            });
        }
        let s = sentence(&mut rng);
        text.push_str(&s.text);
        sentences.push(s);
    }
    (text, sentences)
}

fn pick<T: Copy>(rng: &mut StdRng, items: &[T]) -> T {
    items[rng.random_range(0..items.len())]
}

/// Pushes "det adj? noun" with the given number.
fn noun_phrase(rng: &mut StdRng, words: &mut Vec<&'static str>, plural: bool) {
    // "the" is the commonest determiner, as in English.
    let det = if rng.random_bool(0.6) {
        pick(rng, &NEUTRAL_DETERMINERS)
    } else if plural {
        pick(rng, &PLURAL_DETERMINERS)
    } else {
        pick(rng, &SINGULAR_DETERMINERS)
    };
    words.push(det);
    if rng.random_bool(0.3) {
        words.push(pick(rng, &ADJECTIVES));
    }
    words.push(pick(rng, &NOUNS).form(plural));
}

fn sentence(rng: &mut StdRng) -> GrammarSentence {
    let subject_plural = rng.random_bool(0.5);
    let mut words = Vec::with_capacity(16);
    noun_phrase(rng, &mut words, subject_plural);
    let kind = match rng.random_range(0..100) {
        0..15 => SentenceKind::Intransitive,
        15..30 => SentenceKind::Transitive,
        30..48 => SentenceKind::SubjectRelative,
        48..66 => SentenceKind::ObjectRelative,
        66..82 => SentenceKind::PrepositionalSubject,
        _ => SentenceKind::AttachmentAmbiguity,
    };
    // The noun between subject and main verb has a random number, so half the time it
    // is an attractor of the wrong number.
    let inner_plural = rng.random_bool(0.5);
    match kind {
        SentenceKind::SubjectRelative => {
            words.push("that");
            words.push(pick(rng, &TRANSITIVE_VERBS).form(subject_plural));
            noun_phrase(rng, &mut words, inner_plural);
        }
        SentenceKind::ObjectRelative => {
            words.push("that");
            noun_phrase(rng, &mut words, inner_plural);
            words.push(pick(rng, &TRANSITIVE_VERBS).form(inner_plural));
        }
        SentenceKind::PrepositionalSubject => {
            words.push(pick(rng, &PREPOSITIONS));
            noun_phrase(rng, &mut words, inner_plural);
        }
        _ => {}
    }
    let main_verb = words.len();
    let transitive = match kind {
        SentenceKind::Intransitive => false,
        SentenceKind::Transitive | SentenceKind::AttachmentAmbiguity => true,
        _ => rng.random_bool(0.5),
    };
    if transitive {
        words.push(pick(rng, &TRANSITIVE_VERBS).form(subject_plural));
        let object_plural = rng.random_bool(0.5);
        noun_phrase(rng, &mut words, object_plural);
        if kind == SentenceKind::AttachmentAmbiguity {
            words.push("with");
            words.push(pick(rng, &WITH_PHRASES));
        }
    } else {
        words.push(pick(rng, &INTRANSITIVE_VERBS).form(subject_plural));
    }
    GrammarSentence {
        text: words.join(" ") + ".",
        kind,
        subject_plural,
        main_verb,
    }
}

/// Why a sentence is not in the grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    #[error("word {index} {word:?}: expected {expected}")]
    Unexpected {
        index: usize,
        word: String,
        expected: &'static str,
    },
    #[error("sentence ends early: expected {expected}")]
    EarlyEnd { expected: &'static str },
    #[error(
        "word {index} {word:?} is {} but its {subject} is {}",
        number(.word_plural), opposite_number(.word_plural)
    )]
    Disagreement {
        index: usize,
        word: String,
        word_plural: bool,
        /// "subject" or "noun" (for determiners).
        subject: &'static str,
    },
}

fn number(plural: &bool) -> &'static str {
    if *plural { "plural" } else { "singular" }
}

fn opposite_number(plural: &bool) -> &'static str {
    number(&!*plural)
}

/// What [`parse_sentence`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parse {
    pub kind: SentenceKind,
    pub subject_plural: bool,
    pub main_verb: usize,
}

/// Parses one sentence (trailing "." optional) with the grammar's word lists alone and
/// checks every agreement: determiner–noun, relative verb–its subject, main verb–head
/// noun. Independent of the generator, so it catches generator bugs.
pub fn parse_sentence(sentence: &str) -> Result<Parse, GrammarError> {
    parse(sentence, true)
}

/// True when `sentence` has the grammar's structure (word classes and their order), whatever
/// the number of its words: "the dogs chases a cat." is well-formed but disagrees.
pub fn well_formed(sentence: &str) -> bool {
    parse(sentence, false).is_ok()
}

/// [`parse_sentence`], checking agreement only when `numbers`.
fn parse(sentence: &str, numbers: bool) -> Result<Parse, GrammarError> {
    parse_parts(sentence, numbers).map(|(parse, _)| parse)
}

/// Where the parser found a sentence's noun phrases and verbs, as word indices (words split
/// on whitespace, the final "." left out): what `crate::syntax` turns into dependencies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Parts {
    /// `(determiner, noun)` of every noun phrase, in order: the subject's first.
    pub phrases: Vec<(usize, usize)>,
    /// Every verb, in order: a relative clause's before the main verb.
    pub verbs: Vec<usize>,
}

/// [`parse`], also returning the [`Parts`] it found.
pub(crate) fn parse_parts(sentence: &str, numbers: bool) -> Result<(Parse, Parts), GrammarError> {
    let sentence = sentence.trim();
    let sentence = sentence.strip_suffix('.').unwrap_or(sentence);
    let words: Vec<&str> = sentence.split_whitespace().collect();
    let mut p = Parser {
        words: &words,
        i: 0,
        numbers,
        parts: Parts::default(),
    };

    let subject_plural = p.noun_phrase()?;
    let mut kind = None;
    if p.peek() == Some("that") {
        p.i += 1;
        if p.peek().is_some_and(|w| determiner_number(w).is_some()) {
            let inner = p.noun_phrase()?;
            p.verb(true, inner, "subject")?;
            kind = Some(SentenceKind::ObjectRelative);
        } else {
            p.verb(true, subject_plural, "subject")?;
            p.noun_phrase()?;
            kind = Some(SentenceKind::SubjectRelative);
        }
    } else if p.peek().is_some_and(|w| PREPOSITIONS.contains(&w)) {
        p.i += 1;
        p.noun_phrase()?;
        kind = Some(SentenceKind::PrepositionalSubject);
    }
    let main_verb = p.i;
    let transitive = p.any_verb(subject_plural)?;
    if transitive {
        p.noun_phrase()?;
        if p.peek() == Some("with") {
            p.i += 1;
            let rest = words[p.i..].join(" ");
            if !WITH_PHRASES.contains(&rest.as_str()) {
                return Err(p.unexpected("an instrument or attribute after \"with\""));
            }
            p.i = words.len();
            if kind.is_some() {
                return Err(GrammarError::Unexpected {
                    index: main_verb,
                    word: words[main_verb].to_string(),
                    expected: "no \"with\" phrase after a complex subject",
                });
            }
            kind = Some(SentenceKind::AttachmentAmbiguity);
        }
    }
    if p.i < words.len() {
        return Err(p.unexpected("the end of the sentence"));
    }
    let kind = kind.unwrap_or(if transitive {
        SentenceKind::Transitive
    } else {
        SentenceKind::Intransitive
    });
    Ok((
        Parse {
            kind,
            subject_plural,
            main_verb,
        },
        p.parts,
    ))
}

/// True when `sentence` is in the grammar and every verb agrees with its subject.
pub fn check_agreement(sentence: &str) -> bool {
    parse_sentence(sentence).is_ok()
}

fn determiner_number(word: &str) -> Option<Option<bool>> {
    if NEUTRAL_DETERMINERS.contains(&word) {
        Some(None)
    } else if SINGULAR_DETERMINERS.contains(&word) {
        Some(Some(false))
    } else if PLURAL_DETERMINERS.contains(&word) {
        Some(Some(true))
    } else {
        None
    }
}

struct Parser<'a> {
    words: &'a [&'a str],
    i: usize,
    /// Whether a word of the wrong number is an error.
    numbers: bool,
    /// What was found so far.
    parts: Parts,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.words.get(self.i).copied()
    }

    fn unexpected(&self, expected: &'static str) -> GrammarError {
        match self.peek() {
            Some(word) => GrammarError::Unexpected {
                index: self.i,
                word: word.to_string(),
                expected,
            },
            None => GrammarError::EarlyEnd { expected },
        }
    }

    fn next(&mut self, expected: &'static str) -> Result<&'a str, GrammarError> {
        let word = self.peek().ok_or(GrammarError::EarlyEnd { expected })?;
        self.i += 1;
        Ok(word)
    }

    /// "det adj* noun"; returns the noun's number.
    fn noun_phrase(&mut self) -> Result<bool, GrammarError> {
        let det_index = self.i;
        let det = self
            .peek()
            .and_then(determiner_number)
            .ok_or_else(|| self.unexpected("a determiner"))?;
        self.i += 1;
        while self.peek().is_some_and(|w| ADJECTIVES.contains(&w)) {
            self.i += 1;
        }
        let index = self.i;
        let noun = self.next("a noun")?;
        let plural = inflection(&NOUNS, noun).ok_or(GrammarError::Unexpected {
            index,
            word: noun.to_string(),
            expected: "a noun",
        })?;
        self.parts.phrases.push((det_index, index));
        match det {
            Some(det_plural) if det_plural != plural && self.numbers => {
                Err(GrammarError::Disagreement {
                    index: det_index,
                    word: self.words[det_index].to_string(),
                    word_plural: det_plural,
                    subject: "noun",
                })
            }
            _ => Ok(plural),
        }
    }

    /// A verb (transitive only if `transitive_only`) agreeing with `subject_plural`.
    fn verb(
        &mut self,
        transitive_only: bool,
        subject_plural: bool,
        subject: &'static str,
    ) -> Result<bool, GrammarError> {
        let index = self.i;
        let expected = if transitive_only {
            "a transitive verb"
        } else {
            "a verb"
        };
        let word = self.next(expected)?;
        let (transitive, plural) = match inflection(&TRANSITIVE_VERBS, word) {
            Some(p) => (true, p),
            None => match inflection(&INTRANSITIVE_VERBS, word) {
                Some(p) if !transitive_only => (false, p),
                _ => {
                    return Err(GrammarError::Unexpected {
                        index,
                        word: word.to_string(),
                        expected,
                    });
                }
            },
        };
        if plural != subject_plural && self.numbers {
            return Err(GrammarError::Disagreement {
                index,
                word: word.to_string(),
                word_plural: plural,
                subject,
            });
        }
        self.parts.verbs.push(index);
        Ok(transitive)
    }

    fn any_verb(&mut self, subject_plural: bool) -> Result<bool, GrammarError> {
        self.verb(false, subject_plural, "subject")
    }
}

// ---------------------------------------------------------------------------------------
// Induction and copy
// ---------------------------------------------------------------------------------------

fn random_letters(rng: &mut StdRng, len: usize, out: &mut String) {
    for _ in 0..len {
        out.push(char::from(b'a' + rng.random_range(0..26u8)));
    }
}

/// The 62 symbols of the induction corpus. A large alphabet keeps a symbol from recurring
/// by chance within a run, so "find the earlier occurrence of this symbol" points at one place.
pub const INDUCTION_ALPHABET: &[u8] =
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// The runs of the induction corpus: random strings over [`INDUCTION_ALPHABET`] of
/// `len/2 ..= 3*len/2` symbols (`len` 0 is treated as 1). Lengths vary so the repeat sits at no
/// fixed distance and no positional head can predict it.
pub fn induction_runs(seed: u64, n_chars: usize, len: usize) -> Vec<String> {
    let len = len.max(1);
    let (lo, hi) = ((len / 2).max(1), (3 * len / 2).max(1));
    let mut rng = StdRng::seed_from_u64(seed);
    let mut runs = Vec::new();
    let mut total = 0;
    while total < n_chars {
        let n = rng.random_range(lo..=hi);
        let run: String = (0..n)
            .map(|_| char::from(INDUCTION_ALPHABET[rng.random_range(0..INDUCTION_ALPHABET.len())]))
            .collect();
        total += 2 * n;
        runs.push(run);
    }
    runs
}

/// Every run of [`induction_runs`] written twice, back to back with no separator: the
/// second copy is predictable only by finding the earlier occurrence of the current symbol
/// and copying what followed it, which is what an induction head does (Olsson et al. 2022).
pub fn induction(seed: u64, n_chars: usize, len: usize) -> String {
    induction_runs(seed, n_chars, len)
        .into_iter()
        .map(|run| run.repeat(2))
        .collect()
}

/// The letters of the `lookup` corpus.
pub const LOOKUP_ALPHABET: &[u8] = b"abcdefghijklmnop";
/// How many letters back the first source of a `lookup` letter is: the one before the
/// current token, so no head sees it without attending one step back.
pub const LOOKUP_NEAR: usize = 2;
/// How many letters back the second source is.
pub const LOOKUP_FAR: usize = 6;
/// Share of `lookup` letters drawn at random instead of by the rule, so the text never
/// settles into a cycle and val loss has a known floor.
pub const LOOKUP_NOISE: f64 = 0.1;

/// The `lookup` rule: the letter (index into [`LOOKUP_ALPHABET`]) that follows when the
/// letter [`LOOKUP_NEAR`] back is `near` and the one [`LOOKUP_FAR`] back is `far`. Each
/// source picks one of four coordinates (the near letter's group picks the row of a 4 x 4
/// grid, the far letter's the column), so either source alone narrows 16 letters to about 4, which
/// gives training a gradient to follow, and only both give the letter. A head that averages
/// the two sources' letters mixes the near letter's column with the far letter's row.
pub fn lookup_rule(near: u8, far: u8) -> u8 {
    const GROUP: [u8; 16] = [2, 0, 3, 1, 1, 3, 0, 2, 3, 1, 2, 0, 0, 2, 1, 3];
    const PART: [u8; 16] = [1, 3, 0, 2, 3, 0, 2, 1, 0, 2, 3, 1, 2, 1, 3, 0];
    const OUT: [u8; 16] = [9, 3, 14, 0, 6, 11, 1, 15, 4, 12, 8, 2, 13, 7, 10, 5];
    OUT[usize::from(4 * GROUP[usize::from(near)] + PART[usize::from(far)])]
}

/// `n_chars` letters of [`LOOKUP_ALPHABET`] on one line: each set by [`lookup_rule`] from
/// the letters [`LOOKUP_NEAR`] and [`LOOKUP_FAR`] back, except the first [`LOOKUP_FAR`] and
/// a [`LOOKUP_NOISE`] share drawn uniformly. Predicting the next letter needs both sources
/// at once: neither is the current token, so it takes two attention lookups.
pub fn lookup(seed: u64, n_chars: usize) -> String {
    let m = LOOKUP_ALPHABET.len() as u8;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut letters: Vec<u8> = Vec::with_capacity(n_chars);
    for n in 0..n_chars {
        let letter = if n >= LOOKUP_FAR && !rng.random_bool(LOOKUP_NOISE) {
            lookup_rule(letters[n - LOOKUP_NEAR], letters[n - LOOKUP_FAR])
        } else {
            rng.random_range(0..m)
        };
        letters.push(letter);
    }
    letters
        .into_iter()
        .map(|i| char::from(LOOKUP_ALPHABET[usize::from(i)]))
        .collect()
}

/// What "with" modifies in an `attach` sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attachment {
    /// The verb: the subject uses the thing ("follow ... with the telescope").
    Verb,
    /// The object noun: the object has the thing ("the spy with the hat").
    Noun,
}

/// Things only an instrument: with one, "with" attaches to the verb.
pub const INSTRUMENTS: [&str; 3] = ["telescope", "net", "lamp"];
/// Things only worn: with one, "with" attaches to the noun.
pub const POSSESSIONS: [&str; 3] = ["hat", "scarf", "coat"];
/// Things either reading fits: the sentence's last verb says which was meant.
pub const EITHER: [&str; 3] = ["camera", "umbrella", "map"];
/// The last verb, "and <verb> it": it agrees with whoever has the thing.
pub const HOLD_VERBS: [Inflected; 3] = [w("hides", "hide"), w("drops", "drop"), w("keeps", "keep")];

/// One `attach` sentence and its facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachSentence {
    /// Space-separated words ending in "." (no separator after it).
    pub text: String,
    /// What "with" modifies.
    pub attachment: Attachment,
    /// Whether the thing allows both readings (from [`EITHER`]).
    pub ambiguous: bool,
    /// Word indices of the main verb, the object noun, "with" and "and".
    pub verb: usize,
    pub noun: usize,
    pub with: usize,
    pub and: usize,
    /// Numbers of the subject and the object.
    pub subject_plural: bool,
    pub object_plural: bool,
}

/// `n_chars` or more characters of `attach` sentences, separated by a space or (one time in
/// four) a newline. Each is "SUBJECT VERB the OBJECT [from the city] with the THING and
/// HOLD it." The thing is an instrument (the subject has it), a possession (the object has
/// it), or either, read one way or the other at random; the last verb agrees in number with
/// whoever has the thing. So when subject and object differ in number, that verb is
/// predictable only from the attachment, and for an ambiguous thing not even from that.
/// "from the city" (half the sentences) keeps the object noun from always standing next to
/// "with".
pub fn attach(seed: u64, n_chars: usize) -> String {
    attach_sentences(seed, n_chars)
        .iter()
        .enumerate()
        .fold(String::new(), |mut text, (i, s)| {
            if i > 0 {
                text.push(if i % 4 == 0 { '\n' } else { ' ' });
            }
            text.push_str(&s.text);
            text
        })
}

/// The sentences of [`attach`] with the same seed, in order.
pub fn attach_sentences(seed: u64, n_chars: usize) -> Vec<AttachSentence> {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut sentences, mut total) = (Vec::new(), 0);
    while total < n_chars {
        let s = attach_sentence(&mut rng);
        total += s.text.len() + 1;
        sentences.push(s);
    }
    sentences
}

fn attach_sentence(rng: &mut StdRng) -> AttachSentence {
    let (subject_plural, object_plural) = (rng.random_bool(0.5), rng.random_bool(0.5));
    let mut words: Vec<&'static str> = Vec::with_capacity(16);
    noun_phrase(rng, &mut words, subject_plural);
    let verb = words.len();
    words.push(pick(rng, &TRANSITIVE_VERBS).form(subject_plural));
    words.push("the");
    let noun = words.len();
    words.push(pick(rng, &NOUNS).form(object_plural));
    if rng.random_bool(0.5) {
        words.extend(["from", "the", "city"]);
    }
    let with = words.len();
    words.push("with");
    words.push("the");
    let (thing, attachment, ambiguous) = match rng.random_range(0..3) {
        0 => (pick(rng, &INSTRUMENTS), Attachment::Verb, false),
        1 => (pick(rng, &POSSESSIONS), Attachment::Noun, false),
        _ => {
            let reading = if rng.random_bool(0.5) {
                Attachment::Verb
            } else {
                Attachment::Noun
            };
            (pick(rng, &EITHER), reading, true)
        }
    };
    words.push(thing);
    let and = words.len();
    words.push("and");
    let holder_plural = match attachment {
        Attachment::Verb => subject_plural,
        Attachment::Noun => object_plural,
    };
    words.push(pick(rng, &HOLD_VERBS).form(holder_plural));
    words.push("it");
    AttachSentence {
        text: words.join(" ") + ".",
        attachment,
        ambiguous,
        verb,
        noun,
        with,
        and,
        subject_plural,
        object_plural,
    }
}

/// Lines `s|s` where `s` is random letters a–z of a random length in
/// `max(1, max_len / 2) ..= max_len`; varying the length makes the copy offset vary, so
/// a head must find the separator instead of using a fixed distance. `max_len` 0 is
/// treated as 1.
pub fn copy(seed: u64, n_chars: usize, max_len: usize) -> String {
    let max_len = max_len.max(1);
    let min_len = (max_len / 2).max(1);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut text = String::with_capacity(n_chars + 2 * max_len + 2);
    let mut s = String::with_capacity(max_len);
    while text.len() < n_chars {
        s.clear();
        let len = rng.random_range(min_len..=max_len);
        random_letters(&mut rng, len, &mut s);
        text.push_str(&s);
        text.push('|');
        text.push_str(&s);
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    /// Splits grammar text back into sentences on the separators it promises.
    fn split_sentences(text: &str) -> Vec<&str> {
        text.split_inclusive(['.'])
            .map(|s| s.trim_start_matches([' ', '\n']))
            .collect()
    }

    #[test]
    fn lexicon_forms_are_unambiguous() {
        // A form in two roles (say a noun that is also a verb) would make number or role
        // unrecoverable from the text.
        let mut seen = HashSet::new();
        let all = NOUNS
            .iter()
            .chain(&TRANSITIVE_VERBS)
            .chain(&INTRANSITIVE_VERBS)
            .flat_map(|x| [x.singular, x.plural])
            .chain(ADJECTIVES)
            .chain(NEUTRAL_DETERMINERS)
            .chain(SINGULAR_DETERMINERS)
            .chain(PLURAL_DETERMINERS)
            .chain(PREPOSITIONS)
            .chain(["that", "with"]);
        for word in all {
            assert!(seen.insert(word), "{word} appears twice");
        }
        assert!(seen.len() <= 80, "vocabulary too big: {}", seen.len());
    }

    #[test]
    fn every_generated_sentence_agrees() {
        let text = grammar(1, 300_000);
        let sentences = split_sentences(&text);
        assert!(sentences.len() > 5_000, "{}", sentences.len());
        let mut kinds = HashMap::new();
        let mut attractor_mismatches = 0;
        for s in &sentences {
            let parse = parse_sentence(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
            *kinds.entry(parse.kind).or_insert(0usize) += 1;
            // Count relative/prepositional sentences whose inner noun differs in number
            // from the head noun: the cases that test agreement across an attractor.
            if matches!(
                parse.kind,
                SentenceKind::ObjectRelative
                    | SentenceKind::SubjectRelative
                    | SentenceKind::PrepositionalSubject
            ) {
                let words: Vec<&str> = s.trim_end_matches('.').split(' ').collect();
                let inner = words[..parse.main_verb]
                    .iter()
                    .skip(2)
                    .filter_map(|w| inflection(&NOUNS, w))
                    .next_back();
                if inner.is_some_and(|p| p != parse.subject_plural) {
                    attractor_mismatches += 1;
                }
            }
        }
        assert_eq!(kinds.len(), 6, "{kinds:?}");
        assert!(
            attractor_mismatches > sentences.len() / 5,
            "{attractor_mismatches}"
        );
    }

    #[test]
    fn structured_sentences_match_text_and_parser() {
        let text = grammar(9, 20_000);
        let sentences = grammar_sentences(9, 20_000);
        assert_eq!(
            split_sentences(&text),
            sentences
                .iter()
                .map(|s| s.text.as_str())
                .collect::<Vec<_>>()
        );
        for s in &sentences {
            let parse = parse_sentence(&s.text).unwrap();
            assert_eq!(parse.kind, s.kind, "{}", s.text);
            assert_eq!(parse.subject_plural, s.subject_plural, "{}", s.text);
            assert_eq!(parse.main_verb, s.main_verb, "{}", s.text);
        }
        assert!(text.contains(". ") && text.contains(".\n"));
    }

    #[test]
    fn parser_rejects_broken_agreement() {
        for good in [
            "the dogs that the cat sees run.",
            "the dog that sees the cats runs",
            "the dog near the cats runs.",
            "some children that every spy follows like the small bird.",
            "the detective follows the spy with binoculars.",
            "a man watches two birds with a telescope",
        ] {
            assert!(check_agreement(good), "{good}");
        }
        for bad in [
            // main verb agrees with the attractor instead of the head noun
            "the dogs that the cat sees runs.",
            "the dog near the cats run.",
            "the dog that sees the cats run.",
            // relative verb disagrees with its own subject
            "the dogs that the cat see run.",
            "the dogs that sees the cat run.",
            // determiner disagrees with its noun
            "a dogs run.",
            "every big dogs run.",
            "two dog runs.",
            // not in the grammar
            "the dog runs the cat.",
            "the dog sees.",
            "the dog sees the cat with a dog.",
            "dog runs.",
            "the dog runs quickly.",
        ] {
            assert!(!check_agreement(bad), "{bad}");
        }
        let err = parse_sentence("the dogs that the cat sees runs.").unwrap_err();
        assert_eq!(
            err.to_string(),
            "word 6 \"runs\" is singular but its subject is plural"
        );
    }

    /// Well-formed is the structure alone: every wrong number of the list above is
    /// well-formed, every sentence outside the grammar is not.
    #[test]
    fn well_formed_ignores_number_only() {
        for disagreeing in [
            "the dogs that the cat sees runs.",
            "the dogs that sees the cat run.",
            "a dogs run.",
            "two dog runs.",
            "the dog runs.",
        ] {
            assert!(well_formed(disagreeing), "{disagreeing}");
        }
        for broken in [
            "the dog runs the cat.",
            "the dog sees.",
            "dog runs.",
            "the dog runs quickly.",
            "the dogs that the cat sees",
            "",
        ] {
            assert!(!well_formed(broken), "{broken}");
        }
    }

    #[test]
    fn attachment_ambiguities_appear() {
        let text = grammar(2, 50_000);
        let ambiguous = split_sentences(&text)
            .into_iter()
            .filter(|s| s.contains(" with "))
            .collect::<Vec<_>>();
        assert!(ambiguous.len() > 50, "{}", ambiguous.len());
        assert!(
            ambiguous.iter().any(|s| s.ends_with("with binoculars.")),
            "{ambiguous:?}"
        );
        // Instruments and attributes both occur after "with".
        assert!(ambiguous.iter().any(|s| s.ends_with("with a hat.")));
    }

    #[test]
    fn induction_runs_repeat_back_to_back() {
        let runs = induction_runs(5, 10_000, 16);
        let text = induction(5, 10_000, 16);
        let mut expected = String::new();
        let mut lengths = HashSet::new();
        for run in &runs {
            assert!((8..=24).contains(&run.len()), "{run}");
            assert!(
                run.bytes().all(|c| INDUCTION_ALPHABET.contains(&c)),
                "{run}"
            );
            lengths.insert(run.len());
            expected.push_str(run);
            expected.push_str(run);
        }
        assert_eq!(text, expected);
        assert!(text.len() >= 10_000);
        assert_eq!(lengths.len(), 17, "every length from 8 to 24 occurs");
        let symbols: HashSet<char> = text.chars().collect();
        assert_eq!(symbols.len(), 62, "the whole alphabet is used");
        let distinct: HashSet<&String> = runs.iter().collect();
        assert_eq!(distinct.len(), runs.len(), "runs are random, not recycled");
        assert!(
            induction_runs(5, 100, 3)
                .iter()
                .all(|r| (1..=4).contains(&r.len()))
        );
    }

    #[test]
    fn copy_lines_copy() {
        let text = copy(11, 10_000, 10);
        let mut lengths = HashSet::new();
        for line in text.lines() {
            let (a, b) = line.split_once('|').unwrap();
            assert_eq!(a, b);
            assert!((5..=10).contains(&a.len()), "{line}");
            assert!(a.bytes().all(|c| c.is_ascii_lowercase()), "{line}");
            lengths.insert(a.len());
        }
        assert_eq!(lengths.len(), 6);
        assert!(copy(1, 10, 0).lines().all(|l| l.len() == 3));
    }
}

#[cfg(test)]
mod lookup_tests {
    use super::*;
    use std::collections::HashMap;

    /// H(next | the letters at `lags` back), in nats, counted over the text.
    fn conditional_entropy(letters: &[u8], lags: &[usize]) -> f64 {
        let start = lags.iter().copied().max().unwrap_or(0);
        let mut joint: HashMap<(Vec<u8>, u8), usize> = HashMap::new();
        let mut given: HashMap<Vec<u8>, usize> = HashMap::new();
        for n in start..letters.len() {
            let key: Vec<u8> = lags.iter().map(|&l| letters[n - l]).collect();
            *joint.entry((key.clone(), letters[n])).or_default() += 1;
            *given.entry(key).or_default() += 1;
        }
        let total = (letters.len() - start) as f64;
        joint
            .iter()
            .map(|((key, _), &c)| {
                let c = c as f64;
                -(c / total) * (c / given[key] as f64).ln()
            })
            .sum()
    }

    #[test]
    fn the_next_letter_needs_both_sources_and_either_alone_leaves_it_open() {
        let text = lookup(7, 400_000);
        let letters: Vec<u8> = text
            .bytes()
            .map(|b| LOOKUP_ALPHABET.iter().position(|&a| a == b).unwrap() as u8)
            .collect();
        let m = LOOKUP_ALPHABET.len() as f64;
        let uniform = m.ln();
        // The floor: a rule letter (probability 1 - noise, plus noise/m by chance) or another.
        let hit = 1.0 - LOOKUP_NOISE + LOOKUP_NOISE / m;
        let miss = LOOKUP_NOISE / m;
        let floor = -hit * hit.ln() - (m - 1.0) * miss * miss.ln();
        // Either source alone leaves more than a nat above the floor. (With independent sources
        // it would leave four letters, 1.74 nats; the rule makes the two sources of one letter
        // correlated, through letters they share, so measured it is about 1.38.)
        for lags in [
            vec![LOOKUP_NEAR],
            vec![LOOKUP_FAR],
            vec![1, LOOKUP_NEAR],
            vec![1, LOOKUP_FAR],
        ] {
            let h = conditional_entropy(&letters, &lags);
            assert!(
                h > floor + 0.75,
                "H(next | {lags:?} back) = {h:.4}, floor {floor:.4}"
            );
        }
        // The current token alone says almost nothing.
        let h = conditional_entropy(&letters, &[1]);
        assert!(
            h > uniform - 0.05,
            "H(next | current) = {h:.4}, uniform {uniform:.4}"
        );
        // Both sources: the floor the noise sets. (Counting bias, about cells / 2N, is under
        // 0.01 nats here.)
        let h = conditional_entropy(&letters, &[LOOKUP_NEAR, LOOKUP_FAR]);
        assert!(
            (h - floor).abs() < 0.01,
            "H(next | both) = {h:.4}, floor {floor:.4}"
        );
    }

    #[test]
    fn the_rule_needs_both_sources_and_is_not_symmetric() {
        let m = LOOKUP_ALPHABET.len() as u8;
        // Every letter comes out exactly once per (near group, far part) cell: 16 distinct.
        let mut all: Vec<u8> = (0..m)
            .flat_map(|a| (0..m).map(move |b| lookup_rule(a, b)))
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 16);
        for a in 0..m {
            let mut row: Vec<u8> = (0..m).map(|b| lookup_rule(a, b)).collect();
            let mut column: Vec<u8> = (0..m).map(|b| lookup_rule(b, a)).collect();
            row.sort_unstable();
            row.dedup();
            column.sort_unstable();
            column.dedup();
            assert_eq!((row.len(), column.len()), (4, 4), "letter {a}");
        }
        let swapped = (0..m)
            .flat_map(|a| (0..m).map(move |b| (a, b)))
            .filter(|&(a, b)| lookup_rule(a, b) != lookup_rule(b, a))
            .count();
        assert!(swapped > 128, "{swapped} of 256 pairs change when swapped");
        assert_eq!(lookup(3, 1000), lookup(3, 1000));
        assert_ne!(lookup(3, 1000), lookup(4, 1000));
    }
}

#[cfg(test)]
mod attach_tests {
    use super::*;
    use std::collections::HashMap;

    /// Read from the text alone: for each thing, how often the last verb agrees with the
    /// subject, over sentences whose subject and object differ in number.
    #[test]
    fn the_last_verb_agrees_with_whoever_the_attachment_gives_the_thing() {
        let text = attach(11, 300_000);
        assert_eq!(text, attach(11, 300_000));
        let mut with_subject: HashMap<String, (usize, usize)> = HashMap::new();
        for sentence in text
            .split(['\n', ' '])
            .collect::<Vec<_>>()
            .join(" ")
            .split(". ")
        {
            let words: Vec<&str> = sentence.trim_end_matches('.').split(' ').collect();
            let verb = words
                .iter()
                .position(|w| inflection(&TRANSITIVE_VERBS, w).is_some())
                .unwrap();
            let subject = inflection(&NOUNS, words[verb - 1]).unwrap();
            let object = inflection(&NOUNS, words[verb + 2]).unwrap();
            let with = words.iter().position(|w| *w == "with").unwrap();
            let (thing, hold) = (words[with + 2], words[with + 4]);
            assert_eq!(words[with + 3], "and", "{sentence}");
            let hold = inflection(&HOLD_VERBS, hold).unwrap();
            if subject != object {
                let e = with_subject.entry(thing.to_string()).or_default();
                e.0 += usize::from(hold == subject);
                e.1 += 1;
            }
        }
        let share = |things: &[&str]| {
            let (a, n) = things.iter().fold((0, 0), |(a, n), t| {
                let (x, y) = with_subject[*t];
                (a + x, n + y)
            });
            a as f64 / n as f64
        };
        // Determined by the thing: instruments always the subject's number, possessions the
        // object's; with a thing that fits both the verb is a coin toss (ln 2 nats left).
        assert_eq!(share(&INSTRUMENTS), 1.0);
        assert_eq!(share(&POSSESSIONS), 0.0);
        let p = share(&EITHER);
        let h = -(p * p.ln() + (1.0 - p) * (1.0 - p).ln());
        assert!((h - 2f64.ln()).abs() < 0.01, "share {p}, entropy {h}");
    }

    #[test]
    fn the_noun_is_next_to_with_in_about_half_the_sentences() {
        let sentences = attach_sentences(5, 100_000);
        let adjacent = sentences.iter().filter(|s| s.with == s.noun + 1).count();
        let share = adjacent as f64 / sentences.len() as f64;
        assert!((0.45..0.55).contains(&share), "{share}");
        for s in &sentences {
            let words: Vec<&str> = s.text.trim_end_matches('.').split(' ').collect();
            assert_eq!((words[s.with], words[s.and]), ("with", "and"));
            assert!(inflection(&TRANSITIVE_VERBS, words[s.verb]).is_some());
            assert!(inflection(&NOUNS, words[s.noun]).is_some());
        }
    }
}

//! The `relations` corpus: sentences that hold a syntactic and a semantic dependency at once,
//! for `headlab lab relations`.
//!
//! "the dog near the cats chases one of the red mice." The main verb agrees in number with
//! its subject across an attractor (syntax: "chases" because of "dog", not "cats"), and the
//! object belongs to the verb's class (meaning: "chases" takes a small animal, "reads" a text,
//! "eats" a food, "plays" an instrument). So the verb's number is predictable only from the
//! subject, and the object's noun only from the verb. Both span a varying distance: a
//! prepositional phrase or a relative clause (or nothing) between subject and verb, and up to
//! two adjectives and "one of" / "some of" / "two of" between verb and object.
//!
//! A causal model predicts a word at the position before it, so each relation is read there:
//!
//! | relation | from (the predicting word) -> to | example |
//! |---|---|---|
//! | `subject` | the word before the main verb -> the subject noun | "the dog near the **cats** [chases]" -> dog |
//! | `object` | the word before the object noun -> the main verb | "chases one of the **red** [mice]" -> chases |
//!
//! A sentence with nothing between subject and verb has no subject arc: its subject noun
//! predicts the verb itself.
//!
//! [`parse_relations`] reads a sentence back with the word lists alone (not the generator's
//! record), and [`check_relations`] scores it on both relations, for samples of a model.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::syntax::{Arc, Construction, Relation};
use crate::words::{
    ADJECTIVES, Inflected, NEUTRAL_DETERMINERS, NOUNS, PLURAL_DETERMINERS, PREPOSITIONS,
    SINGULAR_DETERMINERS, inflection, w,
};

/// A main verb and the class of objects it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerbClass {
    /// The verb's two forms.
    pub verb: Inflected,
    /// What its objects are, for tables: "a small animal".
    pub class: &'static str,
    /// Its objects, the only nouns that may follow it.
    pub objects: [Inflected; 3],
}

/// The main verbs, each with its own objects: no object noun fits two verbs.
pub const VERB_CLASSES: [VerbClass; 4] = [
    VerbClass {
        verb: w("chases", "chase"),
        class: "a small animal",
        objects: [
            w("mouse", "mice"),
            w("rabbit", "rabbits"),
            w("frog", "frogs"),
        ],
    },
    VerbClass {
        verb: w("reads", "read"),
        class: "a text",
        objects: [
            w("book", "books"),
            w("letter", "letters"),
            w("poem", "poems"),
        ],
    },
    VerbClass {
        verb: w("eats", "eat"),
        class: "a food",
        objects: [w("apple", "apples"), w("cake", "cakes"), w("pear", "pears")],
    },
    VerbClass {
        verb: w("plays", "play"),
        class: "an instrument",
        objects: [
            w("drum", "drums"),
            w("flute", "flutes"),
            w("violin", "violins"),
        ],
    },
];

/// The verbs of a relative clause, "the dog that the cats SEE": they agree with the clause's
/// own subject (the attractor) and take the head noun as their object.
pub const RELATIVE_VERBS: [Inflected; 3] =
    [w("sees", "see"), w("likes", "like"), w("follows", "follow")];

/// Adjectives of an object: each fits every class, so none tells the class. All start with a
/// consonant, so "a" never needs to be "an".
pub const OBJECT_ADJECTIVES: [&str; 4] = ["red", "green", "new", "little"];

/// What may stand between the verb and its object's determiner: "one of the mice".
pub const PARTITIVES: [&str; 3] = ["one", "some", "two"];

/// One sentence of the corpus, with its words and where each relation's words are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationSentence {
    /// Space-separated words ending in "." (no separator after it).
    pub text: String,
    /// What stands between subject and verb.
    pub construction: Construction,
    /// Word indices (words split on spaces, the "." left out) of the subject noun, the
    /// attractor noun (the prepositional phrase's or the relative clause's), the main verb and
    /// the object noun.
    pub subject: usize,
    pub attractor: Option<usize>,
    pub verb: usize,
    pub object: usize,
    /// Index of the main verb's class in [`VERB_CLASSES`].
    pub class: usize,
    pub subject_plural: bool,
    /// The attractor's number; `None` without one.
    pub attractor_plural: Option<bool>,
    pub object_plural: bool,
}

impl RelationSentence {
    /// Its words: split on spaces, the final "." left out.
    pub fn words(&self) -> Vec<&str> {
        self.text.trim_end_matches('.').split(' ').collect()
    }

    /// Its arcs (see the module's table), in word indices; `subject` only when something
    /// stands between subject and verb.
    pub fn arcs(&self) -> Vec<Arc> {
        let mut arcs = Vec::with_capacity(2);
        if self.verb - 1 != self.subject {
            arcs.push(Arc {
                relation: Relation::Subject,
                from: self.verb - 1,
                to: self.subject,
            });
        }
        arcs.push(Arc {
            relation: Relation::Object,
            from: self.object - 1,
            to: self.verb,
        });
        arcs
    }

    /// Whether the attractor's number differs from the subject's: the sentences on which
    /// agreement needs the subject relation.
    pub fn attractor_mismatch(&self) -> bool {
        self.attractor_plural
            .is_some_and(|p| p != self.subject_plural)
    }

    /// The main verb's forms.
    pub fn verb_forms(&self) -> Inflected {
        VERB_CLASSES[self.class].verb
    }

    /// The object noun as written and a noun of another class in the same number and place
    /// of its list: the forced choice on meaning. `k` (1 to 3) picks the other class.
    pub fn object_choice(&self, k: usize) -> (&'static str, &'static str) {
        let objects = &VERB_CLASSES[self.class].objects;
        let i = objects
            .iter()
            .position(|o| o.form(self.object_plural) == self.words()[self.object])
            .expect("the object is one of its class's nouns");
        let other = VERB_CLASSES[(self.class + k) % VERB_CLASSES.len()].objects[i];
        (
            objects[i].form(self.object_plural),
            other.form(self.object_plural),
        )
    }
}

/// `n_chars` or more characters of the corpus: sentences separated by a space or (one time
/// in four) a newline, as the grammar corpus is.
pub fn relations(seed: u64, n_chars: usize) -> String {
    let mut text = String::with_capacity(n_chars + 64);
    let mut rng = StdRng::seed_from_u64(seed);
    while text.len() < n_chars {
        if !text.is_empty() {
            text.push(if rng.random_range(0..4) == 0 {
                '\n'
            } else {
                ' '
            });
        }
        text.push_str(&sentence(&mut rng).text);
    }
    text
}

/// `n` sentences drawn as [`relations`] draws them from `seed`.
pub fn relation_sentences(seed: u64, n: usize) -> Vec<RelationSentence> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| sentence(&mut rng)).collect()
}

fn pick<T: Copy>(rng: &mut StdRng, items: &[T]) -> T {
    items[rng.random_range(0..items.len())]
}

/// Pushes "det adj? noun" of an animate noun in the given number; returns the noun's index.
fn animate_phrase(rng: &mut StdRng, words: &mut Vec<&'static str>, plural: bool) -> usize {
    words.push(determiner(rng, plural));
    if rng.random_bool(0.3) {
        words.push(pick(rng, &ADJECTIVES));
    }
    words.push(pick(rng, &NOUNS).form(plural));
    words.len() - 1
}

/// "the" (the commonest, and of both numbers) or a determiner of the number.
fn determiner(rng: &mut StdRng, plural: bool) -> &'static str {
    if rng.random_bool(0.6) {
        pick(rng, &NEUTRAL_DETERMINERS)
    } else if plural {
        pick(rng, &PLURAL_DETERMINERS)
    } else {
        pick(rng, &SINGULAR_DETERMINERS)
    }
}

fn sentence(rng: &mut StdRng) -> RelationSentence {
    let subject_plural = rng.random_bool(0.5);
    let mut words: Vec<&'static str> = Vec::with_capacity(18);
    let subject = animate_phrase(rng, &mut words, subject_plural);
    let (construction, attractor, attractor_plural) = match rng.random_range(0..100) {
        0..30 => (Construction::Nothing, None, None),
        30..65 => {
            let plural = rng.random_bool(0.5);
            words.push(pick(rng, &PREPOSITIONS));
            let noun = animate_phrase(rng, &mut words, plural);
            (Construction::Prepositional, Some(noun), Some(plural))
        }
        _ => {
            let plural = rng.random_bool(0.5);
            words.push("that");
            let noun = animate_phrase(rng, &mut words, plural);
            words.push(pick(rng, &RELATIVE_VERBS).form(plural));
            (Construction::Relative, Some(noun), Some(plural))
        }
    };
    let class = rng.random_range(0..VERB_CLASSES.len());
    let verb = words.len();
    words.push(VERB_CLASSES[class].verb.form(subject_plural));
    let partitive = rng.random_bool(0.3);
    let object_plural = partitive || rng.random_bool(0.5);
    if partitive {
        words.push(pick(rng, &PARTITIVES));
        words.push("of");
        words.push("the");
    } else {
        words.push(determiner(rng, object_plural));
    }
    let adjectives = match rng.random_range(0..10) {
        0..5 => 0,
        5..8 => 1,
        _ => 2,
    };
    for _ in 0..adjectives {
        words.push(pick(rng, &OBJECT_ADJECTIVES));
    }
    let object = words.len();
    words.push(pick(rng, &VERB_CLASSES[class].objects).form(object_plural));
    RelationSentence {
        text: words.join(" ") + ".",
        construction,
        subject,
        attractor,
        verb,
        object,
        class,
        subject_plural,
        attractor_plural,
        object_plural,
    }
}

/// Why a sentence is not in the corpus's language, or where it breaks a relation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelationError {
    #[error("word {index} {word:?}: expected {expected}")]
    Unexpected {
        index: usize,
        word: String,
        expected: &'static str,
    },
    #[error("the sentence ends early: expected {expected}")]
    EarlyEnd { expected: &'static str },
}

/// [`parse_relations`]'s reading of a sentence: the structure, and whether each relation
/// holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationParse {
    /// The sentence as the parser read it (its numbers as written, its class from the verb).
    pub sentence: RelationSentence,
    /// The main verb agrees with the subject noun, the relative verb with its own subject,
    /// and every determiner with its noun.
    pub agrees: bool,
    /// The object noun is of the main verb's class.
    pub fits: bool,
}

/// Reads one sentence (trailing "." optional) with the corpus's word lists alone: its
/// structure must be the corpus's, but a verb of the wrong number or an object of another
/// class is read and reported (`agrees`, `fits`), not refused.
pub fn parse_relations(sentence: &str) -> Result<RelationParse, RelationError> {
    let text = sentence.trim();
    let body = text.strip_suffix('.').unwrap_or(text);
    let words: Vec<&str> = body.split_whitespace().collect();
    let mut p = Reader {
        words: &words,
        i: 0,
        agrees: true,
    };
    let (subject, subject_plural) = p.animate_phrase()?;
    let (construction, attractor, attractor_plural) = match p.peek() {
        Some("that") => {
            p.i += 1;
            let (noun, plural) = p.animate_phrase()?;
            let at = p.i;
            let word = p.next("a relative clause's verb")?;
            let number = inflection(&RELATIVE_VERBS, word).ok_or_else(|| {
                p.unexpected_at(at, "a relative clause's verb (sees, likes, follows)")
            })?;
            p.agrees &= number == plural;
            (Construction::Relative, Some(noun), Some(plural))
        }
        Some(word) if PREPOSITIONS.contains(&word) => {
            p.i += 1;
            let (noun, plural) = p.animate_phrase()?;
            (Construction::Prepositional, Some(noun), Some(plural))
        }
        _ => (Construction::Nothing, None, None),
    };
    let verb = p.i;
    let word = p.next("a main verb")?;
    let (class, verb_plural) = VERB_CLASSES
        .iter()
        .enumerate()
        .find_map(|(k, c)| inflection(&[c.verb], word).map(|n| (k, n)))
        .ok_or_else(|| p.unexpected_at(verb, "a main verb (chases, reads, eats, plays)"))?;
    p.agrees &= verb_plural == subject_plural;
    // `None` after a partitive ("one of the"), whose noun must be plural.
    // "some" and "two" are determiners too: a partitive is one followed by "of".
    let partitive =
        p.peek().is_some_and(|w| PARTITIVES.contains(&w)) && words.get(p.i + 1) == Some(&"of");
    let det = if partitive {
        p.i += 1;
        p.expect("of")?;
        p.expect("the")?;
        None
    } else {
        let at = p.i;
        let det = p.next("a determiner")?;
        if !is_determiner(det) {
            return Err(p.unexpected_at(at, "a determiner"));
        }
        Some(det)
    };
    while p.peek().is_some_and(|w| OBJECT_ADJECTIVES.contains(&w)) {
        p.i += 1;
    }
    let object = p.i;
    let noun = p.next("an object noun")?;
    let (object_class, object_plural) = VERB_CLASSES
        .iter()
        .enumerate()
        .find_map(|(k, c)| inflection(&c.objects, noun).map(|n| (k, n)))
        .ok_or_else(|| p.unexpected_at(object, "an object noun"))?;
    p.agrees &= det.map_or(object_plural, |det| determiner_fits(det, object_plural));
    if p.i < words.len() {
        return Err(p.unexpected_at(p.i, "the end of the sentence"));
    }
    Ok(RelationParse {
        sentence: RelationSentence {
            text: words.join(" ") + ".",
            construction,
            subject,
            attractor,
            verb,
            object,
            class,
            subject_plural,
            attractor_plural,
            object_plural,
        },
        agrees: p.agrees,
        fits: object_class == class,
    })
}

fn is_determiner(word: &str) -> bool {
    NEUTRAL_DETERMINERS.contains(&word)
        || SINGULAR_DETERMINERS.contains(&word)
        || PLURAL_DETERMINERS.contains(&word)
}

/// Whether determiner `det` may stand before a noun of this number ("the" before both).
fn determiner_fits(det: &str, plural: bool) -> bool {
    NEUTRAL_DETERMINERS.contains(&det)
        || if plural {
            PLURAL_DETERMINERS.contains(&det)
        } else {
            SINGULAR_DETERMINERS.contains(&det)
        }
}

struct Reader<'a> {
    words: &'a [&'a str],
    i: usize,
    agrees: bool,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.words.get(self.i).copied()
    }

    fn next(&mut self, expected: &'static str) -> Result<&'a str, RelationError> {
        let word = self.peek().ok_or(RelationError::EarlyEnd { expected })?;
        self.i += 1;
        Ok(word)
    }

    fn expect(&mut self, word: &'static str) -> Result<(), RelationError> {
        let at = self.i;
        match self.next(word)? {
            w if w == word => Ok(()),
            _ => Err(self.unexpected_at(at, word)),
        }
    }

    fn unexpected_at(&self, index: usize, expected: &'static str) -> RelationError {
        RelationError::Unexpected {
            index,
            word: self.words[index].to_string(),
            expected,
        }
    }

    /// "det adj? noun" of an animate noun: its index and number (a determiner of the other
    /// number clears `agrees`).
    fn animate_phrase(&mut self) -> Result<(usize, bool), RelationError> {
        let at = self.i;
        let det = self.next("a determiner")?;
        if !is_determiner(det) {
            return Err(self.unexpected_at(at, "a determiner"));
        }
        while self.peek().is_some_and(|w| ADJECTIVES.contains(&w)) {
            self.i += 1;
        }
        let noun = self.i;
        let word = self.next("a noun")?;
        let plural = inflection(&NOUNS, word).ok_or_else(|| self.unexpected_at(noun, "a noun"))?;
        self.agrees &= determiner_fits(det, plural);
        Ok((noun, plural))
    }
}

/// How a model's samples do on the corpus's two relations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelationCheck {
    /// Whole sentences (ending in ".") read.
    pub sentences: usize,
    /// Of them, those in the corpus's language.
    pub well_formed: usize,
    /// Of the well-formed, those whose numbers agree.
    pub agreeing: usize,
    /// Of the well-formed, those whose object fits its verb.
    pub fitting: usize,
}

/// Scores a text (a model's sample) sentence by sentence; a last sentence without its "."
/// is left out.
pub fn check_relations(text: &str) -> RelationCheck {
    let mut check = RelationCheck::default();
    let mut rest = text;
    while let Some(dot) = rest.find('.') {
        let sentence = rest[..dot].trim();
        rest = &rest[dot + 1..];
        check.sentences += 1;
        if let Ok(parse) = parse_relations(sentence) {
            check.well_formed += 1;
            check.agreeing += usize::from(parse.agrees);
            check.fitting += usize::from(parse.fits);
        }
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-parsed sentences of each construction: the indices are counted from the words.
    #[test]
    fn each_construction_parses_to_the_words_counted_by_hand() {
        // the0 dog1 near2 the3 cats4 chases5 one6 of7 the8 red9 mice10
        let p = parse_relations("the dog near the cats chases one of the red mice.").unwrap();
        let s = &p.sentence;
        assert_eq!(s.construction, Construction::Prepositional);
        assert_eq!(
            (s.subject, s.attractor, s.verb, s.object),
            (1, Some(4), 5, 10)
        );
        assert_eq!(
            (s.class, s.subject_plural, s.object_plural),
            (0, false, true)
        );
        assert_eq!(s.attractor_plural, Some(true));
        assert!(p.agrees && p.fits && s.attractor_mismatch());
        let arcs: Vec<_> = s
            .arcs()
            .iter()
            .map(|a| (a.relation, a.from, a.to))
            .collect();
        assert_eq!(arcs, [(Relation::Subject, 4, 1), (Relation::Object, 9, 5)]);

        // some0 tall1 teachers2 that3 a4 spy5 likes6 read7 the8 letter9
        let p = parse_relations("some tall teachers that a spy likes read the letter.").unwrap();
        let s = &p.sentence;
        assert_eq!(s.construction, Construction::Relative);
        assert_eq!(
            (s.subject, s.attractor, s.verb, s.object),
            (2, Some(5), 7, 9)
        );
        assert_eq!(s.class, 1);
        assert!(p.agrees && p.fits);
        let arcs: Vec<_> = s
            .arcs()
            .iter()
            .map(|a| (a.relation, a.from, a.to))
            .collect();
        assert_eq!(arcs, [(Relation::Subject, 6, 2), (Relation::Object, 8, 7)]);

        // a0 child1 eats2 every3 green4 new5 pear6: no subject arc, nothing between.
        let p = parse_relations("a child eats every green new pear.").unwrap();
        let s = &p.sentence;
        assert_eq!(s.construction, Construction::Nothing);
        assert_eq!((s.subject, s.attractor, s.verb, s.object), (1, None, 2, 6));
        assert!(p.agrees && p.fits && !s.attractor_mismatch());
        let arcs: Vec<_> = s
            .arcs()
            .iter()
            .map(|a| (a.relation, a.from, a.to))
            .collect();
        assert_eq!(arcs, [(Relation::Object, 5, 2)]);
        // "pear" is the third food: the third instrument, the third animal.
        assert_eq!(s.object_choice(1), ("pear", "violin"));
        assert_eq!(s.object_choice(2), ("pear", "frog"));
    }

    /// A wrong verb form, a wrong object class, a wrong determiner and broken structure,
    /// written by hand.
    #[test]
    fn the_checker_finds_each_broken_relation() {
        // The main verb agrees with the attractor, not the subject.
        let p = parse_relations("the dog near the cats chase the mouse.").unwrap();
        assert!(!p.agrees && p.fits);
        // The relative verb agrees with the head noun, not its own subject.
        let p = parse_relations("the dogs that the cat see chase the mouse.").unwrap();
        assert!(!p.agrees && p.fits);
        // A text where an animal belongs.
        let p = parse_relations("the dog chases the book.").unwrap();
        assert!(p.agrees && !p.fits);
        // "two" before a singular object; "one of the" before a singular.
        assert!(!parse_relations("the dog reads two poem.").unwrap().agrees);
        assert!(
            !parse_relations("the dog reads one of the poem.")
                .unwrap()
                .agrees
        );
        // Not the corpus's structure: no object, an object adjective on the subject, an
        // animate object, a word after the object.
        for bad in [
            "the dog chases.",
            "the red dog chases the mouse.",
            "the dog chases the cat.",
            "the dog chases the mouse near the cat.",
            "the dog sees the mouse.",
        ] {
            assert!(parse_relations(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_relations("the dog chases the cat.").unwrap_err(),
            RelationError::Unexpected {
                index: 4,
                word: "cat".into(),
                expected: "an object noun"
            }
        );
        let check = check_relations(
            "the dog chases the mouse. the dog near the cats chase the mouse. the dog eats \
             the poem. the dog. the cat",
        );
        assert_eq!(
            check,
            RelationCheck {
                sentences: 4,
                well_formed: 3,
                agreeing: 2,
                fitting: 2
            }
        );
    }

    /// Every generated sentence reads back as the generator recorded it, agreeing and fitting;
    /// each construction and each class occurs, and both relations span several distances, so
    /// no fixed offset solves them.
    #[test]
    fn generated_sentences_read_back_whole() {
        let sentences = relation_sentences(3, 2000);
        let mut distances = [
            std::collections::BTreeSet::new(),
            std::collections::BTreeSet::new(),
        ];
        let mut constructions = std::collections::HashSet::new();
        let mut classes = std::collections::HashSet::new();
        for s in &sentences {
            let p = parse_relations(&s.text).unwrap();
            assert!(p.agrees && p.fits, "{}", s.text);
            assert_eq!(&p.sentence, s);
            constructions.insert(s.construction);
            classes.insert(s.class);
            for arc in s.arcs() {
                let k = usize::from(arc.relation == Relation::Object);
                distances[k].insert(arc.from - arc.to);
            }
        }
        assert_eq!((constructions.len(), classes.len()), (3, 4));
        assert!(
            distances[0].len() >= 3 && distances[1].len() >= 4,
            "{distances:?}"
        );
        let text = relations(3, 20_000);
        let check = check_relations(&text);
        assert!(check.sentences > 300);
        assert_eq!(check.sentences, check.well_formed);
        assert_eq!(
            (check.agreeing, check.fitting),
            (check.sentences, check.sentences)
        );
    }
}

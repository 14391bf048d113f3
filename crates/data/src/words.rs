//! The word lists the grammar and relations corpora share: animate nouns and their verbs,
//! adjectives, determiners by number, prepositions; in a module of their own so that each
//! corpus's generator and parser can read them without importing the other.

/// A word with a singular and a plural form (nouns, and present-tense verbs whose
/// singular is the third person: "sees" / "see").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inflected {
    pub singular: &'static str,
    pub plural: &'static str,
}

impl Inflected {
    pub fn form(self, plural: bool) -> &'static str {
        if plural { self.plural } else { self.singular }
    }
}

pub(crate) const fn w(singular: &'static str, plural: &'static str) -> Inflected {
    Inflected { singular, plural }
}

/// Animate nouns: subjects and objects. Irregular plurals (men, children, spies) make the
/// model learn number per word rather than from a trailing "s".
pub const NOUNS: [Inflected; 8] = [
    w("dog", "dogs"),
    w("cat", "cats"),
    w("bird", "birds"),
    w("man", "men"),
    w("child", "children"),
    w("teacher", "teachers"),
    w("detective", "detectives"),
    w("spy", "spies"),
];
pub const TRANSITIVE_VERBS: [Inflected; 6] = [
    w("sees", "see"),
    w("likes", "like"),
    w("follows", "follow"),
    w("chases", "chase"),
    w("watches", "watch"),
    w("finds", "find"),
];
pub const INTRANSITIVE_VERBS: [Inflected; 5] = [
    w("runs", "run"),
    w("sleeps", "sleep"),
    w("sings", "sing"),
    w("waits", "wait"),
    w("smiles", "smile"),
];
/// All start with a consonant, so "a" never needs to be "an".
pub const ADJECTIVES: [&str; 6] = ["small", "big", "tall", "young", "happy", "quiet"];
/// "the" fits both numbers, so the noun alone must carry number.
pub const NEUTRAL_DETERMINERS: [&str; 1] = ["the"];
pub const SINGULAR_DETERMINERS: [&str; 2] = ["a", "every"];
pub const PLURAL_DETERMINERS: [&str; 2] = ["some", "two"];
/// Prepositions of phrases that modify a subject ("the dog near the cats runs").
pub const PREPOSITIONS: [&str; 3] = ["near", "behind", "beside"];

/// The number of `word` if it is one of the forms in `list`.
pub(crate) fn inflection(list: &[Inflected], word: &str) -> Option<bool> {
    list.iter().find_map(|x| {
        if x.singular == word {
            Some(false)
        } else if x.plural == word {
            Some(true)
        } else {
            None
        }
    })
}

//! The word tokenizer (`data.tokenizer = "word"`): one token per word of the training split,
//! so a head that attends to "the subject noun" attends to one position, as in Clark et al.'s
//! word-level pictures.
//!
//! A word is a run of letters and digits with the one space before it (" dog"), a
//! punctuation mark with the space before it ("." or " «"), a newline, or a run of other
//! whitespace ([`WORD_PATTERN`]). The pieces of a text, put back together, are the text, so
//! decoding rebuilds its spacing exactly; a word after a newline ("the") and after a space
//! (" the") are two entries. It is a Hugging Face `tokenizers` WordLevel model behind a `Split`
//! pre-tokenizer, saved as its `tokenizer.json`, so `AutoTokenizer` reads an export with the
//! same ids. Id 0 is [`UNKNOWN_WORD`], which stands for any word the training split lacks: the
//! validation split may have some (their share is reported); a prompt may not.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokenizers::pre_tokenizers::split::Split;
use tokenizers::{
    OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, SplitDelimiterBehavior,
};

/// The pieces a text is cut into: a word with the space before it, a punctuation mark with
/// the space before it, one newline, or a run of other whitespace. Every character matches,
/// and no piece crosses a newline, so a text encodes line by line with the ids of the whole.
/// Rust's (fancy-regex) and Python's (Oniguruma) engines cut it the same way.
pub const WORD_PATTERN: &str = r" ?[\p{L}\p{N}]+| ?[^\s\p{L}\p{N}]|\n|[^\S\n]+";
/// The entry with id 0, for words the training split lacks.
pub const UNKNOWN_WORD: &str = "<unk>";
/// The largest vocabulary the word tokenizer builds, [`UNKNOWN_WORD`] included. A text with
/// more distinct words is refused: most of them would be seen too few times to learn, and
/// the embedding would be mostly their rows; a BPE suits it.
pub const MAX_WORD_VOCAB: usize = 4096;

/// Errors of the word tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum WordError {
    #[error(
        "data.tokenizer = \"word\": the training text has {words} distinct words (\" the\" and \
         \"the\" count apart), more than the word tokenizer's {max} with {UNKNOWN_WORD}; most \
         would be too rare to learn. Use data.tokenizer = \"bpe\" (data.vocab_size sets its \
         size) or \"char\"",
        max = MAX_WORD_VOCAB
    )]
    TooManyWords { words: usize },
    #[error("data.tokenizer = \"word\": the training text has no words")]
    Empty,
    #[error(
        "{what} at line {line}, column {column} is not in the word tokenizer's vocabulary of \
         {vocab_size} words (the words of its training text){hint}"
    )]
    UnknownWord {
        /// The word, quoted, or a description of a whitespace piece.
        what: String,
        /// 1-based line.
        line: usize,
        /// 1-based column in characters.
        column: usize,
        vocab_size: usize,
        hint: String,
    },
    #[error("word tokenizer: {0}")]
    Hf(String),
    #[error("word tokenizer: {0}")]
    NotWordLevel(#[from] NotAWordTokenizer),
}

/// Why a Hugging Face tokenizer is not a word tokenizer of this module
/// ([`WordTokenizer::from_hf`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAWordTokenizer {
    #[error("its model is not WordLevel")]
    Model,
    #[error(
        "its pre-tokenizer is not a Split on {WORD_PATTERN:?} (isolated), so its words would \
         differ"
    )]
    PreTokenizer,
    #[error("it has a normalizer or post-processor, which would change the text")]
    ChangesText,
    #[error("it has added tokens, which headlab does not use")]
    AddedTokens,
    #[error("it has {0} words, more than {MAX_WORD_VOCAB}")]
    TooManyWords(usize),
    #[error("its unknown word is not {UNKNOWN_WORD:?} with id 0")]
    UnknownWord,
    #[error("word ids are not 0..{n}: id {id} is missing")]
    MissingId { n: usize, id: u32 },
    #[error("word {0} is empty")]
    EmptyWord(usize),
}

/// A word-level tokenizer: the Hugging Face tokenizer and each id's word.
#[derive(Clone)]
pub struct WordTokenizer {
    hf: tokenizers::Tokenizer,
    /// The word of each id, `0..vocab_size`; id 0 is [`UNKNOWN_WORD`].
    words: Vec<String>,
}

/// The pre-tokenizer of [`WORD_PATTERN`].
fn splitter() -> Split {
    Split::new(
        tokenizers::pre_tokenizers::split::SplitPattern::Regex(WORD_PATTERN.into()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .expect("WORD_PATTERN is a valid regex")
}

/// The pieces of `text` with their byte offsets, in order.
fn pieces(split: &Split, text: &str) -> Result<Vec<(usize, String)>, WordError> {
    let mut pre = PreTokenizedString::from(text);
    split
        .pre_tokenize(&mut pre)
        .map_err(|e| WordError::Hf(e.to_string()))?;
    Ok(pre
        .get_splits(OffsetReferential::Original, OffsetType::Byte)
        .into_iter()
        .map(|(piece, (start, _), _)| (start, piece.to_string()))
        .collect())
}

impl WordTokenizer {
    /// The words of `corpus`, most frequent first (ties in byte order, as `tokenizers`'
    /// WordLevel trainer orders them), after [`UNKNOWN_WORD`]. Refuses more than
    /// [`MAX_WORD_VOCAB`] entries.
    pub fn train(corpus: &str) -> Result<Self, WordError> {
        let split = splitter();
        let mut counts: HashMap<String, u64> = HashMap::new();
        for line in corpus.split_inclusive('\n') {
            for (_, piece) in pieces(&split, line)? {
                *counts.entry(piece).or_default() += 1;
            }
        }
        if counts.is_empty() {
            return Err(WordError::Empty);
        }
        if counts.len() + 1 > MAX_WORD_VOCAB {
            return Err(WordError::TooManyWords {
                words: counts.len(),
            });
        }
        let mut ordered: Vec<(String, u64)> = counts.into_iter().collect();
        ordered.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let words = std::iter::once(UNKNOWN_WORD.to_string())
            .chain(ordered.into_iter().map(|(w, _)| w))
            .collect();
        Self::from_words(words)
    }

    /// The tokenizer whose id `i` is `words[i]`; `words[0]` must be [`UNKNOWN_WORD`].
    pub fn from_words(words: Vec<String>) -> Result<Self, WordError> {
        let json = hf_json(&words).to_string();
        let hf =
            tokenizers::Tokenizer::from_str(&json).map_err(|e| WordError::Hf(e.to_string()))?;
        Ok(Self::from_hf(hf)?)
    }

    /// Checks a Hugging Face tokenizer is a word tokenizer of this module (a WordLevel model
    /// behind [`WORD_PATTERN`], nothing that changes text) and indexes its words.
    pub fn from_hf(hf: tokenizers::Tokenizer) -> Result<Self, NotAWordTokenizer> {
        use tokenizers::{Model as _, ModelWrapper, PreTokenizerWrapper};
        let ModelWrapper::WordLevel(model) = hf.get_model() else {
            return Err(NotAWordTokenizer::Model);
        };
        match hf.get_pre_tokenizer() {
            Some(PreTokenizerWrapper::Split(s)) if *s == splitter() => {}
            _ => return Err(NotAWordTokenizer::PreTokenizer),
        }
        if hf.get_normalizer().is_some() || hf.get_post_processor().is_some() {
            return Err(NotAWordTokenizer::ChangesText);
        }
        if !hf.get_added_vocabulary().is_empty() {
            return Err(NotAWordTokenizer::AddedTokens);
        }
        let n = model.get_vocab_size();
        if n > MAX_WORD_VOCAB {
            return Err(NotAWordTokenizer::TooManyWords(n));
        }
        if model.unk_token != UNKNOWN_WORD || model.token_to_id(UNKNOWN_WORD) != Some(0) {
            return Err(NotAWordTokenizer::UnknownWord);
        }
        let words = (0..n as u32)
            .map(|id| {
                model
                    .id_to_token(id)
                    .ok_or(NotAWordTokenizer::MissingId { n, id })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(empty) = words.iter().position(String::is_empty) {
            return Err(NotAWordTokenizer::EmptyWord(empty));
        }
        Ok(Self { hf, words })
    }

    /// Number of ids, [`UNKNOWN_WORD`] included.
    pub fn vocab_size(&self) -> usize {
        self.words.len()
    }

    /// The text of id `id` (`None` outside the vocabulary).
    pub fn word(&self, id: u32) -> Option<&str> {
        self.words.get(id as usize).map(String::as_str)
    }

    /// The id of [`UNKNOWN_WORD`].
    pub fn unknown_id(&self) -> u32 {
        0
    }

    /// Encodes `text` line by line (a piece never crosses a newline, so the ids are those of
    /// the whole text). `strict`: a word the vocabulary lacks is an error naming it and its
    /// place; otherwise it becomes [`UNKNOWN_WORD`].
    pub fn encode(&self, text: &str, strict: bool) -> Result<Vec<u32>, WordError> {
        let encodings = self
            .hf
            .encode_batch_fast(text.split_inclusive('\n').collect::<Vec<_>>(), false)
            .map_err(|e| WordError::Hf(e.to_string()))?;
        let ids: Vec<u32> = encodings
            .iter()
            .flat_map(|e| e.get_ids().iter().copied())
            .collect();
        if strict && ids.contains(&self.unknown_id()) {
            return Err(self.unknown_word(text));
        }
        Ok(ids)
    }

    /// The error for the first piece of `text` the vocabulary lacks.
    fn unknown_word(&self, text: &str) -> WordError {
        let known = |piece: &str| self.hf.token_to_id(piece).is_some_and(|id| id != 0);
        let all = pieces(&splitter(), text).unwrap_or_default();
        let Some((at, piece)) = all.iter().find(|(_, p)| !known(p)) else {
            return WordError::Hf("an unknown word was encoded but none is unknown".into());
        };
        let before = &text[..*at];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        let word = piece.trim_start_matches(' ');
        let hint = if word.trim().is_empty() {
            "; a space belongs to the word after it, so end the text with a word, not a space"
                .to_string()
        } else if piece.starts_with(' ') && known(word) {
            format!("; {word:?} without the space before it is known (it starts lines)")
        } else if !piece.starts_with(' ') && known(&format!(" {piece}")) {
            format!("; \" {piece}\", with a space before it, is known")
        } else {
            "; use only words of the training text, or train with data.tokenizer = \"bpe\", \
             which encodes any text"
                .to_string()
        };
        let what = if word.trim().is_empty() {
            format!("whitespace {piece:?}")
        } else {
            format!("word {piece:?}")
        };
        WordError::UnknownWord {
            what,
            line,
            column,
            vocab_size: self.words.len(),
            hint,
        }
    }

    /// The Hugging Face `tokenizer.json` text.
    pub fn to_huggingface_json(&self) -> String {
        hf_json(&self.words).to_string()
    }
}

/// The Hugging Face `tokenizer.json` of `words`: a WordLevel model behind a `Split` on
/// [`WORD_PATTERN`], decoded by `Fuse` (the pieces joined as they are).
fn hf_json(words: &[String]) -> serde_json::Value {
    let vocab: serde_json::Map<String, serde_json::Value> = words
        .iter()
        .enumerate()
        .map(|(id, w)| (w.clone(), serde_json::Value::from(id as u32)))
        .collect();
    serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {
            "type": "Split", "pattern": { "Regex": WORD_PATTERN },
            "behavior": "Isolated", "invert": false
        },
        "post_processor": null,
        "decoder": { "type": "Fuse" },
        "model": { "type": "WordLevel", "vocab": vocab, "unk_token": UNKNOWN_WORD },
    })
}

impl fmt::Debug for WordTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WordTokenizer")
            .field("vocab_size", &self.vocab_size())
            .finish_non_exhaustive()
    }
}

impl PartialEq for WordTokenizer {
    fn eq(&self, other: &Self) -> bool {
        self.words == other.words
    }
}

impl Eq for WordTokenizer {}

impl Serialize for WordTokenizer {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        hf_json(&self.words).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for WordTokenizer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(deserializer)?;
        let hf = tokenizers::Tokenizer::from_str(&value.to_string())
            .map_err(|e| D::Error::custom(format!("invalid Hugging Face word tokenizer: {e}")))?;
        Self::from_hf(hf).map_err(|why| D::Error::custom(format!("unusable word tokenizer: {why}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        pieces(&splitter(), text)
            .unwrap()
            .into_iter()
            .map(|(_, p)| p)
            .collect()
    }

    #[test]
    fn pieces_keep_the_space_before_a_word_and_cover_the_text() {
        // Cut by hand from the pattern's description.
        assert_eq!(
            words("the dog runs. a cat\nthe  spies,  see \n\n x"),
            [
                "the", " dog", " runs", ".", " a", " cat", "\n", "the", "  ", "spies", ",", "  ",
                "see", " ", "\n", "\n", " x"
            ]
        );
        assert_eq!(
            words("Émile's 12 «ok»"),
            ["Émile", "'", "s", " 12", " «", "ok", "»"]
        );
    }

    #[test]
    fn ids_follow_frequency_then_bytes_after_the_unknown_word() {
        let t = WordTokenizer::train("b a. a b a.\n").unwrap();
        // " a" x3, "." x2, then "\n", " b" and "b" once each, in byte order.
        let expected = [UNKNOWN_WORD, " a", ".", "\n", " b", "b"];
        assert_eq!(
            (0..6).map(|i| t.word(i).unwrap()).collect::<Vec<_>>(),
            expected
        );
        assert_eq!(
            t.encode("b a. a b a.\n", true).unwrap(),
            [5, 1, 2, 1, 4, 1, 2, 3]
        );
    }

    #[test]
    fn unknown_words_are_named_with_their_place_or_become_the_unknown_id() {
        let t = WordTokenizer::train("the dog runs.\nthe cat sees the dog.\n").unwrap();
        assert_eq!(t.encode("the cow runs.", false).unwrap()[1], 0);
        let msg = t
            .encode("the dog runs.\nthe cow", true)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("word \" cow\" at line 2, column 4"), "{msg}");
        assert!(msg.contains("data.tokenizer = \"bpe\""), "{msg}");
        let msg = t.encode("the dog ", true).unwrap_err().to_string();
        assert!(
            msg.contains("whitespace \" \" at line 1, column 8"),
            "{msg}"
        );
        assert!(msg.contains("end the text with a word"), "{msg}");
        let msg = t.encode("dog", true).unwrap_err().to_string();
        assert!(
            msg.contains("\" dog\", with a space before it, is known"),
            "{msg}"
        );
    }

    #[test]
    fn too_many_words_are_refused_with_what_to_use() {
        let text: String = (0..MAX_WORD_VOCAB).map(|i| format!(" w{i}")).collect();
        let msg = WordTokenizer::train(&text).unwrap_err().to_string();
        assert!(msg.contains("4096 distinct words"), "{msg}");
        assert!(msg.contains("data.tokenizer = \"bpe\""), "{msg}");
        let fits: String = (0..MAX_WORD_VOCAB - 1).map(|i| format!(" w{i}")).collect();
        assert_eq!(
            WordTokenizer::train(&fits).unwrap().vocab_size(),
            MAX_WORD_VOCAB
        );
    }

    #[test]
    fn json_round_trips_and_foreign_word_levels_are_refused() {
        let t = WordTokenizer::train("the dog runs. the dogs run.\n").unwrap();
        let back: WordTokenizer =
            serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
        let mut other: serde_json::Value = serde_json::from_str(&t.to_huggingface_json()).unwrap();
        other["pre_tokenizer"] = serde_json::json!({ "type": "Whitespace" });
        let hf = tokenizers::Tokenizer::from_str(&other.to_string()).unwrap();
        assert_eq!(
            WordTokenizer::from_hf(hf).unwrap_err(),
            NotAWordTokenizer::PreTokenizer
        );
    }
}

//! Tokenizers: characters (nanoGPT's `shakespeare_char`) or raw UTF-8 bytes.
//!
//! The tokenizer is saved next to every checkpoint as `tokenizer.json`, because a char
//! vocabulary depends on the corpus it was built from: sampling or probing a run with a
//! rebuilt vocabulary would silently shuffle token ids.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Stands in for a token id that no vocabulary entry has, so decoding never panics.
const REPLACEMENT: char = char::REPLACEMENT_CHARACTER;

/// Which tokenizer a run uses (`data.tokenizer` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenizerKind {
    /// One token per distinct character of the corpus.
    #[default]
    Char,
    /// One token per byte: 256 symbols, any UTF-8 text.
    Byte,
}

impl TokenizerKind {
    /// Every kind, for error messages and `--help`.
    pub const ALL: [TokenizerKind; 2] = [TokenizerKind::Char, TokenizerKind::Byte];

    /// The name used in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TokenizerKind::Char => "char",
            TokenizerKind::Byte => "byte",
        }
    }
}

impl fmt::Display for TokenizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TokenizerKind {
    type Err = TokenizerError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| TokenizerError::UnknownKind(s.to_string()))
    }
}

/// Errors from building, using, saving or loading a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("cannot build a char tokenizer from an empty corpus")]
    EmptyCorpus,
    #[error(
        "character {ch:?} (U+{code:04X}) at line {line}, column {column} (char {index}) is not in \
         the char tokenizer's vocabulary of {vocab_size} symbols; the byte tokenizer encodes any \
         UTF-8 text (--set data.tokenizer=byte)",
        code = codepoint(.ch)
    )]
    UnknownChar {
        ch: char,
        /// 0-based index in characters.
        index: usize,
        /// 1-based line.
        line: usize,
        /// 1-based column in characters.
        column: usize,
        vocab_size: usize,
    },
    #[error("unknown tokenizer {0:?}; valid tokenizers: char, byte")]
    UnknownKind(String),
    #[error("cannot read tokenizer file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write tokenizer file {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tokenizer file {} is corrupt: {source}", path.display())]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// A sorted, duplicate-free character list; sortedness is what makes lookup a binary
/// search, so it is checked again whenever a vocabulary is loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<char>", into = "Vec<char>")]
pub struct CharVocab {
    chars: Vec<char>,
}

impl CharVocab {
    /// The vocabulary in id order.
    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    fn id(&self, ch: char) -> Option<u32> {
        // A vocabulary has at most as many entries as there are chars (< 2^21), so the
        // index always fits in u32.
        self.chars.binary_search(&ch).ok().map(|i| i as u32)
    }
}

impl TryFrom<Vec<char>> for CharVocab {
    type Error = String;

    fn try_from(chars: Vec<char>) -> Result<Self, Self::Error> {
        if chars.is_empty() {
            return Err("the char vocabulary is empty".into());
        }
        if let Some(w) = chars.windows(2).find(|w| w[0] >= w[1]) {
            return Err(format!(
                "the char vocabulary must be sorted without duplicates, but {:?} comes before {:?}",
                w[0], w[1]
            ));
        }
        Ok(Self { chars })
    }
}

impl From<CharVocab> for Vec<char> {
    fn from(v: CharVocab) -> Self {
        v.chars
    }
}

/// A tokenizer, stored as JSON (`{"kind": "char", "vocab": [...]}` or `{"kind": "byte"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Tokenizer {
    /// Token id = index of the character in the sorted distinct characters of the corpus,
    /// exactly like nanoGPT's `sorted(list(set(text)))`.
    Char { vocab: CharVocab },
    /// Token id = byte value.
    Byte,
}

impl Tokenizer {
    /// A char tokenizer whose vocabulary is the sorted distinct characters of `corpus`.
    pub fn char_from_corpus(corpus: &str) -> Result<Self, TokenizerError> {
        let mut chars: Vec<char> = corpus.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        let vocab = CharVocab::try_from(chars).map_err(|_| TokenizerError::EmptyCorpus)?;
        Ok(Tokenizer::Char { vocab })
    }

    /// The byte tokenizer (256 symbols).
    pub fn byte() -> Self {
        Tokenizer::Byte
    }

    /// Builds the tokenizer of `kind` for `corpus` (the byte tokenizer ignores the corpus).
    pub fn for_corpus(kind: TokenizerKind, corpus: &str) -> Result<Self, TokenizerError> {
        match kind {
            TokenizerKind::Char => Self::char_from_corpus(corpus),
            TokenizerKind::Byte => Ok(Self::byte()),
        }
    }

    pub fn kind(&self) -> TokenizerKind {
        match self {
            Tokenizer::Char { .. } => TokenizerKind::Char,
            Tokenizer::Byte => TokenizerKind::Byte,
        }
    }

    /// Number of token ids; the model's embedding and output sizes.
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Char { vocab } => vocab.chars.len(),
            Tokenizer::Byte => 256,
        }
    }

    /// Encodes `text`; fails on the first character a char vocabulary lacks.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        match self {
            Tokenizer::Byte => Ok(text.bytes().map(u32::from).collect()),
            Tokenizer::Char { vocab } => {
                let mut ids = Vec::with_capacity(text.len());
                for (index, ch) in text.chars().enumerate() {
                    match vocab.id(ch) {
                        Some(id) => ids.push(id),
                        None => return Err(unknown_char(text, index, ch, vocab.chars.len())),
                    }
                }
                Ok(ids)
            }
        }
    }

    /// Decodes ids to text. Byte sequences that are not UTF-8 (a model can emit them)
    /// decode lossily; ids outside the vocabulary become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Tokenizer::Char { vocab } => ids
                .iter()
                .map(|&id| vocab.chars.get(id as usize).copied().unwrap_or(REPLACEMENT))
                .collect(),
            Tokenizer::Byte => String::from_utf8_lossy(&self.decode_token_bytes(ids)).into_owned(),
        }
    }

    /// The UTF-8 bytes of `ids`, without lossy repair, so a sampler can print tokens as
    /// they arrive while a multi-byte character is still incomplete (see [`StreamDecoder`]).
    pub fn decode_token_bytes(&self, ids: &[u32]) -> Vec<u8> {
        match self {
            Tokenizer::Byte => {
                let mut out = Vec::with_capacity(ids.len());
                for &id in ids {
                    match u8::try_from(id) {
                        Ok(b) => out.push(b),
                        Err(_) => {
                            let mut buf = [0; 4];
                            out.extend_from_slice(REPLACEMENT.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                }
                out
            }
            Tokenizer::Char { .. } => self.decode(ids).into_bytes(),
        }
    }

    /// A short visible label for one token, for axes of attention pictures: printable
    /// characters as themselves, space as `·`, control characters escaped (`\n`), and
    /// non-ASCII bytes of the byte tokenizer as `\xNN` (they are fragments of characters).
    pub fn token_text(&self, id: u32) -> String {
        let ch = match self {
            Tokenizer::Char { vocab } => vocab.chars.get(id as usize).copied(),
            Tokenizer::Byte => match u8::try_from(id) {
                Ok(b) if b.is_ascii() => Some(char::from(b)),
                Ok(b) => return format!("\\x{b:02X}"),
                Err(_) => None,
            },
        };
        match ch {
            None => format!("<{id}?>"),
            Some(' ') => "·".to_string(),
            Some(c) if c.is_control() || c.is_whitespace() => c.escape_default().to_string(),
            Some(c) => c.to_string(),
        }
    }

    /// Writes the tokenizer as pretty JSON.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), TokenizerError> {
        let path = path.as_ref();
        // Serialising plain strings and a tag cannot fail.
        let json = serde_json::to_string_pretty(self).expect("tokenizer serialises to JSON");
        std::fs::write(path, json + "\n").map_err(|source| TokenizerError::Write {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Reads a tokenizer written by [`Tokenizer::save`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| TokenizerError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| TokenizerError::Corrupt {
            path: path.to_path_buf(),
            source,
        })
    }
}

fn codepoint(ch: &char) -> u32 {
    u32::from(*ch)
}

fn unknown_char(text: &str, index: usize, ch: char, vocab_size: usize) -> TokenizerError {
    let before = text.chars().take(index);
    let (mut line, mut column) = (1, 1);
    for c in before {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    TokenizerError::UnknownChar {
        ch,
        index,
        line,
        column,
        vocab_size,
    }
}

/// Turns a stream of byte-tokenizer output into text, holding back the bytes of a
/// character that is not complete yet instead of printing U+FFFD for each half.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes and returns the text that is now complete. Invalid bytes (not a prefix
    /// of any character) come out as U+FFFD.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // Only the prefix checked by from_utf8 is pushed, so this cannot fail.
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or(""));
                    match e.error_len() {
                        // Incomplete character at the end: wait for more bytes.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push(REPLACEMENT);
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Flushes what is left at the end of the stream (lossily).
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("headlab-tok-{}-{name}", std::process::id()))
    }

    #[test]
    fn char_vocab_is_sorted_distinct_chars() {
        let t = Tokenizer::char_from_corpus("hello world\n").unwrap();
        let Tokenizer::Char { vocab } = &t else {
            panic!("expected a char tokenizer")
        };
        // sorted(set("hello world\n")) in Python:
        assert_eq!(
            vocab.chars(),
            &['\n', ' ', 'd', 'e', 'h', 'l', 'o', 'r', 'w']
        );
        assert_eq!(t.vocab_size(), 9);
        assert_eq!(t.encode("hello").unwrap(), vec![4, 3, 5, 5, 6]);
        assert_eq!(t.decode(&[8, 6, 7, 5, 2]), "world");
    }

    #[test]
    fn empty_corpus_is_an_error() {
        assert!(matches!(
            Tokenizer::char_from_corpus(""),
            Err(TokenizerError::EmptyCorpus)
        ));
    }

    #[test]
    fn unknown_char_names_char_position_and_byte_tokenizer() {
        let t = Tokenizer::char_from_corpus("abc\n").unwrap();
        let err = t.encode("ab\ncaé").unwrap_err();
        match &err {
            TokenizerError::UnknownChar {
                ch,
                index,
                line,
                column,
                ..
            } => {
                assert_eq!((*ch, *index, *line, *column), ('é', 5, 2, 3));
            }
            other => panic!("wrong error {other:?}"),
        }
        let msg = err.to_string();
        for part in ["'é'", "U+00E9", "line 2, column 3", "char 5", "byte"] {
            assert!(msg.contains(part), "{part:?} missing from {msg:?}");
        }
        // Invisible characters are escaped so the message shows what went wrong.
        let msg = t.encode("a\u{301}").unwrap_err().to_string();
        assert!(msg.contains("'\\u{301}'"), "{msg}");
    }

    #[test]
    fn byte_tokenizer_round_trips_utf8_and_repairs_invalid_bytes() {
        let t = Tokenizer::byte();
        assert_eq!(t.vocab_size(), 256);
        let ids = t.encode("aé").unwrap();
        assert_eq!(ids, vec![0x61, 0xC3, 0xA9]);
        assert_eq!(t.decode(&ids), "aé");
        // A lone continuation byte is not UTF-8: lossy decoding, no panic.
        assert_eq!(t.decode(&[0x61, 0xA9, 0x62]), "a\u{FFFD}b");
        assert_eq!(t.decode(&[0x61, 300]), "a\u{FFFD}");
        assert_eq!(t.decode_token_bytes(&[0xC3, 0xA9]), vec![0xC3, 0xA9]);
    }

    #[test]
    fn out_of_range_ids_decode_to_replacement() {
        let t = Tokenizer::char_from_corpus("ab").unwrap();
        assert_eq!(t.decode(&[0, 2, 1]), "a\u{FFFD}b");
        assert_eq!(t.token_text(7), "<7?>");
    }

    #[test]
    fn token_text_is_visible() {
        let t = Tokenizer::char_from_corpus("a b\n\t").unwrap();
        let labels: Vec<String> = (0..t.vocab_size() as u32)
            .map(|i| t.token_text(i))
            .collect();
        assert_eq!(labels, vec!["\\t", "\\n", "·", "a", "b"]);
        let b = Tokenizer::byte();
        assert_eq!(b.token_text(u32::from(b'x')), "x");
        assert_eq!(b.token_text(0xC3), "\\xC3");
        assert_eq!(b.token_text(10), "\\n");
    }

    #[test]
    fn stream_decoder_waits_for_whole_characters() {
        let mut d = StreamDecoder::new();
        let bytes = "é€".as_bytes();
        assert_eq!(d.push(&bytes[..1]), "");
        assert_eq!(d.push(&bytes[1..3]), "é");
        assert_eq!(d.push(&bytes[3..4]), "");
        assert_eq!(d.push(&bytes[4..]), "€");
        assert_eq!(d.push(&[0xFF, b'a']), "\u{FFFD}a");
        assert_eq!(d.push(&[0xE2, 0x82]), "");
        assert_eq!(d.finish(), "\u{FFFD}");
    }

    #[test]
    fn save_and_load_round_trip() {
        for t in [
            Tokenizer::char_from_corpus("First Citizen:\nBefore we proceed é\"\\").unwrap(),
            Tokenizer::byte(),
        ] {
            let path = temp_path(&format!("{}.json", t.kind()));
            t.save(&path).unwrap();
            let back = Tokenizer::load(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            assert_eq!(back, t);
        }
    }

    #[test]
    fn json_format_is_stable() {
        let t = Tokenizer::char_from_corpus("ba\n").unwrap();
        let v: serde_json::Value = serde_json::to_value(&t).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind": "char", "vocab": ["\n", "a", "b"]})
        );
        let b: Tokenizer = serde_json::from_str(r#"{"kind":"byte"}"#).unwrap();
        assert_eq!(b, Tokenizer::Byte);
    }

    #[test]
    fn load_errors_name_the_file() {
        let missing = temp_path("does-not-exist.json");
        let msg = Tokenizer::load(&missing).unwrap_err().to_string();
        assert!(msg.contains(&missing.display().to_string()), "{msg}");

        for (name, body) in [
            ("garbage.json", "{not json"),
            ("unsorted.json", r#"{"kind":"char","vocab":["b","a"]}"#),
            ("kind.json", r#"{"kind":"word"}"#),
        ] {
            let path = temp_path(name);
            std::fs::write(&path, body).unwrap();
            let err = Tokenizer::load(&path).unwrap_err();
            std::fs::remove_file(&path).unwrap();
            assert!(matches!(err, TokenizerError::Corrupt { .. }), "{err:?}");
            let msg = err.to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
        }
    }

    #[test]
    fn kind_parses_and_rejects_unknown() {
        assert_eq!(
            "byte".parse::<TokenizerKind>().unwrap(),
            TokenizerKind::Byte
        );
        let msg = "bpe".parse::<TokenizerKind>().unwrap_err().to_string();
        assert!(msg.contains("bpe") && msg.contains("char, byte"), "{msg}");
    }

    proptest! {
        #[test]
        fn byte_round_trip(s in any::<String>()) {
            let t = Tokenizer::byte();
            let ids = t.encode(&s).unwrap();
            prop_assert_eq!(ids.len(), s.len());
            prop_assert_eq!(t.decode(&ids), s);
        }

        #[test]
        fn char_round_trip(s in any::<String>().prop_filter("non-empty", |s| !s.is_empty())) {
            let t = Tokenizer::char_from_corpus(&s).unwrap();
            let ids = t.encode(&s).unwrap();
            prop_assert_eq!(ids.len(), s.chars().count());
            prop_assert!(ids.iter().all(|&i| (i as usize) < t.vocab_size()));
            prop_assert_eq!(t.decode(&ids), s);
        }

        #[test]
        fn stream_decoder_matches_lossy_decode(bytes in proptest::collection::vec(any::<u8>(), 0..64),
                                               cut in 0usize..64) {
            let cut = cut.min(bytes.len());
            let mut d = StreamDecoder::new();
            let mut out = d.push(&bytes[..cut]);
            out += &d.push(&bytes[cut..]);
            out += &d.finish();
            prop_assert_eq!(out, String::from_utf8_lossy(&bytes).into_owned());
        }
    }
}

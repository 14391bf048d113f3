//! Tokenizers: characters (nanoGPT's `shakespeare_char`), raw UTF-8 bytes, a byte-level BPE
//! trained with Hugging Face's `tokenizers` crate, or words ([`crate::word`]).
//!
//! The tokenizer is saved next to every checkpoint as `tokenizer.json`, because a char
//! vocabulary and a BPE depend on the corpus they were built from: sampling or probing a
//! run with a rebuilt vocabulary would silently shuffle token ids.
//!
//! A BPE is stored as `{"kind": "bpe", "huggingface": {...}}`, where the inner object is
//! the Hugging Face `tokenizer.json` itself (loadable by `Tokenizer.from_str` in Python); a
//! word tokenizer likewise as `{"kind": "word", "huggingface": {...}}`.

use std::fmt;
// Log lines go to stderr with `let _ = writeln!`: a reader that went away must not end a run.
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::LazyLock;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ids::TokenIds;
use crate::word::{WordError, WordTokenizer};
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{Model, TokenizerBuilder, TokenizerImpl};

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
    /// Byte-level BPE with `data.vocab_size` tokens, trained on the training split: the 256
    /// bytes plus merged byte sequences, any UTF-8 text.
    Bpe,
    /// One token per word of the training split, with the space before it (" dog"), and one
    /// per punctuation mark and newline; at most 4096 ([`crate::word::MAX_WORD_VOCAB`]).
    Word,
}

impl TokenizerKind {
    /// Every kind, for error messages and `--help`.
    pub const ALL: [TokenizerKind; 4] = [
        TokenizerKind::Char,
        TokenizerKind::Byte,
        TokenizerKind::Bpe,
        TokenizerKind::Word,
    ];

    /// The name used in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TokenizerKind::Char => "char",
            TokenizerKind::Byte => "byte",
            TokenizerKind::Bpe => "bpe",
            TokenizerKind::Word => "word",
        }
    }
}

/// `data.vocab_size` when a BPE is built without one.
pub const DEFAULT_BPE_VOCAB: usize = 1024;
/// The smallest BPE vocabulary: one token per byte, no merges.
pub const MIN_BPE_VOCAB: usize = 256;
/// The largest BPE vocabulary headlab trains.
pub const MAX_BPE_VOCAB: usize = 65_536;
/// Bytes of text [`Tokenizer::encode_into`] encodes between two progress reports.
const ENCODE_PIECE: usize = 1 << 20;
/// BPE training text from this many bytes on says so, and shows progress bars on a terminal.
const BPE_PROGRESS_BYTES: usize = 500_000;

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
         the char tokenizer's vocabulary of {vocab_size} symbols (the characters of its training \
         text); leave it out, or train with data.tokenizer = \"byte\", which encodes any UTF-8 \
         text",
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
    #[error("unknown tokenizer {0:?}; valid tokenizers: char, byte, bpe, word")]
    UnknownKind(String),
    #[error(
        "data.vocab_size = {0} is out of range for a byte-level BPE: it must be from 256 \
         (one token per byte) to 65536 (e.g. 1024)"
    )]
    BpeVocabSize(usize),
    #[error("byte-level BPE: {0}")]
    Bpe(String),
    /// Boxed: its unknown-word case would double the size of every `Result` that carries
    /// this error.
    #[error(transparent)]
    Word(Box<WordError>),
    /// A tokenizer from another tool that headlab cannot use as it is.
    #[error("not a tokenizer headlab can read: {0}")]
    Foreign(String),
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

impl From<WordError> for TokenizerError {
    fn from(e: WordError) -> Self {
        TokenizerError::Word(Box::new(e))
    }
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

/// A tokenizer, stored as JSON (`{"kind": "char", "vocab": [...]}`, `{"kind": "byte"}` or
/// `{"kind": "bpe", "huggingface": {...}}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Tokenizer {
    /// Token id = index of the character in the sorted distinct characters of the corpus,
    /// exactly like nanoGPT's `sorted(list(set(text)))`.
    Char { vocab: CharVocab },
    /// Token id = byte value.
    Byte,
    /// A byte-level BPE (GPT-2 style). A BPE headlab trained cuts text into lines before
    /// encoding (its tokens never cross one); an imported one (`whole_text`) encodes a text
    /// whole, exactly as `tokenizers` does, since its whitespace tokens may span lines.
    Bpe {
        huggingface: Box<BpeTokenizer>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        whole_text: bool,
    },
    /// Words of the training split ([`crate::word`]); a word it lacks encodes as id 0 in data
    /// and is an error in a prompt.
    Word { huggingface: Box<WordTokenizer> },
}

impl Tokenizer {
    /// A char tokenizer whose vocabulary is the sorted distinct characters of `corpus`.
    pub fn char_from_corpus(corpus: &str) -> Result<Self, TokenizerError> {
        // A set, not a list of every character: a large text would need four bytes per
        // character for it.
        let mut ascii = [false; 128];
        let mut other = std::collections::BTreeSet::new();
        for ch in corpus.chars() {
            match ascii.get_mut(ch as usize) {
                Some(seen) => *seen = true,
                None => {
                    other.insert(ch);
                }
            }
        }
        let chars: Vec<char> = (0u8..128)
            .filter(|&b| ascii[usize::from(b)])
            .map(char::from)
            .chain(other)
            .collect();
        let vocab = CharVocab::try_from(chars).map_err(|_| TokenizerError::EmptyCorpus)?;
        Ok(Tokenizer::Char { vocab })
    }

    /// The byte tokenizer (256 symbols).
    pub fn byte() -> Self {
        Tokenizer::Byte
    }

    /// A byte-level BPE of at most `vocab_size` tokens trained on `corpus` (fewer when the
    /// corpus has too few distinct pairs to merge). Deterministic: the same corpus and
    /// vocabulary size give the same tokenizer.
    pub fn train_bpe(corpus: &str, vocab_size: usize) -> Result<Self, TokenizerError> {
        Ok(Tokenizer::Bpe {
            huggingface: Box::new(BpeTokenizer::train(corpus, vocab_size)?),
            whole_text: false,
        })
    }

    /// Builds the tokenizer of `kind` for `corpus` (the byte tokenizer ignores the corpus; a
    /// BPE gets [`DEFAULT_BPE_VOCAB`] tokens, see [`Tokenizer::train_bpe`] for others).
    pub fn for_corpus(kind: TokenizerKind, corpus: &str) -> Result<Self, TokenizerError> {
        match kind {
            TokenizerKind::Char => Self::char_from_corpus(corpus),
            TokenizerKind::Byte => Ok(Self::byte()),
            TokenizerKind::Bpe => Self::train_bpe(corpus, DEFAULT_BPE_VOCAB),
            TokenizerKind::Word => Self::train_words(corpus),
        }
    }

    /// A word tokenizer of the words of `corpus` ([`WordTokenizer::train`]).
    pub fn train_words(corpus: &str) -> Result<Self, TokenizerError> {
        Ok(Tokenizer::Word {
            huggingface: Box::new(WordTokenizer::train(corpus)?),
        })
    }

    pub fn kind(&self) -> TokenizerKind {
        match self {
            Tokenizer::Char { .. } => TokenizerKind::Char,
            Tokenizer::Byte => TokenizerKind::Byte,
            Tokenizer::Bpe { .. } => TokenizerKind::Bpe,
            Tokenizer::Word { .. } => TokenizerKind::Word,
        }
    }

    /// This tokenizer as a Hugging Face `tokenizer.json`, with the same ids, so
    /// `transformers` and `tokenizers` read exported models' text as headlab does. Char: a
    /// word-level vocabulary over single characters (`Split` on `[\s\S]`, which both Rust's and
    /// Python's (Oniguruma) regex engines read, isolates each one; `Fuse` joins
    /// them back). Byte: GPT-2's byte-level mapping with no merges, so id = byte. BPE: its
    /// own Hugging Face form.
    pub fn to_huggingface_json(&self) -> String {
        let chars_to_ids = |pairs: Vec<(String, u32)>| {
            pairs
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::from(v)))
                .collect::<serde_json::Map<_, _>>()
        };
        let (pre_tokenizer, model, decoder) = match self {
            Tokenizer::Bpe { huggingface, .. } => return huggingface.to_huggingface_json(),
            Tokenizer::Word { huggingface } => return huggingface.to_huggingface_json(),
            Tokenizer::Char { vocab } => (
                serde_json::json!({
                    "type": "Split", "pattern": { "Regex": "[\\s\\S]" },
                    "behavior": "Isolated", "invert": false
                }),
                serde_json::json!({
                    "type": "WordLevel", "unk_token": "<unk>",
                    "vocab": chars_to_ids(vocab.chars.iter().enumerate()
                        .map(|(i, c)| (c.to_string(), i as u32)).collect()),
                }),
                serde_json::json!({ "type": "Fuse" }),
            ),
            Tokenizer::Byte => {
                let byte_level = serde_json::json!({
                    "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                    "use_regex": true
                });
                (
                    byte_level.clone(),
                    serde_json::json!({
                        "type": "BPE", "dropout": null, "unk_token": null,
                        "continuing_subword_prefix": null, "end_of_word_suffix": null,
                        "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                        "vocab": chars_to_ids((0..=255u8)
                            .map(|b| (gpt2_byte_char(b).to_string(), u32::from(b))).collect()),
                        "merges": [],
                    }),
                    byte_level,
                )
            }
        };
        serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
            "normalizer": null, "pre_tokenizer": pre_tokenizer, "post_processor": null,
            "decoder": decoder, "model": model,
        })
        .to_string()
    }

    /// Reads a Hugging Face `tokenizer.json`. What [`Tokenizer::to_huggingface_json`] writes
    /// comes back as it was (a char vocabulary, the byte tokenizer); any other byte-level BPE
    /// (GPT-2's and its family's) becomes a BPE that encodes whole texts as `tokenizers` does.
    pub fn from_huggingface_json(json: &str) -> Result<Self, TokenizerError> {
        let foreign = |why: String| TokenizerError::Foreign(why);
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| foreign(format!("it is not JSON ({e})")))?;
        let model = &value["model"];
        match model["type"].as_str() {
            Some("WordLevel")
                if value["pre_tokenizer"]["type"] != "Split"
                    || value["pre_tokenizer"]["pattern"]["Regex"] != crate::word::WORD_PATTERN =>
            {
                let vocab = model["vocab"]
                    .as_object()
                    .ok_or_else(|| foreign("its WordLevel model has no vocab".into()))?;
                let mut chars = vec![None; vocab.len()];
                for (token, id) in vocab {
                    let mut it = token.chars();
                    let (Some(ch), None) = (it.next(), it.next()) else {
                        return Err(foreign(format!(
                            "its WordLevel entry {token:?} is not one character; headlab \
                             reads WordLevel vocabularies of single characters only"
                        )));
                    };
                    let slot = id
                        .as_u64()
                        .and_then(|id| chars.get_mut(id as usize))
                        .ok_or_else(|| {
                            foreign(format!(
                                "the id of {token:?} is not one of 0..{}",
                                vocab.len()
                            ))
                        })?;
                    *slot = Some(ch);
                }
                let chars: Option<Vec<char>> = chars.into_iter().collect();
                let chars = chars.ok_or_else(|| foreign("two entries share an id".into()))?;
                let vocab = CharVocab::try_from(chars).map_err(foreign)?;
                Ok(Tokenizer::Char { vocab })
            }
            // A word tokenizer headlab wrote: its pre-tokenizer is the word pattern's Split.
            Some("WordLevel") => {
                let hf =
                    tokenizers::Tokenizer::from_str(json).map_err(|e| foreign(e.to_string()))?;
                Ok(Tokenizer::Word {
                    huggingface: Box::new(
                        WordTokenizer::from_hf(hf).map_err(|e| foreign(e.to_string()))?,
                    ),
                })
            }
            Some("BPE") => {
                let no_merges = model["merges"].as_array().is_some_and(|m| m.is_empty());
                let ids_are_bytes = model["vocab"].as_object().is_some_and(|v| {
                    v.len() == 256
                        && (0..=255u8).all(|b| {
                            v.get(&gpt2_byte_char(b).to_string())
                                .and_then(|id| id.as_u64())
                                == Some(u64::from(b))
                        })
                });
                if no_merges && ids_are_bytes {
                    return Ok(Tokenizer::Byte);
                }
                let hf: HfBpe = serde_json::from_str(json).map_err(|e| {
                    foreign(format!(
                        "it is not a byte-level BPE (GPT-2's ByteLevel pre-tokenizer and \
                         decoder, no normalizer): {e}"
                    ))
                })?;
                Ok(Tokenizer::Bpe {
                    huggingface: Box::new(BpeTokenizer::from_hf(hf).map_err(foreign)?),
                    whole_text: true,
                })
            }
            other => Err(foreign(format!(
                "its model is {}; headlab reads byte-level BPE (GPT-2) and single-character \
                 WordLevel vocabularies",
                other.unwrap_or("missing")
            ))),
        }
    }

    /// GPT-2's tokenizer from its two older files, `vocab.json` and `merges.txt`: a byte-level
    /// BPE with GPT-2's pre-tokenizer (its split regex, no added prefix space), encoding whole
    /// texts.
    pub fn from_vocab_merges(vocab: &Path, merges: &Path) -> Result<Self, TokenizerError> {
        let foreign = |why: String| TokenizerError::Foreign(why);
        let (Some(v), Some(m)) = (vocab.to_str(), merges.to_str()) else {
            return Err(foreign("its path is not UTF-8".into()));
        };
        let model = BPE::from_file(v, m).build().map_err(|e| {
            foreign(format!(
                "{} and {} are not a BPE vocabulary and merge list: {e}",
                vocab.display(),
                merges.display()
            ))
        })?;
        let hf: HfBpe = TokenizerBuilder::new()
            .with_model(model)
            .with_normalizer(None)
            .with_pre_tokenizer(Some(byte_level()))
            .with_post_processor(None)
            .with_decoder(Some(byte_level()))
            .build()
            .map_err(|e| foreign(e.to_string()))?;
        Ok(Tokenizer::Bpe {
            huggingface: Box::new(BpeTokenizer::from_hf(hf).map_err(foreign)?),
            whole_text: true,
        })
    }

    /// Number of token ids; the model's embedding and output sizes.
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Char { vocab } => vocab.chars.len(),
            Tokenizer::Byte => 256,
            Tokenizer::Bpe { huggingface, .. } => huggingface.vocab_size(),
            Tokenizer::Word { huggingface } => huggingface.vocab_size(),
        }
    }

    /// Encodes `text`; fails on the first character a char vocabulary lacks, or the first
    /// word a word vocabulary lacks (byte and BPE encode any text).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        match self {
            Tokenizer::Byte => Ok(text.bytes().map(u32::from).collect()),
            Tokenizer::Bpe {
                huggingface,
                whole_text,
            } => huggingface.encode(text, *whole_text),
            Tokenizer::Word { huggingface } => Ok(huggingface.encode(text, true)?),
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

    /// Encodes `text` onto the end of `out`, a piece at a time (no second copy of a large
    /// text's ids), telling `progress` how many bytes of `text` are done after each piece.
    /// The same ids and the same errors as [`Tokenizer::encode`], except that a word the word
    /// vocabulary lacks becomes its unknown id (data may have words its training split lacks).
    pub fn encode_into(
        &self,
        text: &str,
        out: &mut TokenIds,
        progress: &mut dyn FnMut(usize),
    ) -> Result<(), TokenizerError> {
        self.encode_in_pieces(text, out, ENCODE_PIECE, progress)
    }

    /// [`Tokenizer::encode_into`] with pieces of about `piece` bytes (or ids).
    fn encode_in_pieces(
        &self,
        text: &str,
        out: &mut TokenIds,
        piece: usize,
        progress: &mut dyn FnMut(usize),
    ) -> Result<(), TokenizerError> {
        match self {
            Tokenizer::Char { vocab } => {
                let ascii: Vec<Option<u32>> = (0u8..128).map(|b| vocab.id(char::from(b))).collect();
                let mut ids = Vec::with_capacity(piece.min(text.len()));
                for (index, (at, ch)) in text.char_indices().enumerate() {
                    let id = match ascii.get(ch as usize) {
                        Some(id) => *id,
                        None => vocab.id(ch),
                    };
                    match id {
                        Some(id) => ids.push(id),
                        None => return Err(unknown_char(text, index, ch, vocab.chars.len())),
                    }
                    if ids.len() == piece {
                        out.push_all(&ids);
                        ids.clear();
                        progress(at + ch.len_utf8());
                    }
                }
                out.push_all(&ids);
            }
            Tokenizer::Byte => {
                for (i, bytes) in text.as_bytes().chunks(piece).enumerate() {
                    let ids: Vec<u32> = bytes.iter().map(|&b| u32::from(b)).collect();
                    out.push_all(&ids);
                    progress(i * piece + bytes.len());
                }
            }
            // Pieces end after a newline, which no word crosses.
            Tokenizer::Word { huggingface } => {
                encode_lines(text, piece, out, progress, |t| {
                    Ok(huggingface.encode(t, false)?)
                })?;
            }
            // An imported BPE encodes a text whole: its tokens may cross lines.
            Tokenizer::Bpe {
                whole_text: true, ..
            } => out.push_all(&self.encode(text)?),
            // Pieces end after a newline, as the lines the BPE encodes do, so the ids are the
            // same.
            Tokenizer::Bpe { .. } => encode_lines(text, piece, out, progress, |t| self.encode(t))?,
        }
        progress(text.len());
        Ok(())
    }

    /// Decodes ids to text. Byte sequences that are not UTF-8 (a model can emit them)
    /// decode lossily; ids outside the vocabulary become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Tokenizer::Char { vocab } => ids
                .iter()
                .map(|&id| vocab.chars.get(id as usize).copied().unwrap_or(REPLACEMENT))
                .collect(),
            Tokenizer::Byte | Tokenizer::Bpe { .. } => {
                String::from_utf8_lossy(&self.decode_token_bytes(ids)).into_owned()
            }
            Tokenizer::Word { huggingface } => ids
                .iter()
                .map(|&id| huggingface.word(id).unwrap_or("\u{FFFD}"))
                .collect(),
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
            Tokenizer::Bpe { huggingface, .. } => {
                let mut out = Vec::with_capacity(ids.len() * 4);
                for &id in ids {
                    match huggingface.token_bytes(id) {
                        Some(bytes) => out.extend_from_slice(bytes),
                        None => {
                            let mut buf = [0; 4];
                            out.extend_from_slice(REPLACEMENT.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                }
                out
            }
            Tokenizer::Char { .. } | Tokenizer::Word { .. } => self.decode(ids).into_bytes(),
        }
    }

    /// The id that stands for any word the vocabulary lacks (the word tokenizer's
    /// `<unk>`), which no prompt should hold; the other tokenizers have none.
    pub fn unknown_id(&self) -> Option<u32> {
        match self {
            Tokenizer::Word { huggingface } => Some(huggingface.unknown_id()),
            _ => None,
        }
    }

    /// How many characters of text `ids` stand for: the characters whose first byte lies in
    /// one of these tokens (a character split across tokens counts once, in the token that
    /// starts it). Ids outside the vocabulary count as one character (U+FFFD). This is the
    /// denominator of bits per character, so models with different tokenizers compare.
    pub fn char_count(&self, ids: &[u32]) -> usize {
        self.chars_of(ids.iter().copied())
    }

    /// [`Tokenizer::char_count`] of stored ids.
    pub fn char_count_of(&self, ids: &TokenIds) -> usize {
        self.chars_of(ids.iter())
    }

    fn chars_of(&self, ids: impl Iterator<Item = u32>) -> usize {
        match self {
            Tokenizer::Char { .. } => ids.count(),
            Tokenizer::Byte => ids
                .filter(|&id| u8::try_from(id).map_or(true, starts_char))
                .count(),
            Tokenizer::Bpe { huggingface, .. } => ids
                .map(|id| {
                    huggingface
                        .token_bytes(id)
                        .map_or(1, |b| b.iter().filter(|&&b| starts_char(b)).count())
                })
                .sum(),
            // The unknown word stands for one word of unknown length: counted as one.
            Tokenizer::Word { huggingface } => ids
                .map(|id| match huggingface.word(id) {
                    Some(w) if id != huggingface.unknown_id() => w.chars().count(),
                    _ => 1,
                })
                .sum(),
        }
    }

    /// A short visible label for one token, for axes of attention pictures: printable
    /// characters as themselves, space as `·`, control characters escaped (`\n`), and
    /// non-ASCII bytes of the byte tokenizer as `\xNN` (they are fragments of characters).
    /// A BPE token shows its decoded text the same way, e.g. `·the` or `,\n`; bytes that are
    /// only part of a character show as `\xNN`.
    pub fn token_text(&self, id: u32) -> String {
        match self {
            Tokenizer::Bpe { huggingface, .. } => {
                return match huggingface.token_bytes(id) {
                    None => format!("<{id}?>"),
                    Some(bytes) => visible_bytes(bytes),
                };
            }
            Tokenizer::Word { huggingface } => {
                return match huggingface.word(id) {
                    None => format!("<{id}?>"),
                    Some(w) => w.chars().map(visible_char).collect(),
                };
            }
            _ => {}
        }
        let ch = match self {
            Tokenizer::Char { vocab } => vocab.chars.get(id as usize).copied(),
            Tokenizer::Byte => match u8::try_from(id) {
                Ok(b) if b.is_ascii() => Some(char::from(b)),
                Ok(b) => return format!("\\x{b:02X}"),
                Err(_) => None,
            },
            Tokenizer::Bpe { .. } | Tokenizer::Word { .. } => None,
        };
        match ch {
            None => format!("<{id}?>"),
            Some(c) => visible_char(c),
        }
    }

    /// Writes the tokenizer as pretty JSON.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), TokenizerError> {
        let path = path.as_ref();
        // Serialising strings, numbers and a tag cannot fail.
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

/// Encodes `text` with `encode` in pieces of about `piece` bytes, each ending after a newline
/// (or at the text's end), onto `out`, telling `progress` where each piece ended. For
/// tokenizers whose tokens never cross a newline, so the ids are those of the whole text.
fn encode_lines(
    text: &str,
    piece: usize,
    out: &mut TokenIds,
    progress: &mut dyn FnMut(usize),
    encode: impl Fn(&str) -> Result<Vec<u32>, TokenizerError>,
) -> Result<(), TokenizerError> {
    let mut start = 0;
    while start < text.len() {
        // Searched as bytes: `start + piece` may fall inside a character, and a newline byte
        // is never part of one, so the cut is a boundary.
        let from = (start + piece).min(text.len());
        let end = text.as_bytes()[from..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(text.len(), |i| from + i + 1);
        out.push_all(&encode(&text[start..end])?);
        progress(end);
        start = end;
    }
    Ok(())
}

fn codepoint(ch: &char) -> u32 {
    u32::from(*ch)
}

/// Whether `b` is the first byte of a UTF-8 character (not a continuation byte).
fn starts_char(b: u8) -> bool {
    b & 0xC0 != 0x80
}

/// One character as a visible label: space as `·`, control characters and other
/// whitespace escaped.
fn visible_char(c: char) -> String {
    match c {
        ' ' => "·".to_string(),
        c if c.is_control() || c.is_whitespace() => c.escape_default().to_string(),
        c => c.to_string(),
    }
}

/// Bytes as a visible label: the characters they hold through [`visible_char`], and bytes
/// that are not a whole character as `\xNN`.
fn visible_bytes(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.extend(chunk.valid().chars().map(visible_char));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02X}"));
        }
    }
    out
}

/// The Hugging Face tokenizer behind [`Tokenizer::Bpe`]: a BPE model over GPT-2's byte
/// alphabet, a byte-level pre-tokenizer (GPT-2's split regex, no added prefix space) and a
/// byte-level decoder.
type HfBpe = TokenizerImpl<BPE, NormalizerWrapper, ByteLevel, PostProcessorWrapper, ByteLevel>;

/// GPT-2's `bytes_to_unicode`: every byte as a printable character (printable Latin-1
/// bytes as themselves, the other 68 as U+0100 onwards), the alphabet of byte-level BPE
/// vocabularies.
struct ByteAlphabet {
    to_char: [char; 256],
    /// Indexed by the character's code point (all are below 0x144).
    to_byte: [Option<u8>; 0x144],
}

static BYTE_ALPHABET: LazyLock<ByteAlphabet> = LazyLock::new(|| {
    let mut to_char = ['\0'; 256];
    let mut to_byte = [None; 0x144];
    let mut next = 0x100u32;
    for b in 0..=255u8 {
        let c = if matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF) {
            char::from(b)
        } else {
            next += 1;
            char::from_u32(next - 1).expect("U+0100..U+0143 are characters")
        };
        to_char[usize::from(b)] = c;
        to_byte[c as usize] = Some(b);
    }
    ByteAlphabet { to_char, to_byte }
});

impl ByteAlphabet {
    /// The bytes a vocabulary entry spells, or `None` if it has a character outside the
    /// byte alphabet.
    fn bytes(&self, token: &str) -> Option<Vec<u8>> {
        token
            .chars()
            .map(|c| self.to_byte.get(c as usize).copied().flatten())
            .collect()
    }
}

/// A trained byte-level BPE: the Hugging Face tokenizer plus each token's bytes, so
/// decoding is exact (a model may emit half a character) and labels are cheap.
#[derive(Clone)]
pub struct BpeTokenizer {
    hf: HfBpe,
    /// The bytes of each token id, `0..vocab_size`.
    token_bytes: Vec<Vec<u8>>,
}

impl BpeTokenizer {
    /// Trains a byte-level BPE of at most `vocab_size` tokens on `corpus`, which is cut
    /// into lines exactly as [`BpeTokenizer::encode`] cuts text.
    pub fn train(corpus: &str, vocab_size: usize) -> Result<Self, TokenizerError> {
        if !(MIN_BPE_VOCAB..=MAX_BPE_VOCAB).contains(&vocab_size) {
            return Err(TokenizerError::BpeVocabSize(vocab_size));
        }
        let bpe_err = |e: tokenizers::Error| TokenizerError::Bpe(e.to_string());
        let mut hf: HfBpe = TokenizerBuilder::new()
            .with_model(BPE::default())
            .with_normalizer(None)
            .with_pre_tokenizer(Some(byte_level()))
            .with_post_processor(None)
            .with_decoder(Some(byte_level()))
            .build()
            .map_err(bpe_err)?;
        let large = corpus.len() >= BPE_PROGRESS_BYTES;
        // Only on a terminal: the bars also print blank lines to stdout.
        let show_progress = large && std::io::IsTerminal::is_terminal(&std::io::stderr());
        if large {
            let _ = writeln!(
                std::io::stderr(),
                "headlab: training a byte-level BPE of {vocab_size} tokens on {} characters",
                corpus.chars().count()
            );
        }
        let mut trainer = BpeTrainerBuilder::new()
            .vocab_size(vocab_size)
            .min_frequency(0)
            .show_progress(show_progress)
            .initial_alphabet(BYTE_ALPHABET.to_char.iter().copied().collect())
            .build();
        // A Vec, so the progress bar knows the number of lines.
        let lines: Vec<&str> = lines(corpus).collect();
        hf.train(&mut trainer, lines.into_iter()).map_err(bpe_err)?;
        Self::from_hf(hf).map_err(TokenizerError::Bpe)
    }

    /// Checks a Hugging Face tokenizer is a byte-level BPE headlab can use and indexes it.
    fn from_hf(hf: HfBpe) -> Result<Self, String> {
        let pre = hf
            .get_pre_tokenizer()
            .ok_or("it has no pre-tokenizer (expected ByteLevel)")?;
        if pre.add_prefix_space {
            return Err(
                "its ByteLevel pre-tokenizer adds a prefix space, which would change \
                        the text on decoding"
                    .into(),
            );
        }
        if hf.get_normalizer().is_some() {
            return Err("it has a normalizer, which would change the text".into());
        }
        // Added tokens that are also vocabulary entries (GPT-2's `<|endoftext|>`) change no id.
        if hf.get_vocab_size(true) != hf.get_vocab_size(false) {
            return Err(
                "it has added tokens outside its vocabulary, which headlab does not use".into(),
            );
        }
        let model = hf.get_model();
        if model.dropout.is_some_and(|d| d > 0.0) {
            return Err("its BPE has dropout, which would make encoding random".into());
        }
        let n = model.get_vocab_size();
        if !(MIN_BPE_VOCAB..=MAX_BPE_VOCAB).contains(&n) {
            return Err(format!(
                "its vocabulary has {n} tokens, but a byte-level BPE has {MIN_BPE_VOCAB} to \
                 {MAX_BPE_VOCAB}"
            ));
        }
        let mut token_bytes = Vec::with_capacity(n);
        for id in 0..n as u32 {
            let token = model
                .id_to_token(id)
                .ok_or_else(|| format!("token ids are not 0..{n}: id {id} is missing"))?;
            let bytes = BYTE_ALPHABET.bytes(&token).ok_or_else(|| {
                format!("token {id} ({token:?}) is not made of byte-level characters")
            })?;
            if bytes.is_empty() {
                return Err(format!("token {id} is empty"));
            }
            token_bytes.push(bytes);
        }
        for (b, c) in BYTE_ALPHABET.to_char.iter().enumerate() {
            if model.token_to_id(&c.to_string()).is_none() {
                return Err(format!(
                    "byte 0x{b:02X} has no token, so some text could not be encoded"
                ));
            }
        }
        Ok(Self { hf, token_bytes })
    }

    /// Number of token ids.
    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// The bytes token `id` stands for (`None` outside the vocabulary).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.token_bytes.get(id as usize).map(Vec::as_slice)
    }

    /// Encodes any text: whole (as `tokenizers` would), or line by line (in parallel, the
    /// cut a BPE headlab trains is trained on), the lines' ids concatenated.
    pub fn encode(&self, text: &str, whole_text: bool) -> Result<Vec<u32>, TokenizerError> {
        let bpe_err = |e: tokenizers::Error| TokenizerError::Bpe(e.to_string());
        if whole_text {
            let encoding = self.hf.encode_fast(text, false).map_err(bpe_err)?;
            return Ok(encoding.get_ids().to_vec());
        }
        let encodings = self
            .hf
            .encode_batch_fast(lines(text).collect::<Vec<_>>(), false)
            .map_err(bpe_err)?;
        Ok(encodings
            .iter()
            .flat_map(|e| e.get_ids().iter().copied())
            .collect())
    }

    /// The Hugging Face `tokenizer.json` text.
    pub fn to_huggingface_json(&self) -> String {
        // A BPE of strings and numbers always serialises.
        self.hf.to_string(false).expect("BPE serialises to JSON")
    }
}

/// The printable character GPT-2's byte-level tokenizers show byte `b` as: printable Latin-1
/// bytes stand for themselves, the other 68 take the code points from U+0100 on, in byte
/// order.
fn gpt2_byte_char(b: u8) -> char {
    let printable = |c: u8| matches!(c, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let shifted = (0..b).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + shifted).expect("U+0100..U+0143 are chars")
}

/// GPT-2's byte-level pre-tokenizer and decoder, without the leading space GPT-2 adds (so
/// decoding gives back exactly the text).
fn byte_level() -> ByteLevel {
    ByteLevel::new(false, false, true)
}

/// Text cut after each newline: the unit BPE training and encoding work on.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive('\n')
}

impl fmt::Debug for BpeTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BpeTokenizer")
            .field("vocab_size", &self.vocab_size())
            .finish_non_exhaustive()
    }
}

impl PartialEq for BpeTokenizer {
    fn eq(&self, other: &Self) -> bool {
        self.token_bytes == other.token_bytes
            && self.to_huggingface_json() == other.to_huggingface_json()
    }
}

impl Eq for BpeTokenizer {}

impl Serialize for BpeTokenizer {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.hf.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for BpeTokenizer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // Through text: the Hugging Face deserialisers expect borrowed strings, which a
        // buffered (internally tagged) value cannot always give.
        let value = serde_json::Value::deserialize(deserializer)?;
        let hf: HfBpe = serde_json::to_string(&value)
            .and_then(|json| serde_json::from_str(&json))
            .map_err(|e| D::Error::custom(format!("invalid Hugging Face BPE: {e}")))?;
        Self::from_hf(hf).map_err(|why| D::Error::custom(format!("unusable byte-level BPE: {why}")))
    }
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

    const BPE_CORPUS: &str = "the cat sat on the mat.\nthe dog sat on the log.\n\
                              a cat and a dog: the end.\n";

    fn small_bpe() -> Tokenizer {
        Tokenizer::train_bpe(&BPE_CORPUS.repeat(20), 300).unwrap()
    }

    /// Hugging Face's own `tokenizers` reads each exported vocabulary and gives the same ids
    /// and the same text back: what `transformers` sees in an exported model.
    #[test]
    fn hugging_face_reads_every_kind_with_the_same_ids_and_text() {
        let text = "the cat sat on the mat.\nThe dog: ñandú, \u{1F600} and\ttabs!\n";
        for tokenizer in [
            Tokenizer::char_from_corpus(text).unwrap(),
            Tokenizer::byte(),
            small_bpe(),
            Tokenizer::train_words(text).unwrap(),
        ] {
            let json = tokenizer.to_huggingface_json();
            let hf = tokenizers::Tokenizer::from_str(&json)
                .unwrap_or_else(|e| panic!("{:?}: {e}\n{json}", tokenizer.kind()));
            let encoding = hf.encode(text, false).unwrap();
            assert_eq!(
                encoding.get_ids(),
                tokenizer.encode(text).unwrap(),
                "{:?}",
                tokenizer.kind()
            );
            assert_eq!(hf.decode(encoding.get_ids(), false).unwrap(), text);
            // A BPE read back encodes whole texts, as any imported one does.
            if tokenizer.kind() != TokenizerKind::Bpe {
                assert_eq!(Tokenizer::from_huggingface_json(&json).unwrap(), tokenizer);
            }
        }
        // GPT-2's table: printable bytes are themselves, the rest follow U+0100 in order.
        assert_eq!(gpt2_byte_char(b'A'), 'A');
        assert_eq!(gpt2_byte_char(0), '\u{100}');
        assert_eq!(gpt2_byte_char(b' '), '\u{120}');
        assert_eq!(gpt2_byte_char(0xAD), '\u{143}');
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
    fn byte_alphabet_is_gpt2s() {
        let hf: std::collections::HashSet<char> = ByteLevel::alphabet().into_iter().collect();
        let ours: std::collections::HashSet<char> = BYTE_ALPHABET.to_char.iter().copied().collect();
        assert_eq!(ours, hf);
        // GPT-2's well-known spellings of space and newline.
        assert_eq!(BYTE_ALPHABET.to_char[usize::from(b' ')], 'Ġ');
        assert_eq!(BYTE_ALPHABET.to_char[usize::from(b'\n')], 'Ċ');
        assert_eq!(BYTE_ALPHABET.to_char[usize::from(b'a')], 'a');
        for b in 0..=255u8 {
            let c = BYTE_ALPHABET.to_char[usize::from(b)];
            assert_eq!(BYTE_ALPHABET.bytes(&c.to_string()), Some(vec![b]));
        }
        assert_eq!(BYTE_ALPHABET.bytes("a\u{2028}"), None);
    }

    #[test]
    fn bpe_merges_frequent_pairs_and_keeps_every_byte() {
        let t = small_bpe();
        assert_eq!(t.kind(), TokenizerKind::Bpe);
        let n = t.vocab_size();
        assert!(n > 256 && n <= 300, "{n}");
        let ids = t.encode("the cat sat on the mat.\n").unwrap();
        assert!(ids.len() < 12, "frequent words are merged: {ids:?}");
        assert!(ids.iter().all(|&i| (i as usize) < n));
        assert_eq!(t.decode(&ids), "the cat sat on the mat.\n");
        // Never-seen text still encodes, a byte at a time at worst.
        let unseen = "Zoë's naïve café ☕ 🙂\r\n\0";
        let ids = t.encode(unseen).unwrap();
        assert_eq!(t.decode(&ids), unseen);
        assert_eq!(t.char_count(&ids), unseen.chars().count());
        assert_eq!(t.encode("").unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn bpe_labels_show_decoded_text() {
        let t = small_bpe();
        let labels: Vec<String> = t
            .encode("the cat sat\n")
            .unwrap()
            .iter()
            .map(|&id| t.token_text(id))
            .collect();
        assert_eq!(labels.concat(), "the·cat·sat\\n", "{labels:?}");
        assert!(labels.iter().any(|l| l.chars().count() > 2), "{labels:?}");
        // Single bytes: ASCII as itself, bytes of a longer character as \xNN.
        let e = t.encode("é").unwrap();
        let shown: String = e.iter().map(|&id| t.token_text(id)).collect();
        assert_eq!(shown, "\\xC3\\xA9");
        assert_eq!(
            t.token_text(t.vocab_size() as u32),
            format!("<{}?>", t.vocab_size())
        );
        assert_eq!(visible_bytes("€\t".as_bytes()), "€\\t");
        assert_eq!(visible_bytes(&[b'a', 0xE2, 0x82]), "a\\xE2\\x82");
    }

    #[test]
    fn bpe_decodes_partial_characters_exactly() {
        let t = small_bpe();
        let ids = t.encode("€").unwrap();
        assert_eq!(ids.len(), 3, "one token per byte for an unseen character");
        assert_eq!(t.decode_token_bytes(&ids[..1]), vec![0xE2]);
        assert_eq!(t.decode(&ids[..1]), "\u{FFFD}");
        // Out of range ids become U+FFFD.
        assert_eq!(t.decode(&[t.vocab_size() as u32]), "\u{FFFD}");
        let mut d = StreamDecoder::new();
        let mut out = String::new();
        for &id in &ids {
            out += &d.push(&t.decode_token_bytes(&[id]));
        }
        assert_eq!(out + &d.finish(), "€");
    }

    #[test]
    fn encoding_in_pieces_gives_the_ids_of_encoding_whole() {
        let text = "the cats near the dog sing.\nthé dog sees\n\nà la\nend";
        let char_vocab = {
            // nanoGPT's `sorted(list(set(text)))`, written out.
            let mut chars: Vec<char> = text.chars().collect();
            chars.sort();
            chars.dedup();
            chars
        };
        let chars = Tokenizer::char_from_corpus(text).unwrap();
        match &chars {
            Tokenizer::Char { vocab } => assert_eq!(vocab.chars(), char_vocab),
            other => panic!("{other:?}"),
        }
        let bpe = Tokenizer::train_bpe(&text.repeat(20), 300).unwrap();
        let words = Tokenizer::train_words(text).unwrap();
        for tokenizer in [chars, Tokenizer::byte(), bpe, words] {
            let whole = tokenizer.encode(text).unwrap();
            for piece in [1, 2, 3, 7, 64, 1 << 20] {
                for vocab in [256, 70_000] {
                    let mut ids = TokenIds::for_vocab(vocab, 0);
                    let mut done = Vec::new();
                    tokenizer
                        .encode_in_pieces(text, &mut ids, piece, &mut |d| done.push(d))
                        .unwrap();
                    let got: Vec<u32> = ids.iter().collect();
                    assert_eq!(got, whole, "{} in pieces of {piece}", tokenizer.kind());
                    assert!(done.windows(2).all(|w| w[0] <= w[1]), "{done:?}");
                    assert_eq!(done.last(), Some(&text.len()));
                }
            }
        }
        // An unknown character is named by its place in the whole text, as `encode` does.
        let known = Tokenizer::char_from_corpus("abc ").unwrap();
        let mut ids = TokenIds::for_vocab(4, 0);
        let err = known
            .encode_in_pieces("abc abc x", &mut ids, 2, &mut |_| {})
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            known.encode("abc abc x").unwrap_err().to_string()
        );
    }

    #[test]
    fn char_count_counts_characters_once() {
        let text = "aé€🙂";
        for t in [
            Tokenizer::char_from_corpus(text).unwrap(),
            Tokenizer::byte(),
            small_bpe(),
        ] {
            let ids = t.encode(text).unwrap();
            assert_eq!(t.char_count(&ids), 4, "{}", t.kind());
        }
        // A split character counts in the token that starts it.
        let b = Tokenizer::byte();
        let ids = b.encode("é").unwrap();
        assert_eq!((b.char_count(&ids[..1]), b.char_count(&ids[1..])), (1, 0));
    }

    #[test]
    fn bpe_vocab_size_is_checked() {
        for bad in [0, 255, 65_537] {
            let msg = Tokenizer::train_bpe("abc", bad).unwrap_err().to_string();
            assert!(
                msg.contains(&format!("data.vocab_size = {bad}")) && msg.contains("256"),
                "{msg}"
            );
        }
        // 256 is the bytes alone.
        let t = Tokenizer::train_bpe("aaaa", 256).unwrap();
        assert_eq!(t.vocab_size(), 256);
        assert_eq!(t.encode("aaaa").unwrap().len(), 4);
        // A tiny corpus runs out of pairs before the requested size.
        let t = Tokenizer::train_bpe("abab", 1024).unwrap();
        assert!(t.vocab_size() < 260, "{}", t.vocab_size());
    }

    #[test]
    fn bpe_json_is_tagged_huggingface_json() {
        let t = small_bpe();
        let v: serde_json::Value = serde_json::to_value(&t).unwrap();
        assert_eq!(v["kind"], "bpe");
        assert_eq!(v["huggingface"]["model"]["type"], "BPE");
        assert_eq!(v["huggingface"]["pre_tokenizer"]["type"], "ByteLevel");
        assert_eq!(v["huggingface"]["pre_tokenizer"]["add_prefix_space"], false);
        let Tokenizer::Bpe { huggingface, .. } = &t else {
            panic!("expected a BPE")
        };
        let inner: serde_json::Value =
            serde_json::from_str(&huggingface.to_huggingface_json()).unwrap();
        assert_eq!(inner, v["huggingface"]);
        assert_eq!(
            format!("{t:?}"),
            format!(
                "Bpe {{ huggingface: BpeTokenizer {{ vocab_size: {}, .. }}, whole_text: false }}",
                t.vocab_size()
            )
        );
    }

    #[test]
    fn an_imported_bpe_encodes_whole_texts_and_keeps_saying_so() {
        // The byte vocabulary plus one merge across lines, "\n\n", which a BPE trained line
        // by line never learns but GPT-2's has.
        let mut hf: serde_json::Value =
            serde_json::from_str(&Tokenizer::byte().to_huggingface_json()).unwrap();
        hf["model"]["vocab"]["ĊĊ"] = 256.into();
        hf["model"]["merges"] = serde_json::json!(["Ċ Ċ"]);
        let imported = Tokenizer::from_huggingface_json(&hf.to_string()).unwrap();
        let Tokenizer::Bpe {
            huggingface,
            whole_text,
        } = &imported
        else {
            panic!("expected a BPE")
        };
        assert!(whole_text);
        // Whole, GPT-2's pre-tokenizer keeps "\n\n" together; cut into lines, it cannot.
        let text = "a\n\n\nb";
        let n = u32::from(b'\n');
        assert_eq!(imported.encode(text).unwrap(), [97, 256, n, 98]);
        assert_eq!(huggingface.encode(text, false).unwrap(), [97, n, n, n, 98]);
        assert_eq!(imported.decode(&imported.encode(text).unwrap()), text);
        let trained = small_bpe();
        let json = serde_json::to_value(&imported).unwrap();
        assert_eq!(json["whole_text"], true);
        assert_eq!(serde_json::from_value::<Tokenizer>(json).unwrap(), imported);
        assert!(
            serde_json::to_value(&trained)
                .unwrap()
                .get("whole_text")
                .is_none()
        );
    }

    #[test]
    fn save_and_load_round_trip() {
        for t in [
            Tokenizer::char_from_corpus("First Citizen:\nBefore we proceed é\"\\").unwrap(),
            Tokenizer::byte(),
            small_bpe(),
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

        let mut bpe: serde_json::Value = serde_json::to_value(small_bpe()).unwrap();
        let good = bpe.to_string();
        let mut broken = Vec::new();
        let hf = &mut bpe["huggingface"];
        hf["model"]["vocab"].as_object_mut().unwrap().remove("Ġ");
        broken.push(("bpe-no-space-byte.json", bpe.to_string(), ""));
        let mut bpe: serde_json::Value = serde_json::from_str(&good).unwrap();
        bpe["huggingface"]["pre_tokenizer"]["add_prefix_space"] = true.into();
        broken.push(("bpe-prefix.json", bpe.to_string(), "prefix space"));
        let mut bpe: serde_json::Value = serde_json::from_str(&good).unwrap();
        bpe["huggingface"]["model"]["vocab"]["a"] = 100_000.into();
        broken.push(("bpe-ids.json", bpe.to_string(), "missing"));
        let mut bpe: serde_json::Value = serde_json::from_str(&good).unwrap();
        bpe["huggingface"]["model"]["type"] = "WordPiece".into();
        broken.push(("bpe-model.json", bpe.to_string(), "BPE"));
        broken.push((
            "bpe-truncated.json",
            good[..good.len() / 2].to_string(),
            "EOF",
        ));
        broken.push(("bpe-empty.json", r#"{"kind":"bpe"}"#.into(), "huggingface"));

        for (name, body, part) in [
            ("garbage.json", "{not json".to_string(), ""),
            (
                "unsorted.json",
                r#"{"kind":"char","vocab":["b","a"]}"#.to_string(),
                "",
            ),
            ("kind.json", r#"{"kind":"wordpiece"}"#.to_string(), "bpe"),
            (
                "word-empty.json",
                r#"{"kind":"word"}"#.to_string(),
                "huggingface",
            ),
        ]
        .into_iter()
        .chain(broken)
        {
            let path = temp_path(name);
            std::fs::write(&path, body).unwrap();
            let err = Tokenizer::load(&path).unwrap_err();
            std::fs::remove_file(&path).unwrap();
            assert!(
                matches!(err, TokenizerError::Corrupt { .. }),
                "{name}: {err:?}"
            );
            let msg = err.to_string();
            assert!(
                msg.contains(&path.display().to_string()) && msg.contains(part),
                "{name}: {part:?} missing from {msg}"
            );
        }
    }

    #[test]
    fn kind_parses_and_rejects_unknown() {
        assert_eq!(
            "byte".parse::<TokenizerKind>().unwrap(),
            TokenizerKind::Byte
        );
        assert_eq!("bpe".parse::<TokenizerKind>().unwrap(), TokenizerKind::Bpe);
        assert_eq!(
            "word".parse::<TokenizerKind>().unwrap(),
            TokenizerKind::Word
        );
        let msg = "words".parse::<TokenizerKind>().unwrap_err().to_string();
        assert!(
            msg.contains("words") && msg.contains("char, byte, bpe, word"),
            "{msg}"
        );
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
        fn bpe_round_trip(s in any::<String>()) {
            static BPE: LazyLock<Tokenizer> = LazyLock::new(small_bpe);
            let ids = BPE.encode(&s).unwrap();
            prop_assert!(ids.len() <= s.len());
            prop_assert!(ids.iter().all(|&i| (i as usize) < BPE.vocab_size()));
            prop_assert_eq!(BPE.char_count(&ids), s.chars().count());
            prop_assert_eq!(BPE.decode(&ids), s);
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

/// Properties over random text: every tokenizer round-trips any text in its vocabulary, also
/// after a save and load (as a run directory does).
#[cfg(test)]
mod props {
    use std::sync::LazyLock;

    use proptest::prelude::*;

    use super::{Tokenizer, TokenizerKind};

    /// Encodes, decodes, and does the same with the tokenizer written to disk and read back.
    fn round_trips(tokenizer: &Tokenizer, text: &str) -> Result<(), TestCaseError> {
        let ids = tokenizer
            .encode(text)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(ids.iter().all(|&i| (i as usize) < tokenizer.vocab_size()));
        prop_assert_eq!(tokenizer.decode(&ids), text);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        tokenizer.save(&path).unwrap();
        let loaded = Tokenizer::load(&path).unwrap();
        prop_assert_eq!(loaded.vocab_size(), tokenizer.vocab_size());
        prop_assert_eq!(loaded.encode(text).unwrap(), ids);
        Ok(())
    }

    static BPE: LazyLock<Tokenizer> = LazyLock::new(|| {
        let corpus = "the quick brown fox jumps over the lazy dog; héllo wörld ✓\n".repeat(20);
        Tokenizer::train_bpe(&corpus, 300).unwrap()
    });

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any text made of the corpus's characters, in any order.
        #[test]
        fn char_tokenizer_round_trips_text_in_its_vocabulary(
            corpus in "\\PC{1,40}",
            picks in proptest::collection::vec(any::<prop::sample::Index>(), 0..60),
        ) {
            let tokenizer = Tokenizer::char_from_corpus(&corpus).unwrap();
            let chars: Vec<char> = corpus.chars().collect();
            let text: String = picks.iter().map(|i| chars[i.index(chars.len())]).collect();
            round_trips(&tokenizer, &text)?;
        }

        #[test]
        fn byte_and_bpe_tokenizers_round_trip_any_text(text in any::<String>()) {
            round_trips(&Tokenizer::byte(), &text)?;
            round_trips(&BPE, &text)?;
        }
    }

    /// Byte-level BPE trained on the built-in grammar corpus: lossless on any UTF-8, and
    /// deterministic.
    static CORPUS: LazyLock<String> = LazyLock::new(|| crate::corpus::grammar(3, 20_000));
    static GRAMMAR_BPE: LazyLock<Tokenizer> =
        LazyLock::new(|| Tokenizer::train_bpe(&CORPUS, 400).expect("BPE trains"));

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any UTF-8, mostly never seen in training: no unknown tokens, exact round trip.
        #[test]
        fn any_utf8_round_trips(s in any::<String>()) {
            let ids = GRAMMAR_BPE.encode(&s).unwrap();
            prop_assert!(ids.iter().all(|&i| (i as usize) < GRAMMAR_BPE.vocab_size()));
            prop_assert!(ids.len() <= s.len());
            prop_assert_eq!(GRAMMAR_BPE.char_count(&ids), s.chars().count());
            prop_assert_eq!(GRAMMAR_BPE.decode(&ids), s);
        }

        /// Text like the corpus (so merges apply), with foreign characters mixed in.
        #[test]
        fn corpus_like_text_round_trips(
            s in r"[a-z ,.\n]{0,120}( ?[é€🙂\r\t\x00]{0,3}[a-z ]{0,20}){0,4}"
        ) {
            let ids = GRAMMAR_BPE.encode(&s).unwrap();
            prop_assert_eq!(GRAMMAR_BPE.decode(&ids), s.clone());
            let bytes: Vec<u8> = ids.iter().flat_map(|&i| GRAMMAR_BPE.decode_token_bytes(&[i])).collect();
            prop_assert_eq!(bytes, s.as_bytes().to_vec());
        }
    }

    #[test]
    fn bpe_compresses_the_text_it_was_trained_on() {
        assert_eq!(GRAMMAR_BPE.kind(), TokenizerKind::Bpe);
        assert_eq!(GRAMMAR_BPE.vocab_size(), 400);
        let ids = GRAMMAR_BPE.encode(&CORPUS).unwrap();
        let ratio = CORPUS.chars().count() as f64 / ids.len() as f64;
        assert!(ratio > 2.5, "only {ratio:.2} chars per token");
        assert_eq!(GRAMMAR_BPE.char_count(&ids), CORPUS.chars().count());
    }

    #[test]
    fn same_corpus_and_vocab_size_give_an_identical_tokenizer_file() {
        let dir = tempfile::tempdir().unwrap();
        let save = |t: &Tokenizer, name: &str| {
            let path = dir.path().join(name);
            t.save(&path).unwrap();
            std::fs::read(&path).unwrap()
        };
        let a = save(&Tokenizer::train_bpe(&CORPUS, 400).unwrap(), "a.json");
        let b = save(&Tokenizer::train_bpe(&CORPUS, 400).unwrap(), "b.json");
        assert!(a == b, "two trainings differ");
        assert_eq!(a, save(&GRAMMAR_BPE, "c.json"));
        let loaded = Tokenizer::load(dir.path().join("a.json")).unwrap();
        assert_eq!(&loaded, &*GRAMMAR_BPE);
        assert_eq!(save(&loaded, "d.json"), a, "load + save changes the file");
        let other = save(&Tokenizer::train_bpe(&CORPUS, 350).unwrap(), "e.json");
        assert_ne!(other, a);
    }
}

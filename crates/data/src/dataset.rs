//! Token data: load text, tokenize, split train/val like nanoGPT, and sample batches.
//!
//! Deliberately free of Burn: batches are flat `Vec<u32>` in row-major `[batch, time]`
//! order, so everything here is testable without a backend; the trainer turns them into
//! tensors.

use std::fmt;
// Log lines go to stderr with `let _ = writeln!`: a reader that went away must not end a run.
use std::io::Write as _;
use std::path::{Path, PathBuf};

use rand::Rng;

use crate::builtin::BuiltinCorpus;
use crate::config::{DataConfig, DataConfigError, DataSource};
use crate::ids::TokenIds;
use crate::tokenizer::{DEFAULT_BPE_VOCAB, Tokenizer, TokenizerError, TokenizerKind};

/// Which part of the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    Train,
    Val,
}

impl Split {
    pub const ALL: [Split; 2] = [Split::Train, Split::Val];

    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
        }
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Errors from loading data or drawing batches.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read the text file {}: {source}{}", path.display(), cwd_hint(path))]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("dataset {} is empty", path.display())]
    Empty { path: PathBuf },
    #[error(
        "dataset {} is not valid UTF-8: the first invalid byte is at byte offset {offset} \
         (line {line}); convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        path.display()
    )]
    NotUtf8 {
        path: PathBuf,
        offset: usize,
        line: usize,
    },
    #[error("cannot tokenize {source_name}: {source}")]
    Tokenize {
        source_name: String,
        source: TokenizerError,
    },
    #[error("data.val_fraction = {0} must be strictly between 0 and 1")]
    ValFraction(f64),
    #[error(
        "the {split} split has {len} tokens, but model.block_size = {block_size} needs at least \
         {} (a window plus its next-token target); lower model.block_size to at most {} or use \
         more data (a longer file, a larger data.builtin_chars{})",
        block_size + 1,
        len.saturating_sub(1),
        val_hint(split)
    )]
    TooShort {
        split: Split,
        len: usize,
        block_size: usize,
    },
    #[error(transparent)]
    Config(#[from] DataConfigError),
    /// A text of one character repeated: there is nothing to predict.
    #[error(
        "{source_name} holds one distinct character ({symbol:?}) and nothing else: a model has \
         nothing to predict there (its loss is 0 from the first step); give a text with more \
         than one distinct character"
    )]
    OneSymbol { source_name: String, symbol: char },
}

fn val_hint(split: &Split) -> &'static str {
    match split {
        Split::Val => ", or a larger data.val_fraction",
        Split::Train => "",
    }
}

fn cwd_hint(path: &Path) -> String {
    match std::env::current_dir() {
        Ok(cwd) if path.is_relative() => {
            format!(
                " (relative paths start from the current directory {})",
                cwd.display()
            )
        }
        _ => String::new(),
    }
}

/// Bits per character: `total_nats` of next-token loss over text of `n_chars` characters,
/// in bits (`total_nats / n_chars / ln 2`). Unlike loss per token it does not depend on the
/// tokenizer, so a char model and a BPE model on the same text compare honestly.
pub fn bits_per_char(total_nats: f64, n_chars: usize) -> f64 {
    total_nats / n_chars as f64 / std::f64::consts::LN_2
}

/// Tokenized text split into a training prefix and a validation suffix.
#[derive(Debug, Clone)]
pub struct Dataset {
    tokenizer: Tokenizer,
    train: TokenIds,
    val: TokenIds,
    /// Characters of text in each split (see [`Tokenizer::char_count`]).
    chars: [usize; 2],
    description: String,
}

impl Dataset {
    /// Tokenizes `text` with a new tokenizer of `kind` (a char vocabulary is built from
    /// the whole text, as nanoGPT does; a BPE gets [`DEFAULT_BPE_VOCAB`] tokens) and
    /// splits it.
    pub fn from_text(
        text: &str,
        kind: TokenizerKind,
        val_fraction: f64,
        description: impl Into<String>,
    ) -> Result<Self, DataError> {
        Self::build(text, kind, DEFAULT_BPE_VOCAB, val_fraction, description)
    }

    /// Builds a tokenizer of `kind` for `text` and tokenizes and splits the text with it.
    /// A char vocabulary comes from the whole text (as in nanoGPT); a byte-level BPE of at
    /// most `vocab_size` tokens and a word vocabulary come from the training split only, so
    /// validation text stays unseen. `vocab_size` is ignored by the other kinds.
    pub fn build(
        text: &str,
        kind: TokenizerKind,
        vocab_size: usize,
        val_fraction: f64,
        description: impl Into<String>,
    ) -> Result<Self, DataError> {
        let description = description.into();
        check_val_fraction(val_fraction)?;
        check_more_than_one_symbol(text, &description)?;
        let tokenizer = match kind {
            TokenizerKind::Bpe => {
                Tokenizer::train_bpe(split_text(text, val_fraction).0, vocab_size)
            }
            TokenizerKind::Word => Tokenizer::train_words(split_words(text, val_fraction).0),
            _ => Tokenizer::for_corpus(kind, text),
        }
        .map_err(|source| DataError::Tokenize {
            source_name: description.clone(),
            source,
        })?;
        Self::with_tokenizer(text, tokenizer, val_fraction, description)
    }

    /// Refuses a text of one character repeated (letters or NUL bytes alike): a model has
    /// nothing to predict there. `description` names the text in the error.
    pub fn check_text(text: &str, description: &str) -> Result<(), DataError> {
        check_more_than_one_symbol(text, description)
    }

    /// Tokenizes `text` with an existing tokenizer (for example one loaded from a run
    /// directory, so ids match a checkpoint) and splits it.
    ///
    /// Char and byte tokens are split like nanoGPT: the first `1 - val_fraction` of the
    /// tokens train. A BPE splits the text first, at `1 - val_fraction` of its characters
    /// (the same text a char model validates on), and encodes each part; a word tokenizer
    /// moves that cut to the next whitespace, so no word is cut in two.
    pub fn with_tokenizer(
        text: &str,
        tokenizer: Tokenizer,
        val_fraction: f64,
        description: impl Into<String>,
    ) -> Result<Self, DataError> {
        let description = description.into();
        check_val_fraction(val_fraction)?;
        let encode = |text: &str| {
            encode_shown(&tokenizer, text).map_err(|source| DataError::Tokenize {
                source_name: description.clone(),
                source,
            })
        };
        // Each split is encoded on its own, into storage of its own size: never the whole
        // text's ids and then a copy of a part.
        let mut chars = None;
        let (train, val) = match tokenizer.kind() {
            TokenizerKind::Bpe => {
                let (train, val) = split_text(text, val_fraction);
                (encode(train)?, encode(val)?)
            }
            // Counted from the text: an unknown word's length is not in its id.
            TokenizerKind::Word => {
                let (train, val) = split_words(text, val_fraction);
                chars = Some([train.chars().count(), val.chars().count()]);
                (encode(train)?, encode(val)?)
            }
            TokenizerKind::Char => {
                let (train, val) = split_text(text, val_fraction);
                // A character the vocabulary lacks is named by its place in the whole text.
                match (encode(train), encode(val)) {
                    (Ok(train), Ok(val)) => (train, val),
                    (Err(e), _) | (_, Err(e)) => {
                        return Err(tokenizer.encode(text).err().map_or(e, |source| {
                            DataError::Tokenize {
                                source_name: description.clone(),
                                source,
                            }
                        }));
                    }
                }
            }
            // A byte split may fall inside a character: the ids are the bytes.
            TokenizerKind::Byte => {
                let bytes = text.as_bytes();
                let (train, val) = bytes.split_at(train_len(bytes.len(), val_fraction));
                let ids = |part: &[u8]| TokenIds::U16(part.iter().map(|&b| u16::from(b)).collect());
                (ids(train), ids(val))
            }
        };
        let chars = chars.unwrap_or_else(|| {
            [
                tokenizer.char_count_of(&train),
                tokenizer.char_count_of(&val),
            ]
        });
        Ok(Self {
            tokenizer,
            train,
            val,
            chars,
            description,
        })
    }

    /// Reads a UTF-8 text file and tokenizes it (see [`Dataset::from_text`]).
    pub fn from_file(
        path: impl AsRef<Path>,
        kind: TokenizerKind,
        val_fraction: f64,
    ) -> Result<Self, DataError> {
        let path = path.as_ref();
        let text = read_text(path)?;
        Self::from_text(&text, kind, val_fraction, path.display().to_string())
    }

    /// Generates a built-in corpus and tokenizes it.
    pub fn from_builtin(
        corpus: BuiltinCorpus,
        seed: u64,
        n_chars: usize,
        seq_len: usize,
        kind: TokenizerKind,
        val_fraction: f64,
    ) -> Result<Self, DataError> {
        let data = DataConfig {
            builtin: Some(corpus.name().to_string()),
            builtin_chars: n_chars,
            induction_len: seq_len,
            ..DataConfig::default()
        };
        let (text, description) = load_text(&data, seed)?;
        Self::from_text(&text, kind, val_fraction, description)
    }

    /// Loads what `[data]` describes; `seed` seeds built-in corpora.
    pub fn from_config(data: &DataConfig, seed: u64) -> Result<Self, DataError> {
        let (text, description) = load_text(data, seed)?;
        Self::build(
            &text,
            data.tokenizer,
            data.vocab_size,
            data.val_fraction,
            description,
        )
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The share of `split`'s tokens that are the word tokenizer's unknown word (words its
    /// training split lacks); `None` for the other tokenizers, which encode every text.
    pub fn unknown_share(&self, split: Split) -> Option<f64> {
        let Tokenizer::Word { huggingface } = &self.tokenizer else {
            return None;
        };
        let ids = self.tokens(split);
        let unknown = ids
            .iter()
            .filter(|&id| id == huggingface.unknown_id())
            .count();
        Some(unknown as f64 / ids.len().max(1) as f64)
    }

    /// Where the data came from, for logs.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The ids of `split`.
    pub fn tokens(&self, split: Split) -> &TokenIds {
        match split {
            Split::Train => &self.train,
            Split::Val => &self.val,
        }
    }

    pub fn len(&self, split: Split) -> usize {
        self.tokens(split).len()
    }

    /// Characters of text in `split` (for a char tokenizer, its token count).
    pub fn chars(&self, split: Split) -> usize {
        self.chars[split as usize]
    }

    /// Characters per token in `split`: 1 for chars, about 1 for bytes of mostly-ASCII
    /// text, more for a BPE.
    pub fn chars_per_token(&self, split: Split) -> f64 {
        self.chars(split) as f64 / self.len(split).max(1) as f64
    }

    /// Bits per character of a mean loss per token measured on `split`:
    /// `loss * tokens / chars / ln 2`.
    pub fn bits_per_char(&self, split: Split, loss_per_token: f64) -> f64 {
        loss_per_token / self.chars_per_token(split) / std::f64::consts::LN_2
    }

    /// Errors unless both splits hold at least one window of `block_size` tokens plus a
    /// target; check once before training rather than failing at the first evaluation.
    pub fn check_block_size(&self, block_size: usize) -> Result<(), DataError> {
        for split in Split::ALL {
            let len = self.len(split);
            if len < block_size + 1 {
                return Err(DataError::TooShort {
                    split,
                    len,
                    block_size,
                });
            }
        }
        Ok(())
    }

    /// `batch_size` random windows of `split`: `x` is `[batch_size, block_size]` row-major
    /// and `y` is `x` shifted one token ahead (each position's next-token target). Window
    /// starts are uniform over every start that leaves room for the target, as in
    /// nanoGPT's `get_batch`.
    pub fn sample_batch<R: Rng + ?Sized>(
        &self,
        split: Split,
        batch_size: usize,
        block_size: usize,
        rng: &mut R,
    ) -> Result<(Vec<u32>, Vec<u32>), DataError> {
        let data = self.tokens(split);
        if data.len() < block_size + 1 {
            return Err(DataError::TooShort {
                split,
                len: data.len(),
                block_size,
            });
        }
        let mut x = Vec::with_capacity(batch_size * block_size);
        let mut y = Vec::with_capacity(batch_size * block_size);
        for _ in 0..batch_size {
            let start = rng.random_range(0..data.len() - block_size);
            data.extend_into(start..start + block_size, &mut x);
            data.extend_into(start + 1..start + 1 + block_size, &mut y);
        }
        Ok((x, y))
    }
}

/// Texts from this many bytes on show how their tokenisation goes: a bar on a terminal, a line
/// when it starts and one when it ends elsewhere (a log, a CI job).
const SHOW_PROGRESS_BYTES: usize = 16 << 20;

/// `text`'s ids, two bytes each where the vocabulary allows, with progress for a large text.
fn encode_shown(tokenizer: &Tokenizer, text: &str) -> Result<TokenIds, TokenizerError> {
    // Chars and bytes: at most one token per byte. A BPE's tokens average more than two
    // bytes; the vector grows if not.
    let capacity = match tokenizer.kind() {
        TokenizerKind::Bpe => text.len() / 2,
        TokenizerKind::Word => text.len() / 3,
        _ => text.len(),
    };
    let mut ids = TokenIds::for_vocab(tokenizer.vocab_size(), capacity);
    if text.len() < SHOW_PROGRESS_BYTES {
        tokenizer.encode_into(text, &mut ids, &mut |_| {})?;
        ids.shrink_to_fit();
        return Ok(ids);
    }
    let started = std::time::Instant::now();
    let what = format!(
        "tokenizing {:.0} MB of text ({} tokenizer)",
        text.len() as f64 / 1e6,
        tokenizer.kind()
    );
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let bar = indicatif::ProgressBar::new(text.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} {bar:30.cyan/blue} {binary_bytes}/{binary_total_bytes} [{elapsed}<{eta}]",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_message(what.clone());
        bar
    } else {
        let _ = writeln!(std::io::stderr(), "headlab: {what}");
        indicatif::ProgressBar::hidden()
    };
    tokenizer.encode_into(text, &mut ids, &mut |done| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    ids.shrink_to_fit();
    let _ = writeln!(
        std::io::stderr(),
        "headlab: {} tokens in {:.1} s ({} bytes each)",
        ids.len(),
        started.elapsed().as_secs_f64(),
        ids.id_bytes()
    );
    Ok(ids)
}

/// Tokens in the training split: `int(n * (1 - val_fraction))`, nanoGPT's
/// `data[:int(n*0.9)]` for the default 0.1.
pub fn train_len(n: usize, val_fraction: f64) -> usize {
    ((n as f64 * (1.0 - val_fraction)) as usize).min(n)
}

/// [`Dataset::check_text`].
fn check_more_than_one_symbol(text: &str, description: &str) -> Result<(), DataError> {
    let mut chars = text.chars();
    if let Some(symbol) = chars.next()
        && chars.all(|c| c == symbol)
    {
        return Err(DataError::OneSymbol {
            source_name: description.to_string(),
            symbol,
        });
    }
    Ok(())
}

/// `text` cut into its training prefix and validation suffix by characters: the first
/// [`train_len`] characters train.
pub fn split_text(text: &str, val_fraction: f64) -> (&str, &str) {
    let n_train = train_len(text.chars().count(), val_fraction);
    let at = text
        .char_indices()
        .nth(n_train)
        .map_or(text.len(), |(i, _)| i);
    text.split_at(at)
}

/// [`split_text`] with the cut moved on to the next whitespace character (or the end), so
/// the word it fell in stays whole in the training split.
pub fn split_words(text: &str, val_fraction: f64) -> (&str, &str) {
    let (train, val) = split_text(text, val_fraction);
    let more = val.find(char::is_whitespace).unwrap_or(val.len());
    text.split_at(train.len() + more)
}

fn check_val_fraction(val_fraction: f64) -> Result<(), DataError> {
    if val_fraction > 0.0 && val_fraction < 1.0 {
        Ok(())
    } else {
        Err(DataError::ValFraction(val_fraction))
    }
}

/// The text `[data]` names and a description of it for logs; `seed` seeds built-in corpora.
pub fn load_text(data: &DataConfig, seed: u64) -> Result<(String, String), DataError> {
    Ok(match data.source()? {
        DataSource::File(path) => (read_text(&path)?, path.display().to_string()),
        DataSource::Builtin(corpus) => {
            let text = corpus.generate(seed, data.builtin_chars, data.induction_len);
            let description = format!(
                "built-in {corpus} corpus (seed {seed}, {} chars)",
                text.len()
            );
            (text, description)
        }
    })
}

/// Reads a whole file as UTF-8, with errors that say which file and where it goes wrong.
pub fn read_text(path: &Path) -> Result<String, DataError> {
    let bytes = std::fs::read(path).map_err(|source| DataError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if bytes.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..offset]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        DataError::NotUtf8 {
            path: path.to_path_buf(),
            offset,
            line,
        }
    })
}

#[cfg(test)]
mod tests {
    /// The ids of a split as a plain vector.
    fn ids(d: &Dataset, split: Split) -> Vec<u32> {
        d.tokens(split).to_vec(0..d.len(split))
    }
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
        let path = std::env::temp_dir().join(format!("headlab-data-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// `n` distinct characters, half train and half val, so a window identifies its
    /// position.
    fn distinct_dataset(n: u32) -> Dataset {
        let text: String = (0..n).filter_map(|i| char::from_u32(0x100 + i)).collect();
        Dataset::from_text(&text, TokenizerKind::Char, 0.5, "distinct").unwrap()
    }

    #[test]
    fn ids_take_two_bytes_each_and_split_as_a_whole_encoding_would() {
        let text: String = (0..5000)
            .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
            .collect();
        for kind in TokenizerKind::ALL {
            let d = Dataset::from_text(&text, kind, 0.1, "letters").unwrap();
            // The reference: the whole text encoded, cut like nanoGPT's `data[:int(n*0.9)]`
            // (a BPE cuts the text there, by characters, and encodes each part).
            let whole = d.tokenizer().encode(&text).unwrap();
            let (train, val) = match kind {
                TokenizerKind::Bpe => {
                    let (a, b) = split_text(&text, 0.1);
                    (
                        d.tokenizer().encode(a).unwrap(),
                        d.tokenizer().encode(b).unwrap(),
                    )
                }
                // One word with no space to cut at: all of it trains.
                TokenizerKind::Word => (whole.clone(), Vec::new()),
                _ => (whole[..4500].to_vec(), whole[4500..].to_vec()),
            };
            assert_eq!(ids(&d, Split::Train), train, "{kind}");
            assert_eq!(ids(&d, Split::Val), val, "{kind}");
            for split in Split::ALL {
                assert_eq!(d.tokens(split).id_bytes(), 2, "{kind}");
            }
        }
    }

    #[test]
    fn split_is_nanogpt_90_10() {
        // nanoGPT's prepare.py on tiny-shakespeare: "train has 1,003,854 tokens",
        // "val has 111,540 tokens".
        assert_eq!(train_len(1_115_394, 0.1), 1_003_854);
        assert_eq!(train_len(10, 0.1), 9);
        assert_eq!(train_len(3, 0.5), 1);

        let text = "abcdefghij";
        let d = Dataset::from_text(text, TokenizerKind::Char, 0.1, "t").unwrap();
        assert_eq!(d.tokenizer().decode(&ids(&d, Split::Train)), "abcdefghi");
        assert_eq!(d.tokenizer().decode(&ids(&d, Split::Val)), "j");
    }

    #[test]
    fn real_shakespeare_matches_nanogpt() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/tinyshakespeare/input.txt");
        let d = Dataset::from_file(&path, TokenizerKind::Char, 0.1).unwrap();
        assert_eq!(d.tokenizer().vocab_size(), 65);
        assert_eq!(d.len(Split::Train), 1_003_854);
        assert_eq!(d.len(Split::Val), 111_540);
        // nanoGPT's meta.pkl: itos[0] = '\n', itos[1] = ' '.
        assert_eq!(d.tokenizer().decode(&[0, 1]), "\n ");
        // "First Citizen" as in nanoGPT / Karpathy's "Let's build GPT".
        assert_eq!(
            &ids(&d, Split::Train)[..13],
            &[18, 47, 56, 57, 58, 1, 15, 47, 58, 47, 64, 43, 52]
        );
    }

    #[test]
    fn file_errors_name_the_path() {
        let missing = std::env::temp_dir().join("headlab-no-such-dataset.txt");
        let msg = Dataset::from_file(&missing, TokenizerKind::Char, 0.1)
            .unwrap_err()
            .to_string();
        assert!(msg.contains(&missing.display().to_string()), "{msg}");
        let msg = Dataset::from_file("no/such/file.txt", TokenizerKind::Char, 0.1)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("no/such/file.txt") && msg.contains("current directory"),
            "{msg}"
        );

        let empty = temp_file("empty.txt", b"");
        let err = Dataset::from_file(&empty, TokenizerKind::Char, 0.1).unwrap_err();
        std::fs::remove_file(&empty).unwrap();
        assert!(matches!(err, DataError::Empty { .. }), "{err:?}");
        assert!(err.to_string().contains(&empty.display().to_string()));

        let latin1 = temp_file("latin1.txt", b"ab\ncaf\xe9 au lait\n");
        let err = Dataset::from_file(&latin1, TokenizerKind::Byte, 0.1).unwrap_err();
        std::fs::remove_file(&latin1).unwrap();
        match &err {
            DataError::NotUtf8 { offset, line, .. } => assert_eq!((*offset, *line), (6, 2)),
            other => panic!("wrong error {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains("byte offset 6") && msg.contains(&latin1.display().to_string()),
            "{msg}"
        );
    }

    #[test]
    fn existing_tokenizer_reports_unknown_chars() {
        let tok = Tokenizer::char_from_corpus("abc").unwrap();
        let err = Dataset::with_tokenizer("abcd", tok, 0.1, "new.txt").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("new.txt") && msg.contains("'d'"), "{msg}");
        assert!(matches!(
            Dataset::from_text("abc", TokenizerKind::Char, 1.0, "t"),
            Err(DataError::ValFraction(_))
        ));
    }

    #[test]
    fn word_tokens_give_every_built_in_corpus_back_or_refuse_it() {
        use crate::word::MAX_WORD_VOCAB;
        let mut accepted = Vec::new();
        for corpus in BuiltinCorpus::ALL {
            let data = DataConfig {
                builtin: Some(corpus.name().to_string()),
                builtin_chars: 50_000,
                ..DataConfig::default()
            };
            let (text, _) = load_text(&data, 7).unwrap();
            match Tokenizer::train_words(&text) {
                Ok(t) => {
                    let ids = t.encode(&text).unwrap();
                    assert!(t.decode(&ids) == text, "{corpus}: the decoded text differs");
                    assert!(t.vocab_size() <= MAX_WORD_VOCAB);
                    accepted.push(corpus);
                }
                Err(e) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("distinct words") && msg.contains("\"bpe\""),
                        "{corpus}: {msg}"
                    );
                }
            }
        }
        // The grammars' validation words are all in their training split, and the splits
        // give the text back: no word is cut in two where they meet.
        for corpus in [BuiltinCorpus::Grammar, BuiltinCorpus::Attach] {
            assert!(accepted.contains(&corpus), "{accepted:?}");
            let text = corpus.generate(7, 50_000, 0);
            let d = Dataset::build(&text, TokenizerKind::Word, 0, 0.1, corpus.name()).unwrap();
            let t = d.tokenizer();
            assert_eq!(d.unknown_share(Split::Val), Some(0.0), "{corpus}");
            let back = t.decode(&ids(&d, Split::Train)) + &t.decode(&ids(&d, Split::Val));
            assert!(back == text, "{corpus}: the decoded splits differ");
            assert_eq!(
                d.chars(Split::Train) + d.chars(Split::Val),
                text.chars().count()
            );
        }
    }

    #[test]
    fn word_validation_counts_its_unknown_words() {
        let text = "the dog runs. the cat runs. the dog sees the cat. the cow runs.";
        let d = Dataset::build(text, TokenizerKind::Word, 0, 0.2, "t").unwrap();
        // The cut, 50 characters in, falls before "the cow": it moves on to the space after
        // "the", so val is " cow runs.", one unknown word of three.
        assert_eq!(d.tokenizer().decode(&ids(&d, Split::Val)), "<unk> runs.");
        assert_eq!(d.unknown_share(Split::Val), Some(1.0 / 3.0));
        assert_eq!(d.chars(Split::Val), " cow runs.".len());
        assert_eq!(d.unknown_share(Split::Train), Some(0.0));
    }

    #[test]
    fn builtin_and_config_loading() {
        let d = Dataset::from_builtin(BuiltinCorpus::Copy, 3, 2_000, 8, TokenizerKind::Char, 0.1)
            .unwrap();
        let vocab = d.tokenizer().vocab_size();
        // 26 letters at most, plus '|' and '\n'.
        assert!((20..=28).contains(&vocab), "{vocab}");
        let all = [ids(&d, Split::Train), ids(&d, Split::Val)].concat();
        assert_eq!(d.tokenizer().decode(&all), crate::corpus::copy(3, 2_000, 8));

        let mut section = DataConfig {
            builtin_chars: 3_000,
            tokenizer: TokenizerKind::Char,
            ..DataConfig::default()
        };
        let d = Dataset::from_config(&section, 1).unwrap();
        assert!(d.description().contains("grammar"));
        assert_eq!(
            d.len(Split::Train) + d.len(Split::Val),
            crate::corpus::grammar(1, 3_000).len()
        );
        section.builtin = None;
        assert!(matches!(
            Dataset::from_config(&section, 1),
            Err(DataError::Config(DataConfigError::NoDataSource))
        ));
    }

    #[test]
    fn bpe_is_trained_on_the_training_characters_only() {
        let train_part = "the cat sat on the mat; the cat sat on the hat.\n".repeat(20);
        // 10% of the characters, a word the training split never has.
        let val_part = "zyzzyva zyzzyva é\n".repeat(train_part.chars().count() / 9 / 18 + 1);
        let text = train_part.clone() + &val_part;
        let (train_text, val_text) = split_text(&text, 0.1);
        assert_eq!(train_text.len() + val_text.len(), text.len());
        let d = Dataset::build(&text, TokenizerKind::Bpe, 320, 0.1, "t").unwrap();
        let tok = d.tokenizer();
        assert_eq!(tok.kind(), TokenizerKind::Bpe);
        assert!(tok.vocab_size() <= 320);
        // Splits are the character split, encoded separately.
        assert_eq!(tok.decode(&ids(&d, Split::Train)), train_text);
        assert_eq!(tok.decode(&ids(&d, Split::Val)), val_text);
        assert_eq!(d.chars(Split::Train), train_text.chars().count());
        assert_eq!(d.chars(Split::Val), val_text.chars().count());
        assert!(
            d.chars_per_token(Split::Train) > 2.0,
            "{}",
            d.chars_per_token(Split::Train)
        );
        // Every merge comes from the training text.
        assert!(val_text.contains("zyzzyva zyzzyva é"));
        for id in 256..tok.vocab_size() as u32 {
            let token = tok.decode(&[id]);
            assert!(
                train_text.contains(&token),
                "{token:?} is not from training"
            );
        }
        // A run directory's tokenizer gives the same tokens again (resume, eval).
        let again = Dataset::with_tokenizer(&text, tok.clone(), 0.1, "t").unwrap();
        assert_eq!(ids(&again, Split::Train), ids(&d, Split::Train));
        assert_eq!(ids(&again, Split::Val), ids(&d, Split::Val));
    }

    #[test]
    fn bits_per_char_is_nats_over_chars_over_ln2() {
        assert!((bits_per_char(std::f64::consts::LN_2 * 10.0, 5) - 2.0).abs() < 1e-12);
        let d = Dataset::from_text("abcdefghij", TokenizerKind::Char, 0.1, "t").unwrap();
        assert_eq!((d.chars(Split::Train), d.chars(Split::Val)), (9, 1));
        assert_eq!(d.chars_per_token(Split::Train), 1.0);
        assert!((d.bits_per_char(Split::Val, 2.0) - 2.0 / std::f64::consts::LN_2).abs() < 1e-12);
        // Bytes: "é" and "à" are two tokens each but one character.
        let d = Dataset::from_text(&"éà".repeat(5), TokenizerKind::Byte, 0.5, "t").unwrap();
        assert_eq!((d.len(Split::Train), d.chars(Split::Train)), (10, 5));
        assert!((d.bits_per_char(Split::Train, 1.0) - 2.0 / std::f64::consts::LN_2).abs() < 1e-12);
    }

    #[test]
    fn config_vocab_size_reaches_the_bpe() {
        let section = DataConfig {
            builtin_chars: 5_000,
            tokenizer: TokenizerKind::Bpe,
            vocab_size: 270,
            ..DataConfig::default()
        };
        let d = Dataset::from_config(&section, 1).unwrap();
        assert_eq!(d.tokenizer().vocab_size(), 270);
        let all = [ids(&d, Split::Train), ids(&d, Split::Val)].concat();
        assert_eq!(d.tokenizer().decode(&all), crate::corpus::grammar(1, 5_000));
        let section = DataConfig {
            vocab_size: 10,
            ..section
        };
        let msg = Dataset::from_config(&section, 1).unwrap_err().to_string();
        assert!(msg.contains("data.vocab_size = 10"), "{msg}");
    }

    #[test]
    fn block_size_check_names_both_numbers() {
        let d = distinct_dataset(40); // 20 train, 20 val tokens
        d.check_block_size(19).unwrap();
        let err = d.check_block_size(20).unwrap_err();
        let msg = err.to_string();
        for part in [
            "train split has 20 tokens",
            "model.block_size = 20",
            "at least 21",
            "at most 19",
        ] {
            assert!(msg.contains(part), "{part:?} missing from {msg}");
        }
        let d = Dataset::from_text(&"xy".repeat(50), TokenizerKind::Char, 0.05, "t").unwrap();
        let msg = d.check_block_size(10).unwrap_err().to_string();
        assert!(
            msg.contains("val split has 5 tokens") && msg.contains("data.val_fraction"),
            "{msg}"
        );
    }

    #[test]
    fn batches_are_shifted_contiguous_windows() {
        let d = distinct_dataset(200);
        let data = ids(&d, Split::Train);
        let (b, t) = (16, 10);
        let mut rng = StdRng::seed_from_u64(0);
        let (x, y) = d.sample_batch(Split::Train, b, t, &mut rng).unwrap();
        assert_eq!((x.len(), y.len()), (b * t, b * t));
        for row in 0..b {
            let xr = &x[row * t..(row + 1) * t];
            let yr = &y[row * t..(row + 1) * t];
            let start = data.iter().position(|&v| v == xr[0]).unwrap();
            assert_eq!(xr, &data[start..start + t]);
            assert_eq!(yr, &data[start + 1..start + t + 1]);
        }
        let val_tokens = ids(&d, Split::Val);
        let (xv, _) = d.sample_batch(Split::Val, 4, 5, &mut rng).unwrap();
        assert!(xv.iter().all(|v| val_tokens.contains(v)));
    }

    #[test]
    fn batches_are_seeded_and_cover_every_start() {
        let d = distinct_dataset(60); // 30 train tokens
        let draw = |seed| {
            d.sample_batch(Split::Train, 8, 4, &mut StdRng::seed_from_u64(seed))
                .unwrap()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));

        let data = ids(&d, Split::Train);
        let mut rng = StdRng::seed_from_u64(7);
        let mut starts = std::collections::HashSet::new();
        for _ in 0..200 {
            let (x, _) = d.sample_batch(Split::Train, 4, 4, &mut rng).unwrap();
            for row in x.chunks(4) {
                starts.insert(data.iter().position(|&v| v == row[0]).unwrap());
            }
        }
        // Starts 0..=25 (30 tokens, windows of 4 plus a target), and no others.
        assert_eq!(starts, (0..=25).collect());

        // A split of exactly block_size + 1 tokens has a single window.
        let (x, y) = d.sample_batch(Split::Train, 2, 29, &mut rng).unwrap();
        assert_eq!(&x[..29], &data[..29]);
        assert_eq!(&y[..29], &data[1..]);
        assert!(matches!(
            d.sample_batch(Split::Train, 2, 30, &mut rng),
            Err(DataError::TooShort {
                len: 30,
                block_size: 30,
                ..
            })
        ));
    }

    /// On tiny-shakespeare, a BPE run validates on exactly the char model's
    /// validation text, so their bits per character compare.
    #[test]
    fn real_shakespeare_bpe_validates_on_the_char_models_text() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../datasets/tinyshakespeare/input.txt");
        let text = std::fs::read_to_string(&path).unwrap();
        let chars = Dataset::from_text(&text, TokenizerKind::Char, 0.1, "c").unwrap();
        let bpe = Dataset::build(&text, TokenizerKind::Bpe, 1024, 0.1, "b").unwrap();
        assert_eq!(bpe.tokenizer().vocab_size(), 1024);
        for split in [Split::Train, Split::Val] {
            assert_eq!(bpe.chars(split), chars.len(split));
            assert_eq!(
                bpe.tokenizer().decode(&ids(&bpe, split)),
                chars.tokenizer().decode(&ids(&chars, split))
            );
        }
        assert_eq!(bpe.chars(Split::Val), 111_540);
        let ratio = bpe.chars_per_token(Split::Val);
        assert!((2.0..3.0).contains(&ratio), "{ratio} chars per token");
    }
}

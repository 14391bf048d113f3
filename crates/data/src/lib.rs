//! Text in, token batches out: everything between a corpus and the model's input.
//!
//! - [`builtin`]: the built-in corpora by name ([`BuiltinCorpus`]) and their generators;
//!   [`words`]: the word lists the grammar and relations corpora share.
//! - [`corpus`]: the built-in corpora headlab generates (grammar, induction, copy, lookup, attach), with the
//!   grammar's parser so generated text can be checked.
//! - [`relations`]: the `relations` corpus (a verb's number from its subject, its object's
//!   class from the verb) and its checker.
//! - [`tokenizer`]: char, byte, byte-level BPE and word ([`word`]) tokenizers behind one
//!   [`Tokenizer`].
//! - [`config`]: the `[data]` section of a run config ([`DataConfig`]).
//! - [`dataset`]: tokenized train/val splits and random windows ([`Dataset`]), their ids
//!   stored two bytes each where the vocabulary allows ([`ids`]).
//! - [`batch`]: seeds derived per step and stream, and windows as Burn tensors.
//!
//! This crate knows nothing of models or training; it must not depend on any other
//! headlab crate.

pub mod batch;
pub mod builtin;
pub mod config;
pub mod corpus;
pub mod dataset;
pub mod ids;
pub mod modular;
pub mod relations;
pub mod syntax;
pub mod tokenizer;
pub mod word;
pub mod words;

pub use batch::{STREAM_BATCH, STREAM_DEVICE, STREAM_EVAL, batch_tensors, ids_tensor, mix_seed};
pub use builtin::BuiltinCorpus;
pub use config::{DataConfig, DataConfigError, DataSource};
pub use dataset::{DataError, Dataset, Split, bits_per_char, load_text, read_text};
pub use ids::TokenIds;
pub use tokenizer::{StreamDecoder, Tokenizer, TokenizerError, TokenizerKind};

//! Text in, token batches out: everything between a corpus and the model's input.
//!
//! - [`corpus`]: the built-in corpora headlab generates (grammar, induction, copy, lookup, attach), with the
//!   grammar's parser so generated text can be checked.
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
pub mod config;
pub mod corpus;
pub mod dataset;
pub mod ids;
pub mod modular;
pub mod syntax;
pub mod tokenizer;
pub mod word;

pub use batch::{STREAM_BATCH, STREAM_DEVICE, STREAM_EVAL, batch_tensors, ids_tensor, mix_seed};
pub use config::{DataConfig, DataConfigError, DataSource};
pub use corpus::BuiltinCorpus;
pub use dataset::{DataError, Dataset, Split, bits_per_char, load_text, read_text};
pub use ids::TokenIds;
pub use tokenizer::{StreamDecoder, Tokenizer, TokenizerError, TokenizerKind};

//! Other tools' formats in and out: a Hugging Face GPT-2 folder ([`hf`]: read and written) and
//! a nanoGPT checkpoint ([`nanogpt`]: read), both brought into GPT-2's tensor names and layout
//! and written as a headlab run ([`import`]).
//!
//! It reads and writes files and builds models; it never trains. It depends on the model,
//! the data (tokenizers) and train's run directories, and nothing above them.

pub mod hf;
pub mod import;
pub mod nanogpt;

pub use hf::{HfError, export_gpt2, read_gpt2_folder};
pub use import::{ImportError, Imported};
pub use nanogpt::read_nanogpt;

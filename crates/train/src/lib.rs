//! Training, data and the `headlab` CLI.
//!
//! - [`config`]: the TOML run config and `--set` overrides.
//! - [`corpus`], [`tokenizer`], [`data`]: built-in corpora, char and byte tokenizers, splits
//!   and batches.
//! - [`trainer`]: the training loop; [`optim`] and [`schedule`]: AdamW and the learning rate.
//! - [`run`]: run directories and checkpoints; [`plot`]: PNG charts; [`rss`]: peak memory.
//! - [`scores`]: what each attention head does, as numbers; [`heads`]: probes, ablation and
//!   the head table; [`heads_view`]: attention maps and the HTML explorer; [`lab`]: experiments.
//! - [`compare`]: one model on several backends, agreement and speed.
//! - [`alloc`]: keeping the allocator's freed pages while training.
//! - [`backend`]: choosing a Burn backend by name; [`cli`]: the `headlab` command line.

pub mod alloc;
pub mod backend;
pub mod cli;
pub mod compare;
pub mod config;
pub mod corpus;
pub mod data;
pub mod heads;
pub mod heads_view;
pub mod lab;
pub mod optim;
pub mod plot;
pub mod rss;
pub mod run;
pub mod schedule;
pub mod scores;
pub mod tokenizer;
pub mod trainer;

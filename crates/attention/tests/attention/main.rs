//! headlab-attention's integration tests, one binary: multi-head attention and the attention
//! paths against independent references on every backend.

mod common;
mod mha;
mod position;
mod sdpa;

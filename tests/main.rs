//! headlab's end-to-end tests, one binary (one link of Burn instead of seven): the `headlab`
//! command on tiny configs, its errors, crash safety, BPE runs, head analysis, backend
//! comparison, and the shipped configs against their runs before the speedrun. Each
//! library's own tests sit beside its code or in its crate's tests/; `headlab-bench`'s in
//! crates/bench/tests.

mod common;

mod before;
mod bpe;
mod cli;
mod compare;
mod crash;
mod docs;
mod errors;
mod heads;
mod mpi;
mod report;
mod sweep;
mod walk;

//! headlab's end-to-end tests, one binary (one link of Burn instead of seven): the `headlab`
//! command on tiny configs, its errors, crash safety, BPE runs, head analysis and backend
//! comparison. `headlab-bench`'s test lives with that binary (crates/bench).

mod common;

mod bpe;
mod cli;
mod compare;
mod crash;
mod docs;
mod errors;
mod heads;
mod props;
mod report;
mod walk;

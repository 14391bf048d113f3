//! Nothing to import: this crate exists for its dependencies' features (see Cargo.toml).

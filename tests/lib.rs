//! cross-crate tests.

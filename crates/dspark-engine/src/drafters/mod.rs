//! The drafters: each a [`crate::spec::Drafter`] in its own file.

pub mod draft_model;

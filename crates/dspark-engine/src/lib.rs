//! dspark engine.

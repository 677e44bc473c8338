//! dspark engine: models over a backend seam, tokenizer and chat templates, sampling, and
//! baseline and speculative generation. Knows nothing about HTTP.

pub mod backend;
pub mod drafters;
pub mod error;
pub mod generate;
pub mod huge_pages;
pub mod kv;
pub mod launch;
pub mod load;
pub mod model;
pub mod pipeline;
pub mod prefix_cache;
pub mod queue;
pub mod sampling;
pub mod spec;
pub mod testing;
pub mod weights;
pub mod worker;

pub use error::EngineError;
pub mod chat_template;
mod chat_template_py;
pub mod constrain;
pub mod detok;
pub mod tokenizer;
mod tokenizer_spm;

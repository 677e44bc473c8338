//! Several choices in one response: `n` per prompt, and each prompt of a completions list.
//! They run one after another on the single engine worker, in `index` order: prompt `p`'s
//! choice `i` has `index = p · n + i` (OpenAI's order) and, when the request is seeded, the
//! seed `seed + i` ([`crate::infer::choice_seed`]), so it equals a lone request with that
//! seed. Usage sums completion tokens over all choices and prompt tokens once per prompt.

use std::sync::Arc;

use dspark_engine::worker::{Prompt, Summary};

use crate::engine::Engine;
use crate::openai::Usage;
use crate::validate::ValidRequest;

/// What a multi-choice response needs to start each choice.
pub struct Plan {
    pub engine: Arc<dyn Engine>,
    pub req: ValidRequest,
    pub default_max: usize,
}

impl Plan {
    /// Every choice in `index` order: (prompt, choice within its prompt, index).
    pub fn choices(&self) -> Vec<(Prompt, usize, usize)> {
        let n = self.req.n.max(1);
        std::iter::once(&self.req.prompt)
            .chain(&self.req.more_prompts)
            .enumerate()
            .flat_map(|(p, prompt)| (0..n).map(move |i| (prompt.clone(), i, p * n + i)))
            .collect()
    }
}

/// Adds one choice's usage to `total`; its prompt tokens count when `count_prompt` (the
/// first choice of its prompt).
pub fn add_usage(total: &mut Option<Usage>, s: &Summary, count_prompt: bool) {
    let u = Usage::from_summary(s);
    match total {
        None => *total = Some(u),
        Some(t) => {
            if count_prompt {
                t.prompt_tokens += u.prompt_tokens;
                t.prompt_tokens_details.cached_tokens += u.prompt_tokens_details.cached_tokens;
            }
            t.completion_tokens += u.completion_tokens;
            t.total_tokens = t.prompt_tokens + t.completion_tokens;
        }
    }
}

//! OpenAI wire types for responses and stream chunks (requests are validated from raw JSON in
//! `validate`). Field names and nesting follow the OpenAI API; `x_dspark` is our extension.

use dspark_engine::worker::Summary;
use rand::Rng;
use serde::Serialize;

use crate::logprobs::{ChatLogprobs, TextLogprobs};
use crate::tools::ToolCall;

/// `n` random bytes as lowercase hex.
pub fn random_hex(n: usize) -> String {
    let mut rng = rand::rng();
    (0..n)
        .map(|_| format!("{:02x}", rng.random::<u8>()))
        .collect()
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[derive(utoipa::ToSchema, Serialize, Clone, Debug, PartialEq)]
pub struct PromptDetails {
    pub cached_tokens: usize,
}

#[derive(utoipa::ToSchema, Serialize, Clone, Debug, PartialEq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptDetails,
}

impl Usage {
    pub fn from_summary(s: &Summary) -> Usage {
        let p = s.stats.prompt_tokens;
        Usage {
            prompt_tokens: p,
            completion_tokens: s.completion_tokens,
            total_tokens: p + s.completion_tokens,
            prompt_tokens_details: PromptDetails {
                cached_tokens: s.stats.cached_tokens,
            },
        }
    }
}

/// Speculative-decoding statistics of one response.
#[derive(utoipa::ToSchema, Serialize, Clone, Debug, PartialEq)]
pub struct XDspark {
    pub mode: String,
    /// Mean tokens committed per target forward round (3 decimals).
    pub accept_len: f64,
    /// End-to-end generation speed, prefill included (1 decimal).
    pub tokens_per_sec: f64,
    pub target_forwards: usize,
    pub draft_ms: f64,
    pub verify_ms: f64,
    pub prefill_ms: f64,
    pub queue_ms: f64,
}

fn round(x: f64, places: i32) -> f64 {
    let m = 10f64.powi(places);
    if x.is_finite() {
        (x * m).round() / m
    } else {
        0.0
    }
}

impl XDspark {
    pub fn from_summary(mode: &str, s: &Summary, queued_secs: f64) -> XDspark {
        XDspark {
            mode: mode.to_owned(),
            accept_len: round(s.accept_len, 3),
            tokens_per_sec: round(s.tokens_per_sec, 1),
            target_forwards: s.stats.target_forwards,
            draft_ms: round(s.stats.draft_secs * 1e3, 1),
            verify_ms: round(s.stats.verify_secs * 1e3, 1),
            prefill_ms: round(s.stats.prefill_secs * 1e3, 1),
            queue_ms: round(queued_secs * 1e3, 1),
        }
    }
}

#[derive(utoipa::ToSchema, Serialize, Clone, Debug, PartialEq)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

#[derive(utoipa::ToSchema, Serialize, Clone, Debug, PartialEq)]
pub struct WireToolCall {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

impl WireToolCall {
    pub fn new(c: &ToolCall, index: Option<usize>) -> Self {
        WireToolCall {
            index,
            id: c.id.clone(),
            kind: "function",
            function: FunctionCall {
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            },
        }
    }
}

#[derive(utoipa::ToSchema, Serialize, Debug)]
pub struct AssistantMessage {
    pub role: &'static str,
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(utoipa::ToSchema, Serialize, Debug)]
pub struct ChatChoice {
    pub index: usize,
    pub message: AssistantMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: &'static str,
}

#[derive(utoipa::ToSchema, Serialize, Debug)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
    pub x_dspark: XDspark,
}

#[derive(utoipa::ToSchema, Serialize, Debug, Default)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(utoipa::ToSchema, Serialize, Debug)]
pub struct ChunkChoice {
    pub index: usize,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(utoipa::ToSchema, Serialize, Debug)]
pub struct ChatChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_dspark: Option<XDspark>,
}

#[derive(utoipa::ToSchema, Serialize, Debug)]
pub struct TextChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<TextLogprobs>,
    pub finish_reason: Option<&'static str>,
}

/// `text_completion` objects, whole or as stream chunks (same object name, as OpenAI does).
#[derive(utoipa::ToSchema, Serialize, Debug)]
pub struct Completion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<TextChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_dspark: Option<XDspark>,
}

//! OpenAPI schemas of the routes whose bodies are built with `json!` rather than typed
//! structs: the OpenAI Responses route (`routes::responses`) and Anthropic's Messages routes
//! (`routes::messages`, `anthropic_sse`). The types here exist only for the description;
//! `openapi.rs` names them in its paths. Request schemas list a subset of what the
//! validators accept (`additionalProperties: false`), so every body they allow passes
//! validation (checked by schemathesis's `positive_data_acceptance`); where a rule cannot be
//! written in JSON Schema, the schema states the narrower form and says so.
#![allow(dead_code)]

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::openai::XDspark;
use crate::openapi_parts::{FunctionType, ObjectSchema, ToolChoice};

// ---- requests shared pieces -------------------------------------------------------------

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RespPartType {
    InputText,
    OutputText,
    Text,
}

/// A text part of a Responses message (`input_text`, `output_text` or `text`).
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct RespTextPart {
    #[schema(inline)]
    r#type: Option<RespPartType>,
    text: String,
}

#[derive(ToSchema, Deserialize)]
#[serde(untagged)]
enum RespContent {
    Text(String),
    Parts(Vec<RespTextPart>),
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RespRole {
    User,
    System,
    Developer,
    Assistant,
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "lowercase")]
enum MessageType {
    Message,
}

/// A message item of `input`.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct RespInputMessage {
    #[schema(inline)]
    r#type: Option<MessageType>,
    #[schema(inline)]
    role: RespRole,
    content: RespContent,
}

/// `input`: a user message as text, or a list of message items.
#[derive(ToSchema, Deserialize)]
#[serde(untagged)]
enum RespInput {
    Text(String),
    Items(Vec<RespInputMessage>),
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Effort {
    None,
    Minimal,
    Low,
    Medium,
    High,
}

/// `reasoning`: `effort: "none"` turns thinking off; any other effort leaves it on.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct RespReasoning {
    #[schema(inline)]
    effort: Option<Effort>,
}

/// `POST /v1/responses` (stateless: `store`, `previous_response_id`, `conversation` and
/// `background` are refused; sampling fields as on chat).
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponsesRequest {
    model: Option<String>,
    input: RespInput,
    /// A system message put before `input`.
    instructions: Option<String>,
    /// Capped by the context left after the prompt.
    #[schema(minimum = 1)]
    max_output_tokens: Option<u64>,
    #[schema(minimum = 0.0, maximum = 2.0)]
    temperature: Option<f64>,
    /// Any positive value (one below f32's smallest keeps the likeliest token only).
    #[schema(exclusive_minimum = 0.0, maximum = 1.0)]
    top_p: Option<f64>,
    #[schema(minimum = 0)]
    top_k: Option<u64>,
    #[schema(minimum = 0)]
    seed: Option<u32>,
    #[schema(minimum = 0.0, maximum = 1.0)]
    min_p: Option<f64>,
    #[schema(minimum = -2.0, maximum = 2.0)]
    presence_penalty: Option<f64>,
    #[schema(minimum = -2.0, maximum = 2.0)]
    frequency_penalty: Option<f64>,
    #[schema(minimum = 0.01, maximum = 10.0)]
    repetition_penalty: Option<f64>,
    reasoning: Option<RespReasoning>,
    stream: Option<bool>,
    tools: Option<Vec<RespTool>>,
    /// `none`, `auto`, `required`; `{"type": "function", "name": ...}` (one of `tools`) is
    /// accepted too.
    tool_choice: Option<ToolChoice>,
    text: Option<RespText>,
    /// Echoed back.
    metadata: Option<std::collections::BTreeMap<String, String>>,
    /// Echoed back.
    parallel_tool_calls: Option<bool>,
    /// Only `false`: nothing is stored (schema set by `refine`).
    #[schema(value_type = Option<bool>)]
    store: Option<()>,
    /// Only `disabled` (schema set by `refine`).
    #[schema(value_type = Option<String>)]
    truncation: Option<()>,
}

/// A function tool (`{type: "function", name, description, parameters, strict}`).
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct RespTool {
    #[schema(inline)]
    r#type: FunctionType,
    name: String,
    description: Option<String>,
    parameters: Option<ObjectSchema>,
    strict: Option<bool>,
}

/// `text.format`: as chat's `response_format`, with the `json_schema` fields one level up.
#[derive(ToSchema, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum RespFormat {
    Text,
    JsonObject,
    JsonSchema {
        name: String,
        schema: Option<ObjectSchema>,
        strict: Option<bool>,
    },
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct RespText {
    format: Option<RespFormat>,
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "lowercase")]
enum TextBlockType {
    Text,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnthropicTextBlock {
    #[schema(inline)]
    r#type: TextBlockType,
    text: String,
}

#[derive(ToSchema, Deserialize)]
#[serde(untagged)]
enum AnthropicContent {
    Text(String),
    Blocks(Vec<AnthropicTextBlock>),
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "lowercase")]
enum UserRole {
    User,
}

/// A user turn. Assistant turns (text, `tool_use`, `thinking` blocks) and `tool_result`
/// blocks are accepted between user turns too, but the conversation must end with a user
/// turn, which JSON Schema cannot state about a list's last item; the schema lists user
/// turns only.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnthropicMessageIn {
    #[schema(inline)]
    role: UserRole,
    content: AnthropicContent,
}

#[derive(ToSchema, Deserialize)]
#[serde(untagged)]
enum AnthropicSystem {
    Text(String),
    Blocks(Vec<AnthropicTextBlock>),
}

/// `POST /v1/messages` (Anthropic Messages; auth also by `x-api-key`).
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagesRequest {
    /// Echoed back; the server serves one model whatever this says.
    model: Option<String>,
    /// Required; capped by the context left after the prompt.
    #[schema(minimum = 1)]
    max_tokens: u64,
    #[schema(min_items = 1, max_items = 2048)]
    messages: Vec<AnthropicMessageIn>,
    system: Option<AnthropicSystem>,
    #[schema(minimum = 0.0, maximum = 2.0)]
    temperature: Option<f64>,
    #[schema(exclusive_minimum = 0.0, maximum = 1.0)]
    top_p: Option<f64>,
    #[schema(minimum = 0)]
    top_k: Option<u64>,
    #[schema(max_items = 16)]
    stop_sequences: Option<Vec<String>>,
    stream: Option<bool>,
    tools: Option<Vec<AnthropicTool>>,
    tool_choice: Option<AnthropicToolChoice>,
    thinking: Option<Thinking>,
    output_config: Option<OutputConfig>,
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "lowercase")]
enum CustomType {
    Custom,
}

/// A client tool (no server tools).
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnthropicTool {
    #[schema(inline)]
    r#type: Option<CustomType>,
    name: String,
    description: Option<String>,
    input_schema: ObjectSchema,
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "lowercase")]
enum AnthropicToolChoiceMode {
    Auto,
    Any,
    None,
}

/// `{type: auto|any|none}`; `{type: "tool", name}` (one of `tools`) is accepted too, but
/// JSON Schema cannot tie the name to `tools`, so it is not listed.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnthropicToolChoice {
    #[schema(inline)]
    r#type: AnthropicToolChoiceMode,
}

/// `thinking`: turns the template's thinking on or off (`budget_tokens` is not enforced).
#[derive(ToSchema, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum Thinking {
    Enabled {
        #[schema(minimum = 0)]
        budget_tokens: u64,
    },
    Adaptive,
    Disabled,
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "snake_case")]
enum JsonSchemaType {
    JsonSchema,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputFormat {
    #[schema(inline)]
    r#type: JsonSchemaType,
    schema: ObjectSchema,
}

/// `output_config.format`: structured output by a JSON Schema.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputConfig {
    format: Option<OutputFormat>,
}

/// `POST /v1/messages/count_tokens`: as `/v1/messages`, `max_tokens` optional.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountTokensRequest {
    model: Option<String>,
    #[schema(minimum = 1)]
    max_tokens: Option<u64>,
    #[schema(min_items = 1, max_items = 2048)]
    messages: Vec<AnthropicMessageIn>,
    system: Option<AnthropicSystem>,
}

/// Adds to the generated document the rules utoipa's attributes cannot write:
/// `logit_bias`'s keys are token ids of 1 to 6 digits (within the scripted engine's
/// 1,114,112-id vocabulary; for a real model an id beyond its vocabulary is a 400 that this
/// static pattern does not state), chat's `top_logprobs` above 0 needs `logprobs: true`,
/// the completions `prompt` is a string or a list of non-empty strings, and lists of input
/// items or content blocks are non-empty.
pub fn refine(doc: &mut serde_json::Value) {
    use serde_json::json;
    let bias = json!({
        "type": ["object", "null"],
        "description": "Token id (a decimal string) → bias added to its logit, in [-100, 100]; ids outside the model's vocabulary are a 400.",
        "propertyNames": {"pattern": "^[0-9]{1,6}$"},
        "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
    });
    let schemas = &mut doc["components"]["schemas"];
    for req in ["ChatCompletionRequest", "CompletionRequest"] {
        schemas[req]["properties"]["logit_bias"] = bias.clone();
    }
    schemas["CompletionRequest"]["properties"]["prompt"] = json!({"oneOf": [
        {"type": "string", "minLength": 1},
        {"type": "array", "minItems": 1, "maxItems": 64, "items": {"type": "string", "minLength": 1}},
    ]});
    // an empty list of items or blocks leaves no message, which the validator refuses
    for name in ["RespInput", "AnthropicContent"] {
        if let Some(branches) = schemas[name]["oneOf"].as_array_mut() {
            for b in branches.iter_mut().filter(|b| b["type"] == "array") {
                b["minItems"] = json!(1);
            }
        }
    }
    let resp = &mut schemas["ResponsesRequest"]["properties"];
    resp["store"] = json!({"enum": [false, null]});
    resp["truncation"] = json!({"enum": ["disabled", null]});
    let chat = &mut schemas["ChatCompletionRequest"];
    chat["if"] =
        json!({"properties": {"top_logprobs": {"minimum": 1}}, "required": ["top_logprobs"]});
    chat["then"] = json!({"properties": {"logprobs": {"const": true}}, "required": ["logprobs"]});
}

/// Drops what needs an output grammar: `response_format` (`text` on Responses,
/// `output_config` on Messages), and `"required"` / `"any"` among the `tool_choice` modes.
pub fn without_grammars(doc: &mut serde_json::Value) {
    fn drop_required(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::Array(e)) = m.get_mut("enum") {
                    e.retain(|x| x != "required" && x != "any");
                }
                m.values_mut().for_each(drop_required);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(drop_required),
            _ => {}
        }
    }
    let schemas = &mut doc["components"]["schemas"];
    for req in ["ChatCompletionRequest", "CompletionRequest"] {
        if let Some(p) = schemas[req]["properties"].as_object_mut() {
            p.remove("response_format");
        }
    }
    for (schema, field) in [
        ("ResponsesRequest", "text"),
        ("MessagesRequest", "output_config"),
    ] {
        if let Some(p) = schemas[schema]["properties"].as_object_mut() {
            p.remove(field);
        }
    }
    drop_required(&mut schemas["ToolChoice"]);
    drop_required(&mut schemas["AnthropicToolChoice"]);
}

// ---- responses --------------------------------------------------------------------------

#[derive(ToSchema, Serialize)]
pub struct CountTokens {
    pub input_tokens: usize,
}

#[derive(ToSchema, Serialize)]
pub struct AnthropicErrorObject {
    /// `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `request_too_large`, `rate_limit_error`, `api_error`, ...
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

/// Anthropic's error shape, used for every error on `/v1/messages*`.
#[derive(ToSchema, Serialize)]
pub struct AnthropicError {
    /// Always `error`.
    #[serde(rename = "type")]
    pub kind: String,
    pub error: AnthropicErrorObject,
}

#[derive(ToSchema, Serialize)]
pub struct AnthropicUsage {
    pub input_tokens: usize,
    pub output_tokens: usize,
    pub cache_read_input_tokens: usize,
    pub cache_creation_input_tokens: usize,
}

/// A content block of the reply.
#[derive(ToSchema, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AnthropicBlock {
    Text {
        text: String,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[schema(value_type = Object)]
        input: Value,
    },
}

/// The `message` object of a non-streamed `/v1/messages` reply.
#[derive(ToSchema, Serialize)]
pub struct AnthropicMessage {
    pub id: String,
    /// `message`
    #[serde(rename = "type")]
    pub kind: String,
    /// `assistant`
    pub role: String,
    pub model: String,
    pub content: Vec<AnthropicBlock>,
    /// `end_turn`, `max_tokens`, `stop_sequence` or `tool_use`.
    pub stop_reason: String,
    pub stop_sequence: Option<String>,
    pub usage: AnthropicUsage,
    pub x_dspark: XDspark,
}

#[derive(ToSchema, Serialize)]
pub struct ReasoningText {
    /// `reasoning_text`
    #[serde(rename = "type")]
    pub kind: String,
    pub text: String,
}

#[derive(ToSchema, Serialize)]
pub struct OutputText {
    /// `output_text`
    #[serde(rename = "type")]
    pub kind: String,
    pub text: String,
    pub annotations: Vec<Value>,
    pub logprobs: Vec<Value>,
}

/// One item of `output`.
#[derive(ToSchema, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    Reasoning {
        id: String,
        summary: Vec<Value>,
        content: Vec<ReasoningText>,
        status: String,
    },
    Message {
        id: String,
        role: String,
        status: String,
        content: Vec<OutputText>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        status: String,
    },
}

#[derive(ToSchema, Serialize)]
pub struct InputTokensDetails {
    pub cached_tokens: usize,
    pub cache_write_tokens: usize,
}

#[derive(ToSchema, Serialize)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: usize,
}

#[derive(ToSchema, Serialize)]
pub struct ResponseUsage {
    pub input_tokens: usize,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: usize,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: usize,
}

/// The `response` object (request fields such as `instructions`, `tools`, `reasoning` are
/// echoed as sent).
#[derive(ToSchema, Serialize)]
pub struct ResponseObject {
    pub id: String,
    /// `response`
    pub object: String,
    pub created_at: u64,
    /// `completed`, `incomplete` (token limit) or `in_progress` (stream events).
    pub status: String,
    pub error: Option<Value>,
    pub incomplete_details: Option<Value>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u64>,
    pub model: String,
    pub output: Vec<OutputItem>,
    pub parallel_tool_calls: Value,
    pub previous_response_id: Option<String>,
    pub reasoning: Value,
    pub store: bool,
    pub temperature: Value,
    pub top_p: Value,
    pub text: Value,
    pub tool_choice: Value,
    pub tools: Value,
    pub truncation: String,
    pub metadata: Value,
    pub usage: Option<ResponseUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_dspark: Option<XDspark>,
}

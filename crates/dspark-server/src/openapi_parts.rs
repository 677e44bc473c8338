//! Request-schema parts shared by the OpenAI and Anthropic descriptions (`openapi.rs`,
//! `openapi_extra.rs`): the JSON Schemas a tool's parameters or a structured output may be
//! given as, tools, tool choices and `response_format`. Description-only types, as in
//! `openapi.rs`.
#![allow(dead_code)]

use serde::Deserialize;
use utoipa::ToSchema;

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ObjectType {
    Object,
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ScalarType {
    String,
    Integer,
    Number,
    Boolean,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PropertySchema {
    #[schema(inline)]
    r#type: ScalarType,
}

/// A JSON Schema for an object. The server takes any JSON Schema that llguidance compiles;
/// the description lists flat objects of scalar properties, which always compile.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ObjectSchema {
    #[schema(inline)]
    r#type: ObjectType,
    /// Optional, but never null (llguidance refuses `"properties": null`).
    #[serde(default)]
    properties: std::collections::BTreeMap<String, PropertySchema>,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JsonSchemaFormat {
    name: String,
    strict: Option<bool>,
    /// Absent: any JSON object.
    schema: Option<ObjectSchema>,
}

/// `response_format`: the output is constrained to JSON (`json_object`) or to a schema.
#[derive(ToSchema, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchemaFormat },
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FunctionDef {
    name: String,
    description: Option<String>,
    parameters: Option<ObjectSchema>,
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FunctionType {
    Function,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Tool {
    #[schema(inline)]
    r#type: FunctionType,
    function: FunctionDef,
}

#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NamedFunction {
    name: String,
}

/// `{"type": "function", "function": {"name": ...}}`: forces a call of that tool.
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NamedToolChoice {
    #[schema(inline)]
    r#type: FunctionType,
    function: NamedFunction,
}

#[derive(ToSchema, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ToolChoiceMode {
    None,
    Auto,
    Required,
}

/// `tool_choice`: `none`, `auto` or `required` (a call of one of `tools`, grammar-forced).
/// The server also takes a `NamedToolChoice` (listed in the components), which must name one
/// of `tools`: JSON Schema cannot tie the two fields together, so it is not listed here.
#[derive(ToSchema, Deserialize)]
#[serde(untagged)]
pub(crate) enum ToolChoice {
    Mode(#[schema(inline)] ToolChoiceMode),
}

//! OpenAI request fields this server does not implement, sorted by whether honouring them
//! would change the output. A field that would is refused with a 400 naming it
//! (`unsupported_parameter`) unless it holds its neutral value; a field that would not is
//! accepted and ignored. The table in docs/api.md lists the same fields with the reasons.

use serde_json::{Map, Value as Json};

use super::{Kind, VResult, ValidationError};

/// When a field is refused.
#[derive(Clone, Copy)]
enum Refuse {
    /// Any non-null value.
    Present,
    /// Any value but `false`.
    UnlessFalse,
    /// Any value but `true`.
    UnlessTrue,
    /// Any value but 1.
    UnlessOne,
    /// Any value but an empty string.
    UnlessEmpty,
    /// Any value but `["text"]`.
    UnlessTextOnly,
}

struct Rule {
    field: &'static str,
    chat: bool,
    completions: bool,
    refuse: Refuse,
    msg: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        field: "audio",
        chat: true,
        completions: false,
        refuse: Refuse::Present,
        msg: "audio output is not supported: this server generates text only",
    },
    Rule {
        field: "modalities",
        chat: true,
        completions: false,
        refuse: Refuse::UnlessTextOnly,
        msg: "only [\"text\"] is supported",
    },
    Rule {
        field: "functions",
        chat: true,
        completions: false,
        refuse: Refuse::Present,
        msg: "the deprecated `functions` field is not supported: send `tools`",
    },
    Rule {
        field: "function_call",
        chat: true,
        completions: false,
        refuse: Refuse::Present,
        msg: "the deprecated `function_call` field is not supported: send `tool_choice`",
    },
    Rule {
        field: "parallel_tool_calls",
        chat: true,
        completions: false,
        refuse: Refuse::UnlessTrue,
        msg: "limiting a reply to one tool call is not implemented (only `true` is accepted)",
    },
    Rule {
        field: "reasoning_effort",
        chat: true,
        completions: false,
        refuse: Refuse::Present,
        msg: "effort levels are not implemented: turn thinking on or off with \
              `chat_template_kwargs.enable_thinking`",
    },
    Rule {
        field: "verbosity",
        chat: true,
        completions: false,
        refuse: Refuse::Present,
        msg: "verbosity levels are not implemented",
    },
    Rule {
        field: "web_search_options",
        chat: true,
        completions: false,
        refuse: Refuse::Present,
        msg: "web search is not available on a local server",
    },
    Rule {
        field: "echo",
        chat: false,
        completions: true,
        refuse: Refuse::UnlessFalse,
        msg: "echoing the prompt is not implemented (only `false` is accepted)",
    },
    Rule {
        field: "suffix",
        chat: false,
        completions: true,
        refuse: Refuse::UnlessEmpty,
        msg: "insertion with a suffix is not implemented",
    },
    Rule {
        field: "best_of",
        chat: false,
        completions: true,
        refuse: Refuse::UnlessOne,
        msg: "server-side best-of is not implemented (only 1 is accepted; use `n`)",
    },
];

fn neutral(v: &Json, refuse: Refuse) -> bool {
    match refuse {
        Refuse::Present => false,
        Refuse::UnlessFalse => v == &Json::Bool(false),
        Refuse::UnlessTrue => v == &Json::Bool(true),
        Refuse::UnlessOne => v.as_f64() == Some(1.0),
        Refuse::UnlessEmpty => v.as_str() == Some(""),
        Refuse::UnlessTextOnly => v
            .as_array()
            .is_some_and(|a| a.len() == 1 && a[0].as_str() == Some("text")),
    }
}

/// Refuses the first field of [`RULES`] that this route would have to honour.
pub(super) fn check(o: &Map<String, Json>, kind: Kind) -> VResult<()> {
    for r in RULES {
        let applies = match kind {
            Kind::Chat => r.chat,
            Kind::Completion => r.completions,
        };
        let Some(v) = o.get(r.field).filter(|v| !v.is_null()) else {
            continue;
        };
        if applies && !neutral(v, r.refuse) {
            return Err(ValidationError::Unsupported {
                param: r.field.into(),
                msg: r.msg,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(body: Json, kind: Kind) -> VResult<()> {
        check(body.as_object().unwrap(), kind)
    }

    #[test]
    fn output_changing_fields_are_refused_by_name() {
        for (body, kind, param) in [
            (json!({"audio": {"voice": "alloy"}}), Kind::Chat, "audio"),
            (
                json!({"modalities": ["text", "audio"]}),
                Kind::Chat,
                "modalities",
            ),
            (json!({"functions": []}), Kind::Chat, "functions"),
            (
                json!({"function_call": "auto"}),
                Kind::Chat,
                "function_call",
            ),
            (
                json!({"parallel_tool_calls": false}),
                Kind::Chat,
                "parallel_tool_calls",
            ),
            (
                json!({"reasoning_effort": "low"}),
                Kind::Chat,
                "reasoning_effort",
            ),
            (json!({"verbosity": "low"}), Kind::Chat, "verbosity"),
            (
                json!({"web_search_options": {}}),
                Kind::Chat,
                "web_search_options",
            ),
            (json!({"echo": true}), Kind::Completion, "echo"),
            (json!({"suffix": "}"}), Kind::Completion, "suffix"),
            (json!({"best_of": 3}), Kind::Completion, "best_of"),
        ] {
            let e = run(body.clone(), kind).unwrap_err();
            assert_eq!(e.param(), Some(param), "{body}");
            assert_eq!(e.code(), "unsupported_parameter");
        }
    }

    #[test]
    fn the_request_parser_runs_the_check() {
        let limits = super::super::Limits::default();
        let body = br#"{"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"low"}"#;
        let e = super::super::parse_body(body, Kind::Chat, &limits).unwrap_err();
        assert_eq!(e.param(), Some("reasoning_effort"));
        let body = br#"{"prompt":"hi","echo":true}"#;
        let e = super::super::parse_body(body, Kind::Completion, &limits).unwrap_err();
        assert_eq!(e.param(), Some("echo"));
    }

    #[test]
    fn neutral_values_and_other_routes_pass() {
        for (body, kind) in [
            (json!({"modalities": ["text"]}), Kind::Chat),
            (json!({"parallel_tool_calls": true}), Kind::Chat),
            (json!({"audio": null, "functions": null}), Kind::Chat),
            (
                json!({"echo": false, "suffix": "", "best_of": 1}),
                Kind::Completion,
            ),
            // completions-only fields mean nothing on chat, and the reverse
            (json!({"echo": true, "best_of": 4}), Kind::Chat),
            (json!({"reasoning_effort": "high"}), Kind::Completion),
            // fields that do not change the text
            (
                json!({"store": true, "metadata": {"a": "b"}, "user": "u", "service_tier": "auto",
                       "prediction": {"type": "content", "content": "x"}}),
                Kind::Chat,
            ),
        ] {
            assert!(run(body.clone(), kind).is_ok(), "{body}");
        }
    }
}

//! Request fields that shape what comes back rather than the prompt: `logit_bias`,
//! `logprobs` / `top_logprobs`, `n`, and the list forms of the completions `prompt`.

use serde_json::{Map, Value as Json};

use super::{field, opt_uint, ty, VResult, ValidationError};
use dspark_engine::sampling::logit_bias::MAX_BIAS;

/// Most alternatives per token (OpenAI's `top_logprobs` bound).
pub const MAX_TOP_LOGPROBS: usize = 20;
/// Most choices per prompt; they run one after another on the single engine worker.
pub const MAX_N: usize = 16;
/// Most prompts in one completions request.
pub const MAX_PROMPTS: usize = 64;

fn range(param: &str, rule: &'static str) -> ValidationError {
    ValidationError::Range {
        param: param.into(),
        rule,
    }
}

/// `logit_bias`: an object from token-id strings to numbers in [-100, 100], sorted by id.
/// Whether each id exists in the vocabulary is checked against the model later.
pub fn logit_bias(o: &Map<String, Json>) -> VResult<Vec<(u32, f32)>> {
    let m = match field(o, "logit_bias") {
        None => return Ok(Vec::new()),
        Some(Json::Object(m)) => m,
        Some(_) => return Err(ty("logit_bias", "an object mapping token ids to numbers")),
    };
    let mut out = Vec::with_capacity(m.len());
    for (k, v) in m {
        let id: u32 = k
            .parse()
            .map_err(|_| range("logit_bias", "keyed by token ids (non-negative integers)"))?;
        let b = v
            .as_f64()
            .ok_or_else(|| ty("logit_bias", "an object mapping token ids to numbers"))?;
        if !(-(MAX_BIAS as f64)..=MAX_BIAS as f64).contains(&b) {
            return Err(range("logit_bias", "a map to values between -100 and 100"));
        }
        if b != 0.0 {
            out.push((id, b as f32));
        }
    }
    out.sort_by_key(|e| e.0);
    out.dedup_by_key(|e| e.0);
    Ok(out)
}

/// Log-probabilities wanted: `None` = off, `Some(k)` = the chosen token and `k`
/// alternatives. Chat: `logprobs: bool` plus `top_logprobs: 0..=20` (which needs
/// `logprobs: true`); completions: `logprobs: 0..=20` (0 = the chosen token only).
pub fn logprobs(o: &Map<String, Json>, chat: bool) -> VResult<Option<usize>> {
    let top = opt_uint(o, "top_logprobs")?;
    if top.is_some_and(|k| k as usize > MAX_TOP_LOGPROBS) {
        return Err(range("top_logprobs", "between 0 and 20"));
    }
    if chat {
        let on = match field(o, "logprobs") {
            None | Some(Json::Bool(false)) => false,
            Some(Json::Bool(true)) => true,
            Some(_) => return Err(ty("logprobs", "a boolean")),
        };
        if !on && top.is_some_and(|k| k > 0) {
            return Err(range("top_logprobs", "used with `logprobs: true`"));
        }
        return Ok(on.then(|| top.unwrap_or(0) as usize));
    }
    match field(o, "logprobs") {
        None | Some(Json::Bool(false)) => Ok(None),
        Some(v @ Json::Number(_)) => match super::numbers::non_negative(v) {
            Some(Ok(k)) if k <= MAX_TOP_LOGPROBS as u64 => Ok(Some(k as usize)),
            _ => Err(range("logprobs", "an integer between 0 and 20")),
        },
        Some(_) => Err(ty("logprobs", "an integer")),
    }
}

/// `n`: choices per prompt, 1..=16.
pub fn n(o: &Map<String, Json>) -> VResult<usize> {
    match opt_uint(o, "n")? {
        None => Ok(1),
        Some(k) if (1..=MAX_N as u64).contains(&k) => Ok(k as usize),
        Some(_) => Err(range("n", "between 1 and 16")),
    }
}

/// The completions `prompt`: a string or a list of 1..=64 strings.
pub fn completion_prompts(o: &Map<String, Json>) -> VResult<Vec<String>> {
    let expected = "a string or a list of strings";
    match field(o, "prompt") {
        None => Err(ValidationError::Missing {
            param: "prompt".into(),
        }),
        Some(Json::String(s)) => Ok(vec![s.clone()]),
        Some(Json::Array(a)) if a.is_empty() => Err(range("prompt", "a non-empty list")),
        Some(Json::Array(a)) if a.len() > MAX_PROMPTS => {
            Err(range("prompt", "a list of at most 64 prompts"))
        }
        Some(Json::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, p)| match p {
                Json::String(s) => Ok(s.clone()),
                Json::Number(_) | Json::Array(_) => Err(ValidationError::Unsupported {
                    param: format!("prompt[{i}]"),
                    msg: "token-id prompts are not supported; send text",
                }),
                _ => Err(ty(&format!("prompt[{i}]"), "a string")),
            })
            .collect(),
        Some(_) => Err(ty("prompt", expected)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Json) -> Map<String, Json> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn logit_bias_forms() {
        let b = logit_bias(&obj(json!({"logit_bias": {"7": 5, "3": -100, "9": 0}}))).unwrap();
        assert_eq!(b, vec![(3, -100.0), (7, 5.0)]);
        for bad in [
            json!({"x": 1}),
            json!({"-1": 1}),
            json!({"1": 101}),
            json!({"1": "a"}),
            json!(3),
        ] {
            let e = logit_bias(&obj(json!({ "logit_bias": bad }))).unwrap_err();
            assert_eq!(e.param(), Some("logit_bias"), "{bad}");
        }
    }

    #[test]
    fn logprobs_forms() {
        let chat = |v: Json| logprobs(&obj(v), true);
        assert_eq!(chat(json!({})).unwrap(), None);
        assert_eq!(chat(json!({"logprobs": true})).unwrap(), Some(0));
        assert_eq!(
            chat(json!({"logprobs": true, "top_logprobs": 20})).unwrap(),
            Some(20)
        );
        assert_eq!(
            chat(json!({"logprobs": false, "top_logprobs": 0})).unwrap(),
            None
        );
        for bad in [
            json!({"logprobs": true, "top_logprobs": 21}),
            json!({"top_logprobs": 2}),
            json!({"logprobs": 1}),
        ] {
            assert!(chat(bad.clone()).is_err(), "{bad}");
        }
        let cmpl = |v: Json| logprobs(&obj(v), false);
        assert_eq!(cmpl(json!({"logprobs": 0})).unwrap(), Some(0));
        assert_eq!(cmpl(json!({"logprobs": 5})).unwrap(), Some(5));
        assert_eq!(
            cmpl(json!({"logprobs": 21})).unwrap_err().param(),
            Some("logprobs")
        );
        assert_eq!(
            cmpl(json!({"logprobs": true})).unwrap_err().param(),
            Some("logprobs")
        );
    }

    #[test]
    fn n_and_prompt_lists() {
        assert_eq!(n(&obj(json!({}))).unwrap(), 1);
        assert_eq!(n(&obj(json!({"n": 16}))).unwrap(), 16);
        assert!(n(&obj(json!({"n": 0}))).is_err() && n(&obj(json!({"n": 17}))).is_err());
        let p = |v: Json| completion_prompts(&obj(json!({ "prompt": v })));
        assert_eq!(p(json!(["a", "b"])).unwrap(), vec!["a", "b"]);
        assert_eq!(p(json!([])).unwrap_err().param(), Some("prompt"));
        assert_eq!(
            p(json!([[1, 2]])).unwrap_err().code(),
            "unsupported_parameter"
        );
        assert_eq!(p(json!(["a", 3])).unwrap_err().param(), Some("prompt[1]"));
    }
}

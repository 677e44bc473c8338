//! JSON numbers read as integers. JSON has one number type, and JSON Schema calls a number
//! with a zero fraction an integer: `16`, `16.0` and `1.6e1` are the same `integer`, so each
//! is accepted where an integer is wanted; `1.5` is not an integer and is refused by the
//! caller, naming the field. Integers beyond what the field can hold saturate (a 20-digit
//! `max_tokens` is "as many as fit", as with any value above the context).

use serde_json::{Map, Value as Json};

use super::{field, ty, VResult, ValidationError};

/// Least `repetition_penalty`: a seen token's logit is divided (or, if negative, multiplied)
/// by it in f32, so a smaller one drives logits toward f32 overflow; no model card uses one
/// below 1. The OpenAPI schema states the same bound.
pub const MIN_REPETITION_PENALTY: f64 = 0.01;

/// The integer a JSON number stands for, or `None` (not a number, a fraction, NaN or inf).
/// Floats beyond the `i128` range saturate to its ends.
pub fn integral(v: &Json) -> Option<i128> {
    if let Some(n) = v.as_u64() {
        return Some(i128::from(n));
    }
    if let Some(n) = v.as_i64() {
        return Some(i128::from(n));
    }
    let x = v.as_f64()?;
    // `as` saturates for finite floats beyond the range; a zero fraction means integral
    (x.is_finite() && x.fract() == 0.0).then_some(x as i128)
}

/// A non-negative integer, saturated to `u64`: `Ok(None)` when `v` is not an integer,
/// `Err(())` when it is a negative one.
pub fn non_negative(v: &Json) -> Option<Result<u64, ()>> {
    integral(v).map(|n| {
        if n < 0 {
            Err(())
        } else {
            Ok(u64::try_from(n).unwrap_or(u64::MAX))
        }
    })
}

/// A seed: any integer, negative ones wrapped to their two's-complement `u64` (as before),
/// beyond the `i64`/`u64` range saturated.
pub fn seed(v: &Json) -> Option<u64> {
    integral(v).map(|n| {
        if n >= 0 {
            u64::try_from(n).unwrap_or(u64::MAX)
        } else {
            i64::try_from(n).unwrap_or(i64::MIN) as u64
        }
    })
}

/// `top_p` in (0, 1]. Any positive value is kept positive in f32 (a value below f32's
/// smallest, ~1.4e-45, becomes that smallest one): every such `top_p` keeps the likeliest
/// token(s) only, as any `top_p` below the top token's probability does.
pub fn top_p(o: &Map<String, Json>) -> VResult<Option<f32>> {
    let Some(v) = field(o, "top_p") else {
        return Ok(None);
    };
    let x = v.as_f64().ok_or_else(|| ty("top_p", "a number"))?;
    if !(x > 0.0 && x <= 1.0) {
        return Err(ValidationError::Range {
            param: "top_p".into(),
            rule: "in (0, 1]",
        });
    }
    Ok(Some((x as f32).max(f32::from_bits(1))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(s: &str) -> Json {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn zero_fraction_numbers_are_integers() {
        for (text, want) in [
            ("16", 16),
            ("16.0", 16),
            ("1.6e1", 16),
            ("54918.0", 54918),
            ("-3.0", -3),
            ("0.0", 0),
            ("-0.0", 0),
        ] {
            assert_eq!(integral(&parse(text)), Some(want), "{text}");
        }
        for text in ["1.5", "-0.25", "\"16\"", "true", "null", "[16]"] {
            assert_eq!(integral(&parse(text)), None, "{text}");
        }
    }

    #[test]
    fn out_of_range_integers_saturate() {
        assert_eq!(non_negative(&parse("1e300")), Some(Ok(u64::MAX)));
        assert_eq!(
            non_negative(&parse("18446744073709551615")),
            Some(Ok(u64::MAX))
        );
        assert_eq!(non_negative(&parse("-2.0")), Some(Err(())));
        assert_eq!(seed(&parse("-1")), Some(u64::MAX));
        assert_eq!(seed(&parse("-1e300")), Some(i64::MIN as u64));
        assert_eq!(seed(&json!(7.0)), Some(7));
    }

    fn chat(extra: Json) -> VResult<super::super::ValidRequest> {
        let mut b = json!({"messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        super::super::validate(
            b.as_object().unwrap(),
            super::super::Kind::Chat,
            &super::super::Limits::default(),
        )
    }

    #[test]
    fn requests_take_integers_written_with_a_zero_fraction() {
        // what schemathesis's positive_data_acceptance sent and the validator refused
        let r = chat(
            json!({"seed": 54918.0, "max_tokens": 16.0, "top_k": 3.0, "n": 2.0,
                            "max_completion_tokens": 1.6e1, "logprobs": true,
                            "top_logprobs": 2.0}),
        )
        .unwrap();
        assert_eq!(
            (r.sampling.seed, r.max_tokens, r.sampling.top_k, r.n),
            (Some(54918), Some(16), 3, 2)
        );
        assert_eq!(r.sampling.logprobs, Some(2));
        // a fraction is still refused, naming the field
        for k in ["seed", "max_tokens", "top_k", "n", "top_logprobs"] {
            let e = chat(json!({k: 2.5, "logprobs": true})).unwrap_err();
            assert_eq!((e.param(), e.code()), (Some(k), "invalid_type"), "{k}");
        }
    }

    #[test]
    fn tiny_top_p_is_kept_positive_and_penalty_bound_is_stated() {
        for x in [5e-324, 1e-300, f64::MIN_POSITIVE, 1e-40] {
            let p = chat(json!({"top_p": x})).unwrap().sampling.top_p;
            assert!(p > 0.0 && p <= 1e-38, "{x} -> {p}");
        }
        for x in [0.0, -1e-300, 1.0000001] {
            let e = chat(json!({"top_p": x})).unwrap_err();
            assert_eq!(e.param(), Some("top_p"), "{x}");
        }
        let r = chat(json!({"repetition_penalty": MIN_REPETITION_PENALTY})).unwrap();
        assert_eq!(r.sampling.repetition_penalty, 0.01);
        for x in [1e-300, 0.0099, 10.5] {
            let e = chat(json!({"repetition_penalty": x})).unwrap_err();
            assert_eq!(
                (e.param(), e.code()),
                (Some("repetition_penalty"), "invalid_value"),
                "{x}"
            );
        }
    }
}

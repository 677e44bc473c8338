//! Constrained decoding (`response_format`, `tool_choice`) on the engine, with the real Qwen3
//! tokenizer's token bytes:
//!
//! - the trie's token bytes are exact: for Qwen3 (byte-level BPE) and Gemma 3 (SentencePiece)
//!   the bytes of an encoding concatenate to the encoded text;
//! - 50 JSON schemas drawn from a fixed seed (nested objects, enums, arrays, required and
//!   optional fields, integers, numbers, strings, booleans), each generated greedily and sampled
//!   on a random target with the Qwen3 vocabulary: every output ends with eos, parses, and
//!   passes [`validate`] (the schema keywords used here, written from the JSON-schema spec);
//! - greedy speculation equals the constrained greedy baseline for draft-model, DSpark and
//!   DFlash drafters across seeds and schemas.
//!
//! The chi-squared test under a mask is in `structured_sampling.rs`.

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::constrain::{Compiler, Grammar, Shared};
use dspark_engine::drafters::draft_model::DraftModel;
use dspark_engine::drafters::{dflash_from_parts, dspark_from_parts};
use dspark_engine::generate::{baseline, FinishReason, GenParams, GenResult};
use dspark_engine::model::transformer::Transformer;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_engine::testing::{
    perturbed, random_dflash, random_dspark, random_target, DrafterSpec, Gen, RandomSpec,
};
use dspark_engine::tokenizer::Tokenizer;
use dspark_engine::weights::MemorySource;
use dspark_tests::artefact;
use serde_json::{json, Map, Value};

fn qwen3() -> Tokenizer {
    Tokenizer::from_dir(&artefact("qwen3-tokenizer")).unwrap()
}

#[test]
fn token_bytes_concatenate_to_the_text() {
    let texts = [
        "{\"name\": \"Zoë\", \"n\": -12.5e3, \"ok\": true}",
        "  spaces\tand\nnewlines\r\n",
        "emoji 🦀 and CJK 日本語, accents àéîõü",
        "<tag> & \\escapes\\ \"quoted\"",
    ];
    for (name, tok) in [
        ("qwen3", qwen3()),
        (
            "gemma3",
            Tokenizer::from_dir(&artefact("gemma3-tokenizer")).unwrap(),
        ),
    ] {
        let words = dspark_engine::constrain::vocab::token_bytes(&tok, tok.vocab_size());
        for text in texts {
            let ids = tok.encode(text, false).unwrap();
            let bytes: Vec<u8> = ids
                .iter()
                .flat_map(|&i| words[i as usize].clone())
                .collect();
            assert_eq!(String::from_utf8_lossy(&bytes), text, "{name}: ids {ids:?}");
        }
        // special tokens carry the trie's marker, so no text grammar can produce them
        for &e in tok.eos_ids() {
            assert_eq!(words[e as usize].first(), Some(&0xFF), "{name} eos {e}");
        }
    }
}

/// A random schema: objects with 1-4 properties (some required), nested to `depth`.
fn schema(g: &mut Gen, depth: usize) -> Value {
    let mut u = |k: u32| ((g.normal().abs() * 1e4) as u32) % k;
    let kind = if depth == 0 { u(5) } else { u(7) };
    match kind {
        0 => json!({"type": "string", "maxLength": 1 + u(8)}),
        1 => {
            let lo = u(100) as i64 - 50;
            json!({"type": "integer", "minimum": lo, "maximum": lo + 1 + u(200) as i64})
        }
        2 => json!({"type": "boolean"}),
        3 => {
            let n = 2 + u(3);
            let opts: Vec<String> = (0..n).map(|i| format!("opt{}_{}", i, u(9))).collect();
            json!({"enum": opts})
        }
        4 => json!({"type": "number", "minimum": 0, "maximum": 10, "multipleOf": 0.5}),
        5 => {
            let items = schema(g, depth - 1);
            let mut u = |k: u32| ((g.normal().abs() * 1e4) as u32) % k;
            let min = u(2);
            json!({"type": "array", "items": items, "minItems": min, "maxItems": min + 1 + u(2)})
        }
        _ => object(g, depth - 1),
    }
}

fn object(g: &mut Gen, depth: usize) -> Value {
    let n = 1 + ((g.normal().abs() * 1e4) as usize) % 4;
    let mut props = Map::new();
    let mut required = Vec::new();
    for i in 0..n {
        let name = format!("field_{i}");
        props.insert(name.clone(), schema(g, depth));
        if i == 0 || g.normal() > 0.0 {
            required.push(name);
        }
    }
    json!({"type": "object", "properties": props, "required": required,
           "additionalProperties": false})
}

/// Whether `v` satisfies `s`, for the keywords [`schema`] uses (JSON Schema 2020-12 meaning).
fn validate(v: &Value, s: &Value, path: &str) -> Result<(), String> {
    let fail = |m: &str| Err(format!("{path}: {m} ({v})"));
    if let Some(opts) = s.get("enum").and_then(Value::as_array) {
        return if opts.contains(v) {
            Ok(())
        } else {
            fail("not in enum")
        };
    }
    let num = |k: &str| s.get(k).and_then(Value::as_f64);
    match s["type"].as_str().unwrap() {
        "string" => {
            let Some(t) = v.as_str() else {
                return fail("not a string");
            };
            if num("maxLength").is_some_and(|m| t.chars().count() as f64 > m) {
                return fail("longer than maxLength");
            }
        }
        "integer" | "number" => {
            let Some(x) = v.as_f64() else {
                return fail("not a number");
            };
            // -0 and 1.0 are integers too (JSON Schema compares mathematical values)
            if s["type"] == "integer" && x.fract() != 0.0 {
                return fail("not an integer");
            }
            if num("minimum").is_some_and(|m| x < m) || num("maximum").is_some_and(|m| x > m) {
                return fail("out of range");
            }
            if num("multipleOf").is_some_and(|m| (x / m).fract() != 0.0) {
                return fail("not a multiple");
            }
        }
        "boolean" => {
            if !v.is_boolean() {
                return fail("not a boolean");
            }
        }
        "array" => {
            let Some(a) = v.as_array() else {
                return fail("not an array");
            };
            let n = a.len() as f64;
            if num("minItems").is_some_and(|m| n < m) || num("maxItems").is_some_and(|m| n > m) {
                return fail("item count");
            }
            for (i, x) in a.iter().enumerate() {
                validate(x, &s["items"], &format!("{path}[{i}]"))?;
            }
        }
        "object" => {
            let Some(o) = v.as_object() else {
                return fail("not an object");
            };
            let props = s["properties"].as_object().unwrap();
            for r in s["required"].as_array().unwrap() {
                if !o.contains_key(r.as_str().unwrap()) {
                    return fail(&format!("missing required {r}"));
                }
            }
            for (k, x) in o {
                let Some(ps) = props.get(k) else {
                    return fail(&format!("unexpected property {k}"));
                };
                validate(x, ps, &format!("{path}.{k}"))?;
            }
        }
        other => panic!("schema type {other} not used here"),
    }
    Ok(())
}

struct World {
    tok: Tokenizer,
    compiler: Compiler,
    spec: RandomSpec,
    tsrc: MemorySource,
    target: Transformer<CandleBackend>,
}

fn world(seed: u64) -> World {
    let tok = qwen3();
    let vocab = tok.vocab_size().next_multiple_of(64);
    let spec = RandomSpec {
        layer_scale: 0.3,
        ..RandomSpec::tiny(vocab)
    };
    let (_, tsrc) = random_target(&spec, seed);
    let target = Transformer::load(&CandleBackend::cpu(), spec.config(), &tsrc).unwrap();
    let compiler = Compiler::new(&tok, vocab).unwrap();
    World {
        tok,
        compiler,
        spec,
        tsrc,
        target,
    }
}

fn params(w: &World, schema: &Value, sampling: SamplingParams, max_new: usize) -> GenParams {
    let c = w
        .compiler
        .compile(&Grammar::JsonSchema(schema.clone()))
        .unwrap();
    GenParams {
        max_new_tokens: max_new,
        sampling: SamplingParams {
            constraint: Some(Shared::from(c)),
            ..sampling
        },
        eos: w.tok.eos_ids().to_vec(),
    }
}

fn prompt(w: &World, i: usize) -> Vec<u32> {
    w.tok
        .encode(&format!("Answer {i} in JSON:"), false)
        .unwrap()
}

fn check(w: &World, r: &GenResult, schema: &Value, what: &str) {
    assert_eq!(
        r.finish_reason,
        FinishReason::Stop,
        "{what}: no eos within budget"
    );
    let text = w.tok.decode(&r.tokens, true).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
    validate(&v, schema, "$").unwrap_or_else(|e| panic!("{what}: {e}\nschema {schema}"));
}

#[test]
fn fifty_schemas_give_valid_json() {
    let w = world(7);
    let mut g = Gen::new(2026, "schemas");
    let mut tokens = 0;
    for i in 0..50 {
        let s = object(&mut g, 2);
        let p = prompt(&w, i);
        let greedy = params(&w, &s, SamplingParams::greedy(), 400);
        let r = baseline::generate(
            &w.target,
            &mut w.target.new_cache(),
            &p,
            &greedy,
            &mut Vec::new(),
        )
        .unwrap();
        check(&w, &r, &s, &format!("schema {i} greedy"));
        tokens += r.tokens.len();
        let sampled = SamplingParams {
            temperature: 1.0,
            seed: Some(i as u64),
            ..Default::default()
        };
        let r = baseline::generate(
            &w.target,
            &mut w.target.new_cache(),
            &p,
            &params(&w, &s, sampled, 400),
            &mut Vec::new(),
        )
        .unwrap();
        check(&w, &r, &s, &format!("schema {i} sampled"));
        tokens += r.tokens.len();
    }
    eprintln!("100 constrained generations, {tokens} tokens");
}

#[test]
fn a_refused_schema_is_a_grammar_error() {
    let w = world(1);
    let bad = json!({"type": "object", "properties": {"a": {"$ref": "#/nope"}}});
    let e = w.compiler.compile(&Grammar::JsonSchema(bad)).unwrap_err();
    assert!(
        matches!(e, dspark_engine::constrain::ConstraintError::Grammar(_)),
        "{e}"
    );
}

fn spec_run(
    w: &World,
    d: &mut dyn Drafter<CandleBackend>,
    p: &[u32],
    gp: &GenParams,
    cap: usize,
) -> GenResult {
    d.truncate(0);
    let s = SpecParams {
        max_draft: cap,
        confidence_threshold: 0.0,
        lookup: false,
    };
    decode::generate(
        &w.target,
        &mut w.target.new_cache(),
        d,
        p,
        gp,
        &s,
        &mut Vec::new(),
    )
    .unwrap()
}

fn drafter_spec(spec: &RandomSpec, block: usize, taps: Vec<usize>) -> DrafterSpec {
    DrafterSpec {
        layers: 2,
        block,
        taps,
        layer_scale: 0.5,
        mask_token_id: spec.vocab as u32 - 1,
    }
}

#[test]
fn greedy_speculation_equals_constrained_baseline() {
    let b = CandleBackend::cpu();
    let mut accepted = [0usize; 3];
    for seed in 0..2u64 {
        let w = world(100 + seed);
        let v = w.spec.vocab;
        let mut drafters: Vec<Box<dyn Drafter<CandleBackend>>> = Vec::new();
        let dm = Transformer::load(&b, w.spec.config(), &perturbed(&w.tsrc, 0.2, seed)).unwrap();
        drafters.push(Box::new(DraftModel::new(dm, v, 6).unwrap()));
        let ds = drafter_spec(&w.spec, 6, vec![0, 1, 2]);
        let (cfg, dsrc) = random_dspark(&w.spec, &w.tsrc, &ds, Some(4.0), seed);
        drafters.push(Box::new(
            dspark_from_parts(&b, &cfg, &dsrc, &w.target).unwrap(),
        ));
        let ds = drafter_spec(&w.spec, 6, vec![0, 2]);
        let (cfg, dsrc) = random_dflash(&w.spec, &ds, seed);
        drafters.push(Box::new(
            dflash_from_parts(&b, &cfg, &dsrc, &w.target).unwrap(),
        ));
        let mut g = Gen::new(seed, "spec-schemas");
        for i in 0..6 {
            let s = object(&mut g, 1);
            let p = prompt(&w, i);
            let max_new = 20 + 20 * (i % 3);
            let gp = params(&w, &s, SamplingParams::greedy(), max_new);
            let base = baseline::generate(
                &w.target,
                &mut w.target.new_cache(),
                &p,
                &gp,
                &mut Vec::new(),
            )
            .unwrap();
            for (k, d) in drafters.iter_mut().enumerate() {
                let r = spec_run(&w, d.as_mut(), &p, &gp, 1 + (i + k) % 6);
                assert_eq!(
                    r.tokens,
                    base.tokens,
                    "seed {seed} schema {i} drafter {}",
                    d.name()
                );
                assert_eq!(r.finish_reason, base.finish_reason);
                accepted[k] += r.stats.accept_lengths.iter().map(|a| a - 1).sum::<usize>();
            }
        }
    }
    eprintln!("drafts accepted (draft-model, dspark, dflash): {accepted:?}");
    // the masked drafters must be exercised, not rejected at once every round
    assert!(accepted.iter().all(|&a| a > 0), "{accepted:?}");
}

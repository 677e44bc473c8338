//! Tiny random Gemma 4 and Gemma 3 text models (tests/fixtures/tiny/gemma{4,3}, made with
//! transformers by scripts/fixtures/make_gemma_tiny.py) against transformers' own forward: logits at every
//! position and the outputs of layers 0 and 2 (HF `hidden_states[i + 1]`) within 1e-4 (f32),
//! 24 greedy tokens identical on 3 prompts, and draft-model speculation equal to the baseline.
//! The checkpoint has sliding layers (window 4) and full-attention layers with their own head
//! size and kv heads, keys reused as values and proportional RoPE. Runs on `DSPARK_BACKEND`.

use dspark_engine::backend::Backend;
use dspark_engine::drafters::draft_model::DraftModel;
use dspark_engine::generate::{baseline, GenParams};
use dspark_engine::model::open_checkpoint;
use dspark_engine::model::transformer::{LogitsWanted, Transformer};
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_tests::{as_u32s, fixture, golden, on_backend};

const TOL: f32 = 1e-4;

fn load<B: Backend>(b: &B, variant: &str) -> Transformer<B> {
    let ck = open_checkpoint(&fixture(&format!("tiny/{variant}"))).unwrap();
    Transformer::load(b, ck.cfg, ck.source.as_ref()).unwrap()
}

fn max_diff(got: &[f32], want: &serde_json::Value) -> f32 {
    let want: Vec<f32> = want
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
        })
        .collect();
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

#[test]
fn tiny_gemma4_matches_transformers() {
    on_backend!(matches)
}

fn matches<B: Backend>(b: B) {
    check_variant(&b, "gemma4");
}

fn check_variant<B: Backend>(b: &B, variant: &str) {
    let b = b.clone();
    let g = golden(&format!("tiny_{variant}.json"));
    let t = load(&b, variant);
    let ids = as_u32s(&g["prompt_ids"]);
    let out = t
        .forward(&ids, &mut t.new_cache(), &[0, 2], LogitsWanted::All)
        .unwrap();
    let logits = b.to_f32_vec(out.logits.as_ref().unwrap()).unwrap();
    let d_logits = max_diff(&logits, &g["logits"]);
    let taps = b.to_f32_vec(out.taps.as_ref().unwrap()).unwrap();
    let h = t.cfg.hidden_size;
    let (mut t0, mut t2) = (vec![], vec![]);
    for row in taps.chunks(2 * h) {
        t0.extend_from_slice(&row[..h]);
        t2.extend_from_slice(&row[h..]);
    }
    let d_h0 = max_diff(&t0, &g["hidden_states"]["0"]);
    let d_h2 = max_diff(&t2, &g["hidden_states"]["2"]);
    eprintln!(
        "tiny {variant}: max |diff| logits {d_logits:.2e}, layer 0 {d_h0:.2e}, layer 2 {d_h2:.2e}"
    );
    assert!(d_logits <= TOL && d_h0 <= TOL && d_h2 <= TOL);
    for run in g["greedy"].as_array().unwrap() {
        let prompt = as_u32s(&run["prompt_ids"]);
        let want = as_u32s(&run["new_tokens"]);
        let params = GenParams {
            max_new_tokens: want.len(),
            sampling: SamplingParams::greedy(),
            eos: vec![],
        };
        let base =
            baseline::generate(&t, &mut t.new_cache(), &prompt, &params, &mut Vec::new()).unwrap();
        assert_eq!(base.tokens, want, "greedy for {prompt:?}");
        // the model drafting for itself: every block verified across the 4-token window
        let mut d = DraftModel::new(load(&b, variant), t.cfg.vocab_size, 4).unwrap();
        d.truncate(0);
        let spec = SpecParams {
            max_draft: 4,
            confidence_threshold: 0.0,
            lookup: false,
        };
        let sp = decode::generate(
            &t,
            &mut t.new_cache(),
            &mut d,
            &prompt,
            &params,
            &spec,
            &mut Vec::new(),
        )
        .unwrap();
        assert_eq!(sp.tokens, want, "speculative greedy for {prompt:?}");
    }
}

/// The same checks on a tiny random Gemma 3 in HF form (`(1 + w)` norm weights stored as `w`,
/// query_pre_attn_scalar 24 instead of head_dim, sliding window 4).
#[test]
fn tiny_gemma3_matches_transformers() {
    on_backend!(matches_gemma3)
}

fn matches_gemma3<B: Backend>(b: B) {
    check_variant(&b, "gemma3");
}

/// Gemma-4-12B's own class, `gemma4_unified` (transformers 5.24), as `save_pretrained` writes
/// it: the text config under `text_config` (`gemma4_unified_text`, full layers' head size and kv
/// heads in `per_layer_config`, `use_bidirectional_attention: "vision"`, which leaves text
/// causal), weights under `model.language_model.` beside tiny vision and audio embedders.
#[test]
fn tiny_gemma4_unified_matches_transformers() {
    on_backend!(matches_unified)
}

fn matches_unified<B: Backend>(b: B) {
    check_variant(&b, "gemma4_unified");
}

/// The tiny Gemma 4 rewritten as a multimodal checkpoint (HF `Gemma4ForConditionalGeneration`
/// layout: config under `text_config`, weights under `model.language_model.`) loads the same
/// model: identical logits.
#[test]
fn nested_multimodal_layout_loads_the_same_text_model() {
    let b = dspark_engine::backend::candle::CandleBackend::cpu();
    let dir = std::env::temp_dir().join(format!("dspark-gemma4-nested-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = fixture("tiny/gemma4");
    let text: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    let outer = serde_json::json!({"model_type": "gemma4", "text_config": text});
    std::fs::write(dir.join("config.json"), outer.to_string()).unwrap();
    // safetensors: u64 header length, JSON header (names -> offsets), data: rename in the header
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let renamed: serde_json::Map<String, serde_json::Value> = header
        .into_iter()
        .map(|(k, v)| match k.strip_prefix("model.") {
            Some(rest) => (format!("model.language_model.{rest}"), v),
            None => (k, v),
        })
        .collect();
    let mut h = serde_json::to_vec(&renamed).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(dir.join("model.safetensors"), out).unwrap();

    let logits = |t: &Transformer<_>| {
        let ids = [12u32, 100, 200, 300, 400, 13];
        let o = t
            .forward(&ids, &mut t.new_cache(), &[], LogitsWanted::All)
            .unwrap();
        b.to_f32_vec(o.logits.as_ref().unwrap()).unwrap()
    };
    let ck = open_checkpoint(&dir).unwrap();
    assert_eq!(ck.cfg.arch.name(), "gemma4");
    let nested = Transformer::load(&b, ck.cfg, ck.source.as_ref()).unwrap();
    assert_eq!(logits(&nested), logits(&load(&b, "gemma4")));
    std::fs::remove_dir_all(&dir).ok();
}

//! The target models against HF transformers goldens on the tiny random checkpoints:
//! logits (all positions) within 1e-4 and tapped hidden states within 1e-4 or 2e-6 of the
//! row's largest value, whichever is larger, greedy tokens identical,
//! and KV-cache chunking/rollback giving the same logits as one full pass. Runs on the backend
//! of `DSPARK_BACKEND` (candle, MLX with the `mlx` feature, or candle on CUDA with the `cuda`
//! feature). On CUDA the suite computes in f32 with cuBLAS's TF32 path off, so the same bounds
//! apply: only the order of the sums differs, as between any two backends.

use dspark_engine::backend::Backend;
use dspark_engine::generate::{baseline, GenParams};
use dspark_engine::model::open_checkpoint;
use dspark_engine::model::transformer::{LogitsWanted, Transformer};
use dspark_engine::sampling::SamplingParams;
use dspark_tests::{as_f32_rows, as_u32s, fixture, golden, max_abs, max_abs_diff, on_backend};

const VARIANTS: [&str; 5] = ["qwen3", "qwen3-tied", "llama", "qwen3-bf16", "qwen3-mlx4"];
const TOL: f32 = 1e-4;
/// Hidden states grow with depth (|h| reaches 128 in qwen3-tied's layer 2, where 1e-4 is ~13
/// f32 ulps): each backend sums its dot products in its own order, so the bound there scales
/// with the row (2e-6 · max|h| is ~17 ulps of the largest element). Logits stay at 1e-4.
const TAP_REL_TOL: f32 = 2e-6;

fn load<B: Backend>(b: &B, variant: &str) -> Transformer<B> {
    let ck = open_checkpoint(&fixture(&format!("tiny/{variant}"))).unwrap();
    Transformer::load(b, ck.cfg, ck.source.as_ref()).unwrap()
}

#[test]
fn logits_and_taps_match_transformers() {
    on_backend!(logits_and_taps)
}

fn logits_and_taps<B: Backend>(b: B) {
    for variant in VARIANTS {
        let g = golden(&format!("tiny_{variant}.json"));
        let m = load(&b, variant);
        let ids = as_u32s(&g["prompt_ids"]);
        let want = as_f32_rows(&g["logits"]);
        let mut cache = m.new_cache();
        let out = m
            .forward(&ids, &mut cache, &[0, 2], LogitsWanted::All)
            .unwrap();
        let got = b.to_f32_vec(out.logits.as_ref().unwrap()).unwrap();
        let v = m.cfg.vocab_size;
        let logit_diffs: Vec<f32> = want
            .iter()
            .enumerate()
            .map(|(i, row)| max_abs_diff(&got[i * v..(i + 1) * v], row))
            .collect();
        let taps = b.to_f32_vec(out.taps.as_ref().unwrap()).unwrap();
        let h = m.cfg.hidden_size;
        // (layer, row, diff, tolerance)
        let mut tap_diffs = Vec::new();
        for (k, layer) in ["0", "2"].iter().enumerate() {
            let rows = as_f32_rows(&g["hidden_states"][layer]);
            for (i, row) in rows.iter().enumerate() {
                let start = i * 2 * h + k * h;
                let d = max_abs_diff(&taps[start..start + h], row);
                tap_diffs.push((*layer, i, d, TOL.max(TAP_REL_TOL * max_abs(row))));
            }
        }
        // the measured margins, for the record (`--nocapture`), before any assertion
        let worst_tap = tap_diffs.iter().fold(0f32, |m, t| m.max(t.2 / t.3));
        eprintln!(
            "{variant} on {} {}: max |logit diff| {:.3e} (bound {TOL:e}), worst tap diff/bound {worst_tap:.3}",
            b.name(),
            b.device_label(),
            logit_diffs.iter().fold(0f32, |m, d| m.max(*d)),
        );
        for (i, d) in logit_diffs.iter().enumerate() {
            assert!(*d < TOL, "{variant}: logits row {i} differs by {d}");
        }
        for (layer, i, d, tol) in tap_diffs {
            assert!(
                d < tol,
                "{variant}: hidden state of layer {layer} row {i} differs by {d} (tolerance {tol})"
            );
        }
    }
}

#[test]
fn greedy_tokens_match_transformers() {
    on_backend!(greedy_tokens)
}

fn greedy_tokens<B: Backend>(b: B) {
    for variant in VARIANTS {
        let g = golden(&format!("tiny_{variant}.json"));
        let m = load(&b, variant);
        for case in g["greedy"].as_array().unwrap() {
            let prompt = as_u32s(&case["prompt_ids"]);
            let want = as_u32s(&case["new_tokens"]);
            let params = GenParams {
                max_new_tokens: want.len(),
                sampling: SamplingParams::greedy(),
                eos: vec![],
            };
            let mut cache = m.new_cache();
            let mut sink = Vec::new();
            let r = baseline::generate(&m, &mut cache, &prompt, &params, &mut sink).unwrap();
            assert_eq!(r.tokens, want, "{variant}: greedy tokens for {prompt:?}");
            assert_eq!(sink, want);
            assert_eq!(r.finish_reason.as_str(), "length");
        }
    }
}

#[test]
fn chunked_prefill_and_rollback_reproduce_full_pass() {
    on_backend!(chunked_prefill_and_rollback)
}

fn chunked_prefill_and_rollback<B: Backend>(b: B) {
    let g = golden("tiny_qwen3.json");
    let m = load(&b, "qwen3");
    let ids = as_u32s(&g["prompt_ids"]);
    let want = as_f32_rows(&g["logits"]);
    let v = m.cfg.vocab_size;
    for split in [1, 5, 11] {
        let mut cache = m.new_cache();
        m.forward(&ids[..split], &mut cache, &[], LogitsWanted::None)
            .unwrap();
        let out = m
            .forward(&ids[split..], &mut cache, &[], LogitsWanted::All)
            .unwrap();
        let got = b.to_f32_vec(out.logits.as_ref().unwrap()).unwrap();
        for (j, row) in want[split..].iter().enumerate() {
            let d = max_abs_diff(&got[j * v..(j + 1) * v], row);
            assert!(d < TOL, "split {split}: row {} differs by {d}", split + j);
        }
        assert_eq!(cache.len(), ids.len());
    }
    // feed garbage after the prompt, roll it back, then continue: same as never having fed it
    let mut cache = m.new_cache();
    m.forward(&ids[..8], &mut cache, &[], LogitsWanted::None)
        .unwrap();
    m.forward(&[7, 7, 7, 7, 7, 7, 7], &mut cache, &[], LogitsWanted::None)
        .unwrap();
    cache.truncate(8);
    assert_eq!(cache.len(), 8);
    let out = m
        .forward(&ids[8..], &mut cache, &[], LogitsWanted::All)
        .unwrap();
    let got = b.to_f32_vec(out.logits.as_ref().unwrap()).unwrap();
    for (j, row) in want[8..].iter().enumerate() {
        let d = max_abs_diff(&got[j * v..(j + 1) * v], row);
        assert!(d < TOL, "after rollback: row {} differs by {d}", 8 + j);
    }
}

#[test]
fn bad_checkpoints_give_typed_errors() {
    on_backend!(bad_checkpoints)
}

fn bad_checkpoints<B: Backend>(b: B) {
    let dir = std::env::temp_dir().join(format!("dspark-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // missing directory
    let e = open_checkpoint(&dir.join("nope")).err().unwrap();
    assert!(e.to_string().contains("nope"), "{e}");
    // config without a required field
    let src = fixture("tiny/qwen3");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    cfg.as_object_mut().unwrap().remove("intermediate_size");
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let e = open_checkpoint(&dir).err().unwrap();
    assert!(e.to_string().contains("`intermediate_size`"), "{e}");
    // wrong hidden size: tensors no longer fit the config
    cfg["intermediate_size"] = serde_json::json!(96);
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let ck = open_checkpoint(&dir).unwrap();
    let e = Transformer::load(&b, ck.cfg, ck.source.as_ref())
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(
        msg.contains("mlp.gate_proj.weight") && msg.contains("shape"),
        "{msg}"
    );
    // truncated safetensors
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("model.safetensors"), &bytes[..bytes.len() / 2]).unwrap();
    cfg["intermediate_size"] = serde_json::json!(128);
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let e = open_checkpoint(&dir).err().unwrap();
    assert!(e.to_string().contains("model.safetensors"), "{e}");
    // unknown architecture
    cfg["model_type"] = serde_json::json!("mamba");
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let e = open_checkpoint(&dir).err().unwrap();
    assert!(
        e.to_string().contains("unsupported architecture `mamba`"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 1,500-token prompt against transformers' single full forward: the engine prefills it in
/// chunks of `PREFILL_CHUNK` (512) through the KV cache, at RoPE positions up to 1,515, so this
/// covers chunked prefill and long positions against an outside reference (sampled rows: every
/// 97th position and the last four), then the greedy continuation.
#[test]
fn long_prompt_matches_transformers() {
    on_backend!(long_prompt)
}

fn long_prompt<B: Backend>(b: B) {
    let g = golden("tiny_qwen3_long.json");
    let m = load(&b, "qwen3");
    let ids = as_u32s(&g["prompt_ids"]);
    assert_eq!(ids.len(), 1500);
    assert!(ids.len() > 2 * dspark_engine::model::transformer::PREFILL_CHUNK);
    let rows: Vec<usize> = as_u32s(&g["rows"]).iter().map(|&r| r as usize).collect();
    let mut cache = m.new_cache();
    let out = m
        .forward(&ids, &mut cache, &[0, 2], LogitsWanted::All)
        .unwrap();
    let logits = b.to_f32_vec(out.logits.as_ref().unwrap()).unwrap();
    let taps = b.to_f32_vec(out.taps.as_ref().unwrap()).unwrap();
    let (v, h) = (m.cfg.vocab_size, m.cfg.hidden_size);
    let want = as_f32_rows(&g["logits"]);
    let mut worst = (0.0f32, 0usize);
    for (row, &r) in want.iter().zip(&rows) {
        let d = max_abs_diff(&logits[r * v..(r + 1) * v], row);
        if d > worst.0 {
            worst = (d, r);
        }
        assert!(d < TOL, "logits at position {r}: max |diff| {d}");
    }
    for (k, layer) in ["0", "2"].iter().enumerate() {
        for (row, &r) in as_f32_rows(&g["hidden_states"][layer]).iter().zip(&rows) {
            let start = r * 2 * h + k * h;
            let d = max_abs_diff(&taps[start..start + h], row);
            let tol = TOL.max(TAP_REL_TOL * max_abs(row));
            assert!(d < tol, "layer {layer} output at position {r}: {d} > {tol}");
        }
    }
    eprintln!(
        "long prompt: worst logits diff {} at position {}",
        worst.0, worst.1
    );
    let want = as_u32s(&g["greedy_new_tokens"]);
    let params = GenParams {
        max_new_tokens: want.len(),
        sampling: SamplingParams::greedy(),
        eos: vec![],
    };
    let r = baseline::generate(&m, &mut m.new_cache(), &ids, &params, &mut Vec::new()).unwrap();
    assert_eq!(r.tokens, want, "greedy continuation of the long prompt");
}

#[test]
fn long_prompts_are_chunked_without_changing_results() {
    on_backend!(long_prompts_chunked)
}

fn long_prompts_chunked<B: Backend>(b: B) {
    let m = load(&b, "qwen3");
    let ids: Vec<u32> = (0..1100u32).map(|i| (i * 7919 + 13) % 512).collect();
    let mut one = m.new_cache();
    let a = m.forward(&ids, &mut one, &[1], LogitsWanted::All).unwrap();
    let mut two = m.new_cache();
    m.forward(&ids[..700], &mut two, &[1], LogitsWanted::None)
        .unwrap();
    let c = m
        .forward(&ids[700..], &mut two, &[1], LogitsWanted::All)
        .unwrap();
    let (la, lc) = (
        b.to_f32_vec(a.logits.as_ref().unwrap()).unwrap(),
        b.to_f32_vec(c.logits.as_ref().unwrap()).unwrap(),
    );
    let v = m.cfg.vocab_size;
    assert_eq!(la.len(), 1100 * v);
    assert!(max_abs_diff(&la[700 * v..], &lc) < TOL);
    let (ta, tc) = (
        b.to_f32_vec(a.taps.as_ref().unwrap()).unwrap(),
        b.to_f32_vec(c.taps.as_ref().unwrap()).unwrap(),
    );
    assert!(max_abs_diff(&ta[700 * 64..], &tc) < TOL);
    assert_eq!(one.len(), 1100);
}

/// bf16 compute on CUDA (what `dspark --device cuda` runs by default) against the same f32
/// goldens: every logits row and tapped hidden state within [`BF16_REL_TOL`] of the row's largest
/// |value|. bf16 keeps 8 significant bits (relative rounding 2^-9 = 0.2%), and the activations are
/// rounded after every op of every layer, so the bound is a few percent, not 1e-4. The measured
/// margins and the share of positions whose argmax agrees are printed (`--nocapture`). Runs on
/// CUDA whatever `DSPARK_BACKEND` says (the f32 suite above is the one that follows it).
#[cfg(feature = "cuda")]
const BF16_REL_TOL: f32 = 0.05;

#[cfg(feature = "cuda")]
#[test]
fn bf16_compute_on_cuda_tracks_transformers() {
    use dspark_engine::backend::DType;
    let b = dspark_tests::cuda_backend().with_dtype(DType::BF16);
    let argmax = |r: &[f32]| {
        r.iter()
            .enumerate()
            .fold((0, f32::MIN), |m, (i, &x)| if x > m.1 { (i, x) } else { m })
            .0
    };
    for variant in VARIANTS {
        let g = golden(&format!("tiny_{variant}.json"));
        let m = load(&b, variant);
        let ids = as_u32s(&g["prompt_ids"]);
        let want = as_f32_rows(&g["logits"]);
        let mut cache = m.new_cache();
        let out = m
            .forward(&ids, &mut cache, &[0, 2], LogitsWanted::All)
            .unwrap();
        let got = b.to_f32_vec(out.logits.as_ref().unwrap()).unwrap();
        let taps = b.to_f32_vec(out.taps.as_ref().unwrap()).unwrap();
        let (v, h) = (m.cfg.vocab_size, m.cfg.hidden_size);
        // (what, row, |diff| / max|want|)
        let mut rel = Vec::new();
        let mut agree = 0;
        for (i, row) in want.iter().enumerate() {
            let r = &got[i * v..(i + 1) * v];
            rel.push(("logits", i, max_abs_diff(r, row) / max_abs(row)));
            agree += usize::from(argmax(r) == argmax(row));
        }
        for (k, layer) in ["0", "2"].iter().enumerate() {
            for (i, row) in as_f32_rows(&g["hidden_states"][layer]).iter().enumerate() {
                let start = i * 2 * h + k * h;
                let d = max_abs_diff(&taps[start..start + h], row);
                rel.push((if k == 0 { "tap 0" } else { "tap 2" }, i, d / max_abs(row)));
            }
        }
        let worst = |what: &str| {
            rel.iter()
                .filter(|r| r.0 == what)
                .fold(0f32, |m, r| m.max(r.2))
        };
        eprintln!(
            "{variant} in bf16 on cuda: max |logit diff| / max|logit| {:.4}, taps {:.4} / {:.4} \
             (bound {BF16_REL_TOL}); argmax agrees at {agree}/{} positions",
            worst("logits"),
            worst("tap 0"),
            worst("tap 2"),
            want.len()
        );
        for (what, i, r) in rel {
            assert!(
                r < BF16_REL_TOL,
                "{variant} bf16: {what} row {i} differs by {r} of its largest value"
            );
        }
    }
}

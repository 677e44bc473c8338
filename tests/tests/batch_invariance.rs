//! Batch invariance of the candle CPU path (our kernels): a verify-sized forward of L tokens
//! gives bit-identical logits to L one-token decode steps over the same prefix. That makes
//! greedy speculative output equal the baseline by construction, not only where the top two
//! logits happen to be far apart. Covered: the five tiny variants (f32, bf16 weights kept bf16,
//! MLX 4-bit kept packed) and the real SmolLM2 GGUF both dequantized and kept quantized (Q4_1
//! blocks), with blocks of 1..=17 tokens after prompts of several lengths.

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::Backend;
use dspark_engine::load::load_model;
use dspark_engine::model::open_checkpoint;
use dspark_engine::model::transformer::{LogitsWanted, Transformer};
use dspark_tests::{artefact, fixture};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Prefills `prompt`, then compares one forward over `block` with `block.len()` single steps.
fn check<B: Backend>(b: &B, m: &Transformer<B>, label: &str, prompt: &[u32], block: &[u32]) {
    let v = m.cfg.vocab_size;
    let mut batched = m.new_cache();
    m.forward(prompt, &mut batched, &[], LogitsWanted::None)
        .unwrap();
    let all = m
        .forward(block, &mut batched, &[], LogitsWanted::All)
        .unwrap();
    let all = b.to_f32_vec(all.logits.as_ref().unwrap()).unwrap();
    let mut stepped = m.new_cache();
    m.forward(prompt, &mut stepped, &[], LogitsWanted::None)
        .unwrap();
    for (i, &t) in block.iter().enumerate() {
        let one = m
            .forward(&[t], &mut stepped, &[], LogitsWanted::Last)
            .unwrap();
        let one = b.to_f32_vec(one.logits.as_ref().unwrap()).unwrap();
        assert!(
            one.iter().all(|x| x.is_finite()),
            "{label}: non-finite logits"
        );
        assert_eq!(
            bits(&one),
            bits(&all[i * v..(i + 1) * v]),
            "{label}: prompt {} + block of {}: row {i} differs from its one-token step",
            prompt.len(),
            block.len()
        );
    }
}

fn ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % vocab as u64) as u32
        })
        .collect()
}

#[test]
fn verify_blocks_equal_decode_steps_bit_for_bit_on_tiny_models() {
    let b = CandleBackend::cpu();
    for variant in ["qwen3", "qwen3-tied", "llama", "qwen3-bf16", "qwen3-mlx4"] {
        let ck = open_checkpoint(&fixture(&format!("tiny/{variant}"))).unwrap();
        let m = Transformer::load(&b, ck.cfg, ck.source.as_ref()).unwrap();
        let vocab = m.cfg.vocab_size;
        for (p, l) in [(1usize, 1usize), (5, 8), (12, 17), (40, 5)] {
            let prompt = ids(p, vocab, (p * 31 + l) as u64);
            let block = ids(l, vocab, (p * 7 + l * 3) as u64);
            check(&b, &m, variant, &prompt, &block);
        }
    }
}

#[test]
fn verify_blocks_equal_decode_steps_bit_for_bit_on_smollm2() {
    let path = artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    for (label, b) in [
        ("smollm2 f32", CandleBackend::cpu()),
        (
            "smollm2 q4_1 kept",
            CandleBackend::cpu().keep_quantized(true),
        ),
    ] {
        let lm = load_model(&b, &path, None).unwrap();
        let m = &lm.model;
        let prompt = lm
            .tokenizer
            .encode("The quick brown fox jumps over the lazy dog because", false)
            .unwrap();
        let block = ids(9, m.cfg.vocab_size, 5);
        check(&b, m, label, &prompt, &block);
    }
}

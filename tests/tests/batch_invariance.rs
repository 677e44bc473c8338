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
    for (b, variant) in ["qwen3", "qwen3-tied", "llama", "qwen3-bf16", "qwen3-mlx4"]
        .into_iter()
        .map(|v| (CandleBackend::cpu(), v))
        // dense f32 and bf16 weights as bf16 tiles (f32 on CPUs without AMX or AVX-512 BF16)
        .chain(["qwen3", "qwen3-bf16"].map(|v| (CandleBackend::cpu().with_bf16_matmul(true), v)))
    {
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
        // Q4_1 blocks rebuilt into bf16 tiles (f32 on CPUs without AMX or AVX-512 BF16)
        (
            "smollm2 bf16 tiles",
            CandleBackend::cpu().with_bf16_matmul(true),
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

/// The same contract on a GPU with our CUDA kernels (`backend/cuda/`): blocks of up to 16
/// tokens (the few-row GEMM's limit; DFlash b16's verify block) against one-token steps, in
/// f32 (CUDA cores) and bf16 (tensor cores). Runs with the `cuda` feature on a CUDA device.
#[cfg(feature = "cuda")]
#[test]
fn cuda_verify_blocks_equal_decode_steps_bit_for_bit() {
    use dspark_engine::backend::DType;
    for dtype in [DType::F32, DType::BF16] {
        let b = CandleBackend::cuda(0)
            .unwrap_or_else(|e| panic!("cuda:0: {e}"))
            .with_dtype(dtype);
        for variant in ["qwen3", "qwen3-tied", "llama"] {
            let ck = open_checkpoint(&fixture(&format!("tiny/{variant}"))).unwrap();
            let m = Transformer::load(&b, ck.cfg, ck.source.as_ref()).unwrap();
            let vocab = m.cfg.vocab_size;
            for (p, l) in [(1usize, 1usize), (5, 8), (12, 16), (40, 5), (300, 16)] {
                let prompt = ids(p, vocab, (p * 31 + l) as u64);
                let block = ids(l, vocab, (p * 7 + l * 3) as u64);
                check(&b, &m, &format!("{variant} {dtype:?}"), &prompt, &block);
            }
        }
    }
}

/// The same contract for the bf16 tensor-core attention (heads of 64 and 128, which the tiny
/// fixtures' 16 do not reach), at contexts where its launch forms change: up to 16 key splits
/// of 128 keys it runs as clusters that merge their splits themselves, past that as split
/// blocks and a combine launch, and the K/V loads before the PDL wait depend on the split count
/// and rows. A block that crosses 2048 keys (16 -> 17 splits) has rows of both forms, so its
/// rows equal the decode steps only if both forms give the same bits.
#[cfg(feature = "cuda")]
#[test]
fn cuda_tensor_core_attention_blocks_equal_decode_steps() {
    use dspark_engine::backend::DType;
    use dspark_engine::testing::{random_target, RandomSpec};
    let b = CandleBackend::cuda(0)
        .unwrap_or_else(|e| panic!("cuda:0: {e}"))
        .with_dtype(DType::BF16);
    for (k, head_dim) in [64usize, 128].into_iter().enumerate() {
        let spec = RandomSpec {
            hidden: 256,
            intermediate: 256,
            layers: 2,
            heads: 8,
            kv_heads: 2,
            head_dim,
            max_positions: 4096,
            ..RandomSpec::tiny(512)
        };
        let (_, src) = random_target(&spec, 70 + k as u64);
        let m = Transformer::load(&b, spec.config(), &src).unwrap();
        for (p, l) in [
            (1usize, 1usize),
            (5, 8),
            (120, 16),
            (1020, 16),
            (2040, 16),
            (2100, 5),
        ] {
            let prompt = ids(p, spec.vocab, (p * 13 + l) as u64);
            let block = ids(l, spec.vocab, (p * 5 + l * 7) as u64);
            check(&b, &m, &format!("bf16 head {head_dim}"), &prompt, &block);
        }
    }
}

/// The device argmax the greedy loops use on CUDA picks what `sampling::argmax` picks on the
/// host: the first index among ties, never a NaN, 0 for a row of -inf; in f32 and in bf16
/// (where ties between nearby logits are common).
#[cfg(feature = "cuda")]
#[test]
fn cuda_device_argmax_follows_the_host_rule() {
    use dspark_engine::backend::DType;
    use dspark_engine::sampling::argmax;
    let n = 5000;
    let mut rows: Vec<Vec<f32>> = Vec::new();
    let mut s = 7u64;
    for r in 0..24 {
        let mut row: Vec<f32> = (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // coarse values: many exact ties, also after rounding to bf16
                ((s >> 40) % 64) as f32 * 0.25 - 8.0
            })
            .collect();
        match r % 4 {
            1 => row[n - 1] = f32::NAN,
            2 => row.iter_mut().for_each(|v| *v = f32::NEG_INFINITY),
            3 => row[r * 13] = f32::NAN,
            _ => {}
        }
        rows.push(row);
    }
    for dtype in [DType::F32, DType::BF16] {
        let b = CandleBackend::cuda(0)
            .unwrap_or_else(|e| panic!("cuda:0: {e}"))
            .with_dtype(dtype);
        assert!(b.device_argmax(), "our CUDA kernels are on by default");
        let flat: Vec<f32> = rows.concat();
        let t = b.from_f32(&flat, &[1, rows.len(), n]).unwrap();
        // the host rule on exactly the values the device holds
        let held = b.to_f32_vec(&t).unwrap();
        let want: Vec<u32> = held.chunks_exact(n).map(argmax).collect();
        let got = b.to_u32_vec(&b.argmax_last(&t).unwrap()).unwrap();
        assert_eq!(got, want, "{dtype:?}");
    }
}

/// DSpark's greedy chain fused on the device (`markov.cuh`, one launch a row) gives the ids of
/// the ops one by one that `drafters/dspark.rs` runs without it (gather of `w1[prev]`, the
/// `[vocab, rank]` GEMM, casts to f32, add, argmax): vocabularies that end inside a column tile,
/// ranks whose rows are not 16-byte multiples, bf16 and f32 logits, coarse values with many
/// ties after the add, NaN entries and rows of -inf (whose id 0 the next row's bias reads). A
/// weight shape whose GEMM splits K is left to the ops (`None`).
#[cfg(feature = "cuda")]
#[test]
fn cuda_markov_chain_fused_equals_the_ops() {
    use dspark_engine::backend::DType;
    use dspark_engine::weights::HostTensor;
    let b = CandleBackend::cuda(0)
        .unwrap_or_else(|e| panic!("cuda:0: {e}"))
        .with_dtype(DType::BF16);
    let mut s = 11u64;
    let mut coarse = |steps: u64, unit: f32| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) % steps) as f32 * unit - (steps / 2) as f32 * unit
    };
    let cases = [
        (1000usize, 16usize, 7usize, false),
        (5003, 64, 7, true),
        (20000, 40, 5, false),
        (49152, 16, 16, true),
        (151936, 256, 7, false),
    ];
    for (case, &(vocab, rank, n, f32_logits)) in cases.iter().enumerate() {
        // case 1: w1 longer than the vocabulary, the pending token past it (a draft
        // vocabulary's extended table: subset rows, then the whole w1)
        let v1 = vocab + if case == 1 { 700 } else { 0 };
        let w1: Vec<f32> = (0..v1 * rank).map(|_| coarse(16, 0.125)).collect();
        let w2: Vec<f32> = (0..vocab * rank).map(|_| coarse(8, 0.0625)).collect();
        let mut logits: Vec<f32> = (0..n * vocab).map(|_| coarse(32, 0.25)).collect();
        logits[vocab + 3] = f32::NAN;
        logits[2 * vocab..3 * vocab].fill(f32::NEG_INFINITY);
        logits[4 * vocab + 1] = f32::NAN;
        let w1 = b.from_f32(&w1, &[v1, rank]).unwrap();
        let w2 = b
            .linear(&HostTensor::from_f32(vec![vocab, rank], &w2))
            .unwrap();
        let mut logits = b.from_f32(&logits, &[1, n, vocab]).unwrap();
        if f32_logits {
            logits = b.to_dtype(&logits, DType::F32).unwrap();
        }
        let pending = if v1 > vocab {
            (vocab + 123) as u32
        } else {
            (case * 997 % vocab) as u32
        };
        let mut want = Vec::new();
        let mut prev = pending;
        for i in 0..n {
            let row = b
                .to_dtype(&b.narrow(&logits, 1, i, 1).unwrap(), DType::F32)
                .unwrap();
            let e = b.embedding_ids(&w1, &[prev], &[1]).unwrap();
            let bias = b
                .reshape(&b.matmul(&e, &w2).unwrap(), &[1, 1, vocab])
                .unwrap();
            let sum = b
                .add(&row, &b.to_dtype(&bias, DType::F32).unwrap())
                .unwrap();
            prev = b.to_u32_vec(&b.argmax_last(&sum).unwrap()).unwrap()[0];
            want.push(prev);
        }
        assert_eq!(want[2], 0, "case {case}: a row of -inf gives id 0");
        let got = b
            .markov_greedy(&logits, &w1, &w2, pending, n)
            .unwrap()
            .unwrap_or_else(|| panic!("case {case}: the fused chain takes {vocab} x {rank}"));
        assert_eq!(b.to_u32_vec(&got).unwrap(), want, "case {case}");
    }
    // o / down-shaped: K split over blocks, not fused
    let w2 = b
        .linear(&HostTensor::from_f32(
            vec![4096, 2048],
            &vec![0.0; 4096 * 2048],
        ))
        .unwrap();
    let w1 = b.from_f32(&vec![0.0; 4096 * 2048], &[4096, 2048]).unwrap();
    let logits = b.from_f32(&vec![0.0; 4096], &[1, 1, 4096]).unwrap();
    assert!(b.markov_greedy(&logits, &w1, &w2, 0, 1).unwrap().is_none());
}

/// One script of forwards on `m` (prefill, decode steps across the cache's growth, rollbacks,
/// verify-sized blocks with and without taps and logits): every output, as bits.
fn script<B: Backend>(b: &B, m: &Transformer<B>, prompt: &[u32]) -> Vec<Vec<u32>> {
    script_to(b, m, prompt, 150)
}

/// [`script`], with decode steps up to `upto` positions.
fn script_to<B: Backend>(b: &B, m: &Transformer<B>, prompt: &[u32], upto: usize) -> Vec<Vec<u32>> {
    let vocab = m.cfg.vocab_size;
    let taps = [0usize, 1];
    let mut cache = m.new_cache();
    let mut outs = Vec::new();
    let mut keep = |o: dspark_engine::model::transformer::ForwardOut<B>| {
        for t in [o.logits, o.taps].into_iter().flatten() {
            outs.push(bits(&b.to_f32_vec(&t).unwrap()));
        }
    };
    keep(
        m.forward(prompt, &mut cache, &[], LogitsWanted::Last)
            .unwrap(),
    );
    // decode steps: the cache doubles at 64 and 128 positions
    let steps = ids(upto.saturating_sub(prompt.len()), vocab, 11);
    for &t in &steps {
        keep(
            m.forward(&[t], &mut cache, &[], LogitsWanted::Last)
                .unwrap(),
        );
    }
    // verify-sized blocks, rolled back to different lengths in between
    for (i, n) in (1..=16usize).chain([16, 3, 16, 1]).enumerate() {
        let block = ids(n, vocab, 100 + i as u64);
        let back = cache.len() - (i % 5) * 3;
        cache.truncate(back);
        let want = [LogitsWanted::All, LogitsWanted::Last, LogitsWanted::None][i % 3];
        let t: &[usize] = if i % 2 == 0 { &taps } else { &[] };
        keep(m.forward(&block, &mut cache, t, want).unwrap());
        cache.truncate(back + 1 + i % 4);
    }
    outs
}

/// The real SmolLM2 GGUF (Q4_1 layers, a Q8_0 tied embedding) loaded dequantized, held packed
/// and run by the exact kernel (`backend/cpu/qexact.rs`, the default on AVX-512 CPUs) gives
/// every output of the dense f32 copy's forwards bit for bit: prefill, 150 decode steps,
/// verify blocks of 1..=16 rows with and without taps, rollbacks. Embedding rows come from the
/// packed table too. Where the CPU lacks the kernel, both loads are dense and this says so.
/// With `DSPARK_GEMV_AVX512=0` both loads run what AVX2-only CPUs run (the exact kernel's
/// scratch form, and the blocked GEMM on rebuilt weights for the 70-row prefill).
#[test]
fn exact_packed_smollm2_gives_the_dense_copys_bits() {
    let path = artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let dense = CandleBackend::cpu().with_exact_packed(false);
    let packed = CandleBackend::cpu().with_exact_packed(true);
    let a = load_model(&dense, &path, None).unwrap();
    let b = load_model(&packed, &path, None).unwrap();
    let report = b.load_report.as_ref().unwrap().summary();
    if !dspark_engine::backend::cpu::qexact::available() {
        eprintln!("skipped: this CPU has no exact packed kernel (loads: {report})");
        return;
    }
    assert!(
        report.contains("packed Q4_1, exact F32") && report.contains("packed Q8_0, exact F32"),
        "{report}"
    );
    let (held_a, held_b) = (
        a.load_report.as_ref().unwrap().held_bytes(),
        b.load_report.as_ref().unwrap().held_bytes(),
    );
    assert!(
        held_b * 4 < held_a,
        "packed {held_b} vs dense {held_a} bytes"
    );
    // two short prompts, and a 70-token one: a prefill past the AVX2 tiles' 32 rows (the
    // blocked GEMM on rebuilt weights there) and past a 64-row block
    let long = ids(70, a.model.cfg.vocab_size, 7);
    let texts = ["The quick brown fox", "def fib(n):\n    \"\"\"Return", ""];
    for text in texts {
        let prompt = if text.is_empty() {
            long.clone()
        } else {
            a.tokenizer.encode(text, false).unwrap()
        };
        let (x, y) = (
            script(&dense, &a.model, &prompt),
            script(&packed, &b.model, &prompt),
        );
        assert_eq!(x.len(), y.len(), "output count");
        for (i, (x, y)) in x.iter().zip(&y).enumerate() {
            assert!(x == y, "{text:?}: output {i} differs");
        }
    }
}

/// The same for the real Gemma-3-270M Q4_K_M GGUF, whose Q4_K, Q5_0, Q6_K (a scale per 16)
/// and Q8_0 tensors are all held packed: a 70-token prefill, 20 decode steps, the verify
/// blocks.
#[test]
fn exact_packed_gemma3_gives_the_dense_copys_bits() {
    let path = artefact("gemma3-270m/gemma-3-270m-q4_k_m.gguf");
    if !dspark_engine::backend::cpu::qexact::available() {
        eprintln!("skipped: this CPU has no exact packed kernel");
        return;
    }
    let dense = CandleBackend::cpu().with_exact_packed(false);
    let packed = CandleBackend::cpu().with_exact_packed(true);
    let a = load_model(&dense, &path, None).unwrap();
    let b = load_model(&packed, &path, None).unwrap();
    let report = b.load_report.as_ref().unwrap().summary();
    for fmt in ["Q4K", "Q5_0", "Q6K", "Q8_0"] {
        assert!(
            report.contains(&format!("packed {fmt}, exact F32")),
            "{report}"
        );
    }
    let prompt = ids(70, a.model.cfg.vocab_size, 5);
    let (x, y) = (
        script_to(&dense, &a.model, &prompt, 90),
        script_to(&packed, &b.model, &prompt, 90),
    );
    assert_eq!(x.len(), y.len(), "output count");
    for (i, (x, y)) in x.iter().zip(&y).enumerate() {
        assert!(x == y, "output {i} differs");
    }
}

/// The model's fixed-shape step path ([`Backend::run_step`], with the cache's room reserved
/// first) gives the plain forwards' bits. On the CPU it has no graphs, so this covers the
/// model's side of it: the reservation, the step keys and the outputs' order.
#[test]
fn step_path_gives_the_plain_forwards_bits_on_the_cpu() {
    let plain = CandleBackend::cpu();
    let steps = CandleBackend::cpu().with_step_graphs(true);
    assert_eq!(plain.step_graph_rows(), 0);
    assert_eq!(steps.step_graph_rows(), 16);
    for variant in ["qwen3", "llama"] {
        let ck = open_checkpoint(&fixture(&format!("tiny/{variant}"))).unwrap();
        let a = Transformer::load(&plain, ck.cfg.clone(), ck.source.as_ref()).unwrap();
        let b = Transformer::load(&steps, ck.cfg, ck.source.as_ref()).unwrap();
        for p in [3usize, 20] {
            let prompt = ids(p, a.cfg.vocab_size, p as u64);
            let (x, y) = (script(&plain, &a, &prompt), script(&steps, &b, &prompt));
            assert_eq!(x.len(), y.len(), "{variant}: output count");
            for (i, (x, y)) in x.iter().zip(&y).enumerate() {
                assert!(x == y, "{variant}, prompt {p}: output {i} differs");
            }
        }
    }
}

/// On a GPU the steps are captured once as CUDA graphs and replayed with new ids and positions
/// (`backend/cuda/graph.rs`): every replayed output has the bits of the same forward run op by
/// op (`with_step_graphs(false)`), in f32 and bf16, across cache growth (new graphs over the
/// new buffers), rollbacks (replays at earlier positions) and all block sizes up to 16. Heads
/// of 64 and 128 (what the one-launch attention inputs take; the tiny fixtures' heads of 16
/// run op by op, uncaptured).
#[cfg(feature = "cuda")]
#[test]
fn cuda_step_graphs_replay_the_eager_bits() {
    use dspark_engine::backend::DType;
    use dspark_engine::testing::{random_target, RandomSpec};
    let specs = [
        RandomSpec {
            hidden: 128,
            intermediate: 256,
            layers: 2,
            heads: 2,
            kv_heads: 1,
            head_dim: 64,
            ..RandomSpec::tiny(512)
        },
        RandomSpec {
            hidden: 256,
            intermediate: 256,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 128,
            tie: true,
            ..RandomSpec::tiny(512)
        },
    ];
    for dtype in [DType::F32, DType::BF16] {
        let eager = CandleBackend::cuda(0)
            .unwrap_or_else(|e| panic!("cuda:0: {e}"))
            .with_dtype(dtype)
            .with_step_graphs(false);
        let graphs = CandleBackend::cuda(0)
            .unwrap()
            .with_dtype(dtype)
            .with_step_graphs(true);
        assert_eq!(
            graphs.step_graph_rows(),
            16,
            "graphs are on with our kernels"
        );
        for (k, spec) in specs.iter().enumerate() {
            let (_, src) = random_target(spec, 90 + k as u64);
            let a = Transformer::load(&eager, spec.config(), &src).unwrap();
            let b = Transformer::load(&graphs, spec.config(), &src).unwrap();
            for p in [3usize, 40] {
                let prompt = ids(p, spec.vocab, p as u64 + 7);
                let (x, y) = (script(&eager, &a, &prompt), script(&graphs, &b, &prompt));
                assert_eq!(
                    x.len(),
                    y.len(),
                    "head {} {dtype:?}: output count",
                    spec.head_dim
                );
                for (i, (x, y)) in x.iter().zip(&y).enumerate() {
                    assert!(
                        x == y,
                        "head {} {dtype:?}, prompt {p}: output {i} differs",
                        spec.head_dim
                    );
                }
            }
        }
        // the replays really happened: every step shape captured, none fell back
        let (on, off) = (graphs.step_graph_stats(), eager.step_graph_stats());
        eprintln!("{dtype:?}: graphs {on:?}");
        assert_eq!(on.failed, 0, "{dtype:?}: {on:?}");
        assert!(on.captured >= 40 && on.replayed >= 400, "{dtype:?}: {on:?}");
        assert_eq!(off.captured + off.replayed + off.failed, 0, "{dtype:?}");
    }
}

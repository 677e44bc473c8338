//! Quantized matmuls on the demo's real tensors (SmolLM2-135M GGUF): every weight of the
//! first two layers and the token embedding (the LM head), run kept quantized by our CPU
//! kernels, must equal the matmul with the same weights dequantized to f32 within the bound
//! that 8-bit activation rounding allows: Σ_blocks Σ_i |w_i| · max|x_block| / 254, plus 1e-5
//! relative f32 slop. Also checks that a verify-sized batch gives the same bits per row as a
//! one-row call (batch invariance) on the real weights, and that a drafter's head over exactly
//! packed weights runs the 8-bit kernel within the same bound.

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::Backend;
use dspark_engine::weights::gguf::GgufSource;
use dspark_engine::weights::WeightSource;
use dspark_tests::artefact;

fn rng(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
}

/// How far 8-bit activation rounding may move the dot product of `x` and `w`:
/// Σ_blocks Σ_i |w_i| · max|x_block| / 254.
fn rounding_bound(x: &[f32], w: &[f32]) -> f64 {
    x.chunks(32)
        .zip(w.chunks(32))
        .map(|(xb, wb)| {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
            wb.iter().map(|v| v.abs() as f64).sum::<f64>() * amax / 254.0
        })
        .sum()
}

/// `got` (8-bit activations) against `want` (the f32 product) for rows `x[m, k]` and the
/// weight `w[n, k]`, on about a hundred sampled columns (the embedding has 49152 rows): within
/// [`rounding_bound`] plus 1e-5 relative f32 slop, never NaN.
fn within_rounding(name: &str, x: &[f32], w: &[f32], got: &[f32], want: &[f32], k: usize) {
    let n = w.len() / k;
    for (r, xr) in x.chunks(k).enumerate() {
        for j in (0..n).step_by((n / 97).max(1)) {
            let bound = rounding_bound(xr, &w[j * k..(j + 1) * k]);
            let (q, d) = (got[r * n + j] as f64, want[r * n + j] as f64);
            assert!(!q.is_nan() && !d.is_nan(), "{name}: NaN");
            let tol = bound + 1e-5 * (1.0 + d.abs());
            assert!(
                (q - d).abs() <= tol,
                "{name} [{r},{j}]: 8-bit {q} vs f32 {d} (bound {tol})"
            );
        }
    }
}

#[test]
fn quantized_matmul_on_real_tensors_is_within_the_activation_rounding_bound() {
    let src = GgufSource::open(&artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let quant = CandleBackend::cpu().keep_quantized(true);
    let dense = CandleBackend::cpu();
    let mut names = vec!["model.embed_tokens.weight".to_string()];
    for l in 0..2 {
        for m in [
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ] {
            names.push(format!("model.layers.{l}.{m}.weight"));
        }
    }
    let mut seed = 1;
    let mut checked = 0;
    for name in &names {
        let host = src.get(name).unwrap();
        let shape = host.shape();
        let (n, k) = (shape[0], shape[1]);
        let w = host.to_f32().unwrap();
        let (wq, wd) = (quant.linear(&host).unwrap(), dense.linear(&host).unwrap());
        for m in [1usize, 5] {
            let x: Vec<f32> = (0..m * k).map(|_| rng(&mut seed)).collect();
            let xq = quant.from_f32(&x, &[1, m, k]).unwrap();
            let yq = quant.to_f32_vec(&quant.matmul(&xq, &wq).unwrap()).unwrap();
            let yd = dense.to_f32_vec(&dense.matmul(&xq, &wd).unwrap()).unwrap();
            within_rounding(name, &x, &w, &yq, &yd, k);
            if m == 5 {
                // batch invariance: row 3 alone gives the same bits as in the batch of 5
                let x1 = quant.from_f32(&x[3 * k..4 * k], &[1, 1, k]).unwrap();
                let y1 = quant.to_f32_vec(&quant.matmul(&x1, &wq).unwrap()).unwrap();
                assert_eq!(y1[..], yq[3 * n..4 * n], "{name}: row 3 differs alone");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 2 * names.len());
}

/// A tied, packed embedding table serves rows bit-identical to its dense (dequantized) copy,
/// so keeping it packed changes no embedding; ids past the table are an error, not a panic.
#[test]
fn packed_embedding_rows_equal_the_dense_table() {
    let src = GgufSource::open(&artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let quant = CandleBackend::cpu().keep_quantized(true);
    let host = src.get("model.embed_tokens.weight").unwrap();
    let (v, h) = (host.shape()[0], host.shape()[1]);
    let packed = quant.linear(&host).unwrap();
    assert!(quant.has_rows(&packed));
    let dense = host.to_f32().unwrap();
    let ids = [0u32, 1, 2, 17, 4096, (v - 1) as u32];
    let rows = quant
        .to_f32_vec(&quant.gather_rows(&packed, &ids).unwrap())
        .unwrap();
    for (i, &id) in ids.iter().enumerate() {
        let want = &dense[id as usize * h..(id as usize + 1) * h];
        assert_eq!(&rows[i * h..(i + 1) * h], want, "row {id}");
    }
    assert!(quant.gather_rows(&packed, &[v as u32]).is_err());
}

/// A drafter's head over exactly packed weights (`Backend::draft_matmul`) runs the 8-bit-
/// activation kernel: within the activation-rounding bound of the exact product, and not its
/// bits; `with_exact_drafts` gives exactly `matmul`'s bits. Real tensors: the tied head (Q8_0)
/// and a Q4_1 projection.
#[test]
fn draft_head_on_exactly_packed_weights_runs_the_8bit_kernel() {
    let src = GgufSource::open(&artefact("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let fast = CandleBackend::cpu().with_exact_drafts(false);
    let exact = CandleBackend::cpu().with_exact_drafts(true);
    let mut seed = 7;
    for name in [
        "model.embed_tokens.weight",
        "model.layers.3.mlp.up_proj.weight",
    ] {
        let host = src.get(name).unwrap();
        let k = host.shape()[1];
        let w = host.to_f32().unwrap();
        let (wf, we) = (fast.linear(&host).unwrap(), exact.linear(&host).unwrap());
        for m in [1usize, 3] {
            let x: Vec<f32> = (0..m * k).map(|_| rng(&mut seed)).collect();
            let xt = fast.from_f32(&x, &[1, m, k]).unwrap();
            let full = exact.to_f32_vec(&exact.matmul(&xt, &we).unwrap()).unwrap();
            let same = exact
                .to_f32_vec(&exact.draft_matmul(&xt, &we).unwrap())
                .unwrap();
            assert_eq!(same, full, "{name}: exact drafts are matmul's bits");
            let drafted = fast
                .to_f32_vec(&fast.draft_matmul(&xt, &wf).unwrap())
                .unwrap();
            if !fast.holds_gguf_exact_packed() {
                // no exact kernel on this CPU: the weights are a dense copy, drafts use it
                assert_eq!(drafted, full, "{name}: dense drafts");
                continue;
            }
            assert_ne!(drafted, full, "{name}: the 8-bit kernel ran");
            within_rounding(name, &x, &w, &drafted, &full, k);
        }
    }
}

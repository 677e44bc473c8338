//! Op-by-op agreement of [`MlxBackend`] with the candle reference backend on random inputs.
//! An integration test of the engine (not a unit test) so that CI's MLX step builds only the
//! engine and the shared suite, not the lib tests of every workspace crate.
#![cfg(feature = "mlx")]

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::mlx::{MlxBackend, MlxLinear};
use dspark_engine::backend::{AttnMask, Backend, DType, RopeSpec, RopeStyle};
use dspark_engine::weights::mlx_quant::MlxQuantized;
use dspark_engine::weights::HostTensor;
use mlx_rs::{Array, Dtype};
use rand::{Rng, SeedableRng};

struct Pair {
    m: MlxBackend,
    c: CandleBackend,
    rng: rand_chacha::ChaCha8Rng,
}

impl Pair {
    fn new(seed: u64) -> Self {
        Pair {
            m: MlxBackend::cpu(),
            c: CandleBackend::cpu(),
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
        }
    }

    fn randn(&mut self, shape: &[usize]) -> (Vec<f32>, Array, candle_core::Tensor) {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| self.rng.random_range(-2.0f32..2.0))
            .collect();
        (
            v.clone(),
            self.m.from_f32(&v, shape).unwrap(),
            self.c.from_f32(&v, shape).unwrap(),
        )
    }

    fn close(&self, a: &Array, b: &candle_core::Tensor, tol: f32) {
        assert_eq!(self.m.dims(a), self.c.dims(b), "shapes differ");
        let x = self.m.to_f32_vec(a).unwrap();
        let y = self.c.to_f32_vec(b).unwrap();
        let d = x
            .iter()
            .zip(&y)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f32::max);
        assert!(d <= tol, "max |mlx - candle| = {d} > {tol}");
    }
}

#[test]
fn matmul_runs() {
    let a = Array::from_slice(&[1f32, 2., 3., 4.], &[2, 2]);
    let c = a.matmul(&a).unwrap();
    c.eval().unwrap();
    assert_eq!(c.as_slice::<f32>(), &[7., 10., 15., 22.]);
}

#[test]
fn dense_and_quantized_matmul_match_candle() {
    let mut p = Pair::new(1);
    let (_, xm, xc) = p.randn(&[1, 3, 64]);
    let (w, _, _) = p.randn(&[16, 64]);
    let host = HostTensor::from_f32(vec![16, 64], &w);
    p.close(
        &p.m.matmul(&xm, &p.m.linear(&host).unwrap()).unwrap(),
        &p.c.matmul(&xc, &p.c.linear(&host).unwrap()).unwrap(),
        1e-5,
    );
    for bits in [4usize, 8] {
        let words = 64 * bits / 32;
        let packed: Vec<u32> = (0..16 * words).map(|_| p.rng.random()).collect();
        let sc: Vec<f32> = (0..32).map(|_| p.rng.random_range(0.01f32..0.1)).collect();
        let bi: Vec<f32> = (0..32).map(|_| p.rng.random_range(-0.5f32..0.5)).collect();
        let bytes = |v: &[f32]| {
            v.iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>()
                .into()
        };
        let q = HostTensor::MlxQuant(MlxQuantized {
            out_features: 16,
            in_features: 64,
            bits,
            group_size: 32,
            packed: packed.into(),
            scales: (DType::F32, bytes(&sc)),
            biases: (DType::F32, bytes(&bi)),
        });
        let lm = p.m.linear(&q).unwrap();
        assert!(
            matches!(lm, MlxLinear::Quant { .. }),
            "MLX-quantized weights stay quantized"
        );
        p.close(
            &p.m.matmul(&xm, &lm).unwrap(),
            &p.c.matmul(&xc, &p.c.linear(&q).unwrap()).unwrap(),
            1e-4,
        );
        p.close(&p.m.tensor(&q).unwrap(), &p.c.tensor(&q).unwrap(), 1e-6);
    }
}

#[test]
fn norm_rope_and_activations_match_candle() {
    let mut p = Pair::new(2);
    let (_, xm, xc) = p.randn(&[1, 4, 5, 16]);
    let (_, wm, wc) = p.randn(&[16]);
    p.close(
        &p.m.rms_norm(&xm, &wm, 1e-6).unwrap(),
        &p.c.rms_norm(&xc, &wc, 1e-6).unwrap(),
        1e-5,
    );
    for style in [RopeStyle::Half, RopeStyle::Interleaved] {
        let spec = RopeSpec::default_theta(10000.0, 16, style);
        let (rm, rc) = (
            p.m.rope_prepare(&spec, 64).unwrap(),
            p.c.rope_prepare(&spec, 64).unwrap(),
        );
        for start in [0, 7, 40] {
            p.close(
                &p.m.rope(&xm, &rm, start).unwrap(),
                &p.c.rope(&xc, &rc, start).unwrap(),
                2e-5,
            );
        }
        assert!(p.m.rope(&xm, &rm, 60).is_err());
    }
    p.close(&p.m.silu(&xm).unwrap(), &p.c.silu(&xc).unwrap(), 1e-6);
    p.close(
        &p.m.gelu_tanh(&xm).unwrap(),
        &p.c.gelu_tanh(&xc).unwrap(),
        1e-5,
    );
    p.close(&p.m.sigmoid(&xm).unwrap(), &p.c.sigmoid(&xc).unwrap(), 1e-6);
    p.close(
        &p.m.softcap(&xm, 1.5).unwrap(),
        &p.c.softcap(&xc, 1.5).unwrap(),
        1e-6,
    );
    p.close(
        &p.m.softmax_last(&xm).unwrap(),
        &p.c.softmax_last(&xc).unwrap(),
        1e-6,
    );
    p.close(
        &p.m.scale(&xm, 0.3).unwrap(),
        &p.c.scale(&xc, 0.3).unwrap(),
        1e-6,
    );
    p.close(
        &p.m.mul(&xm, &wm).unwrap(),
        &p.c.mul(&xc, &wc).unwrap(),
        1e-6,
    );
    p.close(
        &p.m.add(&xm, &wm).unwrap(),
        &p.c.add(&xc, &wc).unwrap(),
        1e-6,
    );
}

#[test]
fn attention_masks_match_candle() {
    let mut p = Pair::new(3);
    let (_, qm, qc) = p.randn(&[1, 4, 3, 8]);
    let (_, km, kc) = p.randn(&[1, 2, 9, 8]);
    let (_, vm, vc) = p.randn(&[1, 2, 9, 8]);
    let masks = [
        AttnMask::None,
        AttnMask::Causal { offset: 6 },
        AttnMask::Causal { offset: 2 },
        AttnMask::SlidingCausal {
            offset: 6,
            window: 4,
        },
        AttnMask::SlidingCausal {
            offset: 3,
            window: 2,
        },
    ];
    for mask in masks {
        let a = p.m.attention(&qm, &km, &vm, mask, 0.35).unwrap();
        let b = p.c.attention(&qc, &kc, &vc, mask, 0.35).unwrap();
        p.close(&a, &b, 1e-5);
    }
    let (_, bad, _) = p.randn(&[1, 3, 9, 8]);
    assert!(p.m.attention(&qm, &bad, &bad, AttnMask::None, 1.0).is_err());
}

#[test]
fn indexing_and_shapes_match_candle() {
    let mut p = Pair::new(4);
    let (_, tm, tc) = p.randn(&[10, 6]);
    let ids = [3u32, 0, 9, 3];
    let (im, ic) = (
        p.m.from_u32(&ids, &[2, 2]).unwrap(),
        p.c.from_u32(&ids, &[2, 2]).unwrap(),
    );
    p.close(
        &p.m.embedding(&tm, &im).unwrap(),
        &p.c.embedding(&tc, &ic).unwrap(),
        0.0,
    );
    let oob = p.m.from_u32(&[10], &[1]).unwrap();
    assert!(p
        .m
        .embedding(&tm, &oob)
        .unwrap_err()
        .message
        .contains("outside the vocabulary"));

    let mut logits: Vec<f32> = (0..24).map(|_| p.rng.random_range(-1.0f32..1.0)).collect();
    logits[5] = logits.iter().cloned().fold(f32::MIN, f32::max) + 1.0;
    logits[9] = logits[5]; // tie: the first index wins
    let (lm, lc) = (
        p.m.from_f32(&logits, &[2, 12]).unwrap(),
        p.c.from_f32(&logits, &[2, 12]).unwrap(),
    );
    let am = p.m.to_u32_vec(&p.m.argmax_last(&lm).unwrap()).unwrap();
    assert_eq!(am, p.c.to_u32_vec(&p.c.argmax_last(&lc).unwrap()).unwrap());
    assert_eq!(am[0], 5);
    let (vm, idm) = p.m.topk_last(&lm, 4).unwrap();
    let (vc, idc) = p.c.topk_last(&lc, 4).unwrap();
    assert_eq!(p.m.to_u32_vec(&idm).unwrap(), p.c.to_u32_vec(&idc).unwrap());
    p.close(&vm, &vc, 0.0);

    p.close(
        &p.m.narrow(&tm, 0, 2, 5).unwrap(),
        &p.c.narrow(&tc, 0, 2, 5).unwrap(),
        0.0,
    );
    p.close(
        &p.m.narrow(&tm, 1, 1, 3).unwrap(),
        &p.c.narrow(&tc, 1, 1, 3).unwrap(),
        0.0,
    );
    assert!(p.m.narrow(&tm, 0, 8, 3).is_err());
    p.close(
        &p.m.transpose(&tm, 0, 1).unwrap(),
        &p.c.transpose(&tc, 0, 1).unwrap(),
        0.0,
    );
    p.close(
        &p.m.reshape(&tm, &[3, 20]).unwrap(),
        &p.c.reshape(&tc, &[3, 20]).unwrap(),
        0.0,
    );
    p.close(
        &p.m.concat(&[&tm, &tm], 1).unwrap(),
        &p.c.concat(&[&tc, &tc], 1).unwrap(),
        0.0,
    );

    let (_, sm, sc) = p.randn(&[1, 2, 3, 4]);
    let (dm, dc) = (
        p.m.zeros(&[1, 2, 8, 4]).unwrap(),
        p.c.zeros(&[1, 2, 8, 4]).unwrap(),
    );
    let um = p.m.slice_update(&dm, &sm, 2, 4).unwrap();
    p.close(&um, &p.c.slice_update(&dc, &sc, 2, 4).unwrap(), 0.0);
    assert!(p.m.slice_update(&dm, &sm, 2, 6).is_err());

    let h = p.m.to_dtype(&tm, DType::BF16).unwrap();
    assert_eq!(h.dtype(), Dtype::Bfloat16);
    p.close(
        &p.m.to_dtype(&h, DType::F32).unwrap(),
        &p.c.to_dtype(&p.c.to_dtype(&tc, DType::BF16).unwrap(), DType::F32)
            .unwrap(),
        0.0,
    );
}

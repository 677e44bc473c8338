//! A header-only walk of a GGUF file that finds the first tensor stored in a type we cannot run
//! (IQ-quants, ternary, integer or f64 tensors), so that loading fails naming the tensor and
//! its type instead of with the reader's "unknown dtype".

use std::io::{BufReader, Read};
use std::path::Path;

/// ggml tensor types by id (as in the GGUF spec) and whether candle reads them.
fn type_name(id: u32) -> (&'static str, bool) {
    match id {
        0 => ("F32", true),
        1 => ("F16", true),
        2 => ("Q4_0", true),
        3 => ("Q4_1", true),
        6 => ("Q5_0", true),
        7 => ("Q5_1", true),
        8 => ("Q8_0", true),
        9 => ("Q8_1", true),
        10 => ("Q2_K", true),
        11 => ("Q3_K", true),
        12 => ("Q4_K", true),
        13 => ("Q5_K", true),
        14 => ("Q6_K", true),
        15 => ("Q8_K", true),
        16 => ("IQ2_XXS", false),
        17 => ("IQ2_XS", false),
        18 => ("IQ3_XXS", false),
        19 => ("IQ1_S", false),
        20 => ("IQ4_NL", false),
        21 => ("IQ3_S", false),
        22 => ("IQ2_S", false),
        23 => ("IQ4_XS", false),
        24 => ("I8", false),
        25 => ("I16", false),
        26 => ("I32", false),
        27 => ("I64", false),
        28 => ("F64", false),
        29 => ("IQ1_M", false),
        30 => ("BF16", true),
        34 => ("TQ1_0", false),
        35 => ("TQ2_0", false),
        39 => ("MXFP4", false),
        _ => ("unknown", false),
    }
}

/// The types a GGUF tensor may have for dspark to load it.
pub const SUPPORTED: &str =
    "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K";

struct Reader<R: Read>(R);

impl<R: Read> Reader<R> {
    fn bytes<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut b = [0u8; N];
        self.0.read_exact(&mut b).ok()?;
        Some(b)
    }
    fn u32(&mut self) -> Option<u32> {
        self.bytes::<4>().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.bytes::<8>().map(u64::from_le_bytes)
    }
    fn skip(&mut self, n: u64) -> Option<()> {
        let got = std::io::copy(&mut (&mut self.0).take(n), &mut std::io::sink()).ok()?;
        (got == n).then_some(())
    }
    fn string(&mut self) -> Option<String> {
        let n = self.u64()?;
        if n > 1 << 20 {
            return None;
        }
        let mut b = vec![0u8; n as usize];
        self.0.read_exact(&mut b).ok()?;
        Some(String::from_utf8_lossy(&b).into_owned())
    }
    /// Skips one metadata value of type `t`.
    fn skip_value(&mut self, t: u32, depth: usize) -> Option<()> {
        match t {
            0 | 1 | 7 => self.skip(1),
            2 | 3 => self.skip(2),
            4..=6 => self.skip(4),
            10..=12 => self.skip(8),
            8 => self.string().map(|_| ()),
            9 if depth < 4 => {
                let (et, n) = (self.u32()?, self.u64()?);
                for _ in 0..n {
                    self.skip_value(et, depth + 1)?;
                }
                Some(())
            }
            _ => None,
        }
    }
}

/// `(tensor name, type description)` of the first tensor of `path` in a type we cannot load;
/// `None` when all are loadable or the header cannot be walked.
pub fn unsupported_tensor(path: &Path) -> Option<(String, String)> {
    let f = std::fs::File::open(path).ok()?;
    let mut r = Reader(BufReader::new(f));
    if &r.bytes::<4>()? != b"GGUF" {
        return None;
    }
    let version = r.u32()?;
    if version < 2 {
        return None;
    }
    let (tensors, kvs) = (r.u64()?, r.u64()?);
    for _ in 0..kvs {
        r.string()?;
        let t = r.u32()?;
        r.skip_value(t, 0)?;
    }
    for _ in 0..tensors {
        let name = r.string()?;
        let dims = r.u32()?;
        r.skip(8 * dims as u64)?;
        let id = r.u32()?;
        r.u64()?;
        let (tn, ok) = type_name(id);
        if !ok {
            return Some((name, format!("{tn} (ggml type {id})")));
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A GGUF v3 header with one string metadata entry and the given tensors (no data).
    pub fn header(tensors: &[(&str, u32)]) -> Vec<u8> {
        let s = |v: &mut Vec<u8>, t: &str| {
            v.extend((t.len() as u64).to_le_bytes());
            v.extend(t.as_bytes());
        };
        let mut v = b"GGUF".to_vec();
        v.extend(3u32.to_le_bytes());
        v.extend((tensors.len() as u64).to_le_bytes());
        v.extend(2u64.to_le_bytes());
        s(&mut v, "general.architecture");
        v.extend(8u32.to_le_bytes());
        s(&mut v, "llama");
        s(&mut v, "tokenizer.ggml.scores");
        v.extend(9u32.to_le_bytes());
        v.extend(6u32.to_le_bytes());
        v.extend(3u64.to_le_bytes());
        for f in [0.5f32, 1.0, 2.0] {
            v.extend(f.to_le_bytes());
        }
        for (name, ty) in tensors {
            s(&mut v, name);
            v.extend(2u32.to_le_bytes());
            v.extend(256u64.to_le_bytes());
            v.extend(4u64.to_le_bytes());
            v.extend(ty.to_le_bytes());
            v.extend(0u64.to_le_bytes());
        }
        v
    }

    #[test]
    fn finds_the_first_tensor_of_an_unsupported_type() {
        let dir = std::env::temp_dir().join(format!("dspark-gguf-scan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("m.gguf");
        std::fs::write(
            &p,
            header(&[("token_embd.weight", 8), ("blk.0.attn_q.weight", 23)]),
        )
        .unwrap();
        assert_eq!(
            unsupported_tensor(&p),
            Some(("blk.0.attn_q.weight".into(), "IQ4_XS (ggml type 23)".into()))
        );
        std::fs::write(&p, header(&[("token_embd.weight", 12)])).unwrap();
        assert_eq!(unsupported_tensor(&p), None);
        std::fs::write(&p, b"not a gguf").unwrap();
        assert_eq!(unsupported_tensor(&p), None);
        std::fs::remove_dir_all(&dir).ok();
    }
}

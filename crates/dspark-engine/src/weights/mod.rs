//! Weight files: safetensors (HF layout, MLX affine-quantized layout) and GGUF. A
//! [`WeightSource`] hands out host-side [`HostTensor`]s by HF tensor name; backends turn them
//! into device tensors. Every failure names the file and the tensor or field.

pub mod gguf;
pub mod gguf_scan;
pub mod mlx_quant;
pub mod nested;
pub mod safetensors;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::DType;

/// A weight on the host, before it reaches a backend.
#[derive(Clone, Debug)]
pub enum HostTensor {
    /// Raw little-endian elements of `dtype`.
    Dense {
        shape: Vec<usize>,
        dtype: DType,
        bytes: Arc<[u8]>,
    },
    /// A GGUF block-quantized (or f16/f32) tensor, held by candle's CPU quantized storage.
    Ggml(Arc<candle_core::quantized::QTensor>),
    /// MLX affine quantization: `w = scales * q + biases` per group along the input axis.
    MlxQuant(mlx_quant::MlxQuantized),
}

impl HostTensor {
    pub fn from_f32(shape: Vec<usize>, data: &[f32]) -> Self {
        let mut bytes = Vec::with_capacity(data.len() * 4);
        for v in data {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        HostTensor::Dense {
            shape,
            dtype: DType::F32,
            bytes: bytes.into(),
        }
    }

    /// Logical shape (`[out, in]` for matrices).
    pub fn shape(&self) -> Vec<usize> {
        match self {
            HostTensor::Dense { shape, .. } => shape.clone(),
            HostTensor::Ggml(q) => q.shape().dims().to_vec(),
            HostTensor::MlxQuant(m) => vec![m.out_features, m.in_features],
        }
    }

    /// Dequantized f32 values in row-major order.
    pub fn to_f32(&self) -> Result<Vec<f32>, String> {
        match self {
            HostTensor::Dense { dtype, bytes, .. } => Ok(dense_to_f32(*dtype, bytes)),
            HostTensor::Ggml(q) => q
                .dequantize(&candle_core::Device::Cpu)
                .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
                .map_err(|e| e.to_string()),
            HostTensor::MlxQuant(m) => Ok(m.dequantize()),
        }
    }

    /// Bytes this weight occupies on the host.
    pub fn nbytes(&self) -> usize {
        match self {
            HostTensor::Dense { bytes, .. } => bytes.len(),
            HostTensor::Ggml(q) => q.storage_size_in_bytes(),
            HostTensor::MlxQuant(m) => m.nbytes(),
        }
    }
}

impl HostTensor {
    /// Two dense `[out, in]` matrices of one dtype as one `[2 out, in]` with their rows
    /// interleaved: `a` row 0, `b` row 0, `a` row 1, ... (a GEMM that computes each pair of
    /// columns together, e.g. SwiGLU's gate and up). `None` for other storage or unequal shapes.
    pub fn interleave_rows(a: &HostTensor, b: &HostTensor) -> Option<HostTensor> {
        match (a, b) {
            (
                HostTensor::Dense {
                    shape,
                    dtype,
                    bytes,
                    ..
                },
                HostTensor::Dense {
                    shape: sb,
                    dtype: db,
                    bytes: bb,
                },
            ) if shape.len() == 2 && shape == sb && dtype == db && shape[1] > 0 => {
                let row = bytes.len() / shape[0].max(1);
                let mut out = Vec::with_capacity(2 * bytes.len());
                for (ra, rb) in bytes.chunks_exact(row).zip(bb.chunks_exact(row)) {
                    out.extend_from_slice(ra);
                    out.extend_from_slice(rb);
                }
                Some(HostTensor::Dense {
                    shape: vec![2 * shape[0], shape[1]],
                    dtype: *dtype,
                    bytes: out.into(),
                })
            }
            _ => None,
        }
    }

    /// Stacks `[out_i, in]` matrices into one `[sum out_i, in]` (fused projections at load).
    /// `None` when the parts differ in storage kind, dtype, quantization or input size, so the
    /// caller keeps them apart. Each output row is the same bytes as before, so a fused matmul
    /// gives the same values as the separate ones.
    pub fn concat_rows(parts: &[&HostTensor]) -> Option<HostTensor> {
        let first = parts.first()?;
        let cols = *first.shape().get(1)?;
        if parts
            .iter()
            .any(|p| p.shape().len() != 2 || p.shape()[1] != cols)
        {
            return None;
        }
        let rows: usize = parts.iter().map(|p| p.shape()[0]).sum();
        match first {
            HostTensor::Dense { dtype, .. } => {
                let mut bytes = Vec::new();
                for p in parts {
                    match p {
                        HostTensor::Dense {
                            dtype: d, bytes: b, ..
                        } if d == dtype => bytes.extend_from_slice(b),
                        _ => return None,
                    }
                }
                Some(HostTensor::Dense {
                    shape: vec![rows, cols],
                    dtype: *dtype,
                    bytes: bytes.into(),
                })
            }
            HostTensor::Ggml(q0) => {
                let mut raw = Vec::new();
                for p in parts {
                    match p {
                        HostTensor::Ggml(q) if q.dtype() == q0.dtype() => {
                            raw.extend_from_slice(&q.data().ok()?)
                        }
                        _ => return None,
                    }
                }
                candle_core::quantized::ggml_file::qtensor_from_ggml(
                    q0.dtype(),
                    &raw,
                    vec![rows, cols],
                    &candle_core::Device::Cpu,
                )
                .ok()
                .map(|q| HostTensor::Ggml(Arc::new(q)))
            }
            HostTensor::MlxQuant(_) => None,
        }
    }
}

pub fn dense_to_f32(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    }
}

/// Why a model or its weights could not be loaded.
#[derive(thiserror::Error, Debug)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: cannot parse: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: missing field `{field}`")]
    MissingField { path: PathBuf, field: String },
    #[error("{path}: field `{field}` is invalid: {message}")]
    InvalidField {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("{path}: unsupported architecture `{arch}` (supported: qwen3, qwen2, llama)")]
    UnknownArch { path: PathBuf, arch: String },
    #[error("{path}: missing tensor `{name}`")]
    MissingTensor { path: PathBuf, name: String },
    #[error("{path}: tensor `{name}` has shape {got:?}, expected {expected:?}")]
    Shape {
        path: PathBuf,
        name: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    #[error("{path}: tensor `{name}` has unsupported dtype {dtype}")]
    Dtype {
        path: PathBuf,
        name: String,
        dtype: String,
    },
    #[error("{path}: no model found: {message}")]
    NotFound { path: PathBuf, message: String },
    #[error("{path}: tensor `{name}`: {message}")]
    Backend {
        path: PathBuf,
        name: String,
        message: String,
    },
    #[error(
        "{path}: needs about {:.2} GB of memory for its weights ({how}) but {:.2} GB is available; \
         close other programs, choose a smaller or quantized variant, or set \
         DSPARK_SKIP_MEMORY_CHECK=1 to load it anyway",
        *needed as f64 / 1e9,
        *available as f64 / 1e9
    )]
    TooLarge {
        path: PathBuf,
        needed: u64,
        available: u64,
        how: String,
    },
}

impl LoadError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        LoadError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
    pub fn parse(path: &Path, message: impl ToString) -> Self {
        LoadError::Parse {
            path: path.to_path_buf(),
            message: message.to_string(),
        }
    }
}

/// Named host tensors from one checkpoint (possibly many files).
pub trait WeightSource {
    /// The file or directory this source reads, for error messages.
    fn path(&self) -> &Path;
    fn contains(&self, name: &str) -> bool;
    fn get(&self, name: &str) -> Result<HostTensor, LoadError>;

    /// Like [`WeightSource::get`], and checks the logical shape.
    fn get_shaped(&self, name: &str, expected: &[usize]) -> Result<HostTensor, LoadError> {
        let t = self.get(name)?;
        let got = t.shape();
        if got != expected {
            return Err(LoadError::Shape {
                path: self.path().to_path_buf(),
                name: name.to_string(),
                expected: expected.to_vec(),
                got,
            });
        }
        Ok(t)
    }
}

/// An in-memory source (random test checkpoints, converted weights).
#[derive(Default, Clone)]
pub struct MemorySource {
    pub label: PathBuf,
    pub tensors: std::collections::HashMap<String, HostTensor>,
}

impl WeightSource for MemorySource {
    fn path(&self) -> &Path {
        &self.label
    }
    fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
    fn get(&self, name: &str) -> Result<HostTensor, LoadError> {
        self.tensors
            .get(name)
            .cloned()
            .ok_or_else(|| LoadError::MissingTensor {
                path: self.label.clone(),
                name: name.to_string(),
            })
    }
}

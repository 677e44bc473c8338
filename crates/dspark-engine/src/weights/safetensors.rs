//! Safetensors checkpoints in the HF layout (f32/f16/bf16), one or many shard files, memory
//! mapped. MLX-quantized linears (`weight` u32 + `scales` + `biases`) are recognised when the
//! config carries a `quantization` block, and handed out as [`HostTensor::MlxQuant`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use safetensors::tensor::{Dtype, Metadata, SafeTensors};

use super::mlx_quant::MlxQuantized;
use super::{HostTensor, LoadError, WeightSource};
use crate::backend::DType;

/// dtype, shape, bytes and the shard file of one stored tensor.
type RawTensor<'a> = (Dtype, Vec<usize>, &'a [u8], &'a Path);
/// A float tensor's dtype, shape and bytes.
type DenseTensor = (DType, Vec<usize>, Arc<[u8]>);

struct Shard {
    path: PathBuf,
    mmap: Mmap,
    data_start: usize,
    meta: Metadata,
}

/// MLX quantization parameters from `config.json`'s `quantization` block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlxQuantConfig {
    pub bits: usize,
    pub group_size: usize,
}

pub struct SafetensorsSource {
    dir: PathBuf,
    shards: Vec<Shard>,
    index: HashMap<String, usize>,
    quant: Option<MlxQuantConfig>,
}

impl SafetensorsSource {
    /// Opens every `*.safetensors` file in `dir` (sorted by name).
    pub fn open_dir(dir: &Path, quant: Option<MlxQuantConfig>) -> Result<Self, LoadError> {
        let rd = std::fs::read_dir(dir).map_err(|e| LoadError::io(dir, e))?;
        let mut files: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(LoadError::NotFound {
                path: dir.to_path_buf(),
                message: "no *.safetensors files".into(),
            });
        }
        Self::open_files(dir, &files, quant)
    }

    pub fn open_files(
        label: &Path,
        files: &[PathBuf],
        quant: Option<MlxQuantConfig>,
    ) -> Result<Self, LoadError> {
        let mut shards = Vec::new();
        let mut index = HashMap::new();
        for path in files {
            let f = std::fs::File::open(path).map_err(|e| LoadError::io(path, e))?;
            // SAFETY: the file is opened read-only; a concurrent truncation by another process
            // is the usual mmap caveat and is outside what the loader can guard against.
            let mmap = unsafe { Mmap::map(&f) }.map_err(|e| LoadError::io(path, e))?;
            let (n, meta) =
                SafeTensors::read_metadata(&mmap).map_err(|e| LoadError::parse(path, e))?;
            // validate once so later slicing cannot go out of bounds
            SafeTensors::deserialize(&mmap).map_err(|e| LoadError::parse(path, e))?;
            for name in meta.tensors().keys() {
                index.insert(name.clone(), shards.len());
            }
            shards.push(Shard {
                path: path.clone(),
                mmap,
                data_start: 8 + n,
                meta,
            });
        }
        Ok(SafetensorsSource {
            dir: label.to_path_buf(),
            shards,
            index,
            quant,
        })
    }

    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.index.keys().cloned().collect();
        v.sort();
        v
    }

    fn raw(&self, name: &str) -> Result<RawTensor<'_>, LoadError> {
        let &si = self
            .index
            .get(name)
            .ok_or_else(|| LoadError::MissingTensor {
                path: self.dir.clone(),
                name: name.to_string(),
            })?;
        let shard = &self.shards[si];
        let info = shard.meta.info(name).expect("indexed name has info");
        let (a, b) = info.data_offsets;
        let bytes = &shard.mmap[shard.data_start + a..shard.data_start + b];
        Ok((info.dtype, info.shape.clone(), bytes, &shard.path))
    }

    fn dense(&self, name: &str) -> Result<DenseTensor, LoadError> {
        let (dt, shape, bytes, path) = self.raw(name)?;
        let dtype = match dt {
            Dtype::F32 => DType::F32,
            Dtype::F16 => DType::F16,
            Dtype::BF16 => DType::BF16,
            other => {
                return Err(LoadError::Dtype {
                    path: path.to_path_buf(),
                    name: name.to_string(),
                    dtype: format!("{other:?}"),
                })
            }
        };
        Ok((dtype, shape, bytes.into()))
    }

    fn mlx_quant(&self, name: &str, q: MlxQuantConfig) -> Result<HostTensor, LoadError> {
        let prefix = name.strip_suffix(".weight").unwrap_or(name);
        let (dt, shape, bytes, path) = self.raw(name)?;
        let bad = |message: String| LoadError::Backend {
            path: path.to_path_buf(),
            name: name.to_string(),
            message,
        };
        if dt != Dtype::U32 || shape.len() != 2 {
            return Err(bad(format!(
                "quantized weight must be a 2-D u32 tensor, got {dt:?} {shape:?}"
            )));
        }
        let packed: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let (sdt, _, sbytes) = self.dense(&format!("{prefix}.scales"))?;
        let (bdt, _, bbytes) = self.dense(&format!("{prefix}.biases"))?;
        let m = MlxQuantized {
            out_features: shape[0],
            in_features: shape[1] * 32 / q.bits,
            bits: q.bits,
            group_size: q.group_size,
            packed: packed.into(),
            scales: (sdt, sbytes),
            biases: (bdt, bbytes),
        };
        m.validate().map_err(bad)?;
        Ok(HostTensor::MlxQuant(m))
    }
}

impl WeightSource for SafetensorsSource {
    fn path(&self) -> &Path {
        &self.dir
    }

    fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    fn get(&self, name: &str) -> Result<HostTensor, LoadError> {
        if let Some(q) = self.quant {
            if let Some(prefix) = name.strip_suffix(".weight") {
                if self.contains(&format!("{prefix}.scales")) {
                    return self.mlx_quant(name, q);
                }
            }
        }
        let (dtype, shape, bytes) = self.dense(name)?;
        Ok(HostTensor::Dense {
            shape,
            dtype,
            bytes,
        })
    }
}

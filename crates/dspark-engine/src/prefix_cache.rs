//! Multi-slot prefix cache: keeps the target KV and the drafter state of recent token
//! sequences so a follow-up request that shares a prefix prefills only the new suffix.
//!
//! A request takes the slot with the longest common prefix; reuse is capped at `prompt - 1`
//! (one token is always prefilled for fresh logits) and skipped below `min_reuse`. An exact
//! extension moves the slot out; a divergent branch copies the shared prefix, so the old
//! branch survives. Slots are evicted LRU; over the RAM budget, LRU slots spill to
//! safetensors files (tokens, fingerprint and a sha256 in the metadata) and are reloaded on a
//! hit; a file that fails its checksum is deleted, never loaded. Files survive restarts.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};
use sha2::{Digest, Sha256};

use crate::backend::{BResult, Backend};
use crate::kv::{HostLayer, KvCache};
use crate::spec::DrafterState;

#[derive(Clone, Debug, PartialEq)]
pub struct PrefixCacheConfig {
    /// Slots kept in total (RAM + disk).
    pub max_slots: usize,
    /// RAM budget for slot state; 0 = unlimited.
    pub max_ram_bytes: usize,
    /// Spill directory; `None` = slots over the RAM budget are dropped.
    pub dir: Option<PathBuf>,
    /// Shorter shared prefixes are not worth reusing.
    pub min_reuse: usize,
}

impl Default for PrefixCacheConfig {
    fn default() -> Self {
        PrefixCacheConfig {
            max_slots: 8,
            max_ram_bytes: 2 << 30,
            dir: None,
            min_reuse: 16,
        }
    }
}

/// Counters for `/metrics`.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PrefixCacheInfo {
    pub enabled: bool,
    pub hits: u64,
    pub misses: u64,
    pub reused_tokens: u64,
    pub slots_ram: usize,
    pub slots_disk: usize,
    pub bytes_ram: usize,
    pub bytes_disk: u64,
    pub spills: u64,
    pub reloads: u64,
    pub corrupt_files: u64,
    /// spills that failed (disk full, unwritable directory): the slot was dropped instead
    pub spill_errors: u64,
    /// partial files of an interrupted spill (a crash mid-write) removed at start
    pub stale_files_removed: u64,
}

enum Place<B: Backend> {
    Ram {
        target: KvCache<B>,
        drafter: DrafterState<B>,
        bytes: usize,
    },
    Disk {
        path: PathBuf,
    },
}

struct Slot<B: Backend> {
    tokens: Vec<u32>,
    place: Place<B>,
    last_used: u64,
}

/// What a request starts from.
pub struct Acquired<B: Backend> {
    pub target: KvCache<B>,
    pub drafter: DrafterState<B>,
    pub reused: usize,
}

pub struct PrefixCache<B: Backend> {
    cfg: PrefixCacheConfig,
    backend: B,
    fingerprint: String,
    /// Per-model subdirectory of `cfg.dir`.
    dir: Option<PathBuf>,
    target_shape: (usize, usize),
    slots: Vec<Slot<B>>,
    clock: u64,
    info: PrefixCacheInfo,
}

fn lcp(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl<B: Backend> PrefixCache<B> {
    /// `fingerprint` names the model/drafter/dtype; spilled files of another fingerprint are
    /// never used. `target_shape` = (layers, max positions) of the target.
    pub fn new(
        backend: &B,
        cfg: PrefixCacheConfig,
        fingerprint: &str,
        target_shape: (usize, usize),
    ) -> Self {
        let dir = cfg
            .dir
            .as_ref()
            .map(|d| d.join(&hex(&Sha256::digest(fingerprint.as_bytes()))[..16]));
        let mut pc = PrefixCache {
            cfg,
            backend: backend.clone(),
            fingerprint: fingerprint.to_string(),
            dir,
            target_shape,
            slots: Vec::new(),
            clock: 0,
            info: PrefixCacheInfo {
                enabled: true,
                ..Default::default()
            },
        };
        pc.scan_disk();
        pc
    }

    /// Picks up slots spilled by an earlier run (metadata only; data is checked on load).
    fn scan_disk(&mut self) {
        let Some(dir) = &self.dir else { return };
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut found: Vec<(PathBuf, Vec<u32>)> = Vec::new();
        for e in rd.flatten() {
            let p = e.path();
            // a spill is written to `.tmp` and renamed when complete: a `.tmp` left behind is
            // a write a crash interrupted
            if p.extension().is_some_and(|x| x == "tmp")
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("slot-"))
            {
                tracing::warn!("prefix cache: removing interrupted spill {}", p.display());
                if std::fs::remove_file(&p).is_ok() {
                    self.info.stale_files_removed += 1;
                }
                continue;
            }
            if p.extension().is_some_and(|x| x == "safetensors") {
                match read_meta(&p) {
                    Some(m) if m.get("fingerprint") == Some(&self.fingerprint) => {
                        if let Some(t) = m.get("tokens").and_then(|t| serde_json::from_str(t).ok())
                        {
                            found.push((p, t));
                        }
                    }
                    _ => {}
                }
            }
        }
        found.sort();
        for (path, tokens) in found {
            self.slots.push(Slot {
                tokens,
                place: Place::Disk { path },
                last_used: 0,
            });
        }
        self.refresh_info();
    }

    pub fn info(&self) -> PrefixCacheInfo {
        self.info.clone()
    }

    /// Drops every slot (RAM and this model's spilled files).
    pub fn clear(&mut self) {
        for s in self.slots.drain(..) {
            if let Place::Disk { path } = s.place {
                let _ = std::fs::remove_file(path);
            }
        }
        self.refresh_info();
    }

    fn refresh_info(&mut self) {
        let (mut r, mut d, mut br, mut bd) = (0, 0, 0, 0u64);
        for s in &self.slots {
            match &s.place {
                Place::Ram { bytes, .. } => {
                    r += 1;
                    br += bytes;
                }
                Place::Disk { path } => {
                    d += 1;
                    bd += std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                }
            }
        }
        self.info.slots_ram = r;
        self.info.slots_disk = d;
        self.info.bytes_ram = br;
        self.info.bytes_disk = bd;
    }

    /// The state to start `prompt` from, or `None` (start fresh) when no slot shares at
    /// least `min_reuse` tokens.
    pub fn acquire(&mut self, prompt: &[u32]) -> Option<Acquired<B>> {
        self.clock += 1;
        let best = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    lcp(&s.tokens, prompt).min(prompt.len().saturating_sub(1)),
                    i,
                )
            })
            .max();
        let (reuse, idx) = match best {
            Some((r, i)) if r >= self.cfg.min_reuse.max(1) => (r, i),
            _ => {
                self.info.misses += 1;
                return None;
            }
        };
        if let Place::Disk { .. } = self.slots[idx].place {
            if !self.reload(idx) {
                self.info.misses += 1;
                self.refresh_info();
                return None;
            }
        }
        let extension = reuse == self.slots[idx].tokens.len();
        let got = if extension {
            let s = self.slots.remove(idx);
            match s.place {
                Place::Ram {
                    mut target,
                    mut drafter,
                    ..
                } => {
                    target.truncate(reuse);
                    // a sliding-window cache truncated below what it holds starts over
                    let reuse = target.len();
                    drafter.truncate(reuse);
                    Some(Acquired {
                        target,
                        drafter,
                        reused: reuse,
                    })
                }
                Place::Disk { .. } => None,
            }
        } else {
            let s = &mut self.slots[idx];
            s.last_used = self.clock;
            match &s.place {
                Place::Ram {
                    target, drafter, ..
                } => copy_prefix(&self.backend, target, drafter, reuse).ok(),
                Place::Disk { .. } => None,
            }
        };
        match &got {
            Some(a) => {
                self.info.hits += 1;
                // what the caches really kept (a sliding-window cache may have started over)
                self.info.reused_tokens += a.reused as u64;
            }
            None => self.info.misses += 1,
        }
        self.refresh_info();
        got
    }

    /// Keeps the state of `tokens` (the sequence the caches hold, exactly).
    pub fn store(
        &mut self,
        tokens: Vec<u32>,
        target: KvCache<B>,
        drafter: DrafterState<B>,
        elem_bytes: usize,
    ) {
        self.clock += 1;
        if tokens.is_empty() || target.len() != tokens.len() {
            return;
        }
        // a slot whose sequence is a prefix of this one is superseded
        let mut i = 0;
        while i < self.slots.len() {
            let s = &self.slots[i];
            if s.tokens.len() <= tokens.len() && tokens[..s.tokens.len()] == s.tokens[..] {
                let s = self.slots.remove(i);
                if let Place::Disk { path } = s.place {
                    let _ = std::fs::remove_file(path);
                }
            } else {
                i += 1;
            }
        }
        let bytes = target.nbytes(&self.backend, elem_bytes)
            + drafter
                .kv
                .as_ref()
                .map_or(0, |k| k.nbytes(&self.backend, elem_bytes));
        self.slots.push(Slot {
            tokens,
            place: Place::Ram {
                target,
                drafter,
                bytes,
            },
            last_used: self.clock,
        });
        self.enforce_budget();
        self.refresh_info();
    }

    fn ram_bytes(&self) -> usize {
        self.slots
            .iter()
            .map(|s| {
                if let Place::Ram { bytes, .. } = s.place {
                    bytes
                } else {
                    0
                }
            })
            .sum()
    }

    /// New slot and RAM limits (0 RAM = unlimited); slots over them go at once, as on a store.
    pub fn set_limits(&mut self, max_slots: usize, max_ram_bytes: usize) {
        self.cfg.max_slots = max_slots.max(1);
        self.cfg.max_ram_bytes = max_ram_bytes;
        self.enforce_budget();
    }

    fn enforce_budget(&mut self) {
        while self.slots.len() > self.cfg.max_slots.max(1) {
            let lru = (0..self.slots.len())
                .min_by_key(|&i| self.slots[i].last_used)
                .unwrap();
            if let Place::Disk { path } = self.slots.remove(lru).place {
                let _ = std::fs::remove_file(path);
            }
        }
        while self.cfg.max_ram_bytes > 0 && self.ram_bytes() > self.cfg.max_ram_bytes {
            let lru = (0..self.slots.len())
                .filter(|&i| matches!(self.slots[i].place, Place::Ram { .. }))
                .min_by_key(|&i| self.slots[i].last_used);
            let Some(lru) = lru else { break };
            let spilled = match self.dir.is_some().then(|| self.spill(lru)) {
                Some(Ok(())) => true,
                Some(Err(e)) => {
                    tracing::warn!("prefix cache: spill failed, slot dropped: {e}");
                    self.info.spill_errors += 1;
                    false
                }
                None => false,
            };
            if !spilled {
                self.slots.remove(lru);
            }
        }
    }

    fn spill(&mut self, idx: usize) -> Result<(), String> {
        let dir = self.dir.clone().ok_or("no spill directory")?;
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let slot = &self.slots[idx];
        let Place::Ram {
            target, drafter, ..
        } = &slot.place
        else {
            return Ok(());
        };
        let b = &self.backend;
        let t = target.export(b).map_err(|e| e.message)?;
        let d = match &drafter.kv {
            Some(k) => k.export(b).map_err(|e| e.message)?,
            None => vec![],
        };
        let tokens = serde_json::to_string(&slot.tokens).map_err(|e| e.to_string())?;
        let backlog = serde_json::to_string(&drafter.backlog).map_err(|e| e.to_string())?;
        let name = format!(
            "slot-{}.safetensors",
            &hex(&Sha256::digest(tokens.as_bytes()))[..16]
        );
        let path = dir.join(name);
        write_slot(&path, &self.fingerprint, &tokens, &backlog, &t, &d)?;
        self.slots[idx].place = Place::Disk { path };
        self.info.spills += 1;
        Ok(())
    }

    /// Loads a spilled slot back into RAM; a corrupt file is deleted and the slot dropped.
    fn reload(&mut self, idx: usize) -> bool {
        let Place::Disk { path } = &self.slots[idx].place else {
            return true;
        };
        let path = path.clone();
        match read_slot(&path, &self.fingerprint) {
            Ok((tokens, backlog, t, d)) if tokens == self.slots[idx].tokens => {
                let b = &self.backend;
                let built: BResult<_> = (|| {
                    let target = KvCache::import(b, &t, self.target_shape.1)?;
                    let kv = if d.is_empty() {
                        None
                    } else {
                        Some(KvCache::import(b, &d, self.target_shape.1)?)
                    };
                    Ok((target, kv))
                })();
                match built {
                    Ok((target, kv)) => {
                        let elem = b.compute_dtype().size_in_bytes();
                        let bytes =
                            target.nbytes(b, elem) + kv.as_ref().map_or(0, |k| k.nbytes(b, elem));
                        let _ = std::fs::remove_file(&path);
                        self.slots[idx].place = Place::Ram {
                            target,
                            drafter: DrafterState { kv, backlog },
                            bytes,
                        };
                        self.info.reloads += 1;
                        true
                    }
                    Err(_) => false,
                }
            }
            _ => {
                tracing::warn!(
                    "prefix cache: ignoring corrupt spill file {}",
                    path.display()
                );
                let _ = std::fs::remove_file(&path);
                self.slots.remove(idx);
                self.info.corrupt_files += 1;
                false
            }
        }
    }
}

fn copy_prefix<B: Backend>(
    b: &B,
    target: &KvCache<B>,
    drafter: &DrafterState<B>,
    len: usize,
) -> BResult<Acquired<B>> {
    let t = target.deep_prefix(b, len)?;
    let kv_len = drafter.kv.as_ref().map_or(0, |k| k.len());
    let kv = match &drafter.kv {
        Some(k) => Some(k.deep_prefix(b, len.min(kv_len))?),
        None => None,
    };
    // a sliding-window drafter cache copied below its floor comes back empty: the backlog
    // (positions after its kv) then no longer lines up, and the drafter starts over
    let whole = kv.as_ref().is_none_or(|k| k.len() == len.min(kv_len));
    let backlog = if whole {
        drafter.backlog[..len.saturating_sub(kv_len).min(drafter.backlog.len())].to_vec()
    } else {
        Vec::new()
    };
    let reused = t.len();
    Ok(Acquired {
        target: t,
        drafter: DrafterState { kv, backlog },
        reused,
    })
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

type SlotData = (Vec<u32>, Vec<u32>, Vec<HostLayer>, Vec<HostLayer>);

fn write_slot(
    path: &Path,
    fp: &str,
    tokens: &str,
    backlog: &str,
    t: &[HostLayer],
    d: &[HostLayer],
) -> Result<(), String> {
    let mut bufs: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (prefix, layers) in [("t", t), ("d", d)] {
        for (i, (shape, k, v)) in layers.iter().enumerate() {
            bufs.push((format!("{prefix}.{i:03}.k"), shape.clone(), f32_bytes(k)));
            bufs.push((format!("{prefix}.{i:03}.v"), shape.clone(), f32_bytes(v)));
        }
    }
    bufs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = Sha256::new();
    h.update(tokens.as_bytes());
    h.update(backlog.as_bytes());
    for (name, _, data) in &bufs {
        h.update(name.as_bytes());
        h.update(data);
    }
    let meta: HashMap<String, String> = [
        ("fingerprint".to_string(), fp.to_string()),
        ("tokens".to_string(), tokens.to_string()),
        ("backlog".to_string(), backlog.to_string()),
        ("sha256".to_string(), hex(&h.finalize())),
    ]
    .into_iter()
    .collect();
    let views = bufs
        .iter()
        .map(|(n, s, data)| TensorView::new(Dtype::F32, s.clone(), data).map(|v| (n.clone(), v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    // write aside, flush to the device, then rename: a crash leaves either no file or a whole
    // one (plus at most a `.tmp`, removed at the next start), and a failed write leaves nothing
    let tmp = path.with_extension("tmp");
    let written = safetensors::serialize_to_file(views, Some(meta), &tmp)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(|e| e.to_string())
        })
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| e.to_string()));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The `__metadata__` of a safetensors file, reading only its header.
fn read_meta(path: &Path) -> Option<HashMap<String, String>> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut n = [0u8; 8];
    f.read_exact(&mut n).ok()?;
    let n = u64::from_le_bytes(n) as usize;
    if n > 64 << 20 {
        return None;
    }
    let mut head = vec![0u8; n];
    f.read_exact(&mut head).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&head).ok()?;
    let m = v.get("__metadata__")?.as_object()?;
    Some(
        m.iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
            .collect(),
    )
}

fn read_slot(path: &Path, fp: &str) -> Result<SlotData, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| e.to_string())?;
    let meta = read_meta(path).ok_or("no metadata")?;
    if meta.get("fingerprint").map(String::as_str) != Some(fp) {
        return Err("fingerprint mismatch".into());
    }
    let tokens_s = meta.get("tokens").ok_or("no tokens")?;
    let backlog_s = meta.get("backlog").ok_or("no backlog")?;
    let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
    names.sort();
    let mut h = Sha256::new();
    h.update(tokens_s.as_bytes());
    h.update(backlog_s.as_bytes());
    for n in &names {
        h.update(n.as_bytes());
        h.update(st.tensor(n).map_err(|e| e.to_string())?.data());
    }
    if meta.get("sha256") != Some(&hex(&h.finalize())) {
        return Err("checksum mismatch".into());
    }
    let layers = |prefix: &str| -> Result<Vec<HostLayer>, String> {
        let mut out = Vec::new();
        let mut i = 0;
        while let (Ok(k), Ok(v)) = (
            st.tensor(&format!("{prefix}.{i:03}.k")),
            st.tensor(&format!("{prefix}.{i:03}.v")),
        ) {
            let f = |d: &[u8]| {
                d.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            };
            out.push((k.shape().to_vec(), f(k.data()), f(v.data())));
            i += 1;
        }
        Ok(out)
    };
    let tokens = serde_json::from_str(tokens_s).map_err(|e| e.to_string())?;
    let backlog = serde_json::from_str(backlog_s).map_err(|e| e.to_string())?;
    Ok((tokens, backlog, layers("t")?, layers("d")?))
}

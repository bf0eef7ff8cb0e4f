//! The optimizer node's state files: what is stored, where, in which format, and how a step is
//! committed so that a crash mid-step never corrupts the committed state.
//!
//! What is stored per parameter (Sec. 3.3 and Sec. 4.1 "bf16 training"): the fp32 master
//! parameter and Adam's fp32 m and v in a *state* file (12 bytes), and the bf16 copy the workers
//! compute with in a *parameter* file (2 bytes). The fwd and bwd steps read the parameter files
//! (step 1, "reading parameters"); bwd+opt reads the state files (step 3), and writes both back
//! (step 5). The paper does not say the worker-facing copy is stored separately; we follow
//! ZeRO-Infinity, which LuWu is built against, where the fp16/bf16 parameters and the fp32
//! optimizer states are separate tensors on NVMe. Per parameter and iteration that is
//! 2 + 2 + 12 = 16 bytes read and 12 + 2 = 14 bytes written.
//!
//! Placement (the paper is silent): every layer is striped across all SSDs in `ssds` contiguous
//! shards, shard `s` of layer `l` on SSD `(l + s) mod ssds` (the rotation spreads the remainder of
//! uneven splits), so each layer task reads and writes with every SSD's bandwidth at once, as a
//! RAID-0 over the node's SSDs would. A layer smaller than `ssds` parameters has fewer shards.
//!
//! On each SSD (`root/ssd{k}`) the shards live in a slot file, like a raw device: shard regions
//! at fixed offsets, in layer order, each region a state "file" followed by a bf16 parameter
//! "file", each with a header (layer, shard, step, length) and a CRC-32 of its payload. One file
//! per SSD (rather than per shard) keeps the open and fsync count per step at the SSD count.
//!
//! Crash safety: every SSD has two slot files (A/B). The state after step `t` lives in slot
//! `t mod 2`; step `t + 1` reads slot `t mod 2` and writes slot `(t + 1) mod 2`, never
//! overwriting the committed state. When every shard of step `t + 1` is written, the manifest
//! (`root/MANIFEST`: configuration and committed step) is replaced by write-to-temporary, fsync,
//! rename, fsync of the directory. A crash before the rename leaves the manifest at `t` and the
//! half-written slot is simply rewritten on resume; every region carries its step and a CRC, so
//! a torn or stale region is detected, never silently used. Against a power loss the slot files
//! must also be fsynced before the manifest ([`Store::durable`]); against a killed process they
//! need not be (the page cache outlives the process). The cost is twice the state's size on the
//! SSDs.

use crate::OocError;
use inabench_train::adam::{AdamParams, AdamStep};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const STATE_MAGIC: &[u8; 8] = b"LUWUOOCS";
const MANIFEST_MAGIC: &[u8; 8] = b"LUWUOOCM";
const VERSION: u32 = 1;
/// Bytes of a shard file's header.
pub const HEADER_BYTES: usize = 48;

/// Which of a shard's two files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// fp32 master parameters, m, v.
    State,
    /// bf16 parameters for the workers.
    Params,
}

impl FileKind {
    fn code(self) -> u32 {
        match self {
            FileKind::State => 1,
            FileKind::Params => 2,
        }
    }
    /// Payload bytes per parameter.
    pub fn bytes_per_param(self) -> usize {
        match self {
            FileKind::State => 12,
            FileKind::Params => 2,
        }
    }
}

/// One shard of one layer: `len` parameters from `offset` within the layer, on SSD `ssd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub layer: usize,
    pub shard: usize,
    pub ssd: usize,
    pub offset: usize,
    pub len: usize,
}

/// The placement of every layer's shards across the SSDs.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub ssds: usize,
    pub layer_params: Vec<usize>,
    pub(crate) shards: Vec<Vec<Shard>>,
    /// Per layer and shard: the offset of the shard's region in its SSD's slot file.
    offsets: Vec<Vec<u64>>,
    /// Per SSD: the size of its slot files.
    slot_bytes: Vec<u64>,
}

impl Layout {
    pub fn new(ssds: usize, layer_params: &[usize]) -> Result<Layout, OocError> {
        if ssds == 0 {
            return Err(OocError::Config("at least one SSD is needed".into()));
        }
        if layer_params.is_empty() || layer_params.contains(&0) {
            return Err(OocError::Config(
                "every layer needs at least one parameter".into(),
            ));
        }
        let shards = layer_params
            .iter()
            .enumerate()
            .map(|(layer, &n)| {
                let k = ssds.min(n);
                let (base, extra) = (n / k, n % k);
                let mut offset = 0;
                (0..k)
                    .map(|s| {
                        let len = base + usize::from(s < extra);
                        let sh = Shard {
                            layer,
                            shard: s,
                            ssd: (layer + s) % ssds,
                            offset,
                            len,
                        };
                        offset += len;
                        sh
                    })
                    .collect()
            })
            .collect::<Vec<Vec<Shard>>>();
        // each SSD's slot file holds its shards in layer order
        let mut slot_bytes = vec![0u64; ssds];
        let offsets = shards
            .iter()
            .map(|layer| {
                layer
                    .iter()
                    .map(|sh| {
                        let off = slot_bytes[sh.ssd];
                        slot_bytes[sh.ssd] += shard_bytes(sh.len);
                        off
                    })
                    .collect()
            })
            .collect();
        Ok(Layout {
            ssds,
            layer_params: layer_params.to_vec(),
            shards,
            offsets,
            slot_bytes,
        })
    }

    /// Where `sh`'s file of `kind` lives in its SSD's slot file: (offset, length). A shard's
    /// region is its state file followed by its bf16 parameter file, so a write is one write.
    pub fn region(&self, sh: &Shard, kind: FileKind) -> (u64, usize) {
        let off = self.offsets[sh.layer][sh.shard];
        let state = HEADER_BYTES + 12 * sh.len;
        match kind {
            FileKind::State => (off, state),
            FileKind::Params => (off + state as u64, HEADER_BYTES + 2 * sh.len),
        }
    }

    /// The size of SSD `ssd`'s slot files.
    pub fn slot_bytes(&self, ssd: usize) -> u64 {
        self.slot_bytes[ssd]
    }

    pub fn layers(&self) -> usize {
        self.layer_params.len()
    }

    pub fn shards(&self, layer: usize) -> &[Shard] {
        &self.shards[layer]
    }

    pub fn total_params(&self) -> u64 {
        self.layer_params.iter().map(|&n| n as u64).sum()
    }
}

/// Bytes of a shard's region (state and bf16 files with their headers) in a slot file.
pub fn shard_bytes(len: usize) -> u64 {
    (2 * HEADER_BYTES + 14 * len) as u64
}

/// The slot file of SSD `ssd` holding the state after step `step`.
pub fn slot_path(root: &Path, ssd: usize, step: u64) -> PathBuf {
    root.join(format!("ssd{ssd}")).join(format!(
        "slot_{}.dat",
        if step.is_multiple_of(2) { 'a' } else { 'b' }
    ))
}

/// Read `len` bytes at `off` of `path`.
pub fn read_region(path: &Path, off: u64, len: usize) -> Result<Vec<u8>, OocError> {
    use std::os::unix::fs::FileExt;
    let f = File::open(path).map_err(|e| OocError::io(path, e))?;
    let mut buf = vec![0u8; len];
    match f.read_exact_at(&mut buf, off) {
        Ok(()) => Ok(buf),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(OocError::Truncated {
            path: path.to_path_buf(),
            got: f.metadata().map(|m| m.len()).unwrap_or(0),
            expected: off + len as u64,
        }),
        Err(e) => Err(OocError::io(path, e)),
    }
}

/// Write `bytes` at `off` of `path` (which must exist). With `writeback`, start the kernel's
/// writeback of the range at once (Linux `sync_file_range`), so that the fsync at the commit
/// finds the pages clean and the flush overlaps the pipeline.
pub fn write_region(path: &Path, off: u64, bytes: &[u8], writeback: bool) -> Result<(), OocError> {
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| OocError::io(path, e))?;
    f.write_all_at(bytes, off)
        .map_err(|e| OocError::io(path, e))?;
    #[cfg(target_os = "linux")]
    if writeback {
        use std::os::fd::AsRawFd;
        // SAFETY: sync_file_range only reads its integer arguments; `f` is open.
        let rc = unsafe {
            libc::sync_file_range(
                f.as_raw_fd(),
                off as libc::off64_t,
                bytes.len() as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        if rc != 0 {
            return Err(OocError::io(path, std::io::Error::last_os_error()));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = writeback;
    Ok(())
}

/// Round an f32 to the nearest bf16 (ties to even; a NaN stays a quiet NaN), as the
/// worker-facing copy is stored: `half::bf16`, the suite's one conversion.
pub fn f32_to_bf16(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A counter-based value in [-0.5, 0.5): a function of its coordinates only, so any chunk of a
/// layer can be generated on its own and agree with generating the whole layer.
fn stream_key(seed: u64, a: u64, b: u64) -> u64 {
    mix(seed ^ mix(a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ mix(b)))
}

/// Element `i` of the stream `key` (SplitMix64's output function at counter `i`).
fn uniform(key: u64, i: u64) -> f32 {
    let h = mix(key.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    ((h >> 40) as f32) * (1.0 / (1u64 << 24) as f32) - 0.5
}

/// The initial fp32 master parameters of `layer` from index `offset` (uniform in ±0.05).
pub fn fill_init(seed: u64, layer: usize, offset: usize, out: &mut [f32]) {
    let key = stream_key(seed, layer as u64, u64::MAX);
    for (k, x) in out.iter_mut().enumerate() {
        *x = 0.1 * uniform(key, (offset + k) as u64);
    }
}

/// The emulated aggregated gradient of `layer` in step `step` (1-based) from index `offset`,
/// uniform in ±0.5 and rounded to bf16 as it arrives from bf16 training.
pub fn fill_gradients(seed: u64, step: u64, layer: usize, offset: usize, out: &mut [f32]) {
    let key = stream_key(seed, layer as u64, step);
    for (k, x) in out.iter_mut().enumerate() {
        let g = uniform(key, (offset + k) as u64);
        *x = f32::from_bits(u32::from(f32_to_bf16(g)) << 16);
    }
}

/// Run `steps` Adam steps in memory over the same initial states and gradients as the store:
/// the reference the out-of-core optimizer must equal bit for bit. Returns (params, m, v) per
/// layer.
pub fn in_memory_reference(
    layer_params: &[usize],
    seed: u64,
    hp: AdamParams,
    steps: u64,
) -> Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    layer_params
        .iter()
        .enumerate()
        .map(|(layer, &n)| {
            let mut p = vec![0.0f32; n];
            fill_init(seed, layer, 0, &mut p);
            let (mut m, mut v, mut g) = (vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]);
            for step in 1..=steps {
                fill_gradients(seed, step, layer, 0, &mut g);
                AdamStep::new(hp, step).apply(&mut p, &mut m, &mut v, &g);
            }
            (p, m, v)
        })
        .collect()
}

/// One shard's fp32 states in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardState {
    pub params: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
}

impl ShardState {
    /// Append the state file of `sh` after step `step` to `out`.
    pub fn encode_into(&self, sh: &Shard, step: u64, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + HEADER_BYTES, 0);
        for part in [&self.params, &self.m, &self.v] {
            for x in part.iter() {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        fill_header(&mut out[start..], FileKind::State, sh, step);
    }

    /// Append the bf16 parameter file of `sh` after step `step` to `out`.
    pub fn encode_bf16_into(&self, sh: &Shard, step: u64, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + HEADER_BYTES, 0);
        for x in &self.params {
            out.extend_from_slice(&f32_to_bf16(*x).to_le_bytes());
        }
        fill_header(&mut out[start..], FileKind::Params, sh, step);
    }

    /// The state file of `sh` after step `step`.
    pub fn encode(&self, sh: &Shard, step: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + 12 * self.params.len());
        self.encode_into(sh, step, &mut out);
        out
    }

    /// The bf16 parameter file of `sh` after step `step`.
    pub fn encode_bf16(&self, sh: &Shard, step: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + 2 * self.params.len());
        self.encode_bf16_into(sh, step, &mut out);
        out
    }

    /// The shard's whole region (state file then bf16 file) after step `step`.
    pub fn encode_region(&self, sh: &Shard, step: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(shard_bytes(self.params.len()) as usize);
        self.encode_into(sh, step, &mut out);
        self.encode_bf16_into(sh, step, &mut out);
        out
    }

    /// Decode a state file read from `path`, checking it is `sh`'s after step `step`.
    pub fn decode(
        path: &Path,
        bytes: &[u8],
        sh: &Shard,
        step: u64,
    ) -> Result<ShardState, OocError> {
        let payload = check_header(path, bytes, FileKind::State, sh, step)?;
        let n = sh.len;
        let f = |k: usize| -> Vec<f32> {
            payload[4 * k * n..4 * (k + 1) * n]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        Ok(ShardState {
            params: f(0),
            m: f(1),
            v: f(2),
        })
    }
}

/// Check a bf16 parameter file read from `path` is `sh`'s after step `step`, intact.
pub fn check_bf16(path: &Path, bytes: &[u8], sh: &Shard, step: u64) -> Result<(), OocError> {
    check_header(path, bytes, FileKind::Params, sh, step).map(|_| ())
}

/// Decode a bf16 parameter file read from `path`, checking it is `sh`'s after step `step`.
pub fn decode_bf16(path: &Path, bytes: &[u8], sh: &Shard, step: u64) -> Result<Vec<u16>, OocError> {
    let payload = check_header(path, bytes, FileKind::Params, sh, step)?;
    Ok(payload
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect())
}

/// Fill the header of `file` (header then payload) in place.
fn fill_header(file: &mut [u8], kind: FileKind, sh: &Shard, step: u64) {
    let crc = crc32fast::hash(&file[HEADER_BYTES..]);
    let mut h = Vec::with_capacity(HEADER_BYTES);
    h.extend_from_slice(STATE_MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(&kind.code().to_le_bytes());
    h.extend_from_slice(&(sh.layer as u32).to_le_bytes());
    h.extend_from_slice(&(sh.shard as u32).to_le_bytes());
    h.extend_from_slice(&step.to_le_bytes());
    h.extend_from_slice(&(sh.len as u64).to_le_bytes());
    h.extend_from_slice(&crc.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    file[..HEADER_BYTES].copy_from_slice(&h);
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn check_header<'a>(
    path: &Path,
    bytes: &'a [u8],
    kind: FileKind,
    sh: &Shard,
    step: u64,
) -> Result<&'a [u8], OocError> {
    let expected = (HEADER_BYTES + kind.bytes_per_param() * sh.len) as u64;
    if (bytes.len() as u64) < expected {
        return Err(OocError::Truncated {
            path: path.to_path_buf(),
            got: bytes.len() as u64,
            expected,
        });
    }
    let corrupt = |what: String| OocError::Corrupt {
        path: path.to_path_buf(),
        what,
    };
    if &bytes[..8] != STATE_MAGIC || u32_at(bytes, 8) != VERSION || u32_at(bytes, 12) != kind.code()
    {
        return Err(corrupt("not a state file of this version and kind".into()));
    }
    let (layer, shard) = (u32_at(bytes, 16) as usize, u32_at(bytes, 20) as usize);
    let (got_step, len) = (u64_at(bytes, 24), u64_at(bytes, 32));
    if layer != sh.layer || shard != sh.shard || len != sh.len as u64 {
        return Err(corrupt(format!(
            "it holds layer {layer} shard {shard} of {len} parameters, expected layer {} shard {} of {}",
            sh.layer, sh.shard, sh.len
        )));
    }
    if got_step != step {
        return Err(corrupt(format!(
            "it holds the state after step {got_step}, expected step {step}"
        )));
    }
    if bytes.len() as u64 != expected {
        return Err(corrupt(format!(
            "it has {} bytes, expected {expected}",
            bytes.len()
        )));
    }
    let payload = &bytes[HEADER_BYTES..];
    if crc32fast::hash(payload) != u32_at(bytes, 40) {
        return Err(corrupt("its checksum does not match its contents".into()));
    }
    Ok(payload)
}

/// Read a whole file.
pub fn read_all(path: &Path) -> Result<Vec<u8>, OocError> {
    let mut f = File::open(path).map_err(|e| OocError::io(path, e))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).map_err(|e| OocError::io(path, e))?;
    Ok(buf)
}

/// Write a whole file and fsync it (the slot it goes to is not committed, so no rename needed).
pub fn write_all_synced(path: &Path, bytes: &[u8]) -> Result<(), OocError> {
    let mut f = File::create(path).map_err(|e| OocError::io(path, e))?;
    f.write_all(bytes).map_err(|e| OocError::io(path, e))?;
    f.sync_data().map_err(|e| OocError::io(path, e))
}

/// Ask the kernel to drop `path`'s pages from the page cache (after an fsync, so they are
/// clean), so that the next read comes from the device; returns whether the kernel accepted. Only
/// on Linux (`posix_fadvise(POSIX_FADV_DONTNEED)`); elsewhere it does nothing and returns false.
pub fn evict_from_page_cache(path: &Path) -> Result<bool, OocError> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let f = File::open(path).map_err(|e| OocError::io(path, e))?;
        // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is open for
        // the duration of the call.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        Ok(rc == 0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        Ok(false)
    }
}

fn sync_dir(dir: &Path) -> Result<(), OocError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| OocError::io(dir, e))
}

/// The state files under a root: layout, seed and the committed step.
#[derive(Debug, Clone)]
pub struct Store {
    pub root: PathBuf,
    pub layout: Layout,
    pub seed: u64,
    /// Adam steps applied to the committed state.
    pub committed: u64,
    /// Whether a commit fsyncs the step's slot files (durable across a power loss) or only
    /// orders the manifest after the writes (safe when the process is killed: the page cache
    /// survives the process). See [`crate::pipeline::Durability`].
    pub durable: bool,
}

fn open_slot(path: &Path, size: u64) -> Result<File, OocError> {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| OocError::io(path, e))?;
    f.set_len(size).map_err(|e| OocError::io(path, e))?;
    Ok(f)
}

impl Store {
    /// Create `root` (if needed), its SSD directories and their slot files, and the seeded
    /// initial state (step 0).
    pub fn create(
        root: &Path,
        ssds: usize,
        layer_params: &[usize],
        seed: u64,
        durable: bool,
    ) -> Result<Store, OocError> {
        let layout = Layout::new(ssds, layer_params)?;
        // A stale manifest must not survive into the new state while it is being written.
        let mpath = root.join("MANIFEST");
        match fs::remove_file(&mpath) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(OocError::io(&mpath, e)),
        }
        let mut slots = Vec::with_capacity(ssds);
        for k in 0..ssds {
            let d = root.join(format!("ssd{k}"));
            fs::create_dir_all(&d).map_err(|e| OocError::io(&d, e))?;
            slots.push(open_slot(&slot_path(root, k, 0), layout.slot_bytes(k))?);
            open_slot(&slot_path(root, k, 1), layout.slot_bytes(k))?;
        }
        for layer in 0..layout.layers() {
            for sh in layout.shards(layer) {
                let mut params = vec![0.0f32; sh.len];
                fill_init(seed, layer, sh.offset, &mut params);
                let st = ShardState {
                    params,
                    m: vec![0.0; sh.len],
                    v: vec![0.0; sh.len],
                };
                let path = slot_path(root, sh.ssd, 0);
                let (off, _) = layout.region(sh, FileKind::State);
                use std::os::unix::fs::FileExt;
                slots[sh.ssd]
                    .write_all_at(&st.encode_region(sh, 0), off)
                    .map_err(|e| OocError::io(&path, e))?;
            }
        }
        let mut store = Store {
            root: root.to_path_buf(),
            layout,
            seed,
            committed: 0,
            durable,
        };
        store.commit(0)?;
        Ok(store)
    }

    /// Open an existing store (not durable until told).
    pub fn open(root: &Path) -> Result<Store, OocError> {
        if !root.is_dir() {
            return Err(OocError::MissingDir {
                path: root.to_path_buf(),
            });
        }
        let mpath = root.join("MANIFEST");
        let b = read_all(&mpath)?;
        let corrupt = |what: &str| OocError::Corrupt {
            path: mpath.clone(),
            what: what.into(),
        };
        if b.len() < 40 {
            return Err(OocError::Truncated {
                path: mpath.clone(),
                got: b.len() as u64,
                expected: 40,
            });
        }
        if &b[..8] != MANIFEST_MAGIC || u32_at(&b, 8) != VERSION {
            return Err(corrupt("not a manifest of this version"));
        }
        let ssds = u32_at(&b, 12) as usize;
        let layers = u32_at(&b, 16) as usize;
        let seed = u64_at(&b, 20);
        let committed = u64_at(&b, 28);
        let expected = 36 + 8 * layers + 4;
        if b.len() != expected {
            return Err(OocError::Truncated {
                path: mpath.clone(),
                got: b.len() as u64,
                expected: expected as u64,
            });
        }
        if crc32fast::hash(&b[..expected - 4]) != u32_at(&b, expected - 4) {
            return Err(corrupt("its checksum does not match its contents"));
        }
        let layer_params: Vec<usize> = (0..layers)
            .map(|l| u64_at(&b, 36 + 8 * l) as usize)
            .collect();
        let layout = Layout::new(ssds, &layer_params)?;
        for k in 0..ssds {
            let d = root.join(format!("ssd{k}"));
            if !d.is_dir() {
                return Err(OocError::MissingDir { path: d });
            }
        }
        Ok(Store {
            root: root.to_path_buf(),
            layout,
            seed,
            committed,
            durable: false,
        })
    }

    /// Atomically record that the state after `step` is complete on the SSDs: (durable) fsync
    /// every SSD's slot file of `step` and the SSD directories, then replace the manifest by
    /// write-to-temporary, fsync, rename, fsync of the root.
    pub fn commit(&mut self, step: u64) -> Result<(), OocError> {
        if self.durable {
            for k in 0..self.layout.ssds {
                let p = slot_path(&self.root, k, step);
                File::open(&p)
                    .and_then(|f| f.sync_data())
                    .map_err(|e| OocError::io(&p, e))?;
                sync_dir(&self.root.join(format!("ssd{k}")))?;
            }
        }
        let mut b = Vec::new();
        b.extend_from_slice(MANIFEST_MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(self.layout.ssds as u32).to_le_bytes());
        b.extend_from_slice(&(self.layout.layers() as u32).to_le_bytes());
        b.extend_from_slice(&self.seed.to_le_bytes());
        b.extend_from_slice(&step.to_le_bytes());
        for &n in &self.layout.layer_params {
            b.extend_from_slice(&(n as u64).to_le_bytes());
        }
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        let tmp = self.root.join("MANIFEST.tmp");
        write_all_synced(&tmp, &b)?;
        let dst = self.root.join("MANIFEST");
        fs::rename(&tmp, &dst).map_err(|e| OocError::io(&dst, e))?;
        sync_dir(&self.root)?;
        self.committed = step;
        Ok(())
    }

    /// Read and check one shard's file of `kind` from the slot holding the state after `step`.
    pub fn read_file(&self, sh: &Shard, kind: FileKind, step: u64) -> Result<Vec<u8>, OocError> {
        let path = slot_path(&self.root, sh.ssd, step);
        let (off, len) = self.layout.region(sh, kind);
        read_region(&path, off, len)
    }

    /// Read one layer's committed fp32 states (params, m, v) whole, checking that its bf16
    /// parameters are the rounded master parameters.
    pub fn load_layer(&self, layer: usize) -> Result<ShardState, OocError> {
        let n = self.layout.layer_params[layer];
        let mut out = ShardState {
            params: vec![0.0; n],
            m: vec![0.0; n],
            v: vec![0.0; n],
        };
        let step = self.committed;
        for sh in self.layout.shards(layer) {
            let path = slot_path(&self.root, sh.ssd, step);
            let st =
                ShardState::decode(&path, &self.read_file(sh, FileKind::State, step)?, sh, step)?;
            let r = sh.offset..sh.offset + sh.len;
            out.params[r.clone()].copy_from_slice(&st.params);
            out.m[r.clone()].copy_from_slice(&st.m);
            out.v[r].copy_from_slice(&st.v);
            let bf = decode_bf16(
                &path,
                &self.read_file(sh, FileKind::Params, step)?,
                sh,
                step,
            )?;
            if bf
                .iter()
                .zip(&st.params)
                .any(|(&h, &p)| h != f32_to_bf16(p))
            {
                return Err(OocError::Corrupt {
                    path,
                    what: "its bf16 parameters are not the rounded master parameters".into(),
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_covers_every_parameter_once_and_rotates_ssds() {
        let l = Layout::new(4, &[10, 3, 8]).unwrap();
        for (layer, &n) in [10usize, 3, 8].iter().enumerate() {
            let sh = l.shards(layer);
            assert_eq!(sh.iter().map(|s| s.len).sum::<usize>(), n);
            let mut off = 0;
            for s in sh {
                assert_eq!(s.offset, off);
                off += s.len;
                assert_eq!(s.ssd, (layer + s.shard) % 4);
            }
        }
        assert_eq!(l.shards(1).len(), 3);
        assert_eq!(
            l.shards(0).iter().map(|s| s.len).collect::<Vec<_>>(),
            [3, 3, 2, 2]
        );
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3F80);
        // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0)
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3F80);
        // 1 + 3 * 2^-8 is halfway between 0x3F81 and 0x3F82: ties to even (0x3F82)
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0), 0x3F82);
        assert_eq!(f32_to_bf16(-2.0), 0xC000);
    }

    #[test]
    fn chunked_gradients_equal_whole_layer_gradients() {
        let mut whole = vec![0.0; 100];
        fill_gradients(3, 2, 5, 0, &mut whole);
        let mut part = vec![0.0; 40];
        fill_gradients(3, 2, 5, 60, &mut part);
        assert_eq!(&whole[60..], &part[..]);
        let mut other = vec![0.0; 100];
        fill_gradients(3, 3, 5, 0, &mut other);
        assert_ne!(whole, other);
    }

    #[test]
    fn encode_decode_roundtrip_and_checks() {
        let sh = Shard {
            layer: 2,
            shard: 1,
            ssd: 3,
            offset: 0,
            len: 5,
        };
        let st = ShardState {
            params: vec![1.0, 2.0, 3.0, 4.0, 5.0],
            m: vec![0.1; 5],
            v: vec![0.2; 5],
        };
        let p = Path::new("x");
        let b = st.encode(&sh, 7);
        assert_eq!(ShardState::decode(p, &b, &sh, 7).unwrap(), st);
        assert!(matches!(
            ShardState::decode(p, &b, &sh, 6),
            Err(OocError::Corrupt { .. })
        ));
        assert!(matches!(
            ShardState::decode(p, &b[..b.len() - 1], &sh, 7),
            Err(OocError::Truncated { .. })
        ));
        let mut flipped = b.clone();
        flipped[HEADER_BYTES + 3] ^= 1;
        assert!(matches!(
            ShardState::decode(p, &flipped, &sh, 7),
            Err(OocError::Corrupt { .. })
        ));
    }
}

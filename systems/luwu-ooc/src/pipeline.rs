//! The optimizer node's runtime: real threads and real file I/O around the sans-IO
//! [`Scheduler`] and [`SsdQueues`].
//!
//! Threads: the caller's thread is the coordinator (it owns the scheduler and the layer buffers
//! and rotates tasks between queues); each emulated SSD has a read thread (serving its read
//! parameters queue before its read model states queue) and a write thread (its write model
//! states queue), each throttled by its own token bucket, because an NVMe SSD serves reads and
//! writes concurrently and the paper quotes its SSDs' bandwidth per direction under a 1:1 mix
//! (Sec. 4.1: "26 GB/s per direction with 1:1 mixed read/write" over 12 SSDs); one Adam thread
//! (the CPU update queue); one thread emulating the workers (compute per layer, then the
//! layer's aggregated gradients arrive). The network is not modelled here (pushes and gradient
//! arrivals are immediate); the fig15 model accounts for it.
//!
//! The page cache: without a throttle, reads of freshly written slots come from this host's
//! memory and (with [`Durability::ProcessKill`]) writes go to it, so unthrottled numbers are
//! optimistic about the SSDs; the throttle charges every byte at the emulated SSD's rate
//! whatever the host did (a request that took the host longer is not charged twice). The bench
//! `luwu_ooc` measures this host's storage with the page cache evicted.

use crate::OocError;
use crate::sched::{Action, Event, IoKind, Phase, Scheduler, SsdQueues};
use crate::store::{self, FileKind, Shard, ShardState, Store, slot_path};
use crate::throttle::TokenBucket;
use inabench_train::adam::{AdamParams, AdamStep};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Buffer sets of the node: the number of layer tasks holding buffers at once (the prefetch
/// depth). The paper does not give it; at OPT-175B scale one backward task's buffers are about
/// 1.8 G parameters x 18 bytes (bf16 parameters, fp32 states, fp32 gradients) = 33 GB, so a few
/// fit in a server's memory; we take 4.
pub const BUFFER_SETS: usize = 4;

/// One emulated training run through the out-of-core optimizer.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Holds the emulated SSD directories `ssd0..ssd{N-1}` (and the commit manifest).
    pub root: PathBuf,
    pub ssds: usize,
    /// Parameters per layer.
    pub layer_params: Vec<usize>,
    /// Per-SSD throttle, MB/s (10^6 bytes) per direction; `None`: unthrottled.
    pub ssd_mbps: Option<f64>,
    pub iterations: usize,
    /// Emulated worker compute per layer, forward.
    pub fwd_compute: Vec<Duration>,
    /// And backward (the gradients of a layer arrive after its backward compute).
    pub bwd_compute: Vec<Duration>,
    pub adam: AdamParams,
    pub seed: u64,
}

/// What a run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PipelineReport {
    pub iter_times: Vec<Duration>,
    /// Per iteration: the busiest SSD's busy time (the longer of its read and write threads'
    /// busy times, throttle waits included).
    pub ssd_time: Vec<Duration>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Parameters updated by Adam.
    pub updates: u64,
}

/// What a committed step survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// The process being killed (the default): writes go to the page cache and the manifest is
    /// replaced atomically after them; no data fsync, so the emulated SSDs' throttle, not this
    /// host's disk, sets the I/O time.
    #[default]
    ProcessKill,
    /// A power loss as well: every write starts its writeback at once and a commit fsyncs the
    /// step's slot files before the manifest; this host's disk then bounds the I/O time.
    PowerLoss,
}

/// Create and initialise the state files under `cfg.root` (seeded), run `cfg.iterations`
/// iterations with the emulated compute and the gradient arrivals it implies, and report.
pub fn run(cfg: &PipelineConfig, cancel: &AtomicBool) -> Result<PipelineReport, OocError> {
    run_with(cfg, Durability::default(), cancel)
}

/// [`run`] with a chosen durability.
pub fn run_with(
    cfg: &PipelineConfig,
    durability: Durability,
    cancel: &AtomicBool,
) -> Result<PipelineReport, OocError> {
    check(cfg)?;
    let durable = durability == Durability::PowerLoss;
    let mut store = Store::create(&cfg.root, cfg.ssds, &cfg.layer_params, cfg.seed, durable)?;
    run_store(&mut store, cfg, cancel)
}

/// Continue the run of `cfg` from the state committed under `cfg.root` (after a crash or a
/// cancel) until `cfg.iterations` steps are committed; creates the state if there is none.
/// The report covers the iterations run by this call.
pub fn resume(cfg: &PipelineConfig, cancel: &AtomicBool) -> Result<PipelineReport, OocError> {
    resume_with(cfg, Durability::default(), cancel)
}

/// [`resume`] with a chosen durability.
pub fn resume_with(
    cfg: &PipelineConfig,
    durability: Durability,
    cancel: &AtomicBool,
) -> Result<PipelineReport, OocError> {
    check(cfg)?;
    if !cfg.root.join("MANIFEST").exists() {
        return run_with(cfg, durability, cancel);
    }
    let mut store = Store::open(&cfg.root)?;
    store.durable = durability == Durability::PowerLoss;
    let mismatch = |what: String| OocError::Mismatch {
        path: cfg.root.clone(),
        what,
    };
    if store.layout.ssds != cfg.ssds || store.layout.layer_params != cfg.layer_params {
        return Err(mismatch("its SSD count or layer sizes differ".into()));
    }
    if store.seed != cfg.seed {
        return Err(mismatch(format!(
            "its seed is {}, not {}",
            store.seed, cfg.seed
        )));
    }
    run_store(&mut store, cfg, cancel)
}

fn check(cfg: &PipelineConfig) -> Result<(), OocError> {
    let l = cfg.layer_params.len();
    if cfg.fwd_compute.len() != l || cfg.bwd_compute.len() != l {
        return Err(OocError::Config(format!(
            "{l} layers but {} forward and {} backward compute times",
            cfg.fwd_compute.len(),
            cfg.bwd_compute.len()
        )));
    }
    if let Some(r) = cfg.ssd_mbps
        && !(r.is_finite() && r > 0.0)
    {
        return Err(OocError::Config(format!(
            "the SSD throttle must be a positive rate, got {r} MB/s"
        )));
    }
    Ok(())
}

/// What an I/O thread did.
enum IoData {
    Params,
    States(ShardState),
    Written,
}

/// A queued request.
struct IoJob {
    shard: Shard,
    /// The step whose committed state a read reads, or whose new state a write writes.
    step: u64,
    /// For writes: the shard's encoded region (state and bf16 files).
    data: Option<Vec<u8>>,
}

enum Msg {
    Io {
        kind: IoKind,
        shard: Shard,
        result: Result<IoData, OocError>,
        bytes: u64,
    },
    Want {
        phase: Phase,
        layer: usize,
    },
    Grads {
        layer: usize,
        grads: Vec<f32>,
    },
    Updated {
        layer: usize,
        shards: Vec<EncodedShard>,
    },
}

/// A shard's updated region (state and bf16 files), encoded.
type EncodedShard = (Shard, Vec<u8>);

struct SsdShared {
    queues: SsdQueues<IoJob>,
    shutdown: bool,
    /// Busy time of the read and write threads since the last reset.
    busy: [Duration; 2],
}

type Ssd = Arc<(Mutex<SsdShared>, Condvar)>;

fn lock(ssd: &Ssd) -> Result<std::sync::MutexGuard<'_, SsdShared>, OocError> {
    ssd.0
        .lock()
        .map_err(|_| OocError::Runtime("an SSD thread panicked".into()))
}

fn io_thread(st: &Store, ssd: Ssd, write: bool, mbps: Option<f64>, tx: Sender<Msg>) {
    let mut bucket = mbps.map(TokenBucket::mbps);
    loop {
        let job = {
            let Ok(mut g) = ssd.0.lock() else { return };
            loop {
                if g.shutdown {
                    return;
                }
                let j = if write {
                    g.queues.pop_write()
                } else {
                    g.queues.pop_read()
                };
                if let Some(j) = j {
                    break j;
                }
                g = match ssd.1.wait(g) {
                    Ok(g) => g,
                    Err(_) => return,
                };
            }
        };
        let (kind, job) = job;
        let t0 = Instant::now();
        let (result, bytes) = serve(st, kind, &job);
        if let Some(b) = bucket.as_mut() {
            std::thread::sleep(b.take(Instant::now(), bytes));
        }
        let busy = t0.elapsed();
        if let Ok(mut g) = ssd.0.lock() {
            g.busy[usize::from(write)] += busy;
        }
        let msg = Msg::Io {
            kind,
            shard: job.shard,
            result,
            bytes,
        };
        if tx.send(msg).is_err() {
            return;
        }
    }
}

fn serve(st: &Store, kind: IoKind, job: &IoJob) -> (Result<IoData, OocError>, u64) {
    let sh = &job.shard;
    let path = slot_path(&st.root, sh.ssd, job.step);
    match kind {
        IoKind::ReadParams | IoKind::ReadStates => {
            let file = if kind == IoKind::ReadParams {
                FileKind::Params
            } else {
                FileKind::State
            };
            match st.read_file(sh, file, job.step) {
                Ok(b) => {
                    let n = b.len() as u64;
                    let r = if file == FileKind::Params {
                        // the parameters go to the workers; checking them catches a torn region
                        store::check_bf16(&path, &b, sh, job.step).map(|()| IoData::Params)
                    } else {
                        ShardState::decode(&path, &b, sh, job.step).map(IoData::States)
                    };
                    (r, n)
                }
                Err(e) => (Err(e), 0),
            }
        }
        IoKind::WriteStates => {
            let Some(region) = &job.data else {
                return (Err(OocError::Runtime("a write without data".into())), 0);
            };
            let (off, _) = st.layout.region(sh, FileKind::State);
            let r = store::write_region(&path, off, region, st.durable).map(|()| IoData::Written);
            (r, region.len() as u64)
        }
    }
}

struct AdamJob {
    layer: usize,
    step: u64,
    shards: Vec<(Shard, ShardState)>,
    grads: Vec<f32>,
}

fn adam_thread(hp: AdamParams, rx: Receiver<AdamJob>, tx: Sender<Msg>) {
    while let Ok(mut job) = rx.recv() {
        let s = AdamStep::new(hp, job.step);
        let mut out = Vec::with_capacity(job.shards.len());
        for (sh, st) in job.shards.iter_mut() {
            let g = &job.grads[sh.offset..sh.offset + sh.len];
            s.apply(&mut st.params, &mut st.m, &mut st.v, g);
            out.push((*sh, st.encode_region(sh, job.step)));
        }
        if tx
            .send(Msg::Updated {
                layer: job.layer,
                shards: out,
            })
            .is_err()
        {
            return;
        }
    }
}

/// The workers: for each step, forward then backward over the layers, asking for each layer's
/// parameters, computing for the configured time, and (backward) delivering its gradients.
fn worker_thread(cfg: &PipelineConfig, rx: Receiver<u64>, pushed: Receiver<()>, tx: Sender<Msg>) {
    let l = cfg.layer_params.len();
    while let Ok(step) = rx.recv() {
        for e in 0..2 * l {
            let (phase, layer) = if e < l {
                (Phase::Fwd, e)
            } else {
                (Phase::Bwd, 2 * l - 1 - e)
            };
            if tx.send(Msg::Want { phase, layer }).is_err() || pushed.recv().is_err() {
                return;
            }
            let start = Instant::now();
            let compute = match phase {
                Phase::Fwd => cfg.fwd_compute[layer],
                Phase::Bwd => cfg.bwd_compute[layer],
            };
            let grads = (phase == Phase::Bwd).then(|| {
                let mut g = vec![0.0f32; cfg.layer_params[layer]];
                store::fill_gradients(cfg.seed, step, layer, 0, &mut g);
                g
            });
            // generating the gradients counts as part of the emulated compute
            std::thread::sleep(compute.saturating_sub(start.elapsed()));
            if let Some(grads) = grads
                && tx.send(Msg::Grads { layer, grads }).is_err()
            {
                return;
            }
        }
    }
}

#[derive(Default)]
struct LayerBuf {
    states: Vec<(Shard, ShardState)>,
    grads: Option<Vec<f32>>,
}

fn run_store(
    store: &mut Store,
    cfg: &PipelineConfig,
    cancel: &AtomicBool,
) -> Result<PipelineReport, OocError> {
    let ssds: Vec<Ssd> = (0..cfg.ssds)
        .map(|_| {
            Arc::new((
                Mutex::new(SsdShared {
                    queues: SsdQueues::default(),
                    shutdown: false,
                    busy: [Duration::ZERO; 2],
                }),
                Condvar::new(),
            ))
        })
        .collect();
    let (tx, rx) = mpsc::channel::<Msg>();
    let shared: Store = store.clone();
    std::thread::scope(|scope| {
        for ssd in &ssds {
            for write in [false, true] {
                let (ssd, tx, st) = (ssd.clone(), tx.clone(), &shared);
                scope.spawn(move || io_thread(st, ssd, write, cfg.ssd_mbps, tx));
            }
        }
        let (adam_tx, adam_rx) = mpsc::channel::<AdamJob>();
        let tx_adam = tx.clone();
        scope.spawn(move || adam_thread(cfg.adam, adam_rx, tx_adam));
        let (step_tx, step_rx) = mpsc::channel::<u64>();
        let (push_tx, push_rx) = mpsc::channel::<()>();
        let tx_worker = tx.clone();
        scope.spawn(move || worker_thread(cfg, step_rx, push_rx, tx_worker));
        drop(tx);
        let r = coordinate(store, cfg, cancel, &ssds, &rx, &adam_tx, &step_tx, &push_tx);
        // stop every thread: SSD threads by flag, the others by closing their channels
        for ssd in &ssds {
            if let Ok(mut g) = ssd.0.lock() {
                g.shutdown = true;
            }
            ssd.1.notify_all();
        }
        drop((adam_tx, step_tx, push_tx));
        drop(rx);
        r
    })
}

#[allow(clippy::too_many_arguments)]
fn coordinate(
    store: &mut Store,
    cfg: &PipelineConfig,
    cancel: &AtomicBool,
    ssds: &[Ssd],
    rx: &Receiver<Msg>,
    adam_tx: &Sender<AdamJob>,
    step_tx: &Sender<u64>,
    push_tx: &Sender<()>,
) -> Result<PipelineReport, OocError> {
    let gone = || OocError::Runtime("a pipeline thread exited early".into());
    let lost =
        |layer: usize| move || OocError::Runtime(format!("the buffers of layer {layer} were lost"));
    let mut report = PipelineReport::default();
    let target = cfg.iterations as u64;
    while store.committed < target {
        let step = store.committed + 1;
        for ssd in ssds {
            lock(ssd)?.busy = [Duration::ZERO; 2];
        }
        let t0 = Instant::now();
        let mut sched = Scheduler::new(store.layout.clone(), BUFFER_SETS);
        let mut bufs: HashMap<usize, LayerBuf> = HashMap::new();
        let mut pending_writes: HashMap<usize, Vec<EncodedShard>> = HashMap::new();
        step_tx.send(step).map_err(|_| gone())?;
        loop {
            // carry out every action the scheduler has
            while let Some(a) = sched.poll() {
                match a {
                    Action::Io { kind, shard, .. } => {
                        let job = if kind == IoKind::WriteStates {
                            let w = pending_writes
                                .get_mut(&shard.layer)
                                .ok_or_else(lost(shard.layer))?;
                            let pos = w
                                .iter()
                                .position(|(s, _)| s.shard == shard.shard)
                                .ok_or_else(lost(shard.layer))?;
                            let (_, region) = w.swap_remove(pos);
                            IoJob {
                                shard,
                                step,
                                data: Some(region),
                            }
                        } else {
                            IoJob {
                                shard,
                                step: step - 1,
                                data: None,
                            }
                        };
                        let ssd = &ssds[shard.ssd];
                        lock(ssd)?.queues.push(kind, job);
                        ssd.1.notify_all();
                    }
                    Action::Push { .. } => push_tx.send(()).map_err(|_| gone())?,
                    Action::Update { layer } => {
                        let b = bufs.remove(&layer).ok_or_else(lost(layer))?;
                        let grads = b.grads.ok_or_else(lost(layer))?;
                        let mut shards = b.states;
                        shards.sort_by_key(|(s, _)| s.shard);
                        adam_tx
                            .send(AdamJob {
                                layer,
                                step,
                                shards,
                                grads,
                            })
                            .map_err(|_| gone())?;
                    }
                    Action::Commit => {}
                }
            }
            if sched.done() {
                break;
            }
            let msg = loop {
                if cancel.load(Ordering::Relaxed) {
                    return Err(OocError::Cancelled);
                }
                match rx.recv_timeout(Duration::from_millis(20)) {
                    Ok(m) => break m,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return Err(gone()),
                }
            };
            let ev = match msg {
                Msg::Io {
                    kind,
                    shard,
                    result,
                    bytes,
                } => {
                    match result? {
                        IoData::Params => report.bytes_read += bytes,
                        IoData::States(st) => {
                            report.bytes_read += bytes;
                            bufs.entry(shard.layer)
                                .or_default()
                                .states
                                .push((shard, st));
                        }
                        IoData::Written => report.bytes_written += bytes,
                    }
                    Event::IoDone {
                        kind,
                        layer: shard.layer,
                        shard: shard.shard,
                    }
                }
                Msg::Want { phase, layer } => Event::Want { phase, layer },
                Msg::Grads { layer, grads } => {
                    bufs.entry(layer).or_default().grads = Some(grads);
                    Event::Grads { layer }
                }
                Msg::Updated { layer, shards } => {
                    report.updates += cfg.layer_params[layer] as u64;
                    pending_writes.insert(layer, shards);
                    Event::Updated { layer }
                }
            };
            sched.handle(ev)?;
        }
        store.commit(step)?;
        report.iter_times.push(t0.elapsed());
        let mut busiest = Duration::ZERO;
        for ssd in ssds {
            let g = lock(ssd)?;
            busiest = busiest.max(g.busy[0]).max(g.busy[1]);
        }
        report.ssd_time.push(busiest);
    }
    Ok(report)
}

//! The emulated testbed of ALEPH Sec. 6.3 on this machine: one network namespace per machine on
//! the suite's bridge (`inabench_fabric::netns`), each machine's link limited by `tbf` in both
//! directions at its own rate, and the TCP data planes (BytePS-style PS, ALEPH's hierarchy with
//! its TCP aggregation service, Horovod-style ring all-reduce) run by threads whose sockets were
//! made inside the machines' namespaces. Every aggregate is compared with the reference sum.
//!
//! Bytes are counted where the data planes write them (TCP payload: chunk headers and
//! gradients), per machine, so all systems are compared on the same count.

use super::TestbedError;
use super::proto::{self, Summer};
use inabench_fabric::netns::Netns;
use inabench_xdp::netns::in_netns;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;

/// TCP port of the aggregation service and of the ring.
pub const TCP_PORT: u16 = 41_460;
/// How long a read may wait before the iteration fails.
const IO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

fn run(args: &[&str]) -> Result<(), TestbedError> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| TestbedError::Setup(format!("cannot run `{}`: {e}", args.join(" "))))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TestbedError::Setup(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Machines in namespaces with per-machine rate limits; removed on drop.
#[derive(Debug)]
pub struct Testbed {
    pub net: Netns,
    pub rates_mbit: Vec<f64>,
}

impl Testbed {
    /// One machine per rate (Mbit/s), each limited to its rate in both directions.
    pub fn create(rates_mbit: &[f64]) -> Result<Testbed, TestbedError> {
        if !inabench_fabric::netns::is_root() {
            return Err(TestbedError::NotRoot);
        }
        let net = Netns::create(rates_mbit.len(), None)
            .map_err(|e| TestbedError::Setup(e.to_string()))?;
        let tb = Testbed {
            net,
            rates_mbit: rates_mbit.to_vec(),
        };
        for (i, r) in rates_mbit.iter().enumerate() {
            let rate = format!("{}kbit", (r * 1000.0).round() as u64);
            let ns = tb.ns(i).to_string();
            let (tag, idx) = ns
                .rsplit_once('-')
                .ok_or_else(|| TestbedError::Setup(format!("namespace name {ns}")))?;
            let port = format!("{tag}v{idx}");
            // as inabench_fabric::netns does: the host's egress and the bridge port's egress
            // toward the host; the burst is at least one 10 ms worth at the rate
            let burst = format!("{}kb", ((r * 1e6 / 8.0 * 0.01) / 1024.0).max(64.0).round());
            let tbf = |dev: &str| {
                vec![
                    "tc".to_string(),
                    "qdisc".into(),
                    "add".into(),
                    "dev".into(),
                    dev.to_string(),
                    "root".into(),
                    "tbf".into(),
                    "rate".into(),
                    rate.clone(),
                    "burst".into(),
                    burst.clone(),
                    "latency".into(),
                    "50ms".into(),
                ]
            };
            let mut inside = vec!["ip".to_string(), "netns".into(), "exec".into(), ns.clone()];
            inside.extend(tbf("eth0"));
            run(&inside.iter().map(String::as_str).collect::<Vec<_>>())?;
            run(&tbf(&port).iter().map(String::as_str).collect::<Vec<_>>())?;
        }
        Ok(tb)
    }

    /// `machines` machines without rate limits (the aggregation-throughput measurements).
    pub fn unlimited(machines: usize) -> Result<Testbed, TestbedError> {
        if !inabench_fabric::netns::is_root() {
            return Err(TestbedError::NotRoot);
        }
        let net = Netns::create(machines, None).map_err(|e| TestbedError::Setup(e.to_string()))?;
        Ok(Testbed {
            net,
            rates_mbit: vec![f64::INFINITY; machines],
        })
    }

    pub fn ns(&self, i: usize) -> &str {
        &self.net.hosts[i].namespace
    }

    pub fn ip(&self, i: usize) -> Ipv4Addr {
        self.net.hosts[i].ip
    }

    pub fn machines(&self) -> usize {
        self.net.hosts.len()
    }

    /// The bridge port of machine `i` (its link's far end, in this process's namespace).
    pub fn bridge_port(&self, i: usize) -> Result<String, TestbedError> {
        let ns = self.ns(i);
        let (tag, idx) = ns
            .rsplit_once('-')
            .ok_or_else(|| TestbedError::Setup(format!("namespace name {ns}")))?;
        Ok(format!("{tag}v{idx}"))
    }
}

/// One iteration's measurement.
#[derive(Debug, Clone)]
pub struct Iteration {
    /// From the start until the slowest worker holds the exact aggregate (s).
    pub time: f64,
    /// Per worker: until it held the aggregate (s).
    pub worker_times: Vec<f64>,
    /// Payload bytes each machine sent.
    pub bytes: Vec<u64>,
    /// CPU time (s) of each machine's user-space threads. This kernel charges softirq work to
    /// whatever thread it interrupts (no `CONFIG_IRQ_TIME_ACCOUNTING` on our hosts), so on veth
    /// a sender's time includes part of its peers' receive path, for every data plane alike.
    pub cpu: Vec<f64>,
    /// Run time (s) of each machine's XDP programs, as the kernel's BPF statistics count it
    /// (zero for the TCP data planes).
    pub xdp: Vec<f64>,
}

/// CPU time of the calling thread (s): the fabric's thread clock (`fabric::wrap`, the one
/// definition); 0 where the clock is refused.
pub fn thread_cpu() -> f64 {
    inabench_fabric::wrap::thread_cpu_ns().unwrap_or(0) as f64 * 1e-9
}

pub(super) fn charge(cpu: &AtomicU64, since: f64) {
    let ns = ((thread_cpu() - since).max(0.0) * 1e9) as u64;
    cpu.fetch_add(ns, Ordering::Relaxed);
}

fn io(what: &str) -> impl Fn(std::io::Error) -> TestbedError + '_ {
    move |e| TestbedError::Io(format!("{what}: {e}"))
}

fn listen(tb: &Testbed, i: usize) -> Result<TcpListener, TestbedError> {
    in_netns(Some(tb.ns(i)), || TcpListener::bind(("0.0.0.0", TCP_PORT)))
        .map_err(|e| TestbedError::Setup(e.to_string()))?
        .map_err(io("listen"))
}

fn connect(tb: &Testbed, from: usize, to: usize, hello: u32) -> Result<TcpStream, TestbedError> {
    let addr = (tb.ip(to), TCP_PORT);
    let mut s = in_netns(Some(tb.ns(from)), move || TcpStream::connect(addr))
        .map_err(|e| TestbedError::Setup(e.to_string()))?
        .map_err(io("connect"))?;
    s.set_nodelay(true).map_err(io("nodelay"))?;
    // a peer that failed must not hang the others forever
    s.set_read_timeout(Some(IO_TIMEOUT))
        .map_err(io("timeout"))?;
    s.write_all(&hello.to_be_bytes()).map_err(io("hello"))?;
    Ok(s)
}

fn accept(l: &TcpListener, count: usize) -> Result<Vec<(u32, TcpStream)>, TestbedError> {
    let mut v = Vec::new();
    for _ in 0..count {
        let (mut s, _) = l.accept().map_err(io("accept"))?;
        s.set_nodelay(true).map_err(io("nodelay"))?;
        s.set_read_timeout(Some(IO_TIMEOUT))
            .map_err(io("timeout"))?;
        let mut h = [0u8; 4];
        s.read_exact(&mut h).map_err(io("hello"))?;
        v.push((u32::from_be_bytes(h), s));
    }
    Ok(v)
}

/// A writer thread's feed and its handle.
type Writer<'s> = (
    mpsc::Sender<Arc<Vec<u8>>>,
    std::thread::ScopedJoinHandle<'s, Result<(), TestbedError>>,
);

/// A writer thread's feed: frames written in order, bytes counted for machine `host`.
fn writer<'s>(
    scope: &'s std::thread::Scope<'s, '_>,
    stream: &'s TcpStream,
    counter: &'s AtomicU64,
    cpu: &'s AtomicU64,
) -> Writer<'s> {
    let (tx, rx) = mpsc::channel::<Arc<Vec<u8>>>();
    let h = scope.spawn(move || {
        let t0 = thread_cpu();
        let mut s = stream;
        for f in rx {
            s.write_all(&f).map_err(io("write"))?;
            counter.fetch_add(f.len() as u64, Ordering::Relaxed);
        }
        charge(cpu, t0);
        Ok(())
    });
    (tx, h)
}

fn read_chunk(mut s: &TcpStream) -> Result<(u32, Vec<i32>), TestbedError> {
    let mut h = [0u8; proto::CHUNK_HEADER];
    s.read_exact(&mut h).map_err(io("read"))?;
    let (index, len) = proto::decode_header(&h)?;
    let mut b = vec![0u8; 4 * len];
    s.read_exact(&mut b).map_err(io("read"))?;
    Ok((index, proto::decode_body(&b)))
}

fn join<T>(
    h: std::thread::ScopedJoinHandle<'_, Result<T, TestbedError>>,
) -> Result<T, TestbedError> {
    h.join()
        .map_err(|_| TestbedError::Io("a testbed thread panicked".into()))?
}

/// Check a worker's result against the reference.
fn check(w: usize, got: &[i32], want: &[i32]) -> Result<(), TestbedError> {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        return Err(TestbedError::Wrong(format!(
            "worker {w}: aggregate differs from the reference at gradient {at} of {}",
            want.len()
        )));
    }
    Ok(())
}

/// Where a node's thread counts what it sends and the CPU it uses.
struct NodeIo<'a> {
    counters: &'a [AtomicU64],
    cpu: &'a AtomicU64,
    start: Instant,
}

/// Where a [`TcpTree`] node's threads run.
#[derive(Debug, Clone)]
pub struct NodePin {
    pub cpus: Vec<usize>,
    /// SCHED_FIFO priority (`None`: the normal policy).
    pub fifo: Option<i32>,
}

/// A two-level aggregation tree over TCP: `parent[w]` of each worker is another worker (its
/// aggregator) or `parent.len()` (the PS, machine `parent.len()`). BytePS: every worker's parent
/// is the PS. ALEPH with TCP: the clustering's aggregators sum their members' gradients with
/// their own and send one aggregate to the PS; the PS sends the total down the same tree.
pub struct TcpTree {
    workers: usize,
    parent: Vec<usize>,
    /// Per node (workers, then the PS): `(child worker, stream)`.
    down: Vec<Vec<(usize, TcpStream)>>,
    /// Per worker: the stream to its parent.
    up: Vec<TcpStream>,
    /// Per node (workers, then the PS): where its threads run (`None`: the caller's cores).
    pins: Vec<Option<NodePin>>,
}

impl TcpTree {
    pub fn connect(tb: &Testbed, parent: &[usize]) -> Result<TcpTree, TestbedError> {
        let n = parent.len();
        if tb.machines() != n + 1 {
            return Err(TestbedError::Setup(format!(
                "{n} workers need {} machines",
                n + 1
            )));
        }
        for (w, &p) in parent.iter().enumerate() {
            let pp = parent.get(p).copied();
            if p > n || p == w || pp.is_some_and(|pp| pp != n) {
                return Err(TestbedError::Setup(format!(
                    "worker {w}'s parent {p} is neither the PS nor a worker under it"
                )));
            }
        }
        let mut down = Vec::new();
        let mut listeners = Vec::new();
        for node in 0..=n {
            let kids = parent.iter().filter(|&&p| p == node).count();
            listeners.push(if kids > 0 {
                Some((listen(tb, node)?, kids))
            } else {
                None
            });
        }
        let mut up = Vec::new();
        for (w, &p) in parent.iter().enumerate() {
            up.push(connect(tb, w, p, w as u32)?);
        }
        for l in listeners {
            let mut v = Vec::new();
            if let Some((l, kids)) = l {
                for (id, s) in accept(&l, kids)? {
                    v.push((id as usize, s));
                }
                v.sort_by_key(|(id, _)| *id);
            }
            down.push(v);
        }
        Ok(TcpTree {
            workers: n,
            parent: parent.to_vec(),
            down,
            up,
            pins: Vec::new(),
        })
    }

    /// Run node `i`'s threads (its readers, summer and writers, which inherit the affinity and
    /// the scheduling policy) as `pins[i]` says from the next iteration on (`None` or no entry:
    /// the caller's cores and policy).
    pub fn pin_nodes(&mut self, pins: Vec<Option<NodePin>>) {
        self.pins = pins;
    }

    /// One iteration of `len` gradients per worker.
    pub fn iterate(&self, iter: u32, len: usize) -> Result<Iteration, TestbedError> {
        let n = self.workers;
        let want = proto::reference(n, iter, len);
        let counters: Vec<AtomicU64> = (0..=n).map(|_| AtomicU64::new(0)).collect();
        let cpu: Vec<AtomicU64> = (0..=n).map(|_| AtomicU64::new(0)).collect();
        let grads: Vec<Vec<i32>> = (0..n).map(|w| proto::gradient(w, iter, len)).collect();
        let start = Instant::now();
        let times = std::thread::scope(|sc| -> Result<Vec<f64>, TestbedError> {
            let mut handles = Vec::new();
            for node in 0..=n {
                let (counters, grads, want, cpu) = (&counters, &grads, &want, &cpu);
                let pin = self.pins.get(node).and_then(Option::as_ref);
                let h = sc.spawn(move || {
                    if let Some(p) = pin {
                        super::multicast::pin(0, &p.cpus)?;
                        if let Some(prio) = p.fifo {
                            super::multicast::realtime(0, prio)?;
                        }
                    }
                    let t0 = thread_cpu();
                    let io = NodeIo {
                        counters,
                        cpu: &cpu[node],
                        start,
                    };
                    let r = self.node(node, len, grads, want, &io);
                    charge(&cpu[node], t0);
                    r
                });
                handles.push(h);
            }
            let mut times = Vec::new();
            for h in handles {
                times.push(join(h)?);
            }
            times.truncate(n);
            Ok(times)
        })?;
        Ok(Iteration {
            time: times.iter().copied().fold(0.0, f64::max),
            worker_times: times,
            bytes: counters.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
            cpu: cpu
                .iter()
                .map(|c| c.load(Ordering::Relaxed) as f64 * 1e-9)
                .collect(),
            xdp: vec![0.0; cpu.len()],
        })
    }

    /// Node `node`'s part of an iteration; returns when it holds the total (s after `start`).
    fn node(
        &self,
        node: usize,
        len: usize,
        grads: &[Vec<i32>],
        want: &[i32],
        nio: &NodeIo<'_>,
    ) -> Result<f64, TestbedError> {
        let (counters, cpu, start) = (nio.counters, nio.cpu, nio.start);
        let n = self.workers;
        let kids = &self.down[node];
        let own = grads.get(node);
        let members = kids.len() + usize::from(own.is_some());
        let chunks = proto::chunks(len);
        std::thread::scope(|sc| -> Result<f64, TestbedError> {
            // writers: one to the parent, one per child
            let mut writers = Vec::new();
            let up_tx = match self.up.get(node) {
                Some(s) => {
                    let (tx, h) = writer(sc, s, &counters[node], cpu);
                    writers.push(h);
                    Some(tx)
                }
                None => None,
            };
            let mut kid_tx = Vec::new();
            for (_, s) in kids {
                let (tx, h) = writer(sc, s, &counters[node], cpu);
                writers.push(h);
                kid_tx.push(tx);
            }
            // the totals come down from the parent while this node still sums: relay them
            let down = self.up.get(node).map(|up| {
                let kid_tx = kid_tx.clone();
                sc.spawn(move || -> Result<(Vec<i32>, f64), TestbedError> {
                    let t0 = thread_cpu();
                    let mut result = vec![0i32; len];
                    for _ in 0..chunks {
                        let (i, g) = read_chunk(up)?;
                        let r = proto::chunk_range(len, i as usize);
                        if r.len() != g.len() {
                            return Err(TestbedError::Wrong(format!("chunk {i} of {}", g.len())));
                        }
                        if !kid_tx.is_empty() {
                            let f = Arc::new(proto::encode(i, &g)?);
                            for k in &kid_tx {
                                let _ = k.send(f.clone());
                            }
                        }
                        result[r].copy_from_slice(&g);
                    }
                    charge(cpu, t0);
                    Ok((result, start.elapsed().as_secs_f64()))
                })
            });
            let mut result = vec![0i32; len];
            let mut done_at = 0.0;
            if kids.is_empty() {
                // a leaf: push every chunk, then pull the total
                let (Some(tx), Some(own)) = (&up_tx, own) else {
                    return Err(TestbedError::Setup(format!("node {node} is idle")));
                };
                for c in 0..chunks {
                    let f = proto::encode(c as u32, &own[proto::chunk_range(len, c)])?;
                    let _ = tx.send(Arc::new(f));
                }
            } else {
                let (tx, rx) = mpsc::channel::<(usize, u32, Vec<i32>)>();
                let mut readers = Vec::new();
                for (m, (_, s)) in kids.iter().enumerate() {
                    let tx = tx.clone();
                    readers.push(sc.spawn(move || -> Result<(), TestbedError> {
                        let t0 = thread_cpu();
                        for _ in 0..chunks {
                            let (i, g) = read_chunk(s)?;
                            if tx.send((m, i, g)).is_err() {
                                break;
                            }
                        }
                        charge(cpu, t0);
                        Ok(())
                    }));
                }
                drop(tx);
                let mut summer = Summer::new(members, len);
                if let Some(own) = own {
                    for c in 0..chunks {
                        let r = proto::chunk_range(len, c);
                        if let Some(agg) = summer.add(kids.len(), c as u32, &own[r])? {
                            emit(c as u32, agg, &up_tx, &kid_tx, &mut result)?;
                        }
                    }
                }
                while !summer.complete() {
                    let Ok((m, i, g)) = rx.recv() else {
                        return Err(TestbedError::Io(format!(
                            "node {node}: a member's connection ended early"
                        )));
                    };
                    if let Some(agg) = summer.add(m, i, &g)? {
                        emit(i, agg, &up_tx, &kid_tx, &mut result)?;
                    }
                }
                for r in readers {
                    join(r)?;
                }
                if node == n {
                    done_at = start.elapsed().as_secs_f64();
                }
            }
            if let Some(d) = down {
                let (r, t) = join(d)?;
                result = r;
                done_at = t;
                check(node, &result, want)?;
            }
            drop(up_tx);
            drop(kid_tx);
            for h in writers {
                join(h)?;
            }
            Ok(done_at)
        })
    }

    pub fn parent(&self) -> &[usize] {
        &self.parent
    }
}

/// A completed aggregate: up to the parent, or (at the PS) down to every child.
fn emit(
    index: u32,
    agg: Vec<i32>,
    up: &Option<mpsc::Sender<Arc<Vec<u8>>>>,
    kids: &[mpsc::Sender<Arc<Vec<u8>>>],
    result: &mut [i32],
) -> Result<(), TestbedError> {
    let f = Arc::new(proto::encode(index, &agg)?);
    if let Some(up) = up {
        let _ = up.send(f);
    } else {
        for k in kids {
            let _ = k.send(f.clone());
        }
        let r = proto::chunk_range(result.len(), index as usize);
        result[r].copy_from_slice(&agg);
    }
    Ok(())
}

/// Horovod-style ring all-reduce over TCP among the workers (machines 0..n; the PS idles).
pub struct TcpRing {
    /// Per worker: (to next, from previous).
    links: Vec<(TcpStream, TcpStream)>,
    machines: usize,
}

impl TcpRing {
    pub fn connect(tb: &Testbed, workers: usize) -> Result<TcpRing, TestbedError> {
        if workers < 2 || workers > tb.machines() {
            return Err(TestbedError::Setup(format!("a ring of {workers} workers")));
        }
        let listeners = (0..workers)
            .map(|w| listen(tb, w))
            .collect::<Result<Vec<_>, _>>()?;
        let mut next = Vec::new();
        for w in 0..workers {
            next.push(connect(tb, w, (w + 1) % workers, w as u32)?);
        }
        let mut links = Vec::new();
        for (w, (l, to)) in listeners.iter().zip(next).enumerate() {
            let (id, from) = accept(l, 1)?
                .pop()
                .ok_or_else(|| TestbedError::Setup("accept".into()))?;
            if id as usize != (w + workers - 1) % workers {
                return Err(TestbedError::Setup(format!("ring hello {id} at {w}")));
            }
            links.push((to, from));
        }
        Ok(TcpRing {
            links,
            machines: tb.machines(),
        })
    }

    pub fn iterate(&self, iter: u32, len: usize) -> Result<Iteration, TestbedError> {
        let n = self.links.len();
        let want = proto::reference(n, iter, len);
        let counters: Vec<AtomicU64> = (0..self.machines).map(|_| AtomicU64::new(0)).collect();
        let cpu: Vec<AtomicU64> = (0..self.machines).map(|_| AtomicU64::new(0)).collect();
        let start = Instant::now();
        let times = std::thread::scope(|sc| -> Result<Vec<f64>, TestbedError> {
            let mut hs = Vec::new();
            for (w, (to, from)) in self.links.iter().enumerate() {
                let (counters, want, cpu) = (&counters, &want, &cpu);
                hs.push(sc.spawn(move || -> Result<f64, TestbedError> {
                    let t0 = thread_cpu();
                    let mut data = proto::gradient(w, iter, len);
                    std::thread::scope(|inner| -> Result<f64, TestbedError> {
                        let (tx, h) = writer(inner, to, &counters[w], &cpu[w]);
                        let mut from = from;
                        for step in 0..2 * (n - 1) {
                            let (sp, rp) = proto::ring_step(w, n, step);
                            let mut f = Vec::new();
                            for g in &data[proto::ring_part(len, n, sp)] {
                                f.extend_from_slice(&g.to_be_bytes());
                            }
                            let _ = tx.send(Arc::new(f));
                            let range = proto::ring_part(len, n, rp);
                            let mut b = vec![0u8; 4 * range.len()];
                            from.read_exact(&mut b).map_err(io("ring read"))?;
                            let got = proto::decode_body(&b);
                            for (d, g) in data[range].iter_mut().zip(got) {
                                *d = if step < n - 1 { d.wrapping_add(g) } else { g };
                            }
                        }
                        let t = start.elapsed().as_secs_f64();
                        drop(tx);
                        join(h)?;
                        check(w, &data, want)?;
                        charge(&cpu[w], t0);
                        Ok(t)
                    })
                }));
            }
            hs.into_iter().map(join).collect()
        })?;
        Ok(Iteration {
            time: times.iter().copied().fold(0.0, f64::max),
            worker_times: times,
            bytes: counters.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
            cpu: cpu
                .iter()
                .map(|c| c.load(Ordering::Relaxed) as f64 * 1e-9)
                .collect(),
            xdp: vec![0.0; cpu.len()],
        })
    }
}

//! `mem`: endpoints in one process on real time. Each node runs on its own OS thread; frames
//! travel over channels (faults applied by the sender's thread); timeouts are honoured with
//! `recv_timeout`; each node's CPU is its thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), so
//! "CPU per worker" is that endpoint's accounting. Link rates are not enforced (it is as fast as
//! this host); the MTU is. Faults are the same seeded fates as on `sim` and `udp`: a reordered
//! frame waits in its sender's delay line for the fault's extra delay, then goes out.

use crate::endpoint::{Endpoint, Nanos, NodeId};
use crate::fault::{Fate, FaultCounters, FaultInjector, Faults};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemNodeStats {
    pub frames_tx: u64,
    pub bytes_tx: u64,
    pub frames_rx: u64,
    pub bytes_rx: u64,
    pub cpu_ns: u64,
    /// Wall time from the start to when the node reported done (or the end).
    pub done_ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemReport {
    pub wall_ns: u64,
    pub nodes: Vec<MemNodeStats>,
    pub dropped_mtu: u64,
    pub faults: FaultCounters,
    pub finished: bool,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

type Frame = (NodeId, Vec<u8>);

/// A sender's delay line of reordered frames: (due, sequence, to, frame), earliest first.
type DelayLine = BinaryHeap<Reverse<(Nanos, u64, NodeId, Vec<u8>)>>;

/// Run `nodes` (node i has id i) until every node that `counts(i)` is done, or `deadline` passes.
/// Returns the nodes and the report.
pub fn run<N: Endpoint + 'static>(
    nodes: Vec<N>,
    mtu: usize,
    faults: Faults,
    deadline: Duration,
    counts: impl Fn(usize) -> bool,
) -> (Vec<N>, MemReport) {
    let n = nodes.len();
    let (txs, rxs): (Vec<Sender<Frame>>, Vec<Receiver<Frame>>) = (0..n).map(|_| channel()).unzip();
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let counted: Vec<bool> = (0..n).map(&counts).collect();
    let need = counted.iter().filter(|c| **c).count();
    let done = Arc::new(AtomicUsize::new(0));
    let injector = Arc::new(Mutex::new(FaultInjector::new(faults)));
    let dropped_mtu = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for ((mut node, rx), i) in nodes.into_iter().zip(rxs).zip(0..) {
        let txs = txs.clone();
        let (stop, done, injector, dropped_mtu) = (
            stop.clone(),
            done.clone(),
            injector.clone(),
            dropped_mtu.clone(),
        );
        let counted = counted[i];
        handles.push(std::thread::spawn(move || {
            let cpu0 = thread_cpu_ns();
            let mut st = MemNodeStats::default();
            let now = || start.elapsed().as_nanos() as Nanos;
            let mut reported = false;
            // the delay line of reordered frames: (due, sequence, to, frame)
            let mut held: DelayLine = BinaryHeap::new();
            let mut held_seq = 0u64;
            let release = |held: &mut DelayLine| {
                let t = now();
                while held.peek().is_some_and(|r| r.0.0 <= t) {
                    if let Some(Reverse((_, _, to, b))) = held.pop() {
                        let _ = txs[to as usize].send((i as NodeId, b));
                    }
                }
            };
            let send_all = |node: &mut N,
                            st: &mut MemNodeStats,
                            held: &mut DelayLine,
                            held_seq: &mut u64| {
                while let Some(t) = node.poll_transmit(now()) {
                    st.frames_tx += 1;
                    st.bytes_tx += t.bytes.len() as u64;
                    if t.bytes.len() > mtu || t.to as usize >= txs.len() {
                        dropped_mtu.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let fate = injector
                        .lock()
                        .map(|mut f| f.fate(i as NodeId, t.to))
                        .unwrap_or(Fate::Deliver {
                            copies: 1,
                            extra_delay_ns: 0,
                        });
                    if let Fate::Deliver {
                        copies,
                        extra_delay_ns,
                    } = fate
                    {
                        for _ in 1..copies {
                            let _ = txs[t.to as usize].send((i as NodeId, t.bytes.clone()));
                        }
                        if extra_delay_ns > 0 {
                            *held_seq += 1;
                            held.push(Reverse((now() + extra_delay_ns, *held_seq, t.to, t.bytes)));
                        } else {
                            let _ = txs[t.to as usize].send((i as NodeId, t.bytes));
                        }
                    }
                }
            };
            send_all(&mut node, &mut st, &mut held, &mut held_seq);
            while !stop.load(Ordering::Relaxed) {
                let wait = node
                    .poll_timeout()
                    .map(|t| Duration::from_nanos(t.saturating_sub(now())))
                    .unwrap_or(Duration::from_millis(5))
                    .min(Duration::from_millis(5))
                    .min(
                        held.peek()
                            .map(|r| Duration::from_nanos(r.0.0.saturating_sub(now())))
                            .unwrap_or(Duration::MAX),
                    );
                match rx.recv_timeout(wait) {
                    Ok((from, frame)) => {
                        st.frames_rx += 1;
                        st.bytes_rx += frame.len() as u64;
                        node.handle_packet(now(), from, &frame);
                        // take what else is waiting before transmitting: one wake-up, many frames
                        for (from, frame) in rx.try_iter().take(256) {
                            st.frames_rx += 1;
                            st.bytes_rx += frame.len() as u64;
                            node.handle_packet(now(), from, &frame);
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
                if node.poll_timeout().is_some_and(|t| t <= now()) {
                    node.handle_timeout(now());
                }
                send_all(&mut node, &mut st, &mut held, &mut held_seq);
                release(&mut held);
                if counted && !reported && node.is_done() {
                    reported = true;
                    st.done_ns = now();
                    if done.fetch_add(1, Ordering::SeqCst) + 1 >= need {
                        stop.store(true, Ordering::SeqCst);
                    }
                }
                if start.elapsed() > deadline {
                    stop.store(true, Ordering::SeqCst);
                }
            }
            if st.done_ns == 0 {
                st.done_ns = now();
            }
            st.cpu_ns = thread_cpu_ns().saturating_sub(cpu0);
            (node, st)
        }));
    }
    drop(txs);
    let mut nodes = Vec::with_capacity(n);
    let mut report = MemReport::default();
    for h in handles {
        match h.join() {
            Ok((node, st)) => {
                nodes.push(node);
                report.nodes.push(st);
            }
            Err(p) => std::panic::resume_unwind(p),
        }
    }
    report.wall_ns = start.elapsed().as_nanos() as u64;
    report.dropped_mtu = dropped_mtu.load(Ordering::Relaxed) as u64;
    report.finished = done.load(Ordering::SeqCst) >= need;
    if let Ok(f) = injector.lock() {
        report.faults = f.counters.clone();
    }
    (nodes, report)
}

//! Throughput of the XDP aggregator on veth pairs (ALEPH Sec. 6.2's microbenchmark, on this
//! machine): every member of a [`Group`] sends `rounds` x `segments` gradient packets as fast as
//! one thread with a UDP socket can (waiting for each other at the end of each round), and the aggregator's counters tell how many were processed.
//!
//! What it measures: packets (and gradients, 128 per packet) aggregated per second of wall time,
//! from the first send until the counters stop moving. On veth the senders' own UDP stacks share
//! the CPUs with the XDP program, so this is the rate of the whole host, an upper bound for
//! neither mode; native and generic differ in where the program runs (veth NAPI poll on an
//! xdp_frame vs. after an skb is built), which is what the comparison shows.

use crate::group::Group;
use crate::proto::{GRADS, Packet};
use crate::{AttachMode, XdpError};
use std::time::{Duration, Instant};

/// One measurement.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    pub mode: AttachMode,
    pub members: usize,
    /// Gradient packets the members sent.
    pub sent: u64,
    /// Packets the program added into a slot.
    pub aggregated: u64,
    /// Packets the program parsed and refused (the baseline's wrong job).
    pub refused: u64,
    /// Packets it dropped as stale (a member fell a whole round behind) or duplicate.
    pub dropped: u64,
    /// Aggregates multicast.
    pub results: u64,
    pub seconds: f64,
}

impl Throughput {
    /// Gradient packets aggregated (or, in the baseline, parsed and refused) per second.
    pub fn pps(&self) -> f64 {
        (self.aggregated + self.refused) as f64 / self.seconds
    }
    /// Gradients aggregated per second.
    pub fn gradients_per_sec(&self) -> f64 {
        self.pps() * GRADS as f64
    }
    /// Aggregation goodput in Gbit/s of gradient payload (4 bytes per gradient).
    pub fn gbps(&self) -> f64 {
        self.gradients_per_sec() * 32.0 / 1e9
    }
}

/// Measure `mode` with `members` senders, `segments` segments per round and `rounds` rounds.
pub fn measure(
    mode: AttachMode,
    members: usize,
    segments: u32,
    rounds: u32,
) -> Result<Throughput, XdpError> {
    measure_with(mode, members, segments, rounds, false)
}

/// The baseline: the same traffic, but the program is configured for another job, so it parses
/// every packet and drops it without touching a slot or emitting anything. What the senders and
/// the veths cost alone.
pub fn baseline(
    mode: AttachMode,
    members: usize,
    segments: u32,
    rounds: u32,
) -> Result<Throughput, XdpError> {
    measure_with(mode, members, segments, rounds, true)
}

fn measure_with(
    mode: AttachMode,
    members: usize,
    segments: u32,
    rounds: u32,
    refuse: bool,
) -> Result<Throughput, XdpError> {
    let g = Group::create(members, segments, mode, 1, false)?;
    let job = if refuse { 2 } else { 1 };
    let mut targets = Vec::new();
    for i in 0..members {
        targets.push(
            g.target(i)
                .ok_or_else(|| XdpError::Config(format!("member {i}")))?,
        );
    }
    // the members keep in step round by round, as training iterations do; without it one
    // sender runs a whole round ahead on a busy CPU and the other's packets turn stale
    let barrier = std::sync::Barrier::new(members);
    let barrier = &barrier;
    let start = Instant::now();
    let sent: Result<Vec<u64>, XdpError> = std::thread::scope(|s| {
        let handles: Vec<_> = g
            .socks
            .iter()
            .zip(&targets)
            .enumerate()
            .map(|(w, (sock, to))| {
                s.spawn(move || -> Result<u64, XdpError> {
                    let mut grads = [0i32; GRADS];
                    for (i, v) in grads.iter_mut().enumerate() {
                        *v = (w * GRADS + i) as i32;
                    }
                    sock.connect(to)
                        .map_err(|e| XdpError::Io("connect".into(), e))?;
                    let mut n = 0;
                    for r in 1..=rounds {
                        for seg in 0..segments {
                            let p = Packet::gradient(job, w as u8, r, seg, grads).emit();
                            if sock.send(&p).is_ok() {
                                n += 1;
                            }
                        }
                        barrier.wait();
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| XdpError::Config("a sender panicked".into()))?
            })
            .collect()
    });
    let sent: u64 = sent?.iter().sum();
    // the counters settle once the backlogs have drained
    let mut last = g.agg.stats()?;
    let mut end = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = g.agg.stats()?;
        if now == last {
            break;
        }
        last = now;
        end = Instant::now();
    }
    Ok(Throughput {
        mode,
        members,
        sent,
        aggregated: last.aggregated,
        refused: last.bad,
        dropped: last.stale + last.duplicate,
        results: last.results,
        seconds: (end - start).as_secs_f64(),
    })
}

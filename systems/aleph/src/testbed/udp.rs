//! ALEPH's Aggregation Service as a user-space UDP program (the "user-space UDP"
//! baseline beside ALEPH with TCP): the same packets as the XDP program (drivers/xdp's
//! [`Packet`], 128 Q15.16 gradients), the same slot semantics (a round number, a bitmap of the
//! members' bits, duplicates and older rounds dropped, wrapping integer sums), and the same
//! multicast of each completed aggregate to every member, but in a thread reading a socket with
//! `recvmmsg` and answering with `sendmmsg`: what the kernel bypass of Sec. 3.2 saves is the
//! network stack up to the socket and the copies to and from user space.
//!
//! [`SlotTable`] is the sans-IO state machine; [`measure`] runs it on a [`Star`] of namespaces for
//! aleph-fig5 (aggregation throughput and CPU against the XDP paths and TCP).

use super::TestbedError;
use super::cpu::{BATCH, Measure, Rounds, hz, stat};
use super::multicast::recv_batch;
use super::net::thread_cpu;
use super::xdp::send_batch_to;
use inabench_xdp::group::{PORT, RESULT_PORT};
use inabench_xdp::netns::{Star, in_netns};
use inabench_xdp::proto::{GRADS, Kind, PACKET_LEN, Packet};
use std::net::{SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What a gradient packet did to the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// Added into its segment's slot, which still lacks members.
    Added,
    /// Added, and the segment is complete: the aggregate to multicast.
    Complete(Box<[i32; GRADS]>),
    /// The sender's bit was already set in this round.
    Duplicate,
    /// An older round than the slot's.
    Stale,
    /// Another job, a bit outside the group, a segment out of range, or not a gradient.
    Bad,
}

#[derive(Debug, Clone)]
struct Slot {
    round: u32,
    bitmap: u32,
    sum: [i32; GRADS],
}

/// The Aggregation Service's slots (one per segment), as the XDP program keeps them in its map.
#[derive(Debug, Clone)]
pub struct SlotTable {
    job: u16,
    full_mask: u32,
    slots: Vec<Slot>,
}

impl SlotTable {
    /// `members` members (bits 0..members) of job `job`, `segments` slots.
    pub fn new(job: u16, members: u32, segments: u32) -> Result<SlotTable, TestbedError> {
        if members == 0 || members > 32 || segments == 0 {
            return Err(TestbedError::Setup(format!(
                "{members} members (1..=32) and {segments} segments (> 0)"
            )));
        }
        let full_mask = if members == 32 {
            u32::MAX
        } else {
            (1u32 << members) - 1
        };
        Ok(SlotTable {
            job,
            full_mask,
            slots: vec![
                Slot {
                    round: 0,
                    bitmap: 0,
                    sum: [0; GRADS],
                };
                segments as usize
            ],
        })
    }

    pub fn offer(&mut self, p: &Packet) -> Offer {
        let bit = 1u32.checked_shl(u32::from(p.worker)).unwrap_or(0);
        if p.kind != Kind::Gradient || p.job != self.job || bit & self.full_mask == 0 {
            return Offer::Bad;
        }
        let Some(slot) = self.slots.get_mut(p.segment as usize) else {
            return Offer::Bad;
        };
        if p.round < slot.round {
            return Offer::Stale;
        }
        if p.round > slot.round {
            *slot = Slot {
                round: p.round,
                bitmap: 0,
                sum: [0; GRADS],
            };
        }
        if slot.bitmap & bit != 0 {
            return Offer::Duplicate;
        }
        for (s, g) in slot.sum.iter_mut().zip(&p.grads) {
            *s = s.wrapping_add(*g);
        }
        slot.bitmap |= bit;
        if slot.bitmap == self.full_mask {
            Offer::Complete(Box::new(slot.sum))
        } else {
            Offer::Added
        }
    }
}

fn big_buffers(s: &UdpSocket) {
    inabench_xdp::netns::force_buffers(s, Some(16 << 20), Some(16 << 20));
}

/// Counters of a service run.
#[derive(Debug, Default)]
pub struct ServiceCounters {
    /// Gradient packets added into a slot.
    pub aggregated: AtomicU64,
    /// Aggregates completed (each multicast to every member).
    pub results: AtomicU64,
    pub dropped: AtomicU64,
    /// CPU time of the service thread (ns).
    pub cpu_ns: AtomicU64,
}

/// Serve `table` on `sock` until `stop`: aggregate, and multicast each completed segment to
/// `members` (their result port).
pub fn serve(
    sock: &UdpSocket,
    mut table: SlotTable,
    members: &[SocketAddrV4],
    stop: &AtomicBool,
    counters: &ServiceCounters,
) -> Result<(), TestbedError> {
    let t0 = thread_cpu();
    let mut bufs = vec![[0u8; 2048]; BATCH];
    let mut lens = vec![0usize; BATCH];
    while !stop.load(Ordering::Relaxed) {
        // a timeout (the socket's read timeout) or an error gives nothing this turn
        let n = recv_batch(sock, &mut bufs, &mut lens).unwrap_or(0);
        let mut out: Vec<[u8; PACKET_LEN]> = Vec::new();
        for (b, &len) in bufs.iter().zip(&lens[..n]) {
            let Ok(p) = Packet::parse(&b[..len]) else {
                counters.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            match table.offer(&p) {
                Offer::Added => {
                    counters.aggregated.fetch_add(1, Ordering::Relaxed);
                }
                Offer::Complete(sum) => {
                    counters.aggregated.fetch_add(1, Ordering::Relaxed);
                    counters.results.fetch_add(1, Ordering::Relaxed);
                    let mut r = Packet::gradient(p.job, 0xff, p.round, p.segment, *sum);
                    r.kind = Kind::Result;
                    out.push(r.emit());
                }
                Offer::Duplicate | Offer::Stale | Offer::Bad => {
                    counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if !out.is_empty() {
            for &m in members {
                // a member's full buffer drops copies, as it would the XDP program's
                let _ = send_batch_to(sock, m, &out);
            }
        }
    }
    let ns = ((thread_cpu() - t0).max(0.0) * 1e9) as u64;
    counters.cpu_ns.fetch_add(ns, Ordering::Relaxed);
    Ok(())
}

/// aleph-fig5's measurement of the user-space UDP service: two members send as fast as they can
/// (or at `target_gbps` in all) for `duration`, in rounds kept in step as the XDP senders are,
/// on the cores `cpus` the caller's affinity allows. CPU = the NET_RX softirq time of those cores
/// plus the service thread's CPU time (as for TCP). `isolate`: the senders' cores; the service
/// thread and the receive path of the aggregator's link ends (threaded NAPI) then run on `cpus`,
/// the senders and the members' receive paths on `isolate`, and CPU is the service thread's and
/// those NAPI threads' time (see [`super::cpu::measure_isolated`]).
pub fn measure(
    cpus: &[usize],
    duration: Duration,
    target_gbps: Option<f64>,
    isolate: Option<super::cpu::Isolate<'_>>,
) -> Result<Measure, TestbedError> {
    const MEMBERS: usize = 2;
    const SEGMENTS: u32 = 1024;
    const JOB: u16 = 1;
    let star = Star::create(MEMBERS)?;
    let service = in_netns(Some(&star.aggregator), || {
        UdpSocket::bind(("0.0.0.0", PORT))
    })?
    .map_err(|e| TestbedError::Io(format!("service socket: {e}")))?;
    big_buffers(&service);
    service
        .set_read_timeout(Some(Duration::from_millis(20)))
        .map_err(|e| TestbedError::Io(e.to_string()))?;
    let mut socks = Vec::new();
    for m in &star.members {
        let s = in_netns(Some(&m.namespace), || {
            UdpSocket::bind(("0.0.0.0", RESULT_PORT))
        })?
        .map_err(|e| TestbedError::Io(format!("member socket: {e}")))?;
        big_buffers(&s);
        s.connect(SocketAddrV4::new(m.gateway, PORT))
            .map_err(|e| TestbedError::Io(format!("connect: {e}")))?;
        socks.push(s);
    }
    let results: Vec<SocketAddrV4> = star
        .members
        .iter()
        .map(|m| SocketAddrV4::new(m.ip, RESULT_PORT))
        .collect();
    let mut napi = Vec::new();
    let host: Vec<usize> = match isolate {
        Some(iso) => {
            for m in &star.members {
                napi.extend(super::multicast::threaded_napi_at(
                    &star.aggregator,
                    &m.port,
                    cpus,
                    iso.realtime,
                )?);
                super::multicast::threaded_napi_at(
                    &m.namespace,
                    "eth0",
                    iso.senders,
                    iso.realtime,
                )?;
            }
            cpus.iter().chain(iso.senders).copied().collect()
        }
        None => cpus.to_vec(),
    };
    let counters = ServiceCounters::default();
    let stop_service = AtomicBool::new(false);
    let (s0, h0, n0, start) = (
        stat(cpus)?,
        stat(&host)?,
        super::cpu::threads_cpu(&napi)?,
        Instant::now(),
    );
    let rounds = Rounds::new(JOB, MEMBERS, SEGMENTS, start, duration, target_gbps);
    let (sent, end) = std::thread::scope(|s| -> Result<(u64, Instant), TestbedError> {
        let table = SlotTable::new(JOB, MEMBERS as u32, SEGMENTS)?;
        let (service, results, counters, stop_service) =
            (&service, &results, &counters, &stop_service);
        let svc = s.spawn(move || {
            if let Some(iso) = isolate {
                super::multicast::pin(0, cpus)?;
                if iso.realtime {
                    // below its NAPI threads, as the TCP aggregator
                    super::multicast::realtime(0, super::multicast::FORWARDER_PRIORITY)?;
                }
            }
            serve(service, table, results, stop_service, counters)
        });
        let hs: Vec<_> = socks
            .iter()
            .enumerate()
            .map(|(w, sock)| {
                let rounds = &rounds;
                s.spawn(move || {
                    if let Some(iso) = isolate {
                        super::multicast::pin(0, iso.senders)?;
                    }
                    rounds.send(sock, w)
                })
            })
            .collect();
        let mut total = 0;
        let mut failed = None;
        for h in hs {
            match h.join() {
                Ok(Ok(n)) => total += n,
                Ok(Err(e)) => failed = Some(e),
                Err(_) => failed = Some(TestbedError::Io("a sender panicked".into())),
            }
        }
        // the service drains its socket; the count settles
        let mut last = counters.aggregated.load(Ordering::Relaxed);
        let mut end = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(40));
            let now = counters.aggregated.load(Ordering::Relaxed);
            if now == last {
                break;
            }
            last = now;
            end = Instant::now();
        }
        stop_service.store(true, Ordering::Relaxed);
        svc.join()
            .map_err(|_| TestbedError::Io("the service panicked".into()))??;
        match failed {
            Some(e) => Err(e),
            None => Ok((total, end)),
        }
    })?;
    let (s1, h1, n1) = (stat(cpus)?, stat(&host)?, super::cpu::threads_cpu(&napi)?);
    // the aggregates the members received (up to their buffers) are the exact sums
    let mut want = [0i32; GRADS];
    for (i, v) in want.iter_mut().enumerate() {
        *v = (0..MEMBERS).map(|w| (w * GRADS + i) as i32).sum();
    }
    let mut checked = 0u64;
    for (w, sock) in socks.iter().enumerate() {
        sock.set_nonblocking(true)
            .map_err(|e| TestbedError::Io(e.to_string()))?;
        let mut buf = [0u8; 2048];
        while let Ok(k) = sock.recv(&mut buf) {
            let p = Packet::parse(&buf[..k])
                .map_err(|e| TestbedError::Wrong(format!("member {w} received {e}")))?;
            if p.kind != Kind::Result || p.grads != want {
                return Err(TestbedError::Wrong(format!(
                    "member {w}: aggregate of segment {} round {} differs from the sum",
                    p.segment, p.round
                )));
            }
            checked += 1;
        }
    }
    if counters.results.load(Ordering::Relaxed) > 0 && checked == 0 {
        return Err(TestbedError::Wrong(
            "the service completed aggregates but no member received one".into(),
        ));
    }
    let seconds = (end - start).as_secs_f64();
    let aggregated = counters.aggregated.load(Ordering::Relaxed);
    let cpu = counters.cpu_ns.load(Ordering::Relaxed) as f64 * 1e-9;
    drop(star);
    Ok(Measure {
        gbps: aggregated as f64 * GRADS as f64 * 32.0 / seconds / 1e9,
        loss_pct: if sent > 0 {
            sent.saturating_sub(aggregated) as f64 / sent as f64 * 100.0
        } else {
            0.0
        },
        cpu_cores: if isolate.is_some() {
            (n1 - n0 + cpu) / seconds
        } else {
            ((s1.1 - s0.1) as f64 / hz() + cpu) / seconds
        },
        host_cores: (h1.0 - h0.0) as f64 / hz() / seconds,
        node_busy: (s1.0 - s0.0) as f64 / hz() / seconds,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grads(w: u32, s: u32) -> [i32; GRADS] {
        let mut g = [0i32; GRADS];
        let mut x = (w + 1).wrapping_mul(0x9E37_79B9) ^ (s + 1).wrapping_mul(0x85EB_CA6B);
        for v in g.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *v = x as i32;
        }
        g
    }

    #[test]
    fn slots_sum_exactly_once_per_member_and_round() {
        let mut t = SlotTable::new(3, 3, 4).unwrap();
        let p = |w: u8, r: u32, s: u32| Packet::gradient(3, w, r, s, grads(u32::from(w), s + r));
        assert_eq!(t.offer(&p(0, 1, 2)), Offer::Added);
        assert_eq!(t.offer(&p(0, 1, 2)), Offer::Duplicate);
        assert_eq!(t.offer(&p(1, 1, 2)), Offer::Added);
        let mut want = [0i32; GRADS];
        for w in 0..3u8 {
            for (a, b) in want.iter_mut().zip(grads(u32::from(w), 3)) {
                *a = a.wrapping_add(b);
            }
        }
        assert_eq!(t.offer(&p(2, 1, 2)), Offer::Complete(Box::new(want)));
        // the next round reuses the slot; the old round is stale from then on
        assert_eq!(t.offer(&p(1, 2, 2)), Offer::Added);
        assert_eq!(t.offer(&p(0, 1, 2)), Offer::Stale);
        // another job, a bit outside the group, a segment out of range, a result
        assert_eq!(
            t.offer(&Packet::gradient(4, 0, 1, 0, [1; GRADS])),
            Offer::Bad
        );
        assert_eq!(t.offer(&p(3, 1, 0)), Offer::Bad);
        assert_eq!(t.offer(&p(200, 1, 0)), Offer::Bad);
        assert_eq!(t.offer(&p(0, 1, 4)), Offer::Bad);
        let mut r = p(0, 1, 0);
        r.kind = Kind::Result;
        assert_eq!(t.offer(&r), Offer::Bad);
        assert!(SlotTable::new(3, 0, 4).is_err());
        assert!(SlotTable::new(3, 33, 4).is_err());
    }
}

//! Mean communication time of one 128-gradient packet at a given packet rate (ALEPH Sec. 6.2 (3),
//! Fig. 7): a worker sends packets paced at `rate_pps` to an aggregator and times each until its
//! aggregate comes back (CLOCK_MONOTONIC in the sender).
//!
//! - XDP: a drivers/xdp `Group` of one member in native mode: the program stores the packet in a
//!   slot, the slot is complete, and the aggregate is multicast back through the devmap. Choice
//!   where the paper is silent: with one member the aggregator adds no segment of its own (the
//!   paper's two-worker case adds one), so the XDP time lacks one 128-gradient add.
//! - TCP: the suite's TCP framing between two namespaces; the aggregator's thread reads each
//!   packet, adds its own stored segment and writes the sum back (Nagle off on both ends).
//!
//! Every aggregate that comes back is checked: the packet itself (XDP) or the packet plus the
//! aggregator's segment (TCP). Packets that never come back are counted, not timed.

use super::TestbedError;
use super::net::{TCP_PORT, Testbed};
use super::proto;
use inabench_xdp::AttachMode;
use inabench_xdp::group::Group;
use inabench_xdp::netns::in_netns;
use inabench_xdp::proto::{GRADS, Kind, Packet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One measurement.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    /// Mean time from send to receiving the aggregate (us).
    pub mean_us: f64,
    /// Packets sent per second of the sending window.
    pub achieved_pps: f64,
    /// Aggregates received per second, from the first send to the last aggregate received.
    pub returned_pps: f64,
    /// Median time of the first and of the last tenth of the packets that came back (us): a
    /// backlog shows as a last tenth far slower than the first. The median, not the mean: a
    /// backlog slows every late packet, one late wake-up of this shared host slows one, and a
    /// tenth's mean of three packets read one 4 ms packet as a backlog (aleph-fig7 at 10
    /// packets/s, stop 51: first tenth 105 us, last tenth's mean 1456 us, the point refused).
    pub first_tenth_us: f64,
    pub last_tenth_us: f64,
    pub sent: u64,
    pub returned: u64,
}

impl Latency {
    /// Why this host did not sustain `rate_pps` (the sender fell behind the offered rate, the
    /// aggregates came back slower than they were sent, or a backlog built up during the run),
    /// or `None` when it did. Thresholds: 5% short of the rate, and a last tenth of the packets
    /// more than 1 ms and more than 4x slower than the first tenth.
    pub fn not_sustained(&self, rate_pps: f64) -> Option<String> {
        // below 100 packets a run has too few packets for rates to mean anything
        if self.sent >= 100 {
            if self.achieved_pps < 0.95 * rate_pps {
                return Some(format!(
                    "the sender reached {:.0} of {rate_pps} packets/s",
                    self.achieved_pps
                ));
            }
            if self.returned_pps < 0.95 * self.achieved_pps {
                return Some(format!(
                    "aggregates came back at {:.0} packets/s of {:.0} sent",
                    self.returned_pps, self.achieved_pps
                ));
            }
        }
        let growth = self.last_tenth_us - self.first_tenth_us;
        if growth > 1000.0 && self.last_tenth_us > 4.0 * self.first_tenth_us {
            return Some(format!(
                "a backlog built up: the last tenth of the packets took {:.0} us, the first {:.0} us",
                self.last_tenth_us, self.first_tenth_us
            ));
        }
        None
    }
}

/// The packets of one run: at most this many are sent.
const MAX_PACKETS: usize = 4 << 20;
/// Slots of the XDP group (packets cycle through them, a round per cycle).
const SEGMENTS: u32 = 4096;

fn grads(seq: u64) -> [i32; GRADS] {
    let mut g = [0i32; GRADS];
    for (i, v) in g.iter_mut().enumerate() {
        *v = (seq as i32).wrapping_mul(31).wrapping_add(i as i32);
    }
    g
}

/// Wait until packet `seq` is due at `rate_pps` after `start`.
fn pace(start: Instant, seq: u64, rate_pps: f64) {
    let due = start + Duration::from_secs_f64(seq as f64 / rate_pps);
    loop {
        let now = Instant::now();
        if now >= due {
            return;
        }
        let left = due - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep(left - Duration::from_micros(100));
        } else {
            std::hint::spin_loop();
        }
    }
}

fn packets(rate_pps: f64, duration: Duration) -> Result<usize, TestbedError> {
    if !(rate_pps.is_finite() && rate_pps > 0.0) {
        return Err(TestbedError::Setup(format!("rate {rate_pps} packets/s")));
    }
    Ok(((rate_pps * duration.as_secs_f64()).ceil() as usize).clamp(1, MAX_PACKETS))
}

fn summarize(sent_ns: &[AtomicU64], back_ns: &[AtomicU64], sent: u64, secs: f64) -> Latency {
    // per packet that came back, in sending order: (sent at, time to come back) in ns
    let mut back: Vec<(u64, u64)> = Vec::new();
    let mut last_back = 0u64;
    for (s, b) in sent_ns.iter().zip(back_ns).take(sent as usize) {
        let (s, b) = (s.load(Ordering::Relaxed), b.load(Ordering::Relaxed));
        if b > 0 {
            back.push((s, b.saturating_sub(s)));
            last_back = last_back.max(b);
        }
    }
    let n = back.len();
    let mean = |v: &[(u64, u64)]| {
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().map(|(_, d)| *d as f64).sum::<f64>() / v.len() as f64 / 1e3
        }
    };
    let median = |v: &[(u64, u64)]| {
        let mut us: Vec<f64> = v.iter().map(|(_, d)| *d as f64 / 1e3).collect();
        inabench_rng::stats::median_in_place(&mut us).unwrap_or(f64::NAN)
    };
    let tenth = n.div_ceil(10);
    let first_sent = sent_ns.first().map_or(0, |s| s.load(Ordering::Relaxed));
    let window = last_back.saturating_sub(first_sent) as f64 / 1e9;
    Latency {
        mean_us: mean(&back),
        achieved_pps: sent as f64 / secs,
        returned_pps: if window > 0.0 { n as f64 / window } else { 0.0 },
        first_tenth_us: median(&back[..tenth]),
        last_tenth_us: median(&back[n - tenth..]),
        sent,
        returned: n as u64,
    }
}

/// XDP in native mode.
pub fn xdp(rate_pps: f64, duration: Duration) -> Result<Latency, TestbedError> {
    if let Some(why) = inabench_xdp::unavailable() {
        return Err(TestbedError::Setup(why));
    }
    let total = packets(rate_pps, duration)?;
    let g = Group::create(1, SEGMENTS, AttachMode::Native, 1, false)?;
    let sock = &g.socks[0];
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .map_err(|e| TestbedError::Io(e.to_string()))?;
    let to = g
        .target(0)
        .ok_or_else(|| TestbedError::Setup("no member".into()))?;
    let sent_ns: Vec<AtomicU64> = (0..total).map(|_| AtomicU64::new(0)).collect();
    let back_ns: Vec<AtomicU64> = (0..total).map(|_| AtomicU64::new(0)).collect();
    let (done, wrong) = (AtomicBool::new(false), AtomicU64::new(0));
    let start = Instant::now();
    let mut sent = 0u64;
    let mut secs = 0.0;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = [0u8; 2048];
            let mut quiet_since: Option<Instant> = None;
            loop {
                match sock.recv(&mut buf) {
                    Ok(k) => {
                        let t = start.elapsed().as_nanos() as u64;
                        let Ok(p) = Packet::parse(&buf[..k]) else {
                            continue;
                        };
                        let seq =
                            u64::from(p.round - 1) * u64::from(SEGMENTS) + u64::from(p.segment);
                        match back_ns.get(seq as usize) {
                            Some(b) if p.kind == Kind::Result && p.grads == grads(seq) => {
                                b.store(t.max(1), Ordering::Relaxed)
                            }
                            _ => {
                                wrong.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    Err(_) => {
                        if done.load(Ordering::Relaxed) {
                            let q = *quiet_since.get_or_insert_with(Instant::now);
                            if q.elapsed() > Duration::from_millis(200) {
                                return;
                            }
                        }
                    }
                }
            }
        });
        for seq in 0..total as u64 {
            pace(start, seq, rate_pps);
            let round = (seq / u64::from(SEGMENTS)) as u32 + 1;
            let seg = (seq % u64::from(SEGMENTS)) as u32;
            let p = Packet::gradient(1, 0, round, seg, grads(seq)).emit();
            sent_ns[seq as usize].store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            if sock.send_to(&p, to).is_ok() {
                sent += 1;
            }
            if start.elapsed() >= duration {
                break;
            }
        }
        secs = start.elapsed().as_secs_f64();
        done.store(true, Ordering::Relaxed);
    });
    if wrong.load(Ordering::Relaxed) > 0 {
        return Err(TestbedError::Wrong(format!(
            "{} aggregates differ from the packets sent",
            wrong.load(Ordering::Relaxed)
        )));
    }
    Ok(summarize(&sent_ns, &back_ns, sent, secs))
}

/// The TCP aggregation program.
pub fn tcp(rate_pps: f64, duration: Duration) -> Result<Latency, TestbedError> {
    let total = packets(rate_pps, duration)?;
    let tb = Testbed::unlimited(2)?;
    let io = |w: &str| {
        let w = w.to_string();
        move |e: std::io::Error| TestbedError::Io(format!("{w}: {e}"))
    };
    let l = in_netns(Some(tb.ns(1)), || TcpListener::bind(("0.0.0.0", TCP_PORT)))?
        .map_err(io("listen"))?;
    let addr = (tb.ip(1), TCP_PORT);
    let client =
        in_netns(Some(tb.ns(0)), move || TcpStream::connect(addr))?.map_err(io("connect"))?;
    let (server, _) = l.accept().map_err(io("accept"))?;
    client.set_nodelay(true).map_err(io("nodelay"))?;
    server.set_nodelay(true).map_err(io("nodelay"))?;
    // the aggregator's own stored segment
    let own: Vec<i32> = proto::gradient(99, 0, GRADS);
    let sent_ns: Vec<AtomicU64> = (0..total).map(|_| AtomicU64::new(0)).collect();
    let back_ns: Vec<AtomicU64> = (0..total).map(|_| AtomicU64::new(0)).collect();
    let wrong = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut secs = 0.0;
    let reader = client.try_clone().map_err(io("clone"))?;
    reader
        .set_read_timeout(Some(Duration::from_millis(500)))
        .map_err(io("timeout"))?;
    std::thread::scope(|s| -> Result<(), TestbedError> {
        // the aggregator: read a packet, add the stored segment, send the sum back
        let (own, server) = (&own, &server);
        s.spawn(move || {
            let (mut r, mut w) = (server, server);
            let mut h = [0u8; proto::CHUNK_HEADER];
            while r.read_exact(&mut h).is_ok() {
                let Ok((i, len)) = proto::decode_header(&h) else {
                    return;
                };
                let mut b = vec![0u8; 4 * len];
                if r.read_exact(&mut b).is_err() {
                    return;
                }
                let sum: Vec<i32> = proto::decode_body(&b)
                    .iter()
                    .zip(own.iter().cycle())
                    .map(|(a, o)| a.wrapping_add(*o))
                    .collect();
                let Ok(f) = proto::encode(i, &sum) else {
                    return;
                };
                if w.write_all(&f).is_err() {
                    return;
                }
            }
        });
        let (reader, back_ns, wrong, done) = (&reader, &back_ns, &wrong, &done);
        let rx = s.spawn(move || {
            let mut r = reader;
            let mut h = [0u8; proto::CHUNK_HEADER];
            loop {
                if let Err(e) = r.read_exact(&mut h) {
                    let timeout = matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    );
                    if timeout && !done.load(Ordering::Relaxed) {
                        continue;
                    }
                    return;
                }
                let t = start.elapsed().as_nanos() as u64;
                let Ok((i, len)) = proto::decode_header(&h) else {
                    return;
                };
                let mut b = vec![0u8; 4 * len];
                if r.read_exact(&mut b).is_err() {
                    return;
                }
                let want: Vec<i32> = grads(u64::from(i))
                    .iter()
                    .zip(own.iter())
                    .map(|(a, o)| a.wrapping_add(*o))
                    .collect();
                match back_ns.get(i as usize) {
                    Some(slot) if proto::decode_body(&b) == want => {
                        slot.store(t.max(1), Ordering::Relaxed)
                    }
                    _ => {
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        let mut w = &client;
        for seq in 0..total as u64 {
            pace(start, seq, rate_pps);
            let f = proto::encode(seq as u32, &grads(seq))?;
            sent_ns[seq as usize].store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            w.write_all(&f).map_err(io("send"))?;
            sent += 1;
            if start.elapsed() >= duration {
                break;
            }
        }
        secs = start.elapsed().as_secs_f64();
        done.store(true, Ordering::Relaxed);
        // the replies drain, then the reader times out and the aggregator sees the close
        let _ = rx.join();
        let _ = client.shutdown(std::net::Shutdown::Both);
        Ok(())
    })?;
    if wrong.load(Ordering::Relaxed) > 0 {
        return Err(TestbedError::Wrong(format!(
            "{} aggregates differ from the packets plus the stored segment",
            wrong.load(Ordering::Relaxed)
        )));
    }
    Ok(summarize(&sent_ns, &back_ns, sent, secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(achieved: f64, returned: f64, first: f64, last: f64, sent: u64) -> Latency {
        Latency {
            mean_us: (first + last) / 2.0,
            achieved_pps: achieved,
            returned_pps: returned,
            first_tenth_us: first,
            last_tenth_us: last,
            sent,
            returned: sent,
        }
    }

    #[test]
    fn saturation_is_detected() {
        // kept up: sent at the rate, all back at once, flat times
        assert_eq!(
            run(9990.0, 9980.0, 40.0, 45.0, 20_000).not_sustained(10_000.0),
            None
        );
        // the sender fell behind the offered rate
        assert!(
            run(8000.0, 8000.0, 40.0, 45.0, 16_000)
                .not_sustained(10_000.0)
                .is_some()
        );
        // aggregates came back slower than they were sent
        assert!(
            run(9990.0, 7000.0, 40.0, 45.0, 20_000)
                .not_sustained(10_000.0)
                .is_some()
        );
        // the 10^5 packets/s TCP run of the review: a 44 ms backlog built up
        assert!(
            run(99_982.0, 99_000.0, 300.0, 44_235.0, 200_000)
                .not_sustained(1e5)
                .is_some()
        );
        // a few packets at a low rate: only the backlog test applies
        assert_eq!(run(0.5, 0.4, 150.0, 900.0, 10).not_sustained(1.0), None);
    }

    /// `summarize` of 30 packets sent 100 ms apart that took `us` each.
    fn summarized(us: &[u64]) -> Latency {
        let sent: Vec<AtomicU64> = (0..us.len() as u64)
            .map(|i| AtomicU64::new(1 + i * 100_000_000))
            .collect();
        let back: Vec<AtomicU64> = sent
            .iter()
            .zip(us)
            .map(|(s, d)| AtomicU64::new(s.load(Ordering::Relaxed) + d * 1000))
            .collect();
        summarize(&sent, &back, us.len() as u64, 3.0)
    }

    #[test]
    fn one_late_packet_is_not_a_backlog_and_a_slow_last_tenth_is() {
        // one 4 ms wake-up among the last three of 30 packets: the tenths' medians are flat
        let mut us = vec![105u64; 30];
        us[28] = 4000;
        let l = summarized(&us);
        assert_eq!((l.first_tenth_us, l.last_tenth_us), (105.0, 105.0));
        assert!(
            (l.mean_us - (29.0 * 105.0 + 4000.0) / 30.0).abs() < 1e-9,
            "{l:?}"
        );
        assert_eq!(l.not_sustained(10.0), None);
        // every late packet slower and slower: a backlog
        let us: Vec<u64> = (0..30).map(|i| 105 + i * i * 10).collect();
        let l = summarized(&us);
        assert_eq!(l.first_tenth_us, 115.0);
        assert_eq!(l.last_tenth_us, 105.0 + 28.0 * 28.0 * 10.0);
        assert!(l.not_sustained(10.0).is_some(), "{l:?}");
    }
}

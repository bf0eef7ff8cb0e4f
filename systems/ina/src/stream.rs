//! A point-to-point RoCEv2 RC transfer through a plain forwarding switch: what NetReduce's
//! Table 1 runs to compare host I/O stacks. Host 0 writes `elements` x 4 bytes (sized like the
//! all-reduces' gradients) to host 1 as RDMA WRITE messages of
//! `msg_packets` packets of `mtu` bytes with a window of `window` messages; host 1 acknowledges
//! (coalesced, one ACK per message or when asked) and checks every delivered payload byte
//! against the pattern the sender wrote. RTT is per message: its first packet sent to the ACK
//! that covers its last.
//!
//! The same endpoints run on every fabric; Table 1's I/O models are how the `udp` fabric's
//! node drives them ([`inabench_fabric::udp::IoModel`]).

use crate::common::{AllReduceConfig, HostStats, Setup, SetupError, System, Worker};
use crate::roce::{Addr, RcResponder, RcSender};
use inabench_fabric::{Endpoint, Forwarder, Nanos, NodeId, Route, Transmit};
use inabench_wire::ib::{Syndrome, opcode};
use inabench_wire::roce::FrameRepr;
use std::collections::VecDeque;

fn addr(i: u8) -> Addr {
    Addr {
        mac: [2, 0, 0, 4, 0, i + 1],
        ip: [10, 0, 4, i + 1],
        qpn: 0x200 + u32::from(i),
    }
}

/// The byte the sender writes at `k` of packet `i`.
fn pattern(i: u32, k: usize) -> u8 {
    (i.wrapping_mul(31) as usize + k) as u8
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    packets: u32,
    msg_len: u32,
    window: u32,
    mtu: usize,
}

impl Shape {
    fn new(cfg: &AllReduceConfig) -> Result<Shape, SetupError> {
        let bytes = 4 * cfg.elements;
        let msg_len = cfg.knob("msg_packets").unwrap_or(64.0) as u32;
        let window = cfg.knob("window").unwrap_or(4.0) as u32;
        if cfg.mtu < 4 || !cfg.mtu.is_multiple_of(4) || msg_len == 0 || window == 0 {
            return Err(SetupError::Config(format!(
                "a stream needs an MTU that is a multiple of 4 and positive message and window sizes (got {}, {msg_len}, {window})",
                cfg.mtu
            )));
        }
        let packets = (bytes.div_ceil(cfg.mtu) as u32).div_ceil(msg_len).max(1) * msg_len;
        Ok(Shape {
            packets,
            msg_len,
            window,
            mtu: cfg.mtu,
        })
    }
}

/// Host 0: the RC requester.
pub struct StreamSender {
    rc: RcSender,
    shape: Shape,
    sent_at: Vec<Option<Nanos>>,
    msgs_acked: u32,
    stats: HostStats,
    started: bool,
}

impl Endpoint for StreamSender {
    fn id(&self) -> NodeId {
        0
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, f: &[u8]) {
        self.stats.packets_rx += 1;
        let Ok((fr, _)) = FrameRepr::parse(f) else {
            self.stats.malformed_rx += 1;
            return;
        };
        let Some(aeth) = fr.aeth else { return };
        let before = self.rc.acked();
        self.rc.on_aeth(now, fr.bth.psn, &aeth);
        if matches!(aeth.syndrome, Syndrome::Nak(_)) {
            return;
        }
        let acked = self.rc.acked() / self.shape.msg_len;
        while self.msgs_acked < acked {
            if let Some(Some(t0)) = self.sent_at.get(self.msgs_acked as usize) {
                self.stats.rtt_ns.push(now.saturating_sub(*t0));
            }
            self.msgs_acked += 1;
        }
        if before < self.shape.packets && self.rc.all_acked() {
            self.stats.end_ns = now;
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if !self.started {
            self.started = true;
            self.stats.start_ns = now;
        }
        let i = self.rc.next_to_send(now)?;
        let m = (i / self.shape.msg_len) as usize;
        if i.is_multiple_of(self.shape.msg_len) && self.sent_at[m].is_none() {
            self.sent_at[m] = Some(now);
        }
        let payload: Vec<u8> = (0..self.shape.mtu).map(|k| pattern(i, k)).collect();
        let bytes = self.rc.frame(i, &payload, self.shape.mtu as u32).ok()?;
        self.stats.packets_tx += 1;
        self.stats.wire_bytes_tx += bytes.len() as u64;
        self.stats.retransmissions = self.rc.retransmissions;
        Some(Transmit { to: 2, bytes })
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.rc.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.rc.on_timeout(now);
    }

    fn is_done(&self) -> bool {
        self.rc.all_acked()
    }
}

impl Worker for StreamSender {
    fn result(&self) -> Option<Vec<i32>> {
        None
    }

    fn stats(&self) -> HostStats {
        self.stats.clone()
    }

    fn check(&self, _cfg: &AllReduceConfig) -> bool {
        self.rc.all_acked()
    }
}

/// Host 1: the RC responder, checking what it is given.
pub struct StreamReceiver {
    rc: RcResponder,
    shape: Shape,
    corrupt: u64,
    out: VecDeque<Vec<u8>>,
    stats: HostStats,
}

impl Endpoint for StreamReceiver {
    fn id(&self) -> NodeId {
        1
    }

    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, f: &[u8]) {
        self.stats.packets_rx += 1;
        let Ok((fr, payload)) = FrameRepr::parse(f) else {
            self.stats.malformed_rx += 1;
            return;
        };
        if fr.bth.opcode & opcode::OPERATION_MASK > opcode::WRITE_ONLY_IMM {
            return;
        }
        if let crate::roce::Accept::Deliver(i) = self.rc.on_data(fr.bth.psn, fr.bth.ack_req)
            && (payload.len() != self.shape.mtu
                || payload.iter().enumerate().any(|(k, b)| *b != pattern(i, k)))
        {
            self.corrupt += 1;
        }
        for a in self.rc.take_acks() {
            if let Ok(b) = self.rc.ack_frame(&a) {
                self.out.push_back(b);
            }
        }
    }

    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        let bytes = self.out.pop_front()?;
        self.stats.packets_tx += 1;
        self.stats.wire_bytes_tx += bytes.len() as u64;
        Some(Transmit { to: 2, bytes })
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }

    fn handle_timeout(&mut self, _now: Nanos) {}

    fn is_done(&self) -> bool {
        self.rc.complete()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("corrupt", self.corrupt)]
    }
}

impl Worker for StreamReceiver {
    fn result(&self) -> Option<Vec<i32>> {
        None
    }

    fn stats(&self) -> HostStats {
        self.stats.clone()
    }

    fn check(&self, _cfg: &AllReduceConfig) -> bool {
        self.rc.complete() && self.corrupt == 0
    }
}

/// The transfer as a [`System`] (`workers` must be 2).
pub struct RcStream;

impl System for RcStream {
    fn name(&self) -> &'static str {
        "rc_stream"
    }

    /// RC over RoCE: in PSN order.
    fn ordered_transport(&self) -> bool {
        true
    }

    /// A pair of hosts, not an all-reduce: the fuzz body does not drive it.
    fn fuzzed(&self) -> bool {
        false
    }

    fn build(&self, cfg: &AllReduceConfig) -> Result<Setup, SetupError> {
        self.build_at(cfg, None)
    }

    /// The two hosts at `plan`'s first two workers' MACs and IPv4 addresses (the QPNs as
    /// without a plan); the switch only swaps the two links, so it needs no address.
    fn build_at(
        &self,
        cfg: &AllReduceConfig,
        plan: Option<&crate::common::AddressPlan>,
    ) -> Result<Setup, SetupError> {
        if cfg.workers != 2 {
            return Err(SetupError::Config(format!(
                "a stream runs between 2 hosts (got {})",
                cfg.workers
            )));
        }
        let shape = Shape::new(cfg)?;
        let (a, b) = match plan {
            None => (addr(0), addr(1)),
            Some(p) => {
                p.covers(2)?;
                let at = |i: u8| {
                    p.worker(usize::from(i))
                        .map(|h| Addr {
                            mac: h.mac,
                            ip: h.ipv4,
                            ..addr(i)
                        })
                        .ok_or(crate::common::AddressError::TooFew { have: 0, need: 2 })
                };
                (at(0)?, at(1)?)
            }
        };
        let sender = StreamSender {
            rc: RcSender::new(
                a,
                b,
                0x10,
                shape.packets,
                shape.msg_len,
                shape.window,
                cfg.timeout_ns,
            ),
            shape,
            sent_at: vec![None; (shape.packets / shape.msg_len) as usize],
            msgs_acked: 0,
            stats: HostStats {
                gradient_bytes: u64::from(shape.packets) * shape.mtu as u64,
                ..HostStats::default()
            },
            started: false,
        };
        let receiver = StreamReceiver {
            rc: RcResponder::new(b, a, 0x10, shape.packets, shape.msg_len),
            shape,
            corrupt: 0,
            out: VecDeque::new(),
            stats: HostStats::default(),
        };
        Ok(Setup {
            workers: vec![Box::new(sender), Box::new(receiver)],
            // a switch that only forwards: frames from host 0 go to host 1 and back
            switch: Box::new(Forwarder::new(2, 3, Route::Swap(0, 1))),
            others: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::SetupNode;
    use inabench_fabric::fault::Faults;

    fn cfg(loss: f64) -> (AllReduceConfig, Faults) {
        (
            AllReduceConfig {
                workers: 2,
                elements: 100_000,
                seed: 1,
                line_rate_bps: 100e9,
                mtu: 1024,
                timeout_ns: 100_000,
                knobs: vec![("msg_packets".into(), 16.0), ("window".into(), 4.0)],
            },
            Faults {
                loss,
                seed: 2,
                ..Faults::default()
            },
        )
    }

    #[test]
    fn a_wrong_byte_is_caught_by_the_receiver() {
        let (c, _) = cfg(0.0);
        let setup = RcStream.build(&c).expect("build");
        let mut nodes = setup.into_nodes();
        let SetupNode::Worker(rx) = &mut nodes[1] else {
            unreachable!()
        };
        let s = RcSender::new(addr(0), addr(1), 0x10, 400, 16, 4, 1000);
        let payload: Vec<u8> = (0..1024).map(|k| pattern(0, k)).collect();
        let good = s.frame(0, &payload, 1024).expect("frame");
        let mut payload: Vec<u8> = (0..1024).map(|k| pattern(1, k)).collect();
        payload[100] ^= 1;
        let bad = s.frame(1, &payload, 1024).expect("frame");
        rx.handle_packet(0, 2, &good);
        assert_eq!(rx.counters(), vec![("corrupt", 0)]);
        rx.handle_packet(0, 2, &bad);
        assert_eq!(
            rx.counters(),
            vec![("corrupt", 1)],
            "packet 1 with one bit flipped (its ICRC recomputed over the flip)"
        );
        assert!(!rx.check(&c));
    }
}

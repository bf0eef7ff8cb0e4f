//! CPUSync's all-reduce: recursive doubling among the workers, as MPI libraries run a small
//! MPI_Allreduce (Open MPI's `tuned` component picks it for short messages; Thakur, Rabenseifner
//! and Gropp, "Optimization of Collective Communication Operations in MPICH", IJHPCA 2005): in
//! step s, worker r exchanges its partial sum with worker r XOR 2^s and adds what it receives;
//! after log2(N) steps every worker holds the sum. Blocking, one operation at a time, as
//! MPI_Allreduce is. Frames go through [`Forwarder`], a switch that only forwards by MAC.
//!
//! Values are int32 with wrapping sums, so the result is exact whatever the order. Reliability
//! is the RDMA transport's in the paper (RC); here the fabric must be loss-free (fig. 8's is):
//! a lost frame stalls the operation, which the experiment reports as unfinished.

use crate::protocol::{Completed, ProtocolError};
use crate::wire::{mac, node_of};
pub use inabench_fabric::Forwarder;
use inabench_fabric::{Endpoint, Nanos, NodeId, Route, Transmit};
use inabench_wire::{Error, ethernet};
use std::collections::{HashMap, VecDeque};

/// EtherType of CPUSync's frames (IEEE 802 local experimental, the second one).
pub const ETHERTYPE_CPUSYNC: u16 = 0x88B6;
const HDR: usize = 8;

/// A CPUSync message: (operation, step, values).
pub(crate) fn cpusync_frame(src: u32, dst: u32, op: u32, step: u8, values: &[i32]) -> Vec<u8> {
    let len = (ethernet::HEADER_LEN + HDR + 4 * values.len()).max(ethernet::MIN_FRAME_LEN);
    let mut f = vec![0u8; len];
    ethernet::Repr {
        dst: mac(dst),
        src: mac(src),
        ethertype: ETHERTYPE_CPUSYNC,
    }
    .emit(&mut f[..]);
    let b = &mut f[ethernet::HEADER_LEN..];
    b[0..4].copy_from_slice(&op.to_be_bytes());
    b[4] = step;
    b[5] = values.len().min(255) as u8;
    for (k, v) in values.iter().take(255).enumerate() {
        b[HDR + 4 * k..HDR + 4 * k + 4].copy_from_slice(&v.to_be_bytes());
    }
    f
}

/// Parses a CPUSync message: (source, operation, step, values).
pub(crate) fn cpusync_parse(f: &[u8]) -> Result<(u32, u32, u8, Vec<i32>), Error> {
    let eth = ethernet::Repr::parse(f)?;
    if eth.ethertype != ETHERTYPE_CPUSYNC {
        return Err(Error::Unsupported("ethertype (not CPUSync)"));
    }
    let src = node_of(eth.src).ok_or(Error::Malformed("source MAC"))?;
    let b = &f[ethernet::HEADER_LEN..];
    if b.len() < HDR {
        return Err(Error::Truncated {
            what: "cpusync header",
            need: HDR,
            have: b.len(),
        });
    }
    let op = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let count = usize::from(b[5]);
    if b.len() < HDR + 4 * count {
        return Err(Error::Truncated {
            what: "cpusync values",
            need: HDR + 4 * count,
            have: b.len(),
        });
    }
    let values = b[HDR..HDR + 4 * count]
        .chunks_exact(4)
        .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((src, op, b[4], values))
}

struct Current {
    op: u64,
    acc: Vec<i32>,
    step: u32,
    submitted_ns: Nanos,
}

/// One MPI rank's recursive-doubling all-reduce.
pub struct CpuSyncWorker {
    rank: usize,
    workers: usize,
    switch: NodeId,
    elements: usize,
    steps: u32,
    pending: VecDeque<(u64, Vec<i32>, Nanos)>,
    current: Option<Current>,
    early: HashMap<(u32, u8), Vec<i32>>,
    submitted: u64,
    completed: VecDeque<Completed>,
    out: VecDeque<Transmit>,
    pub malformed: u64,
}

impl CpuSyncWorker {
    pub fn new(
        rank: usize,
        workers: usize,
        switch: NodeId,
        elements: usize,
    ) -> Result<Self, ProtocolError> {
        if workers < 2 || !workers.is_power_of_two() || rank >= workers {
            return Err(ProtocolError::Config(format!(
                "recursive doubling needs a power-of-two number of workers (2, 4, 8, ...), not {workers}"
            )));
        }
        if elements == 0 || elements > 255 {
            return Err(ProtocolError::Config(format!(
                "1..255 values per message, not {elements}"
            )));
        }
        Ok(CpuSyncWorker {
            rank,
            workers,
            switch,
            elements,
            steps: workers.trailing_zeros(),
            pending: VecDeque::new(),
            current: None,
            early: HashMap::new(),
            submitted: 0,
            completed: VecDeque::new(),
            out: VecDeque::new(),
            malformed: 0,
        })
    }

    pub fn submit(&mut self, now: Nanos, values: Vec<i32>) -> Result<u64, ProtocolError> {
        if values.len() != self.elements {
            return Err(ProtocolError::Length {
                want: self.elements,
                got: values.len(),
            });
        }
        let op = self.submitted;
        self.submitted += 1;
        self.pending.push_back((op, values, now));
        self.advance(now);
        Ok(op)
    }

    pub fn take_completed(&mut self) -> Option<Completed> {
        self.completed.pop_front()
    }

    fn send_step(&mut self) {
        if let Some(c) = &self.current {
            let partner = self.rank ^ (1 << c.step);
            let f = cpusync_frame(
                self.rank as u32,
                partner as u32,
                c.op as u32,
                c.step as u8,
                &c.acc,
            );
            let _ = self.switch;
            self.out.push_back(Transmit {
                to: self.switch,
                bytes: f,
            });
        }
    }

    /// Start the next operation and consume buffered messages while they complete steps.
    fn advance(&mut self, now: Nanos) {
        loop {
            if self.current.is_none() {
                let Some((op, acc, submitted_ns)) = self.pending.pop_front() else {
                    return;
                };
                self.current = Some(Current {
                    op,
                    acc,
                    step: 0,
                    submitted_ns,
                });
                self.send_step();
            }
            let Some(c) = self.current.as_mut() else {
                return;
            };
            let Some(v) = self.early.remove(&(c.op as u32, c.step as u8)) else {
                return;
            };
            for (a, x) in c.acc.iter_mut().zip(&v) {
                *a = a.wrapping_add(*x);
            }
            c.step += 1;
            if c.step == self.steps {
                if let Some(c) = self.current.take() {
                    self.completed.push_back(Completed {
                        op: c.op,
                        values: c.acc,
                        submitted_ns: c.submitted_ns,
                        done_ns: now,
                    });
                }
            } else {
                self.send_step();
            }
        }
    }
}

impl Endpoint for CpuSyncWorker {
    fn id(&self) -> NodeId {
        self.rank as NodeId
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, f: &[u8]) {
        match cpusync_parse(f) {
            Ok((src, op, step, values))
                if values.len() == self.elements
                    && u32::from(step) < self.steps
                    && src as usize == self.rank ^ (1 << step) =>
            {
                self.early.insert((op, step), values);
                self.advance(now);
            }
            _ => self.malformed += 1,
        }
    }

    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }

    fn handle_timeout(&mut self, _now: Nanos) {}

    fn is_done(&self) -> bool {
        self.current.is_none() && self.pending.is_empty()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("workers", self.workers as u64)]
    }
}

/// The switch of the CPU and GPU baselines: it only forwards each frame to the node its
/// destination MAC names (`02:00:4b` and the node, [`crate::wire::mac`]), as
/// [`inabench_fabric::Forwarder`] on [`Route::DstMac`]; a frame to an unknown node or back to
/// the switch is dropped and counted.
pub fn forwarder(id: NodeId, nodes: u32) -> Forwarder {
    Forwarder::new(
        id,
        nodes,
        Route::DstMac {
            prefix: [2, 0, 0x4b],
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_rejects_short_frames() {
        let f = cpusync_frame(1, 0, 7, 2, &[1, 2, 3]);
        assert_eq!(cpusync_parse(&f).expect("parse"), (1, 7, 2, vec![1, 2, 3]));
        for n in 0..ethernet::HEADER_LEN + HDR {
            assert!(cpusync_parse(&f[..n]).is_err());
        }
        let mut bad = f;
        bad[ethernet::HEADER_LEN + 5] = 100;
        assert!(cpusync_parse(&bad).is_err());
    }
}

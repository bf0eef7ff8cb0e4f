//! A software model of a Tofino-class pipeline, with the limits NetReduce's Sec. 6 states: a
//! pipeline has 12 stages, each stage 4 register arrays of 32-bit cells that a packet can touch once
//! per pass (so one pass aggregates at most 12 x 4 x 4 = 192 bytes), and each pipeline serves
//! 16 x 100 Gbps ports; the chip has 4 pipelines. Work beyond a pass recirculates.
//!
//! The switch programs of ATP, SwitchML and SwitchML-RDMA will run on it; what the model derives
//! (passes, recirculations, the internal bandwidth they take, loopback ports) is where their
//! "switch overhead" must come from. Here the model and its accounting, tested on its own.
//! It is one of the two [`Target`]s (the FPGA board the other).

use crate::target::Target;

/// The chip's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TofinoModel {
    pub stages: u32,
    pub registers_per_stage: u32,
    pub register_bytes: u32,
    pub pipelines: u32,
    pub ports_per_pipeline: u32,
    pub port_gbps: f64,
}

impl TofinoModel {
    /// The numbers of NetReduce Sec. 6.
    pub const PAPER: TofinoModel = TofinoModel {
        stages: 12,
        registers_per_stage: 4,
        register_bytes: 4,
        pipelines: 4,
        ports_per_pipeline: 16,
        port_gbps: 100.0,
    };

    /// Bytes of values one pass can aggregate (one access per register array per pass).
    pub fn bytes_per_pass(&self) -> u32 {
        self.stages * self.registers_per_stage * self.register_bytes
    }

    /// Passes a packet needs to aggregate `payload` bytes of values (at least one).
    #[inline]
    pub fn passes(&self, payload: u32) -> u32 {
        let per_pass = self.bytes_per_pass();
        // one pass without a division (the common case, per packet); the same count
        if payload <= per_pass {
            1
        } else {
            payload.div_ceil(per_pass)
        }
    }
}

/// The Tofino as a [`Target`]: every pipeline's ports, and a pass per 192 bytes of values.
impl Target for TofinoModel {
    fn name(&self) -> &'static str {
        "tofino"
    }
    fn ports(&self) -> u32 {
        self.pipelines * self.ports_per_pipeline
    }
    fn port_gbps(&self) -> f64 {
        self.port_gbps
    }
    fn passes(&self, payload: u32) -> u32 {
        TofinoModel::passes(self, payload)
    }
}

/// How a program gets its extra passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recirculation {
    /// Back into the same pipeline (ATP): each extra pass takes the pipeline's bandwidth again.
    SamePipeline,
    /// Through the other pipelines in loopback (SwitchML-RDMA's "huge pipeline"): the ports of
    /// the pipelines used for extra passes carry only looped-back traffic.
    ChainPipelines,
}

/// What the model counted.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PipelineStats {
    pub packets: u64,
    pub passes: u64,
    pub recirculations: u64,
    pub recirculated_bytes: u64,
}

/// A pipeline model executing packets for one program.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub model: TofinoModel,
    pub mode: Recirculation,
    pub stats: PipelineStats,
    /// the last (payload, bytes per pass, passes) counted: a program's packets carry the same
    /// payload, so `process` divides once, not per packet (a division was 7.5% of ATP's switch)
    memo: (u32, u32, u32),
}

impl Pipeline {
    pub fn new(model: TofinoModel, mode: Recirculation) -> Self {
        Pipeline {
            model,
            mode,
            stats: PipelineStats::default(),
            memo: (0, 0, 1),
        }
    }

    /// Account one packet of `frame_bytes` carrying `payload` bytes of values; returns its passes.
    #[inline]
    pub fn process(&mut self, frame_bytes: u32, payload: u32) -> u32 {
        let per_pass = self.model.bytes_per_pass();
        let p = if payload <= per_pass {
            1
        } else if (payload, per_pass) == (self.memo.0, self.memo.1) {
            self.memo.2
        } else {
            let p = self.model.passes(payload);
            self.memo = (payload, per_pass, p);
            p
        };
        self.stats.packets += 1;
        self.stats.passes += u64::from(p);
        self.stats.recirculations += u64::from(p - 1);
        self.stats.recirculated_bytes += u64::from(p - 1) * u64::from(frame_bytes);
        p
    }

    /// The share of the pipeline's packet-processing bandwidth spent on recirculated passes
    /// (ATP's "recirculating packets once costs 50% internal bandwidth").
    pub fn internal_bandwidth_overhead(&self) -> f64 {
        if self.stats.passes == 0 {
            0.0
        } else {
            self.stats.recirculations as f64 / self.stats.passes as f64
        }
    }

    /// The share of the chip's ports that carry only looped-back traffic when extra passes chain
    /// through the other pipelines (SwitchML-RDMA's "75% switch ports ... in loopback mode"):
    /// a packet needing `p` passes occupies min(p, pipelines) pipelines, all but the first in
    /// loopback.
    pub fn loopback_port_share(&self, payload: u32) -> f64 {
        match self.mode {
            Recirculation::SamePipeline => 0.0,
            Recirculation::ChainPipelines => {
                let used = self.model.passes(payload).min(self.model.pipelines);
                f64::from(used - 1) / f64::from(self.model.pipelines)
            }
        }
    }
}

/// Goodput as a share of line rate for `payload` bytes of values in a frame with `header_bytes`
/// of headers, counting Ethernet's preamble, start delimiter and inter-frame gap (20 bytes) and
/// FCS (4 bytes) on the wire.
pub fn goodput_share(payload: u32, header_bytes: u32) -> f64 {
    f64::from(payload) / f64::from(payload + header_bytes + 4 + 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_holds_192_bytes() {
        let m = TofinoModel::PAPER;
        assert_eq!(m.bytes_per_pass(), 192);
        assert_eq!(
            (
                m.passes(0),
                m.passes(192),
                m.passes(193),
                m.passes(256),
                m.passes(1024)
            ),
            (1, 1, 2, 2, 6)
        );
        assert_eq!(m.pipelines * m.ports_per_pipeline, 64);
    }

    #[test]
    fn atp_style_recirculation_costs_half_the_internal_bandwidth() {
        // ATP's 256-byte payload (NetReduce Sec. 6): two passes, one recirculation per packet
        let mut p = Pipeline::new(TofinoModel::PAPER, Recirculation::SamePipeline);
        for _ in 0..1000 {
            assert_eq!(p.process(256 + 70, 256), 2);
        }
        assert_eq!(p.stats.recirculations, 1000);
        assert!((p.internal_bandwidth_overhead() - 0.5).abs() < 1e-12);
        assert_eq!(p.loopback_port_share(256), 0.0);
    }

    /// `process` counts each packet's passes as `passes` does when payloads and the model
    /// change between packets (its memo of the last division is never stale).
    #[test]
    fn process_counts_passes_as_passes_does() {
        let mut p = Pipeline::new(TofinoModel::PAPER, Recirculation::SamePipeline);
        let mut want = PipelineStats::default();
        for (i, payload) in [256u32, 256, 1024, 100, 1024, 193, 384, 385, 256]
            .into_iter()
            .enumerate()
        {
            if i == 6 {
                p.model.stages = 6;
            }
            let n = p.model.passes(payload);
            assert_eq!(p.process(payload + 54, payload), n, "packet {i}");
            want.packets += 1;
            want.passes += u64::from(n);
            want.recirculations += u64::from(n - 1);
            want.recirculated_bytes += u64::from(n - 1) * u64::from(payload + 54);
        }
        assert_eq!(p.stats, want);
        assert_eq!(p.stats.passes, 2 + 2 + 6 + 1 + 6 + 2 + 4 + 5 + 3);
    }

    #[test]
    fn chaining_all_four_pipelines_loops_back_three_quarters_of_the_ports() {
        // SwitchML-RDMA's full-size payloads (1 KB): more passes than pipelines, all four chained
        let p = Pipeline::new(TofinoModel::PAPER, Recirculation::ChainPipelines);
        assert!((p.loopback_port_share(1024) - 0.75).abs() < 1e-12);
        assert!(
            (p.loopback_port_share(300) - 0.25).abs() < 1e-12,
            "two passes: one pipeline in loopback"
        );
        assert_eq!(p.loopback_port_share(100), 0.0);
    }

    #[test]
    fn small_payloads_bound_goodput() {
        // one pass of values (192 B) behind Ethernet/IPv4/UDP and a 12-byte INA header
        let share = goodput_share(192, 14 + 20 + 8 + 12);
        assert!(share > 0.70 && share < 0.72, "{share}");
        assert!(goodput_share(1024, 14 + 20 + 8 + 12 + 16 + 4) > 0.9);
    }
}

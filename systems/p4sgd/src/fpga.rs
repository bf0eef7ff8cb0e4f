//! The FPGA worker's timing model (Sec. 4.1 of the paper), in engine clock cycles.
//!
//! A worker owns `features / workers` features (model parallelism) and splits them evenly over
//! `engines` engines (Sec. 4.1: "partition a subset of the model ... uniformly to engines").
//! Each engine consumes a 512-bit stream per cycle at `clock_hz` (Sec. 4.1.1-4.1.2; 250 MHz in
//! Table III): 8 banks, one sample of the micro-batch each, 64 bit-serial multipliers per bank
//! taking one bit of one feature per cycle (Sec. 4.1.3). A micro-batch of 8 samples over an
//! engine's `f` features at `b`-bit precision therefore takes `ceil(f / 64) * b` cycles of
//! forward propagation; backward propagation runs on its own 64 bit-serial multipliers per bank,
//! fed from the bank's FIFO, at the same one bit per feature per cycle, so it takes as many
//! cycles and overlaps with the forward pass of the next micro-batch.
//!
//! The stream comes from HBM: each engine owns four 256-bit channels (Sec. 4.1.1) of the HBM
//! subsystem clocked at 450 MHz (Table III), 57.6 GB/s per engine; the Alveo U280 data sheet
//! (Xilinx DS963) gives 460 GB/s over its 32 channels, the same 14.4 GB/s per channel. When the
//! engines' demand (512 bits per cycle) exceeds the supply, every cycle stretches by the ratio.
//! The data set is streamed densely (MLWeaving's bit-weaving layout stores every feature of
//! every sample; the bank consumes 64 features per cycle whether they are zero or not).
//!
//! Per iteration (a mini-batch of `B` samples, `M = ceil(B / 8)` micro-batches):
//! - P4SGD (Eq. 3, Fig. 2c): forward of micro-batch k ends at `(k + 1) t`; its all-reduce
//!   starts then; its backward starts when the result is back and the previous backward is done,
//!   and takes `t`. With a constant all-reduce latency `L` this is `t + L + M t`: one
//!   micro-batch's forward, the communication and the mini-batch's backward.
//! - Data-parallel on FPGAs (Eq. 1): each worker has all features and `B / P` samples;
//!   forward and backward overlap per micro-batch, so compute ends one micro-batch after the
//!   last forward, `(m + 1) t` with `m = ceil(B / P / 8)`; then the all-reduce of the whole
//!   gradient.
//!
//! No constant here is fitted to a figure: the cycle counts follow the design the paper
//! describes, the clocks are Table III's and the bandwidths the U280's.

/// One FPGA worker's hardware, as the paper's design states it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FpgaModel {
    /// Engine clock (Table III: 250 MHz).
    pub clock_hz: f64,
    /// Engines per worker (1..=8, Sec. 4.1.1).
    pub engines: usize,
    /// Banks per engine = samples per micro-batch (Sec. 4.1.2: 8).
    pub banks: usize,
    /// Bit-serial multipliers per bank = features per cycle (Sec. 4.1.3: 64).
    pub lanes: usize,
    /// Feature precision in bits (Sec. 5.1: 4).
    pub precision_bits: u32,
    /// HBM channels per engine (Sec. 4.1.1: 4).
    pub hbm_channels_per_engine: usize,
    /// Bits per HBM channel access (Sec. 4.1.1: 256).
    pub hbm_channel_bits: usize,
    /// HBM subsystem clock (Table III: 450 MHz).
    pub hbm_clock_hz: f64,
    /// On-chip weights per engine (Sec. 4.1: up to 256K).
    pub weights_per_engine: usize,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FpgaError {
    #[error("invalid FPGA configuration: {0}")]
    Config(String),
    #[error(
        "{features} features per engine exceed the engine's {capacity} on-chip weights (Sec. 4.1)"
    )]
    Capacity { features: usize, capacity: usize },
}

impl FpgaModel {
    /// The paper's design with `engines` engines at `precision_bits` and `clock_hz`.
    pub fn paper(engines: usize, precision_bits: u32, clock_hz: f64) -> FpgaModel {
        FpgaModel {
            clock_hz,
            engines,
            banks: 8,
            lanes: 64,
            precision_bits,
            hbm_channels_per_engine: 4,
            hbm_channel_bits: 256,
            hbm_clock_hz: 450e6,
            weights_per_engine: 256 * 1024,
        }
    }

    pub fn validate(&self) -> Result<(), FpgaError> {
        if self.engines == 0 || self.engines > 8 {
            return Err(FpgaError::Config(format!(
                "{} engines (the U280 holds 1..8, Sec. 4.1.1)",
                self.engines
            )));
        }
        if self.banks == 0 || self.lanes == 0 || self.precision_bits == 0 {
            return Err(FpgaError::Config(
                "banks, lanes and precision must be positive".into(),
            ));
        }
        if !(self.clock_hz > 0.0 && self.hbm_clock_hz > 0.0) {
            return Err(FpgaError::Config("clocks must be positive".into()));
        }
        Ok(())
    }

    /// Bits per second one engine consumes at full rate (banks x lanes bits per cycle).
    pub fn demand_bps(&self) -> f64 {
        (self.banks * self.lanes) as f64 * self.clock_hz
    }

    /// Bits per second one engine's HBM channels supply.
    pub fn supply_bps(&self) -> f64 {
        (self.hbm_channels_per_engine * self.hbm_channel_bits) as f64 * self.hbm_clock_hz
    }

    /// Features of a worker's partition each engine holds.
    pub fn features_per_engine(&self, worker_features: usize) -> usize {
        worker_features.div_ceil(self.engines.max(1))
    }

    /// Cycles one engine spends on one micro-batch (forward, or backward) over its features.
    pub fn micro_batch_cycles(&self, worker_features: usize) -> u64 {
        let f = self.features_per_engine(worker_features);
        f.div_ceil(self.lanes) as u64 * u64::from(self.precision_bits)
    }

    /// Time of one micro-batch pass (forward or backward) over a worker's `worker_features`, in
    /// ns, stretched when HBM cannot feed the engines at full rate.
    pub fn micro_batch_ns(&self, worker_features: usize) -> Result<f64, FpgaError> {
        self.validate()?;
        let f = self.features_per_engine(worker_features);
        if f > self.weights_per_engine {
            return Err(FpgaError::Capacity {
                features: f,
                capacity: self.weights_per_engine,
            });
        }
        let stall = (self.demand_bps() / self.supply_bps()).max(1.0);
        Ok(self.micro_batch_cycles(worker_features) as f64 * 1e9 / self.clock_hz * stall)
    }
}

/// The features worker `p` of `workers` owns (contiguous blocks, as [`crate::glm::columns`]).
pub fn worker_features(p: usize, workers: usize, features: usize) -> usize {
    crate::glm::columns(p, workers, features).len()
}

/// Eq. 3's pipeline for one worker: micro-batch k's forward ends at `(k + 1) t_fwd`, its
/// all-reduce result is back at `done(k, submit)`, its backward starts at the later of that and
/// the previous backward's end and takes `t_bwd`. Returns when the last backward ends.
pub fn pipeline_ns(
    micro_batches: usize,
    t_fwd: f64,
    t_bwd: f64,
    mut done: impl FnMut(usize, f64) -> f64,
) -> f64 {
    let mut end = 0.0f64;
    for k in 0..micro_batches {
        let submit = (k + 1) as f64 * t_fwd;
        let back = done(k, submit);
        end = end.max(back) + t_bwd;
    }
    end
}

/// P4SGD's iteration time (ns) with a constant all-reduce latency `latency_ns` (Eq. 3); the
/// slowest worker (the one with the most features) sets the pace.
pub fn p4sgd_iteration_ns(
    m: &FpgaModel,
    features: usize,
    workers: usize,
    batch: usize,
    latency_ns: f64,
) -> Result<f64, FpgaError> {
    if workers == 0 || batch == 0 {
        return Err(FpgaError::Config("workers and batch start at 1".into()));
    }
    let t = m.micro_batch_ns(worker_features(0, workers, features))?;
    let mb = batch.div_ceil(m.banks);
    Ok(pipeline_ns(mb, t, t, |_, s| s + latency_ns))
}

/// The FPGA data-parallel system's iteration time (ns), Eq. 1: each worker streams its `B / P`
/// samples over all features; the gradient all-reduce takes `comm_ns` after the last backward.
pub fn dp_iteration_ns(
    m: &FpgaModel,
    features: usize,
    workers: usize,
    batch: usize,
    comm_ns: f64,
) -> Result<f64, FpgaError> {
    if workers == 0 || batch == 0 {
        return Err(FpgaError::Config("workers and batch start at 1".into()));
    }
    let t = m.micro_batch_ns(features)?;
    let mb = batch.div_ceil(workers).div_ceil(m.banks);
    Ok((mb + 1) as f64 * t + comm_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paper8() -> FpgaModel {
        FpgaModel::paper(8, 4, 250e6)
    }

    #[test]
    fn hand_computed_micro_batch_and_iteration() {
        let m = paper8();
        // rcv1: 47,236 features over 4 workers -> 11,809 per worker -> 1,477 per engine
        // -> ceil(1477 / 64) = 24 chunks x 4 bits = 96 cycles = 384 ns at 250 MHz
        assert_eq!(worker_features(0, 4, 47_236), 11_809);
        assert_eq!(m.micro_batch_cycles(11_809), 96);
        assert!((m.micro_batch_ns(11_809).unwrap() - 384.0).abs() < 1e-9);
        // batch 64 = 8 micro-batches, latency 1,000 ns: 384 + 1000 + 8 x 384 = 4,456 ns
        let t = p4sgd_iteration_ns(&m, 47_236, 4, 64, 1000.0).unwrap();
        assert!((t - 4456.0).abs() < 1e-9, "{t}");
        // HBM: 4 x 256 bit x 450 MHz = 460.8 Gb/s >= 512 bit x 250 MHz = 128 Gb/s: no stall
        assert!((m.supply_bps() - 460.8e9).abs() < 1.0);
        assert!((m.demand_bps() - 128e9).abs() < 1.0);
        // data parallel, 4 workers, batch 64: 16 samples each = 2 micro-batches over 47,236
        // features / 8 engines = 5,905 -> 93 chunks x 4 = 372 cycles = 1,488 ns; (2 + 1) x
        // 1,488 + comm
        let d = dp_iteration_ns(&m, 47_236, 4, 64, 500.0).unwrap();
        assert!((d - (3.0 * 1488.0 + 500.0)).abs() < 1e-9, "{d}");
    }

    #[test]
    fn hbm_starvation_stretches_cycles() {
        let mut m = paper8();
        m.hbm_clock_hz = 62.5e6; // 4 x 256 x 62.5 MHz = 64 Gb/s: half the demand
        let fast = paper8().micro_batch_ns(6400).unwrap();
        assert!((m.micro_batch_ns(6400).unwrap() - 2.0 * fast).abs() < 1e-9);
    }

    #[test]
    fn monotone_in_features_batch_engines_workers_and_latency() {
        let base = |e: usize| FpgaModel::paper(e, 4, 250e6);
        let it = |e, d, w, b, l| p4sgd_iteration_ns(&base(e), d, w, b, l).unwrap();
        let mut last = 0.0;
        for d in [1_000, 5_000, 47_236, 332_710, 1_000_000] {
            let t = it(8, d, 8, 64, 1200.0);
            assert!(t > last, "features {d}");
            last = t;
        }
        let mut last = 0.0;
        for b in [8, 16, 64, 256, 1024] {
            let t = it(8, 47_236, 8, b, 1200.0);
            assert!(t > last, "batch {b}");
            // per-sample time falls with the batch (latency amortised)
            last = t;
        }
        let per_sample = |b: usize| it(8, 47_236, 8, b, 1200.0) / b as f64;
        assert!(per_sample(16) > per_sample(64) && per_sample(64) > per_sample(1024));
        let mut last = f64::MAX;
        for e in 1..=8 {
            let t = it(e, 1_000_000, 8, 64, 1200.0);
            assert!(t < last, "engines {e}");
            last = t;
        }
        let mut last = f64::MAX;
        for w in 1..=8 {
            let t = it(8, 1_000_000, w, 64, 1200.0);
            assert!(t < last, "workers {w}");
            last = t;
        }
        assert!(it(8, 47_236, 8, 64, 2000.0) > it(8, 47_236, 8, 64, 1000.0));
        // precision: linear in the bits
        let b1 = p4sgd_iteration_ns(&FpgaModel::paper(8, 1, 250e6), 1 << 20, 8, 64, 0.0).unwrap();
        let b4 = p4sgd_iteration_ns(&FpgaModel::paper(8, 4, 250e6), 1 << 20, 8, 64, 0.0).unwrap();
        assert!((b4 - 4.0 * b1).abs() < 1e-6);
    }

    #[test]
    fn pipeline_waits_for_late_results() {
        // results back in reverse: backward can only start at the latest arrivals
        let t = pipeline_ns(3, 10.0, 10.0, |k, _| [100.0, 50.0, 20.0][k]);
        assert_eq!(t, 130.0);
        // one result very late: everything queues behind it
        let t = pipeline_ns(3, 10.0, 10.0, |k, s| if k == 0 { 500.0 } else { s + 1.0 });
        assert_eq!(t, 530.0);
    }

    #[test]
    fn capacity_and_config_errors() {
        let m = FpgaModel::paper(1, 4, 250e6);
        assert_eq!(
            m.micro_batch_ns(1_000_000),
            Err(FpgaError::Capacity {
                features: 1_000_000,
                capacity: 262_144
            })
        );
        assert!(FpgaModel::paper(9, 4, 250e6).micro_batch_ns(10).is_err());
        assert!(p4sgd_iteration_ns(&m, 10, 0, 64, 0.0).is_err());
    }
}

//! Parameter orchestration (Sec. 3.4): where hot parameters live in the switch's registers, how
//! workers package their gradients, and what that costs on the Tofino pipeline model.
//!
//! - [`Placement::heat`]: register i holds the parameters of rank i + m j (rank 0 the hottest);
//!   [`Placement::random`]: a seeded random assignment of ranks to register slots (the baseline).
//! - [`package_sequential`]: pairs in the order the worker holds them, `cap` to a packet.
//! - [`package_alg1`]: Algorithm 1: P = ceil(|G| / cap) packets; each parameter goes into the
//!   first packet that is not full and holds no parameter of its register; those that fit nowhere
//!   (G') go into new packets without regard to the layout.
//! - [`RegisterPipeline`]: a packet's pairs on the pipeline model: in one pass each register
//!   array serves one access, so a packet needs as many passes as its most used register has
//!   pairs (and at least the passes its payload needs at 192 bytes a pass); every pass beyond the
//!   first is a recirculation, counted in [`inabench_ina::tofino::Pipeline`]'s statistics.
//!
//! The paper's prototype recirculates a packet at most once (Sec. 4); the model counts every pass a
//! packet needs, so that "recirculations per packet" (Fig. 16) can exceed one.

use crate::LibraError;
use inabench_ina::tofino::{Pipeline, Recirculation, TofinoModel};
use inabench_rng::SplitMix64;

/// Bytes of one key/value pair in a Libra packet (4-byte rank index, 4-byte value).
pub const PAIR_BYTES: u32 = 8;

/// Where each hot parameter (by rank) lives.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// Register arrays.
    pub m: usize,
    /// Register of each rank.
    pub reg: Vec<u16>,
    /// Slot (index in its register) of each rank.
    pub slot: Vec<u32>,
}

impl Placement {
    fn check(n: usize, m: usize) -> Result<(), LibraError> {
        if m == 0 || m > 128 || n == 0 {
            return Err(LibraError::Config(format!(
                "a placement needs 1..=128 registers and at least one parameter (got m = {m}, n = {n})"
            )));
        }
        Ok(())
    }

    /// Heat-based placement of `n` ranked parameters on `m` registers.
    pub fn heat(n: usize, m: usize) -> Result<Placement, LibraError> {
        Self::check(n, m)?;
        Ok(Placement {
            m,
            reg: (0..n).map(|r| (r % m) as u16).collect(),
            slot: (0..n).map(|r| (r / m) as u32).collect(),
        })
    }

    /// A random placement: the same register slots, shuffled (Fisher-Yates, seeded).
    pub fn random(n: usize, m: usize, seed: u64) -> Result<Placement, LibraError> {
        Self::check(n, m)?;
        let mut pos: Vec<usize> = (0..n).collect();
        let mut g = SplitMix64::derive(seed, "layout/random");
        for i in (1..n).rev() {
            let j = (g.next_u64() % (i as u64 + 1)) as usize;
            pos.swap(i, j);
        }
        Ok(Placement {
            m,
            reg: pos.iter().map(|p| (p % m) as u16).collect(),
            slot: pos.iter().map(|p| (p / m) as u32).collect(),
        })
    }

    /// Slots per register (the register arrays' size).
    pub fn slots_per_register(&self) -> usize {
        self.reg.len().div_ceil(self.m)
    }
}

/// Pack ranks `cap` to a packet, in order.
pub fn package_sequential(g: &[u32], cap: usize) -> Vec<Vec<u32>> {
    g.chunks(cap.max(1)).map(<[u32]>::to_vec).collect()
}

/// The packets Algorithm 1 builds, and how many of them carry G' (the last ones).
#[derive(Debug, Clone, PartialEq)]
pub struct Packaged {
    pub packets: Vec<Vec<u32>>,
    pub overflow_packets: usize,
}

/// Algorithm 1 (PARAMETER_ORCHESTRATING) for ranks `g`, `cap` pairs to a packet, with the
/// register of each rank from `placement`.
pub fn package_alg1(g: &[u32], cap: usize, placement: &Placement) -> Packaged {
    let cap = cap.max(1);
    let n_pkts = g.len().div_ceil(cap);
    let mut pkts: Vec<Vec<u32>> = vec![Vec::with_capacity(cap); n_pkts];
    // registers each packet already uses (m <= 128)
    let mut used = vec![0u128; n_pkts];
    // P1: packets that are not full, in order
    let mut open: Vec<usize> = (0..n_pkts).collect();
    let mut rest = Vec::new();
    for &theta in g {
        let k = placement.reg.get(theta as usize).copied().unwrap_or(0);
        let bit = 1u128 << k;
        match open.iter().position(|&p| used[p] & bit == 0) {
            Some(i) => {
                let p = open[i];
                pkts[p].push(theta);
                used[p] |= bit;
                if pkts[p].len() == cap {
                    open.remove(i);
                }
            }
            None => rest.push(theta),
        }
    }
    pkts.retain(|p| !p.is_empty());
    let extra = package_sequential(&rest, cap);
    let overflow_packets = extra.len();
    pkts.extend(extra);
    Packaged {
        packets: pkts,
        overflow_packets,
    }
}

/// Passes a packet of ranks needs: its most used register's pair count, at least the payload's.
pub fn passes(pkt: &[u32], placement: &Placement, model: &TofinoModel) -> u32 {
    let mut count = [0u32; 128];
    let mut most = 0;
    for &r in pkt {
        let k = usize::from(placement.reg.get(r as usize).copied().unwrap_or(0));
        count[k] += 1;
        most = most.max(count[k]);
    }
    most.max(model.passes(pkt.len() as u32 * PAIR_BYTES))
}

/// The pipeline model running Libra's register accesses.
#[derive(Debug, Clone)]
pub struct RegisterPipeline {
    pub pipeline: Pipeline,
}

impl RegisterPipeline {
    pub fn new(model: TofinoModel) -> RegisterPipeline {
        RegisterPipeline {
            pipeline: Pipeline::new(model, Recirculation::SamePipeline),
        }
    }

    /// Process one packet of `frame_bytes`; returns its passes.
    pub fn process(&mut self, pkt: &[u32], placement: &Placement, frame_bytes: u32) -> u32 {
        let p = passes(pkt, placement, &self.pipeline.model);
        let s = &mut self.pipeline.stats;
        s.packets += 1;
        s.passes += u64::from(p);
        s.recirculations += u64::from(p - 1);
        s.recirculated_bytes += u64::from(p - 1) * u64::from(frame_bytes);
        p
    }

    /// Process one packet whose pairs are added with the table-lookup float sum; returns its
    /// passes: at least [`float_passes`] and at least what its registers need.
    pub fn process_float(&mut self, pkt: &[u32], placement: &Placement, frame_bytes: u32) -> u32 {
        let p = passes(pkt, placement, &self.pipeline.model).max(float_passes(pkt.len()));
        let s = &mut self.pipeline.stats;
        s.packets += 1;
        s.passes += u64::from(p);
        s.recirculations += u64::from(p - 1);
        s.recirculated_bytes += u64::from(p - 1) * u64::from(frame_bytes);
        p
    }

    pub fn recirculations_per_packet(&self) -> f64 {
        let s = &self.pipeline.stats;
        s.recirculations as f64 / s.packets.max(1) as f64
    }
}

/// The stages of one table-lookup float add's dependency chain ([`crate::float`]): the
/// operands' `epo`, then `log_m` / `log_dm` / `log_mln2` (same stage), `exp_corr` (the log
/// value L is an add in the same stage's action), then θ = L_b - L_a and the miTable key, `mi`,
/// L + mi and the expTable key, `exp`, and the register write: 7 stages, within a pass of the
/// model's 12.
pub const FLOAT_ADD_STAGES: u32 = 7;

/// How many times one add applies its most used table: both operands (the register's running
/// sum and the pushed value) go through `epo`, `log_m`, `log_dm`, `log_mln2` and `exp_corr`.
pub const FLOAT_TABLE_USES_PER_ADD: u32 = 2;

/// Passes a packet of `pairs` float adds needs on the Tofino model with one copy of the seven
/// tables (the 408.5 KB the paper counts): a table is applied at most once per pass, and every
/// add applies the conversion tables twice, so n adds need at least 2n passes; 2n suffice, as
/// each add's chain ([`FLOAT_ADD_STAGES`]) fits in a pass. Our model's choice where the paper is
/// silent (it gives no stage count); it does not model the register being read in one pass and
/// written in a later one (a real program would hold the slot across the passes).
pub fn float_passes(pairs: usize) -> u32 {
    const { assert!(FLOAT_ADD_STAGES <= TofinoModel::PAPER.stages) };
    (pairs as u32 * FLOAT_TABLE_USES_PER_ADD).max(1)
}

/// Pairs a pass can carry on the model (192 B / 8 B = 24).
pub fn pairs_per_packet(model: &TofinoModel) -> usize {
    (model.bytes_per_pass() / PAIR_BYTES) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conflicts(pkt: &[u32], pl: &Placement) -> bool {
        let mut seen = std::collections::HashSet::new();
        pkt.iter().any(|r| !seen.insert(pl.reg[*r as usize]))
    }

    #[test]
    fn heat_placement_is_round_robin() {
        let p = Placement::heat(10, 4).unwrap();
        assert_eq!(p.reg, vec![0, 1, 2, 3, 0, 1, 2, 3, 0, 1]);
        assert_eq!(p.slot[9], 2);
        assert_eq!(p.slots_per_register(), 3);
        let r = Placement::random(1000, 48, 1).unwrap();
        let mut pos: Vec<(u16, u32)> = r.reg.iter().copied().zip(r.slot.iter().copied()).collect();
        pos.sort_unstable();
        pos.dedup();
        assert_eq!(
            pos.len(),
            1000,
            "random placement is a permutation of slots"
        );
        assert!(Placement::heat(10, 0).is_err() && Placement::heat(10, 129).is_err());
    }

    #[test]
    fn alg1_never_puts_one_register_twice_in_its_packets() {
        let model = TofinoModel::PAPER;
        let mut g = SplitMix64::new(4);
        for trial in 0..200 {
            let m = 4 + (trial % 40);
            let pl = Placement::heat(5000, m).unwrap();
            let n = 1 + (g.next_u64() % 400) as usize;
            let mut batch: Vec<u32> = (0..n).map(|_| (g.next_u64() % 5000) as u32).collect();
            batch.sort_unstable();
            batch.dedup();
            let out = package_alg1(&batch, 24, &pl);
            let body = out.packets.len() - out.overflow_packets;
            for p in &out.packets[..body] {
                assert!(!conflicts(p, &pl), "trial {trial}");
                assert_eq!(passes(p, &pl, &model), 1);
            }
            // every pair is carried exactly once
            let mut all: Vec<u32> = out.packets.concat();
            all.sort_unstable();
            assert_eq!(all, batch);
            assert!(out.packets.iter().all(|p| p.len() <= 24));
        }
    }

    #[test]
    fn when_every_register_fits_the_packets_alg1_needs_no_recirculation() {
        // a layout exists: 96 parameters on 48 registers, two each, in 4 packets of 24; Alg. 1
        // in heat order places them without a conflict
        let pl = Placement::heat(96, 48).unwrap();
        let batch: Vec<u32> = (0..96).collect();
        let out = package_alg1(&batch, 24, &pl);
        assert_eq!(out.overflow_packets, 0);
        let mut pipe = RegisterPipeline::new(TofinoModel::PAPER);
        for p in &out.packets {
            pipe.process(p, &pl, 250);
        }
        assert_eq!(pipe.pipeline.stats.recirculations, 0);
        // sequential packing of the same batch on a random layout does recirculate
        let rnd = Placement::random(96, 48, 3).unwrap();
        let mut pipe = RegisterPipeline::new(TofinoModel::PAPER);
        for p in package_sequential(&batch, 24) {
            pipe.process(&p, &rnd, 250);
        }
        assert!(pipe.pipeline.stats.recirculations > 0);
    }

    #[test]
    fn first_fit_can_miss_an_existing_layout() {
        // a documented limit of Algorithm 1's greedy first fit: registers 1, 2, 3, 3 in two
        // packets of two have the layout {1, 3}, {2, 3}, but first fit fills {1, 2} first and
        // sends the second register-3 parameter to G'
        let pl = Placement {
            m: 4,
            reg: vec![1, 2, 3, 3],
            slot: vec![0, 0, 0, 1],
        };
        let out = package_alg1(&[0, 1, 2, 3], 2, &pl);
        assert_eq!(out.overflow_packets, 1);
        assert_eq!(out.packets.len(), 3);
    }

    #[test]
    fn passes_count_register_multiplicity() {
        let pl = Placement::heat(100, 4).unwrap();
        let m = TofinoModel::PAPER;
        assert_eq!(passes(&[0, 4, 8, 1], &pl, &m), 3);
        assert_eq!(passes(&[0, 1, 2, 3], &pl, &m), 1);
        assert_eq!(pairs_per_packet(&m), 24);
    }
}

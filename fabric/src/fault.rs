//! Seeded loss, duplication and reordering, applied per frame per link direction (smoltcp's
//! FaultInjector in spirit), so a sweep is reproducible from its seed.

use crate::endpoint::NodeId;
use inabench_rng::SplitMix64;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Faults {
    pub loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
    /// Extra delay of a reordered frame.
    pub reorder_delay_ns: u64,
    pub seed: u64,
}

/// What happens to one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Drop,
    Deliver { copies: u8, extra_delay_ns: u64 },
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultCounters {
    pub dropped: u64,
    pub duplicated: u64,
    pub reordered: u64,
}

/// The injector: one generator per link direction.
#[derive(Debug)]
pub struct FaultInjector {
    pub faults: Faults,
    rngs: HashMap<(NodeId, NodeId), SplitMix64>,
    pub counters: FaultCounters,
}

impl FaultInjector {
    pub fn new(faults: Faults) -> Self {
        FaultInjector {
            faults,
            rngs: HashMap::new(),
            counters: FaultCounters::default(),
        }
    }

    pub fn fate(&mut self, from: NodeId, to: NodeId) -> Fate {
        let f = self.faults;
        if f.loss == 0.0 && f.duplicate == 0.0 && f.reorder == 0.0 {
            return Fate::Deliver {
                copies: 1,
                extra_delay_ns: 0,
            };
        }
        let g = self
            .rngs
            .entry((from, to))
            .or_insert_with(|| SplitMix64::derive(f.seed, &format!("link {from}->{to}")));
        if g.chance(f.loss) {
            self.counters.dropped += 1;
            return Fate::Drop;
        }
        let copies = if g.chance(f.duplicate) {
            self.counters.duplicated += 1;
            2
        } else {
            1
        };
        let extra_delay_ns = if g.chance(f.reorder) {
            self.counters.reordered += 1;
            f.reorder_delay_ns
        } else {
            0
        };
        Fate::Deliver {
            copies,
            extra_delay_ns,
        }
    }
}

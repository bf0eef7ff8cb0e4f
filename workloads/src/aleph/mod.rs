//! ALEPH's experiments (`experiments/aleph/<id>.yaml`, `workload:` beside each module):
//!
//! - [`table1`]: `aleph.motivating_example` (aleph-table1).
//! - [`sim`]: `aleph.sim_bandwidth`, `aleph.sim_overhead`, `aleph.sim_hops` (aleph-fig13, -fig14,
//!   -fig15-16).
//! - [`testbed_training`]: `aleph.testbed_training` (aleph-fig9, -fig10, -fig11), and the testbed
//!   helpers the others share.
//! - [`aggregation_cpu`]: `aleph.aggregation_cpu` (aleph-fig5, -fig6, -table2).
//! - [`fig7`]: `aleph.packet_latency` (aleph-fig7).
//! - [`fig8`]: `aleph.multicast_cpu` (aleph-fig8).
//! - [`fig12`]: `aleph.accuracy_vs_time` (aleph-fig12).
//! - [`mwcha_draws`]: `aleph.mwcha_draws` (aleph-mwcha-draws).
//! - [`xdp_scale`]: `aleph.xdp_scale_model` (aleph-xdp-scale).
//!
//! The models, the simulator and the testbed's measuring code they drive are `inabench-aleph`.

pub mod aggregation_cpu;
pub mod fig12;
pub mod fig7;
pub mod fig8;
pub mod mwcha_draws;
pub mod sim;
pub mod table1;
pub mod testbed_training;
pub mod xdp_scale;

use inabench_core::Workload;

/// ALEPH's workloads, in the order the harness lists them.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(table1::MotivatingExample),
        Box::new(sim::SimBandwidth),
        Box::new(sim::SimOverhead),
        Box::new(sim::SimHops),
        Box::new(testbed_training::TestbedTraining),
        Box::new(aggregation_cpu::AggregationCpu),
        Box::new(fig7::PacketLatency),
        Box::new(fig8::MulticastCpu),
        Box::new(fig12::AccuracyVsTime),
        Box::new(mwcha_draws::MwchaDraws),
        Box::new(xdp_scale::XdpScaleModel),
    ]
}

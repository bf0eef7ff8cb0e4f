//! The in-file tests' driver (test builds only): a system's nodes run in virtual time on the
//! fabric's `sim` star, as quinn-proto's tests drive two endpoints. The experiments' drivers
//! (host stacks' transmit buffers, an aggregator on links of its own, slow links, captures) are
//! `inabench_ina_run::drive`'s; this one is for systems with none of those, where the two run
//! the same nodes on the same fabric.

use crate::RunError;
use crate::common::{AllReduceConfig, SetupNode, System, sim_link};
use inabench_fabric::fault::Faults;
use inabench_fabric::sim::NodeConfig;
use inabench_fabric::{Fabric, FabricReport, Sim, Until};

/// One all-reduce of `sys` for `cfg` on `sim` (links [`sim_link`], the switch at node
/// `cfg.workers`), every node but the switch charged `host_cost_ns` per frame, until every node
/// is done or `max_ns` of virtual time.
pub(crate) fn run_sim(
    sys: &dyn System,
    cfg: &AllReduceConfig,
    faults: Faults,
    host_cost_ns: u64,
    max_ns: u64,
) -> Result<(Vec<SetupNode>, FabricReport), RunError> {
    assert_eq!(
        sys.extra_links(),
        0,
        "an aggregator on links of its own runs through inabench_ina_run::drive"
    );
    let nodes = sys.build(cfg)?.into_nodes();
    let mut costs = vec![
        NodeConfig {
            rx_cost_ns: host_cost_ns,
            tx_cost_ns: host_cost_ns,
        };
        nodes.len()
    ];
    if let Some(switch) = costs.get_mut(cfg.workers) {
        *switch = NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns: 0,
        };
    }
    let mut fabric = Sim::new(sim_link(cfg), cfg.workers as u32);
    fabric.costs = costs;
    fabric.faults = faults;
    let until = Until {
        counted: vec![true; nodes.len()],
        limit_ns: max_ns,
    };
    Ok(fabric.run(nodes, &until)?)
}

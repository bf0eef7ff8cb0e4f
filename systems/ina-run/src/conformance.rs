//! What every system passes, whatever it is: one all-reduce with exact results on every
//! in-process fabric (`sim`, `mem`, `udp` threads), through [`inabench_fabric::Fabric`]'s one
//! door ([`inabench_fabric::Fabric::run_deployment`]: each node built alone by
//! [`System::build_node`], as a node process builds its own). The systems of [`inabench_ina::SYSTEMS`]
//! pass it in `tests/conformance.rs`; a new system passes it before it is added to the list (the
//! worked example in ARCHITECTURE.md, "Adding a system", is a test system that does exactly that
//! without any other file changing).

use inabench_fabric::fault::Faults;
use inabench_fabric::{
    BuildError, Deployed, Deployment, FabricChoice, FabricError, Ran, udp::IoModel,
};
use inabench_ina::common::{AllReduceConfig, SetupNode, System};

/// One fabric's outcome of the conformance all-reduce.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The fabric that ran (the report's label).
    pub fabric: &'static str,
    /// Every worker was done before the limit.
    pub finished: bool,
    /// Workers whose result was right ([`inabench_ina::common::Worker::check`]).
    pub correct: usize,
    pub workers: usize,
}

impl Outcome {
    /// Finished with every worker right.
    pub fn passed(&self) -> bool {
        self.finished && self.correct == self.workers
    }
}

/// Why the conformance run could not be judged.
#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    #[error("{system} cannot be built for the conformance run: {why}")]
    Build { system: &'static str, why: String },
    #[error("the {fabric} fabric could not run {system}: {why}")]
    Fabric {
        system: &'static str,
        fabric: &'static str,
        why: String,
    },
}

/// `sys` for `cfg` on `sim` (virtual time, 60 s limit), `mem` and `udp` threads (wall time, 60 s
/// limit each), no faults: one outcome per fabric.
pub fn on_every_fabric(
    sys: &dyn System,
    cfg: &AllReduceConfig,
) -> Result<Vec<Outcome>, ConformanceError> {
    let mtu = cfg.mtu + 128;
    let choices = [
        (
            FabricChoice::Sim {
                link: crate::drive::sim_link(cfg),
                switch: cfg.workers as inabench_fabric::NodeId,
            },
            60_000_000_000,
        ),
        (FabricChoice::Mem { mtu }, 60_000_000_000),
        (
            FabricChoice::Udp {
                mtu,
                io: IoModel::Event,
            },
            60_000_000_000,
        ),
    ];
    let nodes = sys
        .build(cfg)
        .map_err(|e| ConformanceError::Build {
            system: sys.name(),
            why: e.to_string(),
        })?
        .into_nodes()
        .len();
    let d = Conformance { sys, cfg, nodes };
    let mut out = Vec::new();
    for (choice, limit_ns) in choices {
        let mut f = choice.build::<SetupNode>(Faults::default(), Vec::new());
        let fabric = f.name();
        let Deployed { report: rep, nodes } =
            f.run_deployment(&d, limit_ns).map_err(|e| match e {
                FabricError::Build { node, source } => ConformanceError::Build {
                    system: sys.name(),
                    why: format!("node {node}: {source}"),
                },
                e => ConformanceError::Fabric {
                    system: sys.name(),
                    fabric,
                    why: e.to_string(),
                },
            })?;
        let Ran::Here(nodes) = nodes else {
            return Err(ConformanceError::Fabric {
                system: sys.name(),
                fabric,
                why: "the nodes ran apart, not in this process".into(),
            });
        };
        let (mut workers, mut correct) = (0, 0);
        for n in &nodes {
            if let SetupNode::Worker(w) = n {
                workers += 1;
                if w.check(cfg) {
                    correct += 1;
                }
            }
        }
        out.push(Outcome {
            fabric: rep.fabric,
            finished: rep.finished,
            correct,
            workers,
        });
    }
    Ok(out)
}

/// The conformance all-reduce as every fabric deploys it: `nodes` nodes of `sys`'s setup for
/// `cfg`, the workers counted, node `i` built alone by [`System::build_node`]; no job line (the
/// in-process fabrics only).
struct Conformance<'a> {
    sys: &'a dyn System,
    cfg: &'a AllReduceConfig,
    nodes: usize,
}

impl Deployment<SetupNode> for Conformance<'_> {
    fn nodes(&self) -> usize {
        self.nodes
    }
    fn counted(&self) -> usize {
        self.cfg.workers
    }
    fn build_node(&self, node: usize) -> Result<SetupNode, BuildError> {
        Ok(self.sys.build_node(self.cfg, node)?)
    }
}

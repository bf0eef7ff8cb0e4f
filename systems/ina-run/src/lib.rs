//! Experiment machinery over the systems of `inabench-ina`, kept out of the protocol crate
//! (quinn keeps its runtime glue out of quinn-proto): what the training experiments run on the
//! systems, never a system itself. Protocol crates do not depend on it; `inabench-workloads`
//! and the benches do.
//!
//! - [`conformance`]: what every system passes, one all-reduce with exact results on `sim`,
//!   `mem` and `udp` threads through `fabric::Fabric`'s one door (a new system passes it before
//!   it joins `inabench_ina::SYSTEMS`);
//! - [`collective`]: float32 all-reduce for training through a system's own protocol code
//!   (ring, NetReduce, SwitchML's block floating point) on `sim`, `mem` or `udp`, each worker's
//!   result as its host stack delivered it;
//! - [`training`]: NetReduce's training-throughput model with communication fitted from the
//!   systems' sim runs, and the emulated class's real gradient exchange (a point's own
//!   measurement: nothing measured is remembered between calls);
//! - [`udp_node`]: a Table 6 system as a `fabric::Deployment` (its node job and outcome as JSON
//!   lines, node `i` rebuilt in its own process by `inabench __fabric-node`), run on any fabric
//!   through the one door (`run_job_on`) or as node processes on loopback or in namespaces
//!   (`run_udp_placed`, through `fabric::procs::UdpProcesses`, the generic launcher);
//! - [`raw_node`]: the same jobs on the `raw` fabric, every node a process in a network
//!   namespace of its own (`inabench __raw-node`), launched by `fabric::procs`.

pub mod collective;
pub mod conformance;
pub mod drive;
pub mod raw_node;
pub mod training;
pub mod udp_node;

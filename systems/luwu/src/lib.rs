//! LuWu (Sun et al., arXiv:2409.00918): the many-to-one push/pull primitives of Sec. 3.2.3 with
//! the heartbeats of Appendix B, sans-IO on the suite's fabrics, and training through them.
//!
//! - [`packet`]: our wire layout of parameter, gradient and heartbeat packets, with a parser that
//!   rejects malformed bytes with a typed error;
//! - [`transport`]: the WorkerNIC and AggNIC transport modules (TX/RX buffers, SeqNum, Ack and
//!   Credit registers, credit flow control, heartbeats, resend from Ack on a stall);
//! - [`switch`]: the SmartSwitch program (parameter broadcast, gradient aggregation table,
//!   heartbeat broadcast and aggregation) with its table budget;
//! - [`convert`]: float gradients to integers at the NIC (SwitchML's block scaling);
//! - [`run`]: a job on the `sim` and `mem` fabrics, checked against a reference;
//! - [`fig16`]: data-parallel training through the transport with Adam on the optimizer node;
//! - [`zero3`]: ZeRO-3's ring reduce-scatter and all-gather on the same fabric (traffic baseline).
//!
//! The workloads `luwu.pushpull` and `luwu.fig16` that drive them are in `inabench-workloads`.

pub mod convert;
pub mod fig16;
pub mod fuzz;
pub mod packet;
pub mod run;
pub mod switch;
pub mod transport;
pub mod zero3;

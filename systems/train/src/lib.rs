//! Real training through the aggregation systems: small models on CPU workers, every gradient of
//! every step all-reduced through a system's own protocol code on a fabric (issue #10).
//!
//! Library choice: the models are written by hand ([`model`]) rather than with candle. candle-core
//! and candle-nn (0.9, CPU backend) were the first candidates; they bring the `gemm` crates and
//! their dependency tree into a clean build that CI must fit in its time on two cores, and their
//! CPU matmul splits work across threads, so the order of float additions (and hence the bits of a
//! loss) can depend on the thread count. These experiments need bit-reproducible losses of tiny
//! models more than speed, so a few hundred lines of deterministic dense and convolution code
//! serve better; a larger model would be the time to revisit (the clean-build time we measured
//! for candle is in the note). The same holds for the small transformer
//! ([`transformer`]): two attention blocks of width 16 are a few hundred lines by hand.
//!
//! Fabrics: `sim` (virtual time), `mem` (a thread per node) and `udp` (every node on its own UDP
//! socket on loopback, a thread per node of this process: the gradients are computed here, and
//! shipping them to node processes each step is not built).

pub mod adam;
pub mod data;
pub mod dp;
pub mod model;
pub mod transformer;

//! aleph-fig5's TCP paths (over veth's GSO, and with NIC-like segmentation) at 1 and 2 cores,
//! unpaced (needs root): prints each measurement, so that a stall shows as a low rate with the
//! host's cores mostly idle.
//!
//! cargo run --release -p inabench-aleph --example tcp_cores -- [seconds]

use inabench_aleph::testbed::cpu::{Path, measure};
use std::time::Duration;

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (name, path) in [("tcp", Path::Tcp), ("tcp_segmented", Path::TcpSegmented)] {
        for k in 1..=cores.min(2) {
            match measure(path, k, Duration::from_secs_f64(secs), None) {
                Ok(m) => println!("{name}, {k} cores: {m:?}"),
                Err(e) => println!("{name}, {k} cores: {e}"),
            }
        }
    }
}

//! The `mem` fabric's link buffers are finite (`run::Bounded`): under loss, go-back-N resends
//! cannot grow the in-flight bytes of any link direction past the bound, the sums stay exact,
//! and a lossless run at the paper-implied window (4970 packets) never fills a buffer.

use inabench_fabric::fault::Faults;
use inabench_luwu::run::{self, Job, LINK_QUEUE_BYTES};
use inabench_luwu::transport::Config;
use std::time::Duration;

const WORKERS: usize = 8;
const VPP: usize = 64;

/// LuWu's push/pull at `window` packets, the emulated class's 100 us heartbeat and `timeout`.
fn cfg(window: usize, timeout_ns: u64) -> Config {
    Config {
        workers: WORKERS,
        values_per_packet: VPP,
        window,
        line_rate_bps: 100e9,
        heartbeat_ns: 100_000,
        resend_timeout_ns: timeout_ns,
        stagger_ns: timeout_ns / WORKERS as u64,
        consumer_rate: vec![1.0; WORKERS],
        agg_consumer_rate: 1.0,
    }
}

fn job(packets: usize) -> Job {
    let n = VPP * packets;
    Job {
        grads: (0..WORKERS)
            .map(|w| inabench_ina::common::gradient(7, w, n))
            .collect(),
        max: false,
        params: inabench_ina::common::gradient(7, 99, n),
    }
}

/// The outcome without its vectors.
fn brief(o: &run::Outcome) -> String {
    format!(
        "finished {} exact {} resends {} stalls {} dropped {} tail_drops {} peak {} B, {} ns",
        o.finished,
        o.exact,
        o.resends,
        o.stalls,
        o.dropped,
        o.tail_drops,
        o.link_peak_bytes,
        o.end_ns
    )
}

/// The element-wise wrapping sum, computed here (not with `Job::reference`).
fn sum(j: &Job) -> Vec<i32> {
    (0..j.grads[0].len())
        .map(|i| j.grads.iter().fold(0i32, |a, g| a.wrapping_add(g[i])))
        .collect()
}

#[test]
fn lossless_at_the_paper_window_never_fills_a_link() {
    let c = cfg(4970, 2_000_000_000);
    let j = job(6000);
    let (_, o) = run::run_mem(&c, &j, Faults::default(), Duration::from_secs(120));
    assert!(o.finished && o.exact, "{}", brief(&o));
    assert_eq!(o.aggregate, sum(&j));
    assert_eq!(o.tail_drops, 0);
    assert_eq!(o.resends, 0);
    assert!(o.link_peak_bytes > 0 && o.link_peak_bytes <= LINK_QUEUE_BYTES as u64);
}

#[test]
fn loss_at_the_paper_window_stays_bounded_and_exact() {
    // 0.1% loss on every link, 10 ms stall timeout: every stall resends from Ack a window of up
    // to 4970 packets; the channels once grew to 24 GB here
    let c = cfg(4970, 10_000_000);
    let j = job(6000);
    let faults = Faults {
        loss: 0.001,
        seed: 3,
        ..Faults::default()
    };
    let (_, o) = run::run_mem(&c, &j, faults, Duration::from_secs(240));
    assert!(o.finished && o.exact, "{}", brief(&o));
    assert_eq!(o.aggregate, sum(&j));
    assert!(
        o.resends > 0 && o.dropped > 0,
        "loss was injected: {}",
        brief(&o)
    );
    assert!(
        o.link_peak_bytes <= LINK_QUEUE_BYTES as u64,
        "{}",
        brief(&o)
    );
    assert_eq!(o.rx_overflows, 0);
}

#[test]
fn a_small_buffer_drops_at_the_tail_and_go_back_n_recovers() {
    // 8 KB per link direction (24 data frames) under a 64-packet window: bursts overflow it
    let cap = 8 << 10;
    let c = cfg(64, 5_000_000);
    let j = job(2000);
    let (_, o) = run::run_mem_bounded(&c, &j, Faults::default(), Duration::from_secs(120), cap);
    assert!(o.finished && o.exact, "{}", brief(&o));
    assert_eq!(o.aggregate, sum(&j));
    assert!(o.tail_drops > 0, "the bound was reached: {}", brief(&o));
    assert!(o.link_peak_bytes <= cap as u64, "{}", brief(&o));
}

//! NetReduce's Table 6 sizes (issue #32 item 1): every profile's gradient is a whole number of
//! NetReduce messages (at the spec's MsgLen and payload), so no padding enters its throughput; a
//! size that pads the last message (262,144 values = 6.02 messages, goodput/throughput 0.81
//! where the headers alone give 0.94) fails here.
#![cfg(feature = "netreduce")]

use inabench_core::Spec;
use inabench_core::plan::{Point, expand};
use inabench_ina::common::AllReduceConfig;
use inabench_ina::netreduce::Layout;
use std::path::Path;

fn spec() -> Spec {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/netreduce/table6.yaml");
    Spec::load(&p).expect("spec")
}

fn get(p: &Point, k: &str) -> String {
    p.params.get(k).map(|v| v.to_string()).unwrap_or_default()
}

/// NetReduce's values per message at the spec's parameters (MsgLen, payload).
fn values_per_message(s: &Spec, p: &Point) -> usize {
    let num = |k: &str| {
        get(p, k)
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("{k} in {}", s.id))
    };
    let cfg = AllReduceConfig {
        workers: num("workers") as usize,
        elements: 1,
        seed: 0,
        line_rate_bps: 100e9,
        mtu: num("mtu") as usize,
        timeout_ns: 1,
        knobs: vec![
            ("window".into(), num("window")),
            ("msg_packets".into(), num("msg_packets")),
        ],
    };
    Layout::new(&cfg).expect("layout").per_msg()
}

#[test]
fn every_profile_sends_whole_netreduce_messages() {
    let s = spec();
    for profile in ["quick", "full"] {
        let points = expand(&s, profile).expect("profile");
        let mut seen = 0;
        for p in points.iter().filter(|p| p.system == "netreduce") {
            let per = values_per_message(&s, p);
            let elements: usize = get(p, "elements").parse().expect("elements");
            assert_eq!(
                elements % per,
                0,
                "{profile}: {elements} values are {:.3} messages of {per}",
                elements as f64 / per as f64
            );
            seen += 1;
        }
        assert!(seen > 0, "{profile} runs NetReduce");
    }
}

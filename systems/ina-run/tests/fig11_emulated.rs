//! The emulated class of `netreduce-fig11`: real gradient exchange through the protocols.

use inabench_ina_run::collective::{Aggregation, Fabric};
use inabench_ina_run::training::{bucket_sizes, check_sum, emulated, exchange, shrink};
use inabench_netreduce::training;
use inabench_netreduce::training::Compute;

fn knobs() -> Vec<(&'static str, f64)> {
    let p = std::env::var("MSG")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(170.0);
    vec![("window", 2.0), ("msg_packets", p)]
}

#[test]
#[ignore = "a timing probe, run by hand"]
fn probe() {
    let scale: f64 = std::env::var("SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0 / 64.0);
    for name in ["alexnet", "vgg16", "resnet50"] {
        let m = training::by_name(name).unwrap();
        for fabric in [Fabric::Mem, Fabric::Udp] {
            for agg in [
                Aggregation::RING,
                Aggregation::NETREDUCE,
                Aggregation::SWITCHML,
            ] {
                let t = std::time::Instant::now();
                let ex = exchange(
                    agg,
                    fabric,
                    &knobs(),
                    &m,
                    scale,
                    64.0 * 1048576.0,
                    6,
                    0,
                    3,
                    1,
                )
                .unwrap();
                eprintln!(
                    "{name} {fabric:?} {agg:?}: {} buckets {:.2} MB, comm {:?} ms, wall {:.2} s",
                    ex.bucket_bytes.len(),
                    ex.bucket_bytes.iter().sum::<f64>() / 1048576.0,
                    ex.steps
                        .iter()
                        .map(|s| (s.iter().sum::<f64>() * 1e3) as u32)
                        .collect::<Vec<_>>(),
                    t.elapsed().as_secs_f64()
                );
            }
        }
    }
}

#[test]
#[ignore = "a timing probe, run by hand"]
fn probe_dilation() {
    for fabric in [Fabric::Mem, Fabric::Udp] {
        let d = inabench_ina_run::training::dilation(fabric, 100e9).unwrap();
        eprintln!("{fabric:?}: dilation {d:.1}");
    }
}

#[test]
fn every_bucket_is_exchanged_for_real_and_timed() {
    let m = training::by_name("resnet50").unwrap();
    let scale = 1.0 / 256.0;
    let bucket = 64.0 * 1048576.0;
    // the shrunk model's buckets cover its gradients exactly, as many as the full model's
    let full = bucket_sizes(&m, 4.0, bucket);
    let sizes = bucket_sizes(&shrink(&m, scale), 4.0, bucket * scale);
    assert_eq!(full.len(), sizes.len());
    let total: f64 = sizes.iter().sum();
    assert!(
        (total - m.gradient_bytes(4.0) * scale).abs() < 1.0,
        "{total}"
    );
    for fabric in [Fabric::Mem, Fabric::Udp] {
        for agg in [
            Aggregation::RING,
            Aggregation::NETREDUCE,
            Aggregation::SWITCHML,
        ] {
            let ex =
                exchange(agg, fabric, &knobs(), &m, scale, bucket, 4, 0, 2, 3).expect("exchange");
            assert_eq!(ex.steps.len(), 2);
            assert!(
                ex.steps
                    .iter()
                    .all(|s| s.len() == sizes.len() && s.iter().all(|t| *t > 0.0))
            );
            let compute = Compute {
                gpu: training::RTX_2080,
                fp16: false,
                utilisation: 0.6,
            };
            let its = emulated(&m, scale, &compute, 32.0, bucket, &ex).expect("timeline");
            for (it, times) in its.iter().zip(&ex.steps) {
                // the timeline's communication is exactly what was measured
                let sum: f64 = times.iter().sum();
                assert!(
                    (it.comm_s - sum).abs() <= 1e-12 * sum,
                    "{} {sum}",
                    it.comm_s
                );
                assert!(it.iteration_s >= it.forward_s + it.backward_s);
                assert!(
                    it.iteration_s >= it.forward_s + sum,
                    "the last bucket is waited for"
                );
            }
        }
    }
}

#[test]
fn a_dropped_or_double_counted_gradient_is_caught() {
    let inputs: Vec<Vec<f32>> = (0..4)
        .map(|w| {
            (0..500)
                .map(|i| ((i * 7 + w) as f32).sin() * 1e-3)
                .collect()
        })
        .collect();
    let sum: Vec<f32> = (0..500)
        .map(|i| inputs.iter().map(|v| f64::from(v[i])).sum::<f64>() as f32)
        .collect();
    for agg in [Aggregation::RING, Aggregation::SWITCHML] {
        assert!(check_sum(agg, &inputs, &vec![sum.clone(); 4]).is_ok());
        let mut twice = vec![sum.clone(); 4];
        for r in &mut twice {
            r[123] += inputs[2][123];
        }
        assert!(
            check_sum(agg, &inputs, &twice).is_err(),
            "{agg:?}: double count"
        );
        let mut dropped = vec![sum.clone(); 4];
        for r in &mut dropped {
            r[77] -= inputs[0][77];
        }
        assert!(check_sum(agg, &inputs, &dropped).is_err(), "{agg:?}: drop");
        let mut uneven = vec![sum.clone(); 4];
        uneven[1][5] = f32::from_bits(uneven[1][5].to_bits() ^ 1);
        assert!(check_sum(agg, &inputs, &uneven).is_err(), "{agg:?}: uneven");
    }
}

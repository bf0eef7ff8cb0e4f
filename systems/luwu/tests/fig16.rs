//! Training through the transport: the loss curve does not depend on link loss (the transport
//! delivers every gradient and parameter exactly once, bit-exact), and stays on ZeRO-Infinity's.

use inabench_luwu::fig16::{Data, TrainConfig, train};

fn cfg(loss: f64) -> TrainConfig {
    TrainConfig {
        workers: 4,
        micro_batch: 4,
        dims: vec![16, 32, 5],
        samples: 512,
        steps: 30,
        lr: 3e-3,
        seed: 3,
        loss,
        data: Data::Clusters,
    }
}

#[test]
fn lossy_links_give_the_same_bits_as_lossless_ones() {
    let a = train(&cfg(0.0)).unwrap();
    let b = train(&cfg(0.02)).unwrap();
    assert_eq!(a.resends, 0);
    assert!(b.resends > 0, "loss should have caused resends");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a.luwu), bits(&b.luwu));
    assert_eq!(a.transfers, 4 * 30);
}

#[test]
fn the_curves_coincide_and_fall() {
    let c = train(&cfg(0.0)).unwrap();
    assert_eq!(c.luwu.len(), 31);
    assert_eq!(c.luwu[0], c.zero_infinity[0]);
    assert!(c.max_gap < 0.01, "{}", c.max_gap);
    let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
    assert!(
        mean(&c.luwu[26..]) < 0.8 * mean(&c.luwu[..5]),
        "{:?}",
        c.luwu
    );
    // the systems' arithmetic differs, so the curves are not identical
    assert_ne!(c.luwu, c.zero_infinity);
}

#[test]
fn the_language_model_learns_the_bigram_language() {
    let c = train(&TrainConfig {
        workers: 4,
        micro_batch: 8,
        dims: vec![2 * 8, 32, 8],
        samples: 2048,
        steps: 60,
        lr: 3e-3,
        seed: 5,
        loss: 0.0,
        data: Data::Bigram {
            vocab: 8,
            context: 2,
        },
    })
    .unwrap();
    let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
    // from about ln 8 = 2.08 nats towards the language's entropy
    assert!(
        mean(&c.luwu[50..]) < mean(&c.luwu[..5]) - 0.2,
        "{:?}",
        c.luwu
    );
    assert!(c.max_gap < 0.01, "{}", c.max_gap);
}

//! What the systems' integration tests share: ina's own and ina-run's (which include this file
//! by `#[path]`).

use inabench_ina::common::{AllReduceConfig, SetupNode, reference_sum};

/// Every worker of `c` finished with exactly the reference sum.
pub fn check(nodes: &[SetupNode], c: &AllReduceConfig) {
    let want = reference_sum(c.seed, c.workers, c.elements);
    let mut k = 0;
    for n in nodes {
        if let SetupNode::Worker(w) = n {
            k += 1;
            let got = w.result().expect("every worker has the result");
            let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert!(
                got.len() == want.len() && bad == 0,
                "worker {} has {bad} wrong elements",
                w.id()
            );
        }
    }
    assert_eq!(k, c.workers);
}

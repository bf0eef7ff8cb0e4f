//! The clusterings the testbed workloads use (aleph-fig9 to -fig12, aleph-mwcha-draws) are trees
//! under the PS within the capacities from bandwidth, and Sec. 6.3's is the paper's.

#![cfg(feature = "aleph")]

use inabench_workloads::aleph::testbed_training::{clustering, paper_clustering};

#[test]
fn clusterings_are_trees_under_the_ps() {
    let rates = [30.0, 20.0, 20.0, 10.0, 10.0, 10.0, 10.0, 10.0];
    for seed in 0..20 {
        let p = clustering(&rates, seed).unwrap();
        for (w, &a) in p.iter().enumerate() {
            assert!(a == 8 || (a != w && p[a] == 8), "seed {seed}: {p:?}");
        }
        // capacities from bandwidth: 30 -> 2 members, 20 -> 1, 10 -> none
        for (a, r) in rates.iter().enumerate() {
            let kids = p.iter().filter(|&&x| x == a).count();
            assert!(kids < (r / 10.0) as usize, "seed {seed}: {p:?}");
        }
    }
    assert_eq!(
        paper_clustering(&rates).unwrap(),
        vec![8, 8, 8, 0, 0, 1, 2, 8]
    );
    assert!(paper_clustering(&rates[..7]).is_err());
}

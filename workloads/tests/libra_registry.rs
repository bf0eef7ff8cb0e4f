//! Libra's workloads are registered under the ids its specs name (`experiments/libra/*.yaml`).

#![cfg(feature = "libra")]

#[test]
fn libra_workload_ids_are_the_specs() {
    let mut ids: Vec<&str> = inabench_workloads::libra::workloads()
        .iter()
        .map(|w| w.id())
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [
            "libra.aggregation",
            "libra.fig15",
            "libra.fig16",
            "libra.fig17",
            "libra.fig5",
            "libra.resources",
            "libra.table2",
        ]
    );
}

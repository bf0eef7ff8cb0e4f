//! LuWu's workloads are registered under the ids its specs name (`experiments/luwu/*.yaml`).

#![cfg(feature = "luwu")]

#[test]
fn luwu_workload_ids_are_the_specs() {
    let mut ids: Vec<&str> = inabench_workloads::luwu::workloads()
        .iter()
        .map(|w| w.id())
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [
            "luwu.fig16",
            "luwu.pushpull",
            "luwu_model.fig10",
            "luwu_model.fig11",
            "luwu_model.fig12",
            "luwu_model.fig13",
            "luwu_model.fig14",
            "luwu_model.fig15",
            "luwu_model.fig17",
            "luwu_model.fig2",
            "luwu_model.fig3",
        ]
    );
}

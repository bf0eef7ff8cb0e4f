//! LuWu's experiments (Sun et al., arXiv:2409.00918), over the systems crates `inabench-luwu`
//! (push/pull transport, in-network Adam training), `inabench-luwu-ooc` (the out-of-core
//! optimizer) and `inabench-luwu-model` (the 100B-scale models):
//!
//! - [`pushpull`]: `luwu.pushpull` (luwu-pushpull);
//! - [`fig16`]: `luwu.fig16` (luwu-fig16);
//! - [`figures`]: `luwu_model.fig2` to `.fig17` (luwu-fig2, -fig3, -fig10 to -fig15, -fig17),
//!   with luwu-fig15's emulated class in [`fig15_emulated`].

use inabench_core::Workload;

pub mod fig15_emulated;
pub mod fig16;
pub mod figures;
pub mod pushpull;

/// LuWu's workloads, for the registry.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    let mut w: Vec<Box<dyn Workload>> = vec![Box::new(pushpull::PushPull), Box::new(fig16::Fig16)];
    w.extend(
        figures::all()
            .into_iter()
            .map(|f| Box::new(f) as Box<dyn Workload>),
    );
    w
}

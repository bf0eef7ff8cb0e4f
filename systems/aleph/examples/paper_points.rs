//! The headline numbers of ALEPH's Sec. 6.4 from this crate's simulation, for a quick look
//! without the harness: `cargo run --release -p inabench-aleph --example paper_points`.

use inabench_aleph::mwcha;
use inabench_aleph::scenario::{self, Scenario, Setup, System};
use inabench_aleph::topo::Kind;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("Fig. 13 (100 workers, fat-tree), seed 1:");
    for sigma in [0.0, 0.1, 0.2, 0.3] {
        let sc = Scenario::build(&Setup {
            sigma,
            ..Setup::paper()
        })?;
        let c = sc.cluster();
        let opt = mwcha::exact_min_senders(&sc.instance)?;
        let mut line = format!(
            "  sigma {sigma}: |D| {} (opt {opt}), aggregators {}",
            c.senders(),
            c.aggregators()
        );
        for sys in [System::BytePs, System::Horovod, System::Aleph] {
            let o = scenario::simulate(&sc, sys, Some(&c))?;
            line += &format!(
                "; {sys:?} workers {:.1} Gbps, PSs {:.1} Gbps, T {:.3} s",
                o.worker_usage_gbps(),
                o.ps_usage_gbps(),
                o.iteration_time
            );
        }
        println!("{line}");
    }
    println!("Fig. 14 (sigma 0.1), comm overhead GB:");
    for kind in [Kind::FatTree, Kind::LeafSpine] {
        for workers in [50, 150, 250] {
            let sc = Scenario::build(&Setup {
                workers,
                topology: kind,
                ..Setup::paper()
            })?;
            let c = sc.cluster();
            let mut line = format!("  {kind:?} {workers}: |D| {}", c.senders());
            for sys in [System::BytePs, System::Horovod, System::Aleph] {
                let o = scenario::simulate(&sc, sys, Some(&c))?;
                line += &format!("; {sys:?} {:.1}", o.overhead_bytes_links / 1e9);
            }
            println!("{line}");
        }
    }
    println!("Figs. 15-16, gradient hops:");
    for (workers, sigma) in [
        (10, 0.3),
        (10, 0.1),
        (10, 0.0),
        (50, 0.1),
        (150, 0.1),
        (250, 0.1),
    ] {
        let sc = Scenario::build(&Setup {
            workers,
            sigma,
            ..Setup::paper()
        })?;
        let c = sc.cluster();
        let mut line = format!("  {workers} workers sigma {sigma}:");
        for sys in [System::BytePs, System::Horovod, System::Aleph] {
            line += &format!(
                " {sys:?} {:.2}",
                scenario::gradient_hops(&sc, sys, Some(&c))?
            );
        }
        println!("{line}");
    }
    Ok(())
}

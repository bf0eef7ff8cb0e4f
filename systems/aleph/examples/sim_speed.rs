//! How fast the flow-level simulator is: one iteration of each system on a 1,024-server
//! fat-tree (32 edge switches x 32 servers) and on the paper's topologies, printing flows,
//! flow-rate updates and events per second of wall time.
//!
//! `cargo run --release -p inabench-aleph --example sim_speed`

use inabench_aleph::flowsim::FlowSim;
use inabench_aleph::scenario::{self, Scenario, Setup, System};
use inabench_aleph::topo::{Kind, Topology};
use inabench_rng::SplitMix64;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1) raw simulator: 1,000 hosts, ring all-reduce steps and a PS-style incast, ECMP paths
    let nic = 10e9 / 8.0;
    let mut topo = Topology::fat_tree(8, 4, 4, 16, 32, nic)?;
    let hosts = topo.hosts();
    let (workers, pss) = (1000usize, 24usize);
    let mut rng = SplitMix64::new(1);
    for h in 0..workers {
        let r = scenario::normal(&mut rng, 0.5, 0.3).clamp(0.1, 0.9);
        topo.set_host_rate(h, r * nic, r * nic)?;
    }
    let caps: Vec<f64> = topo.links().iter().map(|l| l.capacity).collect();
    let t0 = Instant::now();
    let mut sim = FlowSim::new(caps.clone())?;
    // PS incast: every worker to every PS, sprayed over all equal-cost paths (pull included)
    for w in 0..workers {
        for p in 0..pss {
            let mut res = topo.spray(w, workers + p)?;
            res.extend(topo.spray(workers + p, w)?);
            sim.add_weighted_flow(res, 97e6 / pss as f64)?;
        }
    }
    let t_ps = sim.run()?;
    let st = sim.stats();
    let wall = t0.elapsed().as_secs_f64();
    println!(
        "{hosts} hosts, PS incast: {} workers x {} PSs = {} flows, simulated {:.3} s in {:.3} s wall: \
         {} recomputes, {} flow updates ({:.2e}/s), {} completions ({:.2e} events/s)",
        workers,
        pss,
        workers * pss,
        t_ps,
        wall,
        st.recomputes,
        st.flow_updates,
        st.flow_updates as f64 / wall,
        st.completions,
        (st.completions + st.recomputes) as f64 / wall
    );
    let t0 = Instant::now();
    let mut sim = FlowSim::new(caps)?;
    let steps = 2 * (workers - 1);
    for step in 0..steps {
        for i in 0..workers {
            let path = topo.path(i, (i + 1) % workers, (step * workers + i) as u64)?;
            sim.add_flow(path, 97e6 / workers as f64)?;
        }
        sim.run()?;
    }
    let st = sim.stats();
    let wall = t0.elapsed().as_secs_f64();
    println!(
        "{hosts} hosts, ring all-reduce over {workers} workers: {steps} steps, {} flows, simulated \
         {:.3} s in {:.3} s wall: {} flow updates ({:.2e}/s), {:.2e} events/s",
        steps * workers,
        sim.now(),
        wall,
        st.flow_updates,
        st.flow_updates as f64 / wall,
        (st.completions + st.recomputes) as f64 / wall
    );
    // 2) the paper's scenario, each system, 250 workers
    for kind in [Kind::FatTree, Kind::LeafSpine] {
        let sc = Scenario::build(&Setup {
            workers: 250,
            sigma: 0.3,
            topology: kind,
            ..Setup::paper()
        })?;
        let c = sc.cluster();
        for sys in [System::BytePs, System::Horovod, System::Aleph] {
            let t0 = Instant::now();
            let o = scenario::simulate(&sc, sys, Some(&c))?;
            let wall = t0.elapsed().as_secs_f64();
            println!(
                "{kind:?} 250 workers {sys:?}: {} flows, {} flow updates in {:.3} s wall ({:.2e}/s)",
                o.flows,
                o.stats.flow_updates,
                wall,
                o.stats.flow_updates as f64 / wall
            );
        }
    }
    Ok(())
}

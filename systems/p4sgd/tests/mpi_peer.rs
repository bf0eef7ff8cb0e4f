//! p4sgd-fig8's emulated CPUSync peer: OpenMPI's MPI_Allreduce run for real when `mpicc` and
//! `mpirun` are on this host (skipped with the reason printed otherwise; required under CI).

use std::time::Duration;

use inabench_p4sgd::mpi::{self, MpiRun, Transport};

/// Skipped off CI without OpenMPI (the reason printed), required under CI.
fn openmpi() -> bool {
    match mpi::available() {
        Ok(v) => {
            eprintln!("running with {v}");
            true
        }
        Err(e) => inabench_testkit::need(
            &format!("OpenMPI (the peer is {e})"),
            false,
            "Debian packages openmpi-bin libopenmpi-dev",
        ),
    }
}

fn asked(transport: Transport, corrupt: bool) -> MpiRun {
    MpiRun {
        ranks: 8,
        elements: 8,
        ops: 200,
        warmup: 10,
        transport,
        limit: Duration::from_secs(120),
        corrupt,
    }
}

#[test]
fn every_rank_times_every_all_reduce_and_every_sum_is_exact() {
    if !openmpi() {
        return;
    }
    for t in [Transport::SharedMemory, Transport::TcpLoopback] {
        let run = asked(t, false);
        let o = mpi::run(&run).unwrap();
        assert_eq!(o.wrong, 0, "{t:?}");
        assert_eq!(o.latencies.len(), 8 * 200, "{t:?}");
        assert!(o.latencies.iter().all(|&l| l > 0), "{t:?}");
    }
}

#[test]
fn a_wrong_contribution_is_caught_on_every_rank() {
    if !openmpi() {
        return;
    }
    let run = asked(Transport::SharedMemory, true);
    let o = mpi::run(&run).unwrap();
    // rank 1 adds 1 to element 0 of every contribution: every rank's every result is wrong
    assert_eq!(o.wrong, 8 * (200 + 10));
}

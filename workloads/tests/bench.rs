//! The benchmark family's dense all-reduce (issue #39): the quick profile's smallest point of
//! `bench-allreduce` runs for every system of `inabench_ina::SYSTEMS` (the list, not names), and
//! every cell is present: a system that runs it sums it exactly (the workload checks every
//! worker against the reference sum and records `wrong_workers`) with a time and a bandwidth,
//! and a system that cannot run it says why (its build's sentence, logged) with `refused` = 1,
//! never a zero time. The systems that aggregate in the network must run it.

use inabench_core::hostprofile::HostProfile;
use inabench_core::plan::{Point, expand};
use inabench_core::{Event, Fidelity, LogLevel, PointCtx, Spec, Workload, WorkloadError};
use inabench_workloads::bench::allreduce::{AllReduce, REFUSAL_PREFIX};
use std::path::Path;
use std::sync::atomic::AtomicBool;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// A cell's rows: (metric, value).
type Rows = Vec<(String, f64)>;

/// One cell of `spec` run as the harness runs a point (repetition 0, no warm-up): the rows it
/// recorded (metric, value) and its warning lines, or the workload's error.
fn run_cell(
    w: &dyn Workload,
    spec: &Spec,
    point: &Point,
    fidelity: Fidelity,
    fabric: &'static str,
    profile: Option<&HostProfile>,
) -> Result<(Rows, Vec<String>), WorkloadError> {
    let units = |m: &str| spec.metric(m).map(|x| x.unit.clone()).unwrap_or_default();
    let (mut rows, mut warnings) = (Vec::new(), Vec::new());
    let mut sink = |e: Event| match e {
        Event::Row(r) => rows.push((r.metric, r.value)),
        Event::Log {
            level: LogLevel::Warn,
            message,
            ..
        } => warnings.push(message),
        _ => {}
    };
    let cancel = AtomicBool::new(false);
    let mut ctx = PointCtx::new(
        point, 0, fidelity, fabric, 0, false, 1, "test", &spec.id, &cancel, &mut sink, &units,
    )
    .with_host_profile(profile);
    w.run(&mut ctx)?;
    Ok((rows, warnings))
}

#[test]
fn the_smallest_quick_point_is_exact_or_refused_with_a_reason_for_every_system() {
    let s = Spec::load(&root().join("experiments/bench/allreduce.yaml")).expect("spec");
    let profile =
        HostProfile::load(&root().join("experiments/hosts/reference.yaml")).expect("profile");
    // the spec lists every system of the list (a system added to it joins the benchmark)
    for sys in inabench_ina::SYSTEMS {
        assert!(
            s.systems.iter().any(|n| n == sys.name()),
            "experiments/bench/allreduce.yaml does not list `{}`",
            sys.name()
        );
    }
    let points = expand(&s, "quick").expect("quick");
    let size = |p: &inabench_core::Point| {
        let v = |k: &str| p.params.get(k).and_then(|x| x.as_f64()).expect(k);
        (v("size_bytes") as u64, v("workers") as u64)
    };
    let smallest = points.iter().map(size).min().expect("points");
    let w = AllReduce;
    let mut ran = 0;
    for sys in inabench_ina::SYSTEMS {
        let p = points
            .iter()
            .find(|p| p.system == sys.name() && size(p) == smallest)
            .expect("the system's smallest point");
        let (rows, warnings) = run_cell(
            &w,
            &s,
            p,
            Fidelity::Simulated,
            w.fabric(Fidelity::Simulated),
            Some(&profile),
        )
        .unwrap_or_else(|e| panic!("{} at {smallest:?}: {e}", sys.name()));
        let get = |m: &str| rows.iter().find(|(k, _)| k == m).map(|(_, v)| *v);
        match get("refused") {
            Some(r) if r > 0.0 => {
                assert!(
                    !sys.in_network(),
                    "{} aggregates in the network and must run the point: {warnings:?}",
                    sys.name()
                );
                assert!(
                    warnings.iter().any(|m| m.contains("cannot run this cell")),
                    "{} refused without saying why",
                    sys.name()
                );
                assert_eq!(get("time"), None, "{} refused but has a time", sys.name());
                // the build's sentence is kept with the cell (the leaderboard prints it): the
                // row `refused: <why>`, the same sentence the log says
                let why = rows
                    .iter()
                    .find_map(|(m, _)| m.strip_prefix(REFUSAL_PREFIX))
                    .unwrap_or_else(|| panic!("{}: no `refused: <why>` row", sys.name()));
                assert!(
                    why.len() > 10 && warnings.iter().any(|m| m.contains(why)),
                    "{}: {why:?} is not what the log says: {warnings:?}",
                    sys.name()
                );
            }
            Some(_) => {
                assert_eq!(get("wrong_workers"), Some(0.0), "{}: {rows:?}", sys.name());
                let t = get("time").unwrap_or_else(|| panic!("{}: no time", sys.name()));
                let bw = get("algbw").unwrap_or_else(|| panic!("{}: no algbw", sys.name()));
                assert!(
                    t > 0.0 && bw > 0.0,
                    "{}: time {t} us, algbw {bw}",
                    sys.name()
                );
                // algbw is size over time (bits per second, in Gbps)
                let want = smallest.0 as f64 * 8.0 / (t * 1e-6) / 1e9;
                assert!(
                    (bw - want).abs() <= 1e-9 * want,
                    "{}: {bw} vs {want}",
                    sys.name()
                );
                ran += 1;
            }
            None => panic!("{}: the cell has neither a value nor a refusal", sys.name()),
        }
    }
    assert!(
        ran >= inabench_ina::in_network_names().len(),
        "{ran} systems ran"
    );
}

/// bench-small's P4SGD row runs P4SGD's own aggregation through its crate: exact at 8 values
/// with a latency, and at 1024 values (more than one packet holds) refused by its build with the
/// build's sentence, not a zero.
#[cfg(feature = "p4sgd")]
#[test]
fn p4sgd_runs_small_vectors_and_refuses_what_one_packet_cannot_hold() {
    let s = Spec::load(&root().join("experiments/bench/small.yaml")).expect("spec");
    let points = expand(&s, "quick").expect("quick");
    let w = AllReduce;
    for (elements, runs) in [(8, true), (1024, false)] {
        let p = points
            .iter()
            .find(|p| {
                p.system == "p4sgd"
                    && p.params.get("elements").and_then(|x| x.as_f64()) == Some(elements as f64)
            })
            .expect("a p4sgd point");
        let (rows, warnings) =
            run_cell(&w, &s, p, Fidelity::Simulated, "sim", None).expect("the cell");
        let get = |m: &str| rows.iter().find(|(k, _)| k == m).map(|(_, v)| *v);
        if runs {
            assert_eq!(get("refused"), Some(0.0), "{rows:?}");
            assert_eq!(get("wrong_workers"), Some(0.0), "{rows:?}");
            assert!(get("time").is_some_and(|t| t > 0.0), "{rows:?}");
        } else {
            assert_eq!(get("refused"), Some(1.0), "{rows:?}");
            assert_eq!(get("time"), None, "{rows:?}");
            assert!(
                warnings.iter().any(|m| m.contains("values per packet")),
                "{warnings:?}"
            );
            assert!(
                rows.iter().any(|(m, v)| *v == 1.0
                    && m.starts_with(REFUSAL_PREFIX)
                    && m.contains("values per packet")),
                "{rows:?}"
            );
        }
    }
}

/// bench-sparse's sparsest quick point (100 samples a worker) for every system of the spec:
/// Libra and PS-lite aggregate the sparse gradients exactly (every worker's results against the
/// exact sums) with a time, Libra with a share of its pairs in the switch; every system of
/// `inabench_ina::SYSTEMS` runs the dense equivalent exactly (the sparse sums made dense, or its
/// own values of the same size where it takes no external inputs, said by `own_values`) or is
/// refused with its build's sentence kept with the cell. The in-network systems must run it, and
/// at least one dense system must have summed the sparse gradients themselves.
#[cfg(feature = "libra")]
#[test]
fn the_sparsest_quick_point_is_exact_or_refused_with_a_reason_for_every_system() {
    use inabench_workloads::bench::sparse::Sparse;
    let s = Spec::load(&root().join("experiments/bench/sparse.yaml")).expect("spec");
    let profile =
        HostProfile::load(&root().join("experiments/hosts/reference.yaml")).expect("profile");
    for sys in inabench_ina::SYSTEMS {
        assert!(
            s.systems.iter().any(|n| n == sys.name()),
            "experiments/bench/sparse.yaml does not list `{}`",
            sys.name()
        );
    }
    let points = expand(&s, "quick").expect("quick");
    let batch = |p: &inabench_core::Point| p.params.get("batch").and_then(|x| x.as_f64());
    let sparsest = points
        .iter()
        .filter_map(batch)
        .min_by(f64::total_cmp)
        .expect("points");
    let w = Sparse;
    let (mut took_sparse, mut ran_in_network) = (0, 0);
    for name in &s.systems {
        let p = points
            .iter()
            .find(|p| &p.system == name && batch(p) == Some(sparsest))
            .expect("the system's sparsest point");
        let (rows, warnings) = run_cell(&w, &s, p, Fidelity::Simulated, "sim", Some(&profile))
            .unwrap_or_else(|e| panic!("{name} at batch {sparsest}: {e}"));
        let get = |m: &str| rows.iter().find(|(k, _)| k == m).map(|(_, v)| *v);
        let density = get("density").unwrap_or_else(|| panic!("{name}: no density"));
        assert!(
            density > 0.0 && density < 100.0,
            "{name}: density {density}%"
        );
        let ina = inabench_ina::system(name);
        if get("refused") == Some(1.0) {
            assert!(
                ina.is_some_and(|s| !s.in_network()),
                "{name} must run the sparsest point: {warnings:?}"
            );
            let why = rows
                .iter()
                .find_map(|(m, _)| m.strip_prefix(REFUSAL_PREFIX))
                .unwrap_or_else(|| panic!("{name}: no `refused: <why>` row"));
            assert!(warnings.iter().any(|m| m.contains(why)), "{why:?}");
            assert_eq!(get("time"), None, "{name} refused but has a time");
            continue;
        }
        assert_eq!(get("refused"), Some(0.0), "{name}: {rows:?}");
        assert_eq!(get("wrong_workers"), Some(0.0), "{name}: {rows:?}");
        assert!(get("time").is_some_and(|t| t > 0.0), "{name}: {rows:?}");
        match ina {
            Some(sys) => {
                let own = get("own_values").unwrap_or_else(|| panic!("{name}: no own_values"));
                if own == 0.0 {
                    took_sparse += 1;
                }
                if sys.in_network() {
                    ran_in_network += 1;
                }
            }
            None => {
                // Libra and PS-lite: the sparse pairs themselves; Libra's hot keys in the switch
                let hot = get("hot_share");
                if name == "libra" {
                    assert!(hot.is_some_and(|h| h > 0.0 && h < 100.0), "{rows:?}");
                } else {
                    assert_eq!(hot, None, "{name}: {rows:?}");
                }
            }
        }
    }
    assert_eq!(ran_in_network, inabench_ina::in_network_names().len());
    assert!(
        took_sparse >= 1,
        "no dense system summed the sparse gradients"
    );
}

/// bench-twojobs (two jobs sharing one switch, ATP's multi-tenant regime) for every system of
/// its spec, at a smaller size than the quick grid's (about 50 KB a worker, so the test takes
/// about a second): ATP runs both jobs on one switch, exactly, and with a pool under the two
/// windows packets of both jobs fall back to their parameter servers, while at the largest pool
/// none do; a static split runs each job alone, exactly; SwitchML and SwitchML-RDMA are refused
/// with the sentence kept with the cell.
#[test]
fn two_jobs_are_exact_shared_or_split_or_refused_with_a_reason() {
    use inabench_core::Scalar;
    use inabench_workloads::bench::twojobs::TwoJobs;
    let s = Spec::load(&root().join("experiments/bench/twojobs.yaml")).expect("spec");
    let profile =
        HostProfile::load(&root().join("experiments/hosts/reference.yaml")).expect("profile");
    let points = expand(&s, "quick").expect("quick");
    let num = |p: &inabench_core::Point, k: &str| p.params.get(k).and_then(|x| x.as_f64());
    let pools: Vec<f64> = points
        .iter()
        .filter_map(|p| num(p, "atp__atp_pool"))
        .collect();
    let (small, large) = (
        pools.iter().copied().fold(f64::INFINITY, f64::min),
        pools.iter().copied().fold(0.0, f64::max),
    );
    let window = num(&points[0], "atp__atp_window").expect("window");
    assert!(small < 2.0 * window && large > 2.0 * window);
    let run = |name: &str, pool: f64| {
        let mut p = points
            .iter()
            .find(|p| {
                p.system == name
                    && num(p, "atp__atp_pool") == Some(pool)
                    && num(p, "job2_size_bytes") == num(p, "size_bytes")
            })
            .expect("the point")
            .clone();
        p.params
            .insert("size_bytes".into(), Scalar::Int(62 * 4 * 200));
        p.params
            .insert("job2_size_bytes".into(), Scalar::Int(62 * 4 * 150));
        let (rows, warnings) =
            run_cell(&TwoJobs, &s, &p, Fidelity::Simulated, "sim", Some(&profile))
                .unwrap_or_else(|e| panic!("{name} at pool {pool}: {e}"));
        (rows, warnings)
    };
    let get = |rows: &[(String, f64)], m: &str| rows.iter().find(|(k, _)| k == m).map(|(_, v)| *v);
    // ATP: both jobs on one switch, exact; collisions on the small pool, none on the large one
    for (pool, collides) in [(small, true), (large, false)] {
        let (rows, _) = run("atp", pool);
        assert_eq!(get(&rows, "refused"), Some(0.0), "{rows:?}");
        assert_eq!(get(&rows, "wrong_workers"), Some(0.0), "{rows:?}");
        assert_eq!(get(&rows, "shared"), Some(1.0), "{rows:?}");
        let (t, t1, t2) = (
            get(&rows, "time").expect("time"),
            get(&rows, "job1_time").expect("job1_time"),
            get(&rows, "job2_time").expect("job2_time"),
        );
        assert!(t1 > 0.0 && t2 > 0.0 && t >= t1.max(t2), "{rows:?}");
        let shares = ["job1_fallback_share", "job2_fallback_share"].map(|m| get(&rows, m));
        if collides {
            assert!(
                shares.iter().all(|s| s.is_some_and(|s| s > 0.0)),
                "pool {pool}: {rows:?}"
            );
            assert!(get(&rows, "collisions").is_some_and(|c| c > 0.0));
        } else {
            assert_eq!(get(&rows, "collisions"), Some(0.0), "pool {pool}: {rows:?}");
            assert_eq!(shares, [Some(0.0), Some(0.0)], "pool {pool}");
        }
    }
    for name in &s.systems {
        if name == "atp" {
            continue;
        }
        let (rows, warnings) = run(name, large);
        match get(&rows, "refused") {
            Some(r) if r > 0.0 => {
                assert_eq!(get(&rows, "time"), None, "{name}");
                let why = rows
                    .iter()
                    .find_map(|(m, _)| m.strip_prefix(REFUSAL_PREFIX))
                    .unwrap_or_else(|| panic!("{name}: no `refused: <why>` row"));
                assert!(
                    why.contains("one job") && warnings.iter().any(|m| m.contains(why)),
                    "{name}: {why:?}"
                );
            }
            Some(_) => {
                assert_eq!(get(&rows, "wrong_workers"), Some(0.0), "{name}: {rows:?}");
                assert_eq!(get(&rows, "shared"), Some(0.0), "{name}: {rows:?}");
                assert!(get(&rows, "job2_time").is_some_and(|t| t > 0.0), "{name}");
            }
            None => panic!("{name}: the cell has neither a value nor a refusal"),
        }
    }
}

/// Gloo's ring all-reduce, the benchmark's second software reference, run for real when Gloo's
/// headers and g++ are on this host (skipped with the reason printed otherwise; required under
/// CI): every rank times every all-reduce and every sum is exact, and a contribution changed on
/// one rank behind the others' backs is caught on every rank.
#[test]
fn gloo_ring_sums_exactly_and_a_wrong_contribution_is_caught() {
    use inabench_workloads::bench::gloo::{self, GlooRun};
    match gloo::available() {
        Ok(v) => eprintln!("running with {v}"),
        Err(e) => {
            if !inabench_testkit::need(
                &format!("Gloo ({e})"),
                false,
                "Debian packages libgloo-dev g++",
            ) {
                return;
            }
        }
    }
    let asked = |corrupt| GlooRun {
        ranks: 4,
        elements: 64,
        ops: 20,
        warmup: 2,
        limit: std::time::Duration::from_secs(120),
        corrupt,
    };
    let o = gloo::run(&asked(false)).expect("gloo");
    assert_eq!(o.wrong, 0);
    assert_eq!(o.latencies.len(), 4 * 20);
    assert!(o.latencies.iter().all(|&l| l > 0));
    // rank 1 adds 1 to element 0 of every contribution: every rank's every result is wrong
    let o = gloo::run(&asked(true)).expect("gloo");
    assert_eq!(o.wrong, 4 * (20 + 2));
}

/// bench-allreduce's LuWu row runs LuWu's push/pull (its crate's WorkerNICs, SmartSwitch and
/// AggNIC on the sim fabric) as an all-reduce: at the quick profile's smallest point every
/// worker's pulled vector is the exact sum, and the time is at least the vector's serialisation
/// twice over the AggNIC's one link (the sums in, then out); a point of one worker is refused
/// with the sentence why, not a zero.
#[cfg(feature = "luwu")]
#[test]
fn luwu_push_pull_all_reduces_exactly_and_refuses_one_worker() {
    let s = Spec::load(&root().join("experiments/bench/allreduce.yaml")).expect("spec");
    let points = expand(&s, "quick").expect("quick");
    let w = AllReduce;
    let p = points
        .iter()
        .filter(|p| p.system == "luwu")
        .min_by_key(|p| {
            let v = |k: &str| p.params.get(k).and_then(|x| x.as_f64()).expect(k) as u64;
            (v("size_bytes"), v("workers"))
        })
        .expect("a luwu point")
        .clone();
    let mut one = p.clone();
    one.params
        .insert("workers".into(), inabench_core::value::Scalar::Int(1));
    for (point, runs) in [(&p, true), (&one, false)] {
        let (rows, _) =
            run_cell(&w, &s, point, Fidelity::Simulated, "sim", None).expect("the cell");
        let get = |m: &str| rows.iter().find(|(k, _)| k == m).map(|(_, v)| *v);
        if runs {
            assert_eq!(get("refused"), Some(0.0), "{rows:?}");
            assert_eq!(get("wrong_workers"), Some(0.0), "{rows:?}");
            let bytes = point.params["size_bytes"].as_f64().expect("size");
            let rate = point.params["line_rate_gbps"].as_f64().expect("rate") * 1e9;
            let twice_us = 2.0 * bytes * 8.0 / rate * 1e6;
            let t = get("time").expect("a time");
            assert!(t >= twice_us, "{t} us under {twice_us} us: {rows:?}");
        } else {
            assert_eq!(get("refused"), Some(1.0), "{rows:?}");
            assert_eq!(get("time"), None, "{rows:?}");
            assert!(
                rows.iter()
                    .any(|(m, _)| m.starts_with(REFUSAL_PREFIX) && m.contains("two WorkerNICs")),
                "{rows:?}"
            );
        }
    }
}

/// bench-allreduce's ALEPH cell runs ALEPH's service and members (its PS behind one link of the
/// star, the host profile's XDP and sender costs): every member's aggregate exact with a time at
/// the quick profile's smallest points, its senders' cost a packet in the time (more than the
/// 570-byte frames' wire time alone); 33 members, more than the service's bitmap holds, and
/// 256 MiB (the full profile's largest), over the simulation's bound of segments, refused with
/// their sentences.
#[cfg(feature = "aleph")]
#[test]
fn aleph_all_reduces_exactly_through_its_ps_and_refuses_33_members() {
    use inabench_core::value::Scalar;
    let s = Spec::load(&root().join("experiments/bench/allreduce.yaml")).expect("spec");
    let profile =
        HostProfile::load(&root().join("experiments/hosts/reference.yaml")).expect("profile");
    let points = expand(&s, "quick").expect("quick");
    let w = AllReduce;
    let run = |p: &Point| {
        let (rows, _) =
            run_cell(&w, &s, p, Fidelity::Simulated, "sim", Some(&profile)).expect("the cell");
        rows
    };
    let get = |rows: &[(String, f64)], m: &str| rows.iter().find(|(k, _)| k == m).map(|(_, v)| *v);
    let mut seen = 0;
    for p in points.iter().filter(|p| {
        p.system == "aleph" && p.params.get("size_bytes").and_then(|v| v.as_f64()) == Some(4096.0)
    }) {
        let rows = run(p);
        assert_eq!(get(&rows, "refused"), Some(0.0), "{rows:?}");
        assert_eq!(get(&rows, "wrong_workers"), Some(0.0), "{rows:?}");
        let t = get(&rows, "time").expect("a time");
        // 4096 B: 8 datagrams a member, each at least its sender's 1601 ns (the profile's
        // udp_send) before the wire, so the time is above 8 x 1.601 us
        assert!(t > 8.0 * 1.601, "{t} us: {rows:?}");
        seen += 1;
    }
    assert_eq!(
        seen, 2,
        "bench-allreduce quick: ALEPH at 4096 B, 4 and 8 workers"
    );
    // over the simulation's bound of segments: refused with the bound's sentence, no time
    // the full profile's 256 MiB (524288 segments) is over the bound: refused before it runs
    let mut big = points
        .iter()
        .find(|p| {
            p.system == "aleph"
                && p.params.get("size_bytes").and_then(|v| v.as_f64()) == Some(16777216.0)
        })
        .expect("ALEPH at 16 MiB")
        .clone();
    big.params
        .insert("size_bytes".into(), Scalar::Int(268_435_456));
    let rows = run(&big);
    assert_eq!(get(&rows, "refused"), Some(1.0), "{rows:?}");
    assert_eq!(get(&rows, "time"), None, "{rows:?}");
    assert!(
        rows.iter()
            .any(|(m, _)| m.starts_with(REFUSAL_PREFIX) && m.contains("aleph__max_segments")),
        "{rows:?}"
    );
    let mut many = points
        .iter()
        .find(|p| p.system == "aleph")
        .expect("an aleph point")
        .clone();
    many.params.insert("workers".into(), Scalar::Int(33));
    let rows = run(&many);
    assert_eq!(get(&rows, "refused"), Some(1.0), "{rows:?}");
    assert_eq!(get(&rows, "time"), None, "{rows:?}");
    assert!(
        rows.iter()
            .any(|(m, _)| m.starts_with(REFUSAL_PREFIX) && m.contains("33 members")),
        "{rows:?}"
    );
}

/// The hierarchical all-reduce (inabench_ina::hierarchical) in bench-allreduce's quick run: its
/// cells at 16 workers (two groups of the spec's 8: two levels) and 4 workers (one group, the
/// flat ring) are exact with a time, the one-group cell the ring's own time (the same steps over
/// the same chunks); and with groups of 2 (two levels at 4 workers) it is exact on every fabric
/// of the conformance check (`sim`, `mem`, `udp` threads through `Fabric::run_deployment`).
#[test]
fn hierarchical_all_reduce_is_exact_in_the_spec_and_on_every_fabric() {
    let s = Spec::load(&root().join("experiments/bench/allreduce.yaml")).expect("spec");
    assert_eq!(
        s.parameters
            .get("hierarchical_allreduce__group_size")
            .and_then(|v| v.as_f64()),
        Some(8.0),
        "the spec declares the group size"
    );
    let profile =
        HostProfile::load(&root().join("experiments/hosts/reference.yaml")).expect("profile");
    let points = expand(&s, "quick").expect("quick");
    let w = AllReduce;
    let at = |sys: &str, workers: f64, bytes: f64| {
        let p = points
            .iter()
            .find(|p| {
                let v = |k: &str| p.params.get(k).and_then(|x| x.as_f64());
                p.system == sys && v("workers") == Some(workers) && v("size_bytes") == Some(bytes)
            })
            .unwrap_or_else(|| panic!("{sys} at {workers} workers, {bytes} B"));
        let (rows, _) = run_cell(&w, &s, p, Fidelity::Simulated, "sim", Some(&profile))
            .unwrap_or_else(|e| panic!("{sys} at {workers}: {e}"));
        rows
    };
    let get = |rows: &[(String, f64)], m: &str| rows.iter().find(|(k, _)| k == m).map(|(_, v)| *v);
    for (workers, bytes) in [(16.0, 1048576.0), (4.0, 65536.0)] {
        let rows = at("hierarchical_allreduce", workers, bytes);
        assert_eq!(get(&rows, "refused"), Some(0.0), "{rows:?}");
        assert_eq!(get(&rows, "wrong_workers"), Some(0.0), "{rows:?}");
        let t = get(&rows, "time").unwrap_or_else(|| panic!("no time: {rows:?}"));
        assert!(t > 0.0, "{rows:?}");
        if workers == 4.0 {
            let ring = get(&at("ring_allreduce", workers, bytes), "time").expect("ring time");
            assert_eq!(t, ring, "one group is the flat ring");
        }
    }
    let sys = inabench_ina::system("hierarchical_allreduce").expect("listed");
    assert!(!sys.in_network() && !sys.fuzzed() && sys.float_sum().is_none());
    let cfg = inabench_ina::common::AllReduceConfig {
        workers: 4,
        elements: 3 * 256 + 17,
        seed: 5,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 1_000_000,
        knobs: vec![("group_size".into(), 2.0)],
    };
    let out =
        inabench_ina_run::conformance::on_every_fabric(sys, &cfg).unwrap_or_else(|e| panic!("{e}"));
    let fabrics: Vec<&str> = out.iter().map(|o| o.fabric).collect();
    assert_eq!(fabrics, ["sim", "mem", "udp"]);
    for o in &out {
        assert!(o.passed(), "groups of 2: {o:?}");
    }
}

/// ALEPH in bench-hetero (ALEPH's regime): with one worker at 10 Gbps M-WCHA clusters the others
/// under an aggregator (two levels) and the cell is exact with a time; with every link at
/// 100 Gbps it groups nobody and the cell is bench-allreduce's one-level 1 MiB cell, the same
/// time; and a hierarchy of two levels given by hand (two aggregators of three members, two
/// workers straight to the PS) sums exactly too.
#[cfg(feature = "aleph")]
#[test]
fn aleph_runs_two_levels_where_a_link_is_slower() {
    use inabench_workloads::bench::aleph;
    let s = Spec::load(&root().join("experiments/bench/hetero.yaml")).expect("spec");
    let profile =
        HostProfile::load(&root().join("experiments/hosts/reference.yaml")).expect("profile");
    let points = expand(&s, "quick").expect("quick");
    let w = AllReduce;
    let cell = |slow: f64| {
        let p = points
            .iter()
            .find(|p| {
                let v = |k: &str| p.params.get(k).and_then(|x| x.as_f64());
                p.system == "aleph"
                    && v("slow_workers") == Some(1.0)
                    && v("slow_link_gbps") == Some(slow)
            })
            .unwrap_or_else(|| panic!("ALEPH with one worker at {slow} Gbps"));
        run_cell(&w, &s, p, Fidelity::Simulated, "sim", Some(&profile))
            .unwrap_or_else(|e| panic!("{slow} Gbps: {e}"))
            .0
    };
    let get = |rows: &[(String, f64)], m: &str| rows.iter().find(|(k, _)| k == m).map(|(_, v)| *v);
    // M-WCHA on these links: an aggregator among the fast workers
    let mut rates = vec![100.0; 8];
    rates[7] = 10.0;
    let parents =
        inabench_workloads::aleph::testbed_training::clustering(&rates, 1).expect("clustering");
    assert!(
        parents.iter().any(|&p| p < 8),
        "two levels at 10 Gbps: {parents:?}"
    );
    let slow = cell(10.0);
    assert_eq!(get(&slow, "refused"), Some(0.0), "{slow:?}");
    assert_eq!(get(&slow, "wrong_workers"), Some(0.0), "{slow:?}");
    assert!(get(&slow, "time").is_some_and(|t| t > 0.0), "{slow:?}");
    let even = cell(100.0);
    assert_eq!(get(&even, "wrong_workers"), Some(0.0), "{even:?}");
    let s1 = Spec::load(&root().join("experiments/bench/allreduce.yaml")).expect("spec");
    let one_level = expand(&s1, "quick")
        .expect("quick")
        .into_iter()
        .find(|p| {
            let v = |k: &str| p.params.get(k).and_then(|x| x.as_f64());
            p.system == "aleph" && v("workers") == Some(8.0) && v("size_bytes") == Some(1048576.0)
        })
        .expect("bench-allreduce's ALEPH cell at 1 MiB, 8 workers");
    let (flat, _) = run_cell(
        &w,
        &s1,
        &one_level,
        Fidelity::Simulated,
        "sim",
        Some(&profile),
    )
    .expect("the one-level cell");
    assert_eq!(
        get(&even, "time"),
        get(&flat, "time"),
        "every link at 100 Gbps: one level"
    );
    // two aggregators (0 and 4) of three members each, workers 3 and 7 to the PS (node 8)
    let cfg = inabench_ina::common::AllReduceConfig {
        workers: 8,
        elements: 5 * 128 + 7,
        seed: 3,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 0,
        knobs: vec![],
    };
    let costs = aleph::Costs {
        udp_send_ns: 1601.0,
        xdp_rx_ns: 41.7,
        xdp_tx_ns: 74.0,
        program_ns: 277.7,
        ps_cores: 8.0,
        sender_threads: 1.0,
    };
    let o = aleph::run(&cfg, &costs, &[8, 0, 0, 8, 8, 4, 4, 8], 10_000_000_000).expect("run");
    assert!(o.finished && o.wrong == 0 && o.unfinished == 0, "{o:?}");
    // an aggregator's member cannot aggregate in turn
    assert!(aleph::run(&cfg, &costs, &[8, 0, 1, 8, 8, 8, 8, 8], 1_000_000).is_err());
    // 2% of the frames lost, some duplicated: the Integrity Check recovers at both levels
    // (members from their aggregator, aggregators from the PS), every aggregate exact
    for seed in 1..=4 {
        let faults = inabench_fabric::fault::Faults {
            loss: 0.02,
            duplicate: 0.01,
            seed,
            ..Default::default()
        };
        let o = aleph::run_with_faults(
            &cfg,
            &costs,
            &[8, 0, 0, 8, 8, 4, 4, 8],
            faults,
            20_000_000_000,
        )
        .expect("run");
        assert!(o.finished && o.wrong == 0, "seed {seed}: {o:?}");
        assert!(
            o.resent + o.fetches > 0,
            "seed {seed}: nothing recovered: {o:?}"
        );
    }
}

/// The emulated class runs the list's systems on this host's udp fabric (a process per node, or
/// threads where no node binary is at hand, as in this test): every worker's sum exact, the time
/// under its own metric (`single_time`, one cold all-reduce, never ranked beside the references'
/// `time`), and more workers than the class runs refused with the sentence.
#[test]
fn the_list_systems_run_on_this_hosts_udp_fabric_in_the_emulated_class() {
    use inabench_core::value::Scalar;
    let s = Spec::load(&root().join("experiments/bench/small.yaml")).expect("spec");
    let points = expand(&s, "quick").expect("quick");
    let w = AllReduce;
    let run = |p: &Point| {
        let (rows, _) =
            run_cell(&w, &s, p, Fidelity::Emulated, "loopback", None).expect("the cell");
        rows
    };
    let mut ran = 0;
    for p in points.iter().filter(|p| {
        matches!(p.system.as_str(), "switchml" | "atp" | "ring_allreduce")
            && p.params.get("elements").and_then(|v| v.as_f64()) == Some(32.0)
    }) {
        let rows = run(p);
        let get = |m: &str| rows.iter().find(|(k, _)| k == m).map(|(_, v)| *v);
        assert_eq!(get("refused"), Some(0.0), "{}: {rows:?}", p.system);
        assert_eq!(get("wrong_workers"), Some(0.0), "{}: {rows:?}", p.system);
        assert!(get("single_time").is_some_and(|t| t > 0.0), "{rows:?}");
        assert_eq!(
            get("time"),
            None,
            "{}: never ranked with the references",
            p.system
        );
        ran += 1;
    }
    assert_eq!(
        ran, 3,
        "bench-small's quick profile lost a point at 32 values"
    );
    let mut nine = points
        .iter()
        .find(|p| p.system == "switchml")
        .expect("a switchml point")
        .clone();
    nine.params.insert("workers".into(), Scalar::Int(9));
    let rows = run(&nine);
    assert!(
        rows.iter()
            .any(|(m, v)| *v == 1.0 && m.starts_with(REFUSAL_PREFIX) && m.contains("at most 8")),
        "{rows:?}"
    );
}

/// bench-allreduce's emulated class (the dense regime on this host's udp fabric, 4 and 8
/// workers): a point within the profile's size bound runs exact with its own metric
/// (`single_time`, never the simulated class's `time`); a point over `udp_max_bytes` is refused
/// with the bound's sentence; and a cell over its time limit records its workers without a
/// result (`unfinished_workers`) and no time at all, never a zero.
#[test]
fn bench_allreduce_runs_the_list_on_udp_and_a_cell_over_its_limit_says_so() {
    use inabench_core::value::Scalar;
    let s = Spec::load(&root().join("experiments/bench/allreduce.yaml")).expect("spec");
    assert!(
        s.fidelity.contains(&Fidelity::Emulated),
        "no emulated class"
    );
    let points = expand(&s, "quick").expect("quick");
    let w = AllReduce;
    let run = |p: &Point| {
        let (rows, warnings) =
            run_cell(&w, &s, p, Fidelity::Emulated, "loopback", None).expect("the cell");
        (rows, warnings)
    };
    let get = |rows: &[(String, f64)], m: &str| rows.iter().find(|(k, _)| k == m).map(|(_, v)| *v);
    let at = |sys: &str, bytes: f64, workers: f64| {
        points
            .iter()
            .find(|p| {
                let v = |k: &str| p.params.get(k).and_then(|x| x.as_f64());
                p.system == sys && v("size_bytes") == Some(bytes) && v("workers") == Some(workers)
            })
            .unwrap_or_else(|| {
                panic!("bench-allreduce quick has no {sys} point at {bytes} B, {workers} workers")
            })
            .clone()
    };
    // within the bound: exact, its own metric
    for sys in ["switchml", "netreduce"] {
        let (rows, _) = run(&at(sys, 4096.0, 4.0));
        assert_eq!(get(&rows, "refused"), Some(0.0), "{sys}: {rows:?}");
        assert_eq!(get(&rows, "wrong_workers"), Some(0.0), "{sys}: {rows:?}");
        assert_eq!(
            get(&rows, "unfinished_workers"),
            Some(0.0),
            "{sys}: {rows:?}"
        );
        assert!(
            get(&rows, "single_time").is_some_and(|t| t > 0.0),
            "{sys}: {rows:?}"
        );
        assert_eq!(get(&rows, "time"), None, "{sys}: {rows:?}");
    }
    // over the quick profile's size bound: refused with the sentence
    let (rows, _) = run(&at("switchml", 16777216.0, 8.0));
    assert_eq!(get(&rows, "refused"), Some(1.0), "{rows:?}");
    assert!(
        rows.iter()
            .any(|(m, _)| m.starts_with(REFUSAL_PREFIX) && m.contains("udp_max_bytes")),
        "{rows:?}"
    );
    assert_eq!(get(&rows, "single_time"), None, "{rows:?}");
    // over its time limit (1 ms of wall time for 1 MiB a worker through ATP's switch): the
    // workers without a result, no time
    let mut short = at("atp", 1048576.0, 4.0);
    short
        .params
        .insert("udp_time_limit_ms".into(), Scalar::Int(1));
    let (rows, warnings) = run(&short);
    assert_eq!(get(&rows, "refused"), Some(0.0), "{rows:?}");
    assert!(
        get(&rows, "unfinished_workers").is_some_and(|u| u > 0.0),
        "{rows:?}"
    );
    assert_eq!(get(&rows, "single_time"), None, "{rows:?}");
    assert_eq!(get(&rows, "time"), None, "{rows:?}");
    assert!(
        warnings
            .iter()
            .any(|m| m.contains("did not finish within its time limit")),
        "{warnings:?}"
    );
}

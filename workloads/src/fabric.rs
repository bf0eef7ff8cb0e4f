//! The fabric and fault parameters of a point, parsed once here for every workload that runs
//! endpoints: which fabric the emulated class runs on (`emulated_fabric`) and the seeded faults
//! (`loss`, `duplicate`, `reorder`, `reorder_delay_us`, `fault_seed`). The row's fabric label is
//! set here from the fabric chosen, so a workload never writes a label of its own.

use inabench_core::plan::Point;
use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use inabench_fabric::fault::Faults;
use inabench_fabric::raw::SocketsRan;

/// What the udp fabric's batched socket layer uses on this host (UDP GSO/GRO or plain
/// `sendmmsg`/`recvmmsg`), probed once per process; the runner writes it into the manifest.
pub fn udp_offload() -> &'static str {
    inabench_fabric::batch::Offload::probe().label()
}

/// The software fabric an emulated point runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emulated {
    /// UDP sockets on loopback (a process or a thread per node).
    Udp,
    /// In-process channels, a thread per node.
    Mem,
    /// The raw fabric: the endpoints' Ethernet frames through AF_XDP (copy mode) or AF_PACKET
    /// sockets on veth links between network namespaces, a process per node
    /// (`inabench_ina_run::raw_node`; root; `INABENCH_RAW_SOCKET` forces a kind).
    /// Labelled `raw-veth`: an emulation of a NIC testbed on this host, not one; once it ran,
    /// `raw-veth/` and the socket kind that carried the frames ([`raw_label`]).
    Raw,
}

impl Emulated {
    pub fn label(self) -> &'static str {
        match self {
            Emulated::Udp => "udp",
            Emulated::Mem => "mem",
            Emulated::Raw => "raw-veth",
        }
    }
}

/// The point's `emulated_fabric` (`default` when the spec leaves it out), recorded as the fabric
/// of the point's rows. Any other value is an error naming the choices.
pub fn emulated_fabric(
    ctx: &mut PointCtx<'_>,
    default: Emulated,
) -> Result<Emulated, WorkloadError> {
    emulated_fabric_among(ctx, default, false)
}

/// [`emulated_fabric`] for a workload that can also run on the raw fabric (`raw_ok`: the
/// value `raw`, labelled `raw-veth`); elsewhere `raw` is an error.
pub fn emulated_fabric_among(
    ctx: &mut PointCtx<'_>,
    default: Emulated,
    raw_ok: bool,
) -> Result<Emulated, WorkloadError> {
    let chosen = choose(ctx.point, default, raw_ok)?;
    ctx.fabric = chosen.label();
    Ok(chosen)
}

/// The point's `emulated_fabric` among the fabrics the workload runs (`raw_ok`: also `raw`).
fn choose(point: &Point, default: Emulated, raw_ok: bool) -> Result<Emulated, WorkloadError> {
    match point
        .params
        .get("emulated_fabric")
        .map(|v| v.to_string())
        .as_deref()
    {
        None => Ok(default),
        Some("udp") => Ok(Emulated::Udp),
        Some("mem") => Ok(Emulated::Mem),
        Some("raw") if raw_ok => Ok(Emulated::Raw),
        Some(other) => Err(WorkloadError::Invalid(format!(
            "emulated_fabric is `udp`{} or `mem`, not `{other}`",
            if raw_ok { ", `raw`" } else { "" }
        ))),
    }
}

/// The fabric label of an emulated point before it runs, for a workload that picks its fabric
/// with [`emulated_fabric_among`] (its [`Workload::point_fabric`]): the label that function
/// sets, or `default`'s for a value it refuses (the point then fails with that error).
pub fn planned_label(point: &Point, default: Emulated, raw_ok: bool) -> &'static str {
    choose(point, default, raw_ok).unwrap_or(default).label()
}

/// The fabrics a class of a run runs on, each once in the points' order
/// ([`Workload::point_fabric`] of each point): the one decision behind the manifest's `fabric`,
/// its `<class>: <fabric>` lines, and whether it probes the udp fabric's sockets, before any
/// point ran ([`ran_fabrics`] with no point's rows in).
pub fn class_fabrics(workload: &dyn Workload, fidelity: Fidelity, points: &[Point]) -> Vec<String> {
    ran_fabrics(
        workload,
        fidelity,
        points,
        &std::collections::BTreeMap::new(),
    )
}

/// `items` each once, in their first order.
fn once_each<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut seen: Vec<T> = Vec::new();
    for i in items {
        if !seen.contains(&i) {
            seen.push(i);
        }
    }
    seen
}

/// [`class_fabrics`] as the run's rows say once points ran: a point in `ran` (its id) carries
/// the fabrics its rows named (a workload sets a row's fabric as it learns it: table1's `roce`
/// row `rdma-rxe` on Soft-RoCE or `soft-rc-udp` on the software RC over UDP, a raw point the
/// sockets that carried it), every other point its planned fabric; each once, in the points'
/// order.
pub fn ran_fabrics(
    workload: &dyn Workload,
    fidelity: Fidelity,
    points: &[Point],
    ran: &std::collections::BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let seen = once_each(points.iter().flat_map(|p| match ran.get(&p.id) {
        Some(r) => r.clone(),
        None => vec![workload.point_fabric(fidelity, p).to_string()],
    }));
    if seen.is_empty() {
        return vec![workload.fabric(fidelity).to_string()];
    }
    seen
}

/// The rows' fabric label once a raw point ran: `raw-veth/af_xdp` (AF_XDP in copy mode on every
/// link), `raw-veth/af_packet` (`AF_PACKET` on every link) or `raw-veth/mixed` (some of each,
/// or nodes that differ); `raw-veth` where the nodes' labels named no kind.
pub fn raw_label(ran: Option<SocketsRan>) -> &'static str {
    match ran {
        Some(SocketsRan::AfXdp) => "raw-veth/af_xdp",
        Some(SocketsRan::AfPacket) => "raw-veth/af_packet",
        Some(SocketsRan::Mixed) => "raw-veth/mixed",
        None => Emulated::Raw.label(),
    }
}

/// The manifest's line for a raw point that ran: its rows' label, the sockets' label (which
/// kind ran on which links and why AF_XDP was not used where it was not) and the kind asked
/// (`INABENCH_RAW_SOCKET`, `auto` unless set).
pub fn raw_driver_line(ran: Option<SocketsRan>, sockets: &str, asked: &str) -> String {
    let every = if ran == Some(SocketsRan::AfXdp) {
        " on every link"
    } else {
        ""
    };
    format!(
        "raw fabric sockets, rows {}: {sockets}{every} (asked: {asked})",
        raw_label(ran)
    )
}

/// The point's faults: each a probability in [0, 1] (default 0); a reordered frame is delayed
/// by `reorder_delay_us` (default 5 us); `fault_seed` (a grid dimension) draws other faults for
/// the same point seed.
pub fn faults(ctx: &PointCtx<'_>) -> Result<Faults, WorkloadError> {
    let prob = |name: &str| -> Result<f64, WorkloadError> {
        let p = ctx.param(name).unwrap_or(0.0);
        if (0.0..=1.0).contains(&p) {
            Ok(p)
        } else {
            Err(WorkloadError::Invalid(format!(
                "`{name}` is a probability in [0, 1], not {p}"
            )))
        }
    };
    let delay_us = ctx.param("reorder_delay_us").unwrap_or(5.0);
    if !(delay_us >= 0.0 && delay_us.is_finite()) {
        return Err(WorkloadError::Invalid(format!(
            "`reorder_delay_us` is a delay of 0 or more microseconds, not {delay_us}"
        )));
    }
    let fault_seed = match ctx.param("fault_seed") {
        Err(_) => 0,
        Ok(_) => ctx.count("fault_seed")? as u64,
    };
    Ok(Faults {
        loss: prob("loss")?,
        duplicate: prob("duplicate")?,
        reorder: prob("reorder")?,
        reorder_delay_ns: (delay_us * 1e3) as u64,
        seed: ctx.seed.wrapping_add(fault_seed),
    })
}

/// An all-reduce of [`inabench_ina`] that failed, as the point's error, by kind: a system that
/// cannot be built for the point's values or a host stack named or set wrong is a parameter
/// error (resuming fails the same way until the spec changes), a wrong or missing sum is a wrong
/// result, anything else (a fabric that could not start, a run that did not finish, a capture
/// that could not be written) the run's failure.
pub fn run_error(e: inabench_ina::RunError) -> WorkloadError {
    let text = e.to_string();
    classify(&e, text)
}

/// [`run_error`] with what failed named first (`what: error`).
pub fn run_error_in(what: impl std::fmt::Display, e: inabench_ina::RunError) -> WorkloadError {
    let text = format!("{what}: {e}");
    classify(&e, text)
}

fn classify(e: &inabench_ina::RunError, text: String) -> WorkloadError {
    use inabench_ina::RunError as E;
    use inabench_ina::hoststack::StackError;
    let mut kind = e;
    while let E::InStep { cause, .. } = kind {
        kind = cause;
    }
    match kind {
        E::Stack(StackError::NoCosts { .. }) => WorkloadError::Invalid(text),
        E::Setup(_) | E::Stack(_) | E::BadInputs | E::NoFloatSum(_) => {
            WorkloadError::BadParam(text)
        }
        E::WrongResult { .. }
        | E::NoResult { .. }
        | E::AggregatesDiffer
        | E::WrongElement { .. } => WorkloadError::WrongResult(text),
        _ => WorkloadError::Invalid(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_core::Fidelity;
    use inabench_core::event::Event;
    use inabench_core::plan::Point;
    use inabench_core::value::{Params, Scalar};
    use std::sync::atomic::AtomicBool;

    fn with_ctx<R>(params: &[(&str, Scalar)], f: impl FnOnce(&mut PointCtx<'_>) -> R) -> R {
        let p = Point {
            id: "p".into(),
            system: "s".into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect::<Params>(),
            repetitions: 1,
            warmup: 0,
        };
        let cancel = AtomicBool::new(false);
        let mut sink = |_e: Event| {};
        let units = |_m: &str| String::new();
        let mut ctx = PointCtx::new(
            &p,
            0,
            Fidelity::Emulated,
            "udp",
            0,
            false,
            10,
            "r",
            "e",
            &cancel,
            &mut sink,
            &units,
        );
        f(&mut ctx)
    }

    #[test]
    fn an_all_reduce_error_becomes_the_points_error_by_kind() {
        use inabench_ina::RunError;
        use inabench_ina_run::collective::{Aggregation, Fabric, allreduce_f32};
        // a real refusal of inabench_ina: one worker is no all-reduce, whatever the run
        let Err(one) = allreduce_f32(Aggregation::NETREDUCE, &[vec![1.0]], Fabric::Sim) else {
            panic!("an all-reduce of one worker ran");
        };
        assert!(matches!(run_error(one), WorkloadError::BadParam(_)));
        let wrong = RunError::InStep {
            step: 3,
            bucket: 1,
            cause: Box::new(RunError::WrongElement {
                index: 7,
                got: 1.0,
                want: 2.0,
            }),
        };
        match run_error_in("ring", wrong) {
            WorkloadError::WrongResult(m) => {
                assert_eq!(
                    m,
                    "ring: step 3, bucket 1: element 7: 1, the gradients sum to 2"
                )
            }
            other => panic!("a wrong element is a wrong result, not {other:?}"),
        }
        let stuck = RunError::Unfinished { system: "atp" };
        assert!(
            matches!(run_error(stuck), WorkloadError::Invalid(m) if m == "atp's all-reduce did not finish")
        );
    }

    #[test]
    fn the_label_is_the_fabric_chosen() {
        let (chosen, label) = with_ctx(&[("emulated_fabric", Scalar::Str("mem".into()))], |c| {
            (emulated_fabric(c, Emulated::Udp), c.fabric)
        });
        assert_eq!(chosen.ok(), Some(Emulated::Mem));
        assert_eq!(label, "mem");
        let (chosen, label) = with_ctx(&[], |c| (emulated_fabric(c, Emulated::Udp), c.fabric));
        assert_eq!(chosen.ok(), Some(Emulated::Udp));
        assert_eq!(label, "udp");
        let bad = with_ctx(&[("emulated_fabric", Scalar::Str("tcp".into()))], |c| {
            emulated_fabric(c, Emulated::Udp)
        });
        assert!(matches!(bad, Err(WorkloadError::Invalid(m)) if m.contains("not `tcp`")));
        // raw: only where the workload runs it, labelled as the emulation it is
        let raw = [("emulated_fabric", Scalar::Str("raw".into()))];
        let (chosen, label) = with_ctx(&raw, |c| {
            (emulated_fabric_among(c, Emulated::Udp, true), c.fabric)
        });
        assert_eq!(chosen.ok(), Some(Emulated::Raw));
        assert_eq!(label, "raw-veth");
        let bad = with_ctx(&raw, |c| emulated_fabric(c, Emulated::Udp));
        assert!(matches!(bad, Err(WorkloadError::Invalid(m)) if m.contains("not `raw`")));
        // once it ran, the label names the socket kind that carried the frames
        assert_eq!(raw_label(Some(SocketsRan::AfXdp)), "raw-veth/af_xdp");
        assert_eq!(raw_label(Some(SocketsRan::AfPacket)), "raw-veth/af_packet");
        assert_eq!(raw_label(Some(SocketsRan::Mixed)), "raw-veth/mixed");
        assert_eq!(raw_label(None), "raw-veth");
        assert_eq!(
            raw_driver_line(Some(SocketsRan::AfXdp), "af_xdp(copy)", "auto"),
            "raw fabric sockets, rows raw-veth/af_xdp: af_xdp(copy) on every link (asked: auto)"
        );
    }

    /// A workload that picks its emulated fabric from `emulated_fabric` (as Table 6 does).
    struct Picks;

    impl Workload for Picks {
        fn id(&self) -> &'static str {
            "t.picks"
        }
        fn fidelities(&self) -> &'static [Fidelity] {
            &[Fidelity::Emulated, Fidelity::Simulated]
        }
        fn fabric(&self, f: Fidelity) -> &'static str {
            if f == Fidelity::Emulated {
                "udp"
            } else {
                "sim"
            }
        }
        fn point_fabric(&self, f: Fidelity, point: &Point) -> &'static str {
            if f == Fidelity::Emulated {
                planned_label(point, Emulated::Udp, true)
            } else {
                self.fabric(f)
            }
        }
        fn run(&self, _ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
            Ok(())
        }
    }

    /// A workload that does not (the trait's default).
    struct Fixed;

    impl Workload for Fixed {
        fn id(&self) -> &'static str {
            "t.fixed"
        }
        fn fidelities(&self) -> &'static [Fidelity] {
            &[Fidelity::Emulated]
        }
        fn fabric(&self, _f: Fidelity) -> &'static str {
            "udp"
        }
        fn run(&self, _ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
            Ok(())
        }
    }

    fn point(id: &str, fabric: Option<&str>) -> Point {
        Point {
            id: id.into(),
            system: "s".into(),
            params: fabric
                .map(|f| ("emulated_fabric".to_string(), Scalar::Str(f.into())))
                .into_iter()
                .collect::<Params>(),
            repetitions: 1,
            warmup: 0,
        }
    }

    /// Once points ran, the class's fabrics are what their rows named, the planned one for the
    /// points that did not run; each once, in the points' order.
    #[test]
    fn a_class_that_ran_says_what_its_rows_ran_on() {
        let pts = [point("a", None), point("b", Some("raw")), point("c", None)];
        let none = std::collections::BTreeMap::new();
        assert_eq!(
            ran_fabrics(&Picks, Fidelity::Emulated, &pts, &none),
            ["udp", "raw-veth"]
        );
        let ran: std::collections::BTreeMap<String, Vec<String>> = [
            ("b".to_string(), vec!["raw-veth/af_packet".to_string()]),
            (
                "c".to_string(),
                vec!["soft-rc-udp".to_string(), "udp".to_string()],
            ),
        ]
        .into();
        assert_eq!(
            ran_fabrics(&Picks, Fidelity::Emulated, &pts, &ran),
            ["udp", "raw-veth/af_packet", "soft-rc-udp"]
        );
        assert_eq!(ran_fabrics(&Fixed, Fidelity::Emulated, &[], &ran), ["udp"]);
    }

    #[test]
    fn a_class_runs_on_the_fabrics_its_points_pick() {
        let raw = [point("a", Some("raw")), point("b", Some("raw"))];
        assert_eq!(
            class_fabrics(&Picks, Fidelity::Emulated, &raw),
            ["raw-veth"]
        );
        // the simulated class does not read emulated_fabric
        assert_eq!(class_fabrics(&Picks, Fidelity::Simulated, &raw), ["sim"]);
        let both = [
            point("a", None),
            point("b", Some("raw")),
            point("c", Some("udp")),
            point("d", Some("mem")),
        ];
        assert_eq!(
            class_fabrics(&Picks, Fidelity::Emulated, &both),
            ["udp", "raw-veth", "mem"]
        );
        // a value the workload refuses plans as its default (the point fails when it runs)
        assert_eq!(
            class_fabrics(&Picks, Fidelity::Emulated, &[point("a", Some("tcp"))]),
            ["udp"]
        );
        // a workload that does not read it keeps its fabric; no points: the class's own
        assert_eq!(class_fabrics(&Fixed, Fidelity::Emulated, &raw), ["udp"]);
        assert_eq!(class_fabrics(&Picks, Fidelity::Emulated, &[]), ["udp"]);
        // the two other workloads that read it: training (mem by default) and p4sgd-fig8 (udp)
        let mem = [point("a", Some("mem"))];
        let udp = [point("a", Some("udp"))];
        let t = &crate::netreduce::training::Training;
        assert_eq!(class_fabrics(t, Fidelity::Emulated, &raw[..1]), ["mem"]);
        assert_eq!(class_fabrics(t, Fidelity::Emulated, &udp), ["udp"]);
        assert_eq!(class_fabrics(t, Fidelity::Modelled, &udp), ["model"]);
        let f8 = &crate::p4sgd::fig8::Fig8;
        assert_eq!(class_fabrics(f8, Fidelity::Emulated, &mem), ["mem"]);
        assert_eq!(
            class_fabrics(f8, Fidelity::Emulated, &[point("a", None)]),
            ["udp"]
        );
        assert_eq!(class_fabrics(f8, Fidelity::Simulated, &mem), ["sim"]);
    }

    #[test]
    fn faults_are_checked_and_seeded() {
        let f = with_ctx(
            &[
                ("loss", Scalar::Float(0.01)),
                ("reorder", Scalar::Float(0.5)),
                ("fault_seed", Scalar::Int(3)),
            ],
            |c| faults(c),
        )
        .expect("valid faults");
        assert_eq!(f.loss, 0.01);
        assert_eq!(f.reorder_delay_ns, 5_000);
        assert_eq!(f.seed, 13);
        for bad in [
            ("loss", Scalar::Float(1.5)),
            ("duplicate", Scalar::Float(-0.1)),
            ("fault_seed", Scalar::Float(1.5)),
            ("reorder_delay_us", Scalar::Float(-1.0)),
        ] {
            let name = bad.0;
            assert!(
                with_ctx(&[bad], |c| faults(c)).is_err(),
                "{name} must be refused"
            );
        }
    }
}

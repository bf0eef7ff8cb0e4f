//! A testbed's P4Runtime switch, programmed before a run: for each system of the plan that has
//! a switch program description (drivers/p4rt `program`), push its P4Info as the pipeline and
//! write the entries a job of the run's workers needs (drivers/p4rt `entries`): the forwarding
//! (each worker's IPv4 address to its port) and, for a program with job tables (SwitchML's
//! `receive_udp`, `dst_addr` and the job's multicast group, `program::job_program_for`), the
//! job as the SwitchML release's controller writes it, so a switch running the program
//! aggregates the run's workers. What the switch holds is read back and checked as the job the
//! software switch would run from it (`dataplane::job_table`, `TableSwitch::new`); the
//! manifest's driver line says what was written and read back. The data plane of our runs stays
//! the software switch model; what goes through the driver is the control plane a Tofino run
//! needs, and the manifest says so.
//!
//! The workers' addresses ([`job_workers`]): a testbed whose worker hosts state their data
//! addresses (`hosts[].data`) has its job written at those (the testbed file's i-th worker is
//! worker i, on switch port i); else the synthetic plan SwitchML's workers send from
//! (`entries::switchml_workers`: 10.0.1.<w+1>, 02:00:00:01:00:<w+1>), worker `w` on switch port
//! `w`, and the manifest line says which. The switch's own MAC and IPv4, the source of its
//! results, go in `switch_mac_and_ip`'s default entry as the SwitchML release's controller sets
//! them ([`job_switch`]): the testbed's switch host's data address where it states one, else
//! SwitchML's synthetic switch address (node n, the address the workers send to; the frames
//! are then those of a switch without the entry). One job at a time is on the switch, and a job of `n`
//! workers completes no slot for a point of fewer: the runner rewrites it before each point
//! whose `workers` differs from the job on the switch ([`SwitchJob`]), and the manifest says
//! how many writes were made for which values.

use anyhow::{Context, Result, anyhow};
use inabench_p4rt::client::Controller;
use inabench_p4rt::entries::{self, JobWorker};
use inabench_p4rt::pb::p4::config::v1::P4Info;
use inabench_p4rt::pb::p4::v1 as p4;
use inabench_p4rt::program;
use std::collections::{BTreeMap, HashMap};

/// The program description of a system, if it runs on a programmable switch here (the P4
/// driver lists the programs it can describe): what a testbed's P4Info must match.
pub fn program_of(system: &str) -> Option<program::Program> {
    program::for_system(system)
}

/// Program `systems` on the switch at `tb`'s P4Runtime address for `workers` workers at the
/// synthetic addresses their frames carry; returns one line per system for the manifest's
/// drivers.
pub fn program_switch(
    tb: &crate::testbed::P4Runtime,
    systems: &[String],
    workers: usize,
) -> Result<Vec<String>> {
    program_switch_for(tb, systems, &entries::switchml_workers(workers))
}

/// A switch's own (MAC, IPv4 address).
pub type SwitchAddress = ([u8; 6], [u8; 4]);

/// The switch's own address a job of `n` is written with (`switch_mac_and_ip`): the testbed's
/// switch host's stated data address when it gives one, else SwitchML's synthetic switch
/// address (node `n`); with whether it is the testbed's.
pub fn job_switch(tb: &crate::testbed::Testbed, n: usize) -> Result<(SwitchAddress, bool)> {
    let plan = inabench_workloads::netreduce::rig::address_plan(tb)
        .map_err(|e| anyhow!("the testbed's data addresses: {e}"))?;
    Ok(entries::switchml_switch_at(plan.as_ref(), n))
}

/// The workers a job of `n` is written for: the testbed's stated data addresses (its workers
/// in the file's order) when it gives them, else SwitchML's synthetic ones; with whether they
/// are the testbed's. A testbed naming fewer workers than `n` is refused (one sentence).
pub fn job_workers(tb: &crate::testbed::Testbed, n: usize) -> Result<(Vec<JobWorker>, bool)> {
    match inabench_workloads::netreduce::rig::address_plan(tb)
        .map_err(|e| anyhow!("the testbed's data addresses: {e}"))?
    {
        Some(plan) => entries::switchml_workers_at(&plan, n)
            .map(|w| (w, true))
            .map_err(|e| anyhow!("the testbed's data addresses for the P4 switch's job: {e}")),
        None => Ok((entries::switchml_workers(n), false)),
    }
}

/// The largest `workers` value of a run's points (a grid over `workers` gives each its own),
/// else `fixed` (the spec's fixed `workers`, or 2). The runner writes each point's own job
/// ([`SwitchJob`]); this is the job that fits the most workers any point has.
pub fn largest_workers(points: &[inabench_core::plan::Point], fixed: usize) -> usize {
    points
        .iter()
        .filter_map(|p| p.params.get("workers").and_then(|v| v.as_f64()))
        .filter(|w| w.is_finite() && *w >= 0.0)
        .map(|w| w as usize)
        .max()
        .unwrap_or(fixed)
}

/// The `workers` a point's job is written for: its own `workers` parameter, else `fixed` (the
/// spec's fixed value, or 2).
pub fn point_workers(point: &inabench_core::plan::Point, fixed: usize) -> usize {
    point
        .params
        .get("workers")
        .and_then(|v| v.as_f64())
        .filter(|w| w.is_finite() && *w >= 0.0)
        .map_or(fixed, |w| w as usize)
}

/// The job on a testbed's P4Runtime switch through one run. The switch holds one job at a time,
/// and a job written for `n` workers completes no slot for a point of fewer (the switch waits
/// for `n` contributions), so the job is written before each point whose `workers` differs from
/// the job the switch holds ([`SwitchJob::ensure`]): a grid over `workers` rewrites it per
/// point, a grid with one `workers` value writes it once.
pub struct SwitchJob {
    p4: crate::testbed::P4Runtime,
    systems: Vec<String>,
    testbed: crate::testbed::Testbed,
    fixed: usize,
    /// The `workers` of the job the switch holds (None: none written by this run yet).
    on_switch: Option<usize>,
    /// The `workers` of every write, in order.
    writes: Vec<usize>,
    /// Whether the writes were at the testbed's stated worker addresses.
    stated: bool,
    /// What the switch held after the latest write of each `workers` value (its systems'
    /// briefs), in the order the values were first written.
    read_back: Vec<(usize, Vec<String>)>,
}

impl SwitchJob {
    /// The job of a run of `systems` on `tb`'s P4Runtime switch (None: the testbed has none);
    /// `fixed` is the spec's fixed `workers`, else 2.
    pub fn of(
        tb: &crate::testbed::Testbed,
        systems: Vec<String>,
        fixed: usize,
    ) -> Option<SwitchJob> {
        let p4 = tb.switch.p4runtime.clone()?;
        Some(SwitchJob {
            p4,
            systems,
            testbed: tb.clone(),
            fixed,
            on_switch: None,
            writes: Vec::new(),
            stated: false,
            read_back: Vec::new(),
        })
    }

    /// Write the job `point` needs unless the switch already holds it (one call per point,
    /// before it runs): the manifest's lines of the write ([`program_switch_for`]'s, each read
    /// back and checked), or None when nothing was written. A job the switch refuses, or a
    /// testbed naming fewer workers than the point, is an error (one sentence).
    pub fn ensure(&mut self, point: &inabench_core::plan::Point) -> Result<Option<Vec<String>>> {
        let n = point_workers(point, self.fixed);
        if self.on_switch == Some(n) {
            return Ok(None);
        }
        let (w, stated) = job_workers(&self.testbed, n)?;
        let (switch, _) = job_switch(&self.testbed, n)?;
        let written = write_job(&self.p4, &self.systems, &w, switch)?;
        self.on_switch = Some(n);
        self.writes.push(n);
        self.stated = stated;
        let briefs: Vec<String> = written.iter().map(|w| w.brief.clone()).collect();
        match self.read_back.iter_mut().find(|(m, _)| *m == n) {
            Some((_, b)) => *b = briefs,
            None => self.read_back.push((n, briefs)),
        }
        Ok(Some(written.into_iter().map(|w| w.line).collect()))
    }

    /// The `workers` of every write so far, in order.
    pub fn writes(&self) -> &[usize] {
        &self.writes
    }

    /// The manifest's line for the run's writes: once, or rewritten per point, with the counts.
    pub fn summary(&self) -> String {
        let at = if self.stated {
            "the testbed file's worker addresses"
        } else {
            "SwitchML's synthetic worker addresses (the testbed states none)"
        };
        let list = |w: &[usize]| {
            w.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self.writes.as_slice() {
            [] => format!(
                "p4runtime {}: no job written (no point ran)",
                self.p4.address
            ),
            [n] => format!(
                "p4runtime {}: the job written once, for {n} workers (every point's `workers`), at {at}",
                self.p4.address
            ),
            w => {
                let distinct: std::collections::BTreeSet<&usize> = w.iter().collect();
                // the manifest holds the first write's lines; every value's read-back is here
                let held: Vec<String> = self
                    .read_back
                    .iter()
                    .map(|(n, b)| format!("{n} workers: {}", b.join(", ")))
                    .collect();
                format!(
                    "p4runtime {}: the job rewritten per point, before each point whose `workers` differs from the job on the switch (a job of n workers completes no slot for fewer): {} writes for {} `workers` values, in point order {} workers, at {at}; read back after each value's write: {}",
                    self.p4.address,
                    w.len(),
                    distinct.len(),
                    list(w),
                    held.join("; ")
                )
            }
        }
    }
}

/// [`program_switch`] for workers at given addresses and ports (worker `w` is the `w`-th),
/// the switch at SwitchML's synthetic switch address.
pub fn program_switch_for(
    tb: &crate::testbed::P4Runtime,
    systems: &[String],
    workers: &[JobWorker],
) -> Result<Vec<String>> {
    program_switch_at(
        tb,
        systems,
        workers,
        entries::switchml_switch(workers.len()),
    )
}

/// [`program_switch_for`] with the switch's own address `switch` (`switch_mac_and_ip`'s
/// default entry, the source of its results; [`job_switch`]).
pub fn program_switch_at(
    tb: &crate::testbed::P4Runtime,
    systems: &[String],
    workers: &[JobWorker],
    switch: SwitchAddress,
) -> Result<Vec<String>> {
    Ok(write_job(tb, systems, workers, switch)?
        .into_iter()
        .map(|w| w.line)
        .collect())
}

/// What one write left on the switch for one system, as read back.
struct Written {
    /// The manifest's line (the pipeline pushed, the entries and the job read back).
    line: String,
    /// The same in a few words, for the summary of a run that rewrote the job:
    /// `switchml: a job of 4 workers (64 slots of 32 values)` or `switchml: no job (why)`.
    brief: String,
}

/// [`program_switch_for`] with each system's brief.
fn write_job(
    tb: &crate::testbed::P4Runtime,
    systems: &[String],
    workers: &[JobWorker],
    switch: SwitchAddress,
) -> Result<Vec<Written>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the P4Runtime client's runtime")?;
    let programmed: Result<Vec<Written>> = rt.block_on(async {
        let mut lines = Vec::new();
        let mut c = Controller::connect(&tb.address, tb.device_id, (tb.election_id[0], tb.election_id[1]))
            .await
            .context("the testbed's P4Runtime switch")?;
        for s in systems {
            let Some(prog) = program_of(s) else {
                lines.push(Written {
                    line: format!(
                        "p4runtime {} device {}: no switch program for `{s}` (its switch side runs on the software model only)",
                        tb.address, tb.device_id
                    ),
                    brief: format!("{s}: no switch program"),
                });
                continue;
            };
            let job_prog = program::job_program_for(s);
            let (info, device_config, source) = pipeline_of(tb, s, &prog, job_prog.as_ref())?;
            // the job tables are written when the pushed P4Info has them
            let job = match &job_prog {
                Some(j) => match inabench_p4rt::p4info::check(&info, j) {
                    Ok(()) => Ok(j),
                    Err(e) => Err(format!("the P4Info has no job tables ({e})")),
                },
                None => Err(format!("the suite describes no job tables for `{s}`")),
            };
            let pushed = if job.is_ok() { job_prog.as_ref().unwrap_or(&prog) } else { &prog };
            let n = workers.len();
            let max = inabench_p4rt::dataplane::MAX_WORKERS;
            let job = job.and_then(|j| {
                if (2..=max).contains(&n) {
                    Ok(j)
                } else {
                    Err(format!("a job of {n} workers: SwitchML's switch takes 2..={max}"))
                }
            });
            c.set_pipeline(info.clone(), device_config, 1)
                .await
                .map_err(|e| anyhow!("pushing `{}`: {e}", prog.name))?;
            let mut updates = entries::forwarding_updates(&info, workers)
                .map_err(|e| anyhow!("`{s}`'s forwarding entries: {e}"))?;
            // the job, with the pool the pushed pipeline's registers give
            let job = job.and_then(|_| {
                inabench_p4rt::dataplane::pool_of(&info)
                    .map(|(slots, lanes)| {
                        let mut t = entries::switchml_job(workers, slots, lanes);
                        t.switch = Some(switch);
                        t
                    })
                    .map_err(|e| e.to_string())
            });
            match &job {
                Ok(table) => updates.extend(
                    entries::job_updates(&info, table)
                        .map_err(|e| anyhow!("`{s}`'s job entries: {e}"))?,
                ),
                Err(_) => {
                    // results and floods to every worker's port (the forwarding program's group)
                    updates.push(entries::group(
                        entries::JOB_GROUP,
                        &workers.iter().map(|w| (1, w.port)).collect::<Vec<_>>(),
                    ));
                }
            }
            c.write(updates)
                .await
                .map_err(|e| anyhow!("installing `{}`'s entries: {e}", prog.name))?;
            // read back what the switch holds: the match entries, the groups and (P4Runtime
            // reads a default entry only when asked for) switch_mac_and_ip's default entry
            let mut reads = vec![
                p4::Entity {
                    entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry::default())),
                },
                p4::Entity {
                    entity: Some(p4::entity::Entity::PacketReplicationEngineEntry(
                        p4::PacketReplicationEngineEntry::default(),
                    )),
                },
            ];
            if job.is_ok()
                && let Some(id) =
                    inabench_p4rt::p4info::Ids(&info).table("SwitchMLEgress.switch_mac_and_ip")
            {
                reads.push(p4::Entity {
                    entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
                        table_id: id,
                        is_default_action: true,
                        ..Default::default()
                    })),
                });
            }
            let read = c
                .read(reads)
                .await
                .map_err(|e| anyhow!("reading back `{}`'s entries: {e}", prog.name))?;
            let (tables, groups) = held(read);
            let ids = inabench_p4rt::p4info::Ids(&info);
            let count = |t: &str| {
                ids.table(t)
                    .and_then(|id| tables.get(&id))
                    .map_or(0, BTreeMap::len)
            };
            let forwarding = count(&prog.tables[0].name);
            let group = groups.get(&entries::JOB_GROUP).map_or(0, |g| g.replicas.len());
            let (what, brief) = match job {
                Ok(written) => {
                    let mut held = inabench_p4rt::dataplane::job_table(&info, &tables, &groups)
                        .map_err(|e| anyhow!("reading back `{s}`'s job: {e}"))?;
                    held.rules.sort_by_key(|r| match r.action {
                        inabench_p4rt::dataplane::RuleAction::Worker { id, .. } => id,
                        inabench_p4rt::dataplane::RuleAction::Drop => u16::MAX,
                    });
                    if held != written {
                        anyhow::bail!(
                            "the switch holds another job than the one written for `{s}`: {held:?}"
                        );
                    }
                    let read_workers = inabench_p4rt::dataplane::runnable(&held)
                        .map_err(|e| anyhow!("`{s}`'s job as read back: {e}"))?;
                    let job = format!(
                        "a job of {} workers ({} slots of {} values)",
                        read_workers, held.slots, held.lanes
                    );
                    let from = held.switch.map_or_else(
                        || "none".to_string(),
                        |(mac, ip)| {
                            format!(
                                "{} {}",
                                inabench_fabric::addresses::fmt_mac(mac),
                                std::net::Ipv4Addr::from(ip)
                            )
                        },
                    );
                    let whose = if switch == entries::switchml_switch(n) {
                        format!("SwitchML's synthetic switch address, node {n}")
                    } else {
                        "the testbed's switch address".to_string()
                    };
                    (
                        format!(
                            "{} receive_udp entries, {} dst_addr entries, multicast group {} of {group} replicas, switch_mac_and_ip {from} ({whose}) read back: {job}, its results from {from}",
                            count("SwitchMLIngress.receive_udp"),
                            count("SwitchMLEgress.dst_addr"),
                            entries::JOB_GROUP,
                        ),
                        format!("{s}: {job} read back"),
                    )
                }
                Err(why) => (
                    format!(
                        "multicast group {} over {group} ports; no job written ({why}): the switch forwards but does not aggregate",
                        entries::JOB_GROUP
                    ),
                    format!("{s}: no job written ({why}), forwarding only"),
                ),
            };
            let line = format!(
                "p4runtime {} device {}: pipeline `{}` ({} registers, {} tables; P4Info: {source}) pushed, {forwarding} forwarding entries read back, {what}; workers at {}; the data plane of our runs is the software switch model",
                tb.address,
                tb.device_id,
                pushed.name,
                pushed.registers.len(),
                pushed.tables.len(),
                if workers == entries::switchml_workers(n).as_slice() {
                    "SwitchML's synthetic addresses (10.0.1.<w+1>), worker w on port w"
                } else {
                    "the testbed's addresses"
                }
            );
            lines.push(Written { line, brief });
        }
        Ok(lines)
    });
    // every failure names the switch's address (the client's own errors already do)
    programmed.map_err(|e| {
        if format!("{e:#}").contains(&tb.address) {
            e
        } else {
            e.context(format!(
                "the testbed's P4Runtime switch at {} (device {})",
                tb.address, tb.device_id
            ))
        }
    })
}

/// Read-back entities as the switch's tables (table id -> entries) and groups.
#[allow(clippy::type_complexity)]
fn held(
    read: Vec<p4::Entity>,
) -> (
    HashMap<u32, BTreeMap<Vec<u8>, p4::TableEntry>>,
    BTreeMap<u32, p4::MulticastGroupEntry>,
) {
    let (mut tables, mut groups) = (HashMap::new(), BTreeMap::new());
    for (k, e) in read.into_iter().enumerate() {
        match e.entity {
            Some(p4::entity::Entity::TableEntry(t)) => {
                tables
                    .entry(t.table_id)
                    .or_insert_with(BTreeMap::new)
                    .insert((k as u64).to_be_bytes().to_vec(), t);
            }
            Some(p4::entity::Entity::PacketReplicationEngineEntry(
                p4::PacketReplicationEngineEntry {
                    r#type: Some(p4::packet_replication_engine_entry::Type::MulticastGroupEntry(g)),
                },
            )) => {
                groups.insert(g.multicast_group_id, g);
            }
            _ => {}
        }
    }
    (tables, groups)
}

/// The P4Info and device config to push for `system`: the testbed's files when it names them
/// (text-format or binary P4Info, checked against the suite's description of the program),
/// else the suite's description. Relative paths are taken from the working directory.
fn pipeline_of(
    tb: &crate::testbed::P4Runtime,
    system: &str,
    prog: &program::Program,
    job_prog: Option<&program::Program>,
) -> Result<(P4Info, Vec<u8>, String)> {
    let given = tb.programs.get(system);
    let Some(path) = given.and_then(|p| p.p4info.as_deref()) else {
        if let Some(dc) = given.and_then(|p| p.device_config.as_deref()) {
            anyhow::bail!(
                "the testbed gives `{system}` a device config ({dc}) but no p4info: name both"
            );
        }
        return Ok((
            job_prog.unwrap_or(prog).p4info(),
            Vec::new(),
            "the suite's description".into(),
        ));
    };
    let l = inabench_p4rt::p4info::load(std::path::Path::new(path))?;
    inabench_p4rt::p4info::check(&l.info, prog).map_err(|e| {
        anyhow!(
            "{path} does not match the suite's `{}` program: {e}",
            prog.name
        )
    })?;
    let device_config = match given.and_then(|p| p.device_config.as_deref()) {
        Some(d) => {
            std::fs::read(d).with_context(|| format!("cannot read the device config {d}"))?
        }
        None => Vec::new(),
    };
    let dropped = if l.dropped.is_empty() {
        String::new()
    } else {
        format!(", not carried: {}", l.dropped.join(", "))
    };
    let n = device_config.len();
    Ok((
        l.info,
        device_config,
        format!("the testbed's {path}, {n} bytes of device config{dropped}"),
    ))
}

//! Load the ALEPH programs, attach them at the XDP hook, and read and write their maps.

use crate::XdpError;
use crate::libbpf::{self, BPF_ANY, BPF_F_LOCK, Libbpf, XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE};
use crate::netns::{self, in_netns};
use crate::proto::{self, SLOT_LEN, Slot};
use std::ffi::CString;
use std::net::Ipv4Addr;
use std::os::raw::c_void;
use std::path::Path;

/// Where the XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (`XDP_FLAGS_DRV_MODE`; the paper's "XDP-Driven").
    Native,
    /// After the kernel has built an skb (`XDP_FLAGS_SKB_MODE`; the paper's "XDP-Generic").
    Generic,
}

impl AttachMode {
    pub fn flags(self) -> u32 {
        match self {
            AttachMode::Native => XDP_FLAGS_DRV_MODE,
            AttachMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
        }
    }
}

/// How a completed aggregate leaves the aggregator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    /// Fig. 3: the completing packet is overwritten and sent to the next level (an aggregator's
    /// PS) through `ifindex`, using the route set for that interface, as a gradient packet from
    /// worker bit `global_id` (the aggregator's global ID, Sec. 4.2).
    Upstream { ifindex: u32, global_id: u8 },
    /// Fig. 4: one copy to every member in the devmap, each rewritten by the egress program.
    Multicast,
}

/// The `config` map's value (`struct config` in the C program).
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub job: u16,
    /// The members' bits; a segment is complete when its bitmap equals this.
    pub full_mask: u32,
    pub forward: Forward,
    /// UDP destination port of ALEPH traffic.
    pub port: u16,
}

impl Config {
    fn bytes(&self) -> [u8; 28] {
        let (mode, up, id) = match self.forward {
            Forward::Upstream { ifindex, global_id } => (0u32, ifindex, global_id),
            Forward::Multicast => (1, 0, 0),
        };
        let mut b = [0u8; 28];
        b[24..28].copy_from_slice(&u32::from(id).to_ne_bytes());
        b[0..4].copy_from_slice(&u32::from(self.job).to_ne_bytes());
        b[4..8].copy_from_slice(&self.full_mask.to_ne_bytes());
        b[8..12].copy_from_slice(&mode.to_ne_bytes());
        b[12..16].copy_from_slice(&up.to_ne_bytes());
        b[16..18].copy_from_slice(&self.port.to_be_bytes());
        b
    }
}

/// The Gradient Receiver's configuration (the same `config` map, other fields).
#[derive(Debug, Clone, Copy)]
pub struct ReceiverConfig {
    pub job: u16,
    /// UDP port the aggregates arrive on.
    pub port: u16,
    /// UDP port the last aggregate of a round is passed up to (the gradient fetch signal).
    pub notify_port: u16,
    /// Aggregates per round.
    pub segments: u32,
}

impl ReceiverConfig {
    fn bytes(&self) -> [u8; 28] {
        let mut b = [0u8; 28];
        b[0..4].copy_from_slice(&u32::from(self.job).to_ne_bytes());
        b[16..18].copy_from_slice(&self.port.to_be_bytes());
        b[18..20].copy_from_slice(&self.notify_port.to_be_bytes());
        b[20..24].copy_from_slice(&self.segments.to_ne_bytes());
        b
    }
}

/// Where a packet leaving through an interface goes (`struct route`).
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub dst_ip: Ipv4Addr,
    pub src_ip: Ipv4Addr,
    pub dst_port: u16,
}

impl Route {
    fn bytes(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[0..6].copy_from_slice(&self.dst_mac);
        b[6..12].copy_from_slice(&self.src_mac);
        b[12..16].copy_from_slice(&self.dst_ip.octets());
        b[16..20].copy_from_slice(&self.src_ip.octets());
        b[20..22].copy_from_slice(&self.dst_port.to_be_bytes());
        b
    }
}

/// The program's counters (`enum stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Gradient packets added into a slot.
    pub aggregated: u64,
    /// Dropped because the sender's bit was already set.
    pub duplicate: u64,
    /// Dropped because they belong to an older round than the slot's.
    pub stale: u64,
    /// Aggregates emitted.
    pub results: u64,
    pub fetch_served: u64,
    pub fetch_miss: u64,
    /// ALEPH packets with a wrong job, an unknown worker bit or a segment out of range.
    pub bad: u64,
    /// Receiver: aggregates stored in its map.
    pub rx_stored: u64,
    /// Receiver: rounds whose last aggregate was passed up as the fetch signal.
    pub rx_notify: u64,
}

/// Kernel-measured run time of BPF programs (`run_time_ns`, `run_cnt`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgramTime {
    pub nanos: u64,
    pub runs: u64,
}

impl ProgramTime {
    /// What ran between `earlier` and `self`.
    pub fn since(self, earlier: ProgramTime) -> ProgramTime {
        ProgramTime {
            nanos: self.nanos.saturating_sub(earlier.nanos),
            runs: self.runs.saturating_sub(earlier.runs),
        }
    }
}

/// Which of the object's programs a [`Aggregator::test_run`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// The Aggregation Service (`aleph_aggregate`).
    Aggregate,
    /// The Gradient Receiver (`aleph_receive`).
    Receive,
    /// The empty program (`xdp_pass`): what a test run costs with no work in it.
    Pass,
    /// The empty program that drops (`xdp_drop`): what a live-frames test run
    /// ([`Aggregator::test_run_live`]) costs with no work in it (a passed live frame goes up the
    /// network stack, which the aggregation program's drops and redirects do not).
    Drop,
}

/// One `BPF_PROG_TEST_RUN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestRun {
    /// The program's return value (`XDP_DROP` 1, `XDP_PASS` 2, `XDP_TX` 3, `XDP_REDIRECT` 4).
    pub retval: u32,
    /// Mean time per repetition (ns) between the kernel's two timer reads around the runs: the
    /// program plus the test-run loop's own cost (bottom halves off and on, the timer reads).
    pub duration_ns: u32,
}

/// BPF run-time statistics switched on for as long as this guard lives (the kernel counts them
/// only while some holder keeps them on: `bpf_enable_stats(BPF_STATS_RUN_TIME)`). They cost a
/// clock read per program run, so measurements that compare throughput leave them off.
#[derive(Debug)]
pub struct RunStats {
    _fd: std::os::fd::OwnedFd,
}

impl RunStats {
    pub fn enable() -> Result<RunStats, XdpError> {
        let lib = Libbpf::get()?;
        // SAFETY: BPF_STATS_RUN_TIME = 0; returns a new fd or a negative errno
        let fd = libbpf::check("bpf_enable_stats", unsafe { (lib.enable_stats)(0) })?;
        // SAFETY: a file descriptor the call just opened and nobody else owns
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        Ok(RunStats { _fd: fd })
    }
}

/// An attached XDP program; detached when dropped (also while a panic unwinds).
#[derive(Debug)]
pub struct Attachment {
    pub namespace: Option<String>,
    pub interface: String,
    pub ifindex: u32,
    pub mode: AttachMode,
}

impl Attachment {
    /// Attach program `prog_fd` to `interface` in namespace `ns`.
    pub fn new(
        prog_fd: i32,
        ns: Option<&str>,
        interface: &str,
        mode: AttachMode,
    ) -> Result<Attachment, XdpError> {
        let lib = Libbpf::get()?;
        let ifindex = netns::ifindex(ns, interface)?;
        // SAFETY: a valid program fd and interface index; no options
        let rc = in_netns(ns, || unsafe {
            (lib.xdp_attach)(ifindex as i32, prog_fd, mode.flags(), std::ptr::null())
        })?;
        libbpf::check("bpf_xdp_attach", rc).map_err(|e| XdpError::Attach {
            interface: interface.into(),
            mode: mode.name(),
            error: e.to_string(),
        })?;
        Ok(Attachment {
            namespace: ns.map(str::to_string),
            interface: interface.into(),
            ifindex,
            mode,
        })
    }

    fn detach(&self) -> Result<(), XdpError> {
        let lib = Libbpf::get()?;
        let (ifindex, flags) = (self.ifindex as i32, self.mode.flags());
        // SAFETY: an interface index this attachment made; no options
        let rc = in_netns(self.namespace.as_deref(), || unsafe {
            (lib.xdp_detach)(ifindex, flags, std::ptr::null())
        })?;
        libbpf::check("bpf_xdp_detach", rc).map(|_| ())
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        // an interface already gone (its namespace deleted) took the program with it
        let _ = self.detach();
    }
}

/// The loaded ALEPH object: programs and maps. Closing it (on drop) releases the maps and
/// programs once no attachment or devmap entry holds them.
pub struct Aggregator {
    lib: &'static Libbpf,
    obj: *mut c_void,
    segments: u32,
    aggregate_fd: i32,
    egress_fd: i32,
    receive_fd: i32,
    pass_fd: i32,
    drop_fd: i32,
    egress_empty_fd: i32,
    slots_fd: i32,
    config_fd: i32,
    stats_fd: i32,
    routes_fd: i32,
    members_fd: i32,
    /// Dropped before the object is closed.
    attachments: Vec<Attachment>,
}

// SAFETY: the object pointer is only used through libbpf calls made while `&mut self` or `&self`
// is held, and libbpf's object is not tied to a thread
unsafe impl Send for Aggregator {}
// SAFETY: after `load`, `&self` methods only make map syscalls on file descriptors (thread-safe in
// the kernel); the object itself is read by `map`/`prog_fd` during `load` and closed in `drop`
unsafe impl Sync for Aggregator {}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator")
            .field("segments", &self.segments)
            .field("attachments", &self.attachments)
            .finish()
    }
}

impl Aggregator {
    /// Compile (or reuse) the programs, open the object with a `slots` map of `segments` slots,
    /// and load it into the kernel (the verifier runs here).
    pub fn load(segments: u32) -> Result<Aggregator, XdpError> {
        let path = crate::compile::aleph_object()?;
        Aggregator::load_object(&path, segments)
    }

    pub fn load_object(path: &Path, segments: u32) -> Result<Aggregator, XdpError> {
        let lib = Libbpf::get()?;
        if segments == 0 {
            return Err(XdpError::Config("zero segments".into()));
        }
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| XdpError::Config(format!("path {}", path.display())))?;
        // SAFETY: a NUL-terminated path; no options
        let obj = unsafe { (lib.object_open_file)(cpath.as_ptr(), std::ptr::null()) };
        if obj.is_null() {
            return Err(libbpf::null_error(lib, "bpf_object__open_file"));
        }
        let mut a = Aggregator {
            lib,
            obj,
            segments,
            aggregate_fd: -1,
            egress_fd: -1,
            receive_fd: -1,
            pass_fd: -1,
            drop_fd: -1,
            egress_empty_fd: -1,
            slots_fd: -1,
            config_fd: -1,
            stats_fd: -1,
            routes_fd: -1,
            members_fd: -1,
            attachments: Vec::new(),
        };
        let slots = a.map("slots")?;
        // SAFETY: a map of this (open, not yet loaded) object
        libbpf::check("bpf_map__set_max_entries", unsafe {
            (lib.map_set_max_entries)(slots, segments)
        })?;
        // SAFETY: an opened object
        libbpf::check("bpf_object__load", unsafe { (lib.object_load)(obj) })?;
        a.aggregate_fd = a.prog_fd("aleph_aggregate")?;
        a.egress_fd = a.prog_fd("aleph_egress")?;
        a.receive_fd = a.prog_fd("aleph_receive")?;
        a.pass_fd = a.prog_fd("xdp_pass")?;
        a.drop_fd = a.prog_fd("xdp_drop")?;
        a.egress_empty_fd = a.prog_fd("xdp_devmap_pass")?;
        // SAFETY: maps of the loaded object
        unsafe {
            a.slots_fd = libbpf::check("bpf_map__fd", (lib.map_fd)(slots))?;
            a.config_fd = libbpf::check("bpf_map__fd", (lib.map_fd)(a.map("config")?))?;
            a.stats_fd = libbpf::check("bpf_map__fd", (lib.map_fd)(a.map("stats")?))?;
            a.routes_fd = libbpf::check("bpf_map__fd", (lib.map_fd)(a.map("routes")?))?;
            a.members_fd = libbpf::check("bpf_map__fd", (lib.map_fd)(a.map("members")?))?;
        }
        Ok(a)
    }

    fn map(&self, name: &str) -> Result<*mut c_void, XdpError> {
        let c = CString::new(name).map_err(|_| XdpError::Config(name.into()))?;
        // SAFETY: our object and a NUL-terminated name
        let m = unsafe { (self.lib.find_map_by_name)(self.obj, c.as_ptr()) };
        if m.is_null() {
            Err(XdpError::Missing("map", name.into()))
        } else {
            Ok(m)
        }
    }

    fn prog_fd(&self, name: &str) -> Result<i32, XdpError> {
        let c = CString::new(name).map_err(|_| XdpError::Config(name.into()))?;
        // SAFETY: our object and a NUL-terminated name
        let p = unsafe { (self.lib.find_program_by_name)(self.obj, c.as_ptr()) };
        if p.is_null() {
            return Err(XdpError::Missing("program", name.into()));
        }
        // SAFETY: a program of our loaded object
        libbpf::check("bpf_program__fd", unsafe { (self.lib.program_fd)(p) })
    }

    fn update(&self, fd: i32, key: &[u8], value: &[u8], flags: u64) -> Result<(), XdpError> {
        // SAFETY: key and value have the map's key and value sizes (checked by the callers'
        // layouts, which mirror the C structs)
        let rc = unsafe {
            (self.lib.map_update_elem)(fd, key.as_ptr().cast(), value.as_ptr().cast(), flags)
        };
        libbpf::check("bpf_map_update_elem", rc).map(|_| ())
    }

    fn lookup(&self, fd: i32, key: &[u8], value: &mut [u8], flags: u64) -> Result<(), XdpError> {
        // SAFETY: as in `update`
        let rc = unsafe {
            (self.lib.map_lookup_elem_flags)(
                fd,
                key.as_ptr().cast(),
                value.as_mut_ptr().cast(),
                flags,
            )
        };
        libbpf::check("bpf_map_lookup_elem_flags", rc).map(|_| ())
    }

    pub fn segments(&self) -> u32 {
        self.segments
    }

    pub fn configure(&self, cfg: &Config) -> Result<(), XdpError> {
        if let Forward::Upstream { global_id, .. } = cfg.forward
            && global_id >= 32
        {
            return Err(XdpError::Config(format!("global ID {global_id} (0..32)")));
        }
        self.update(self.config_fd, &0u32.to_ne_bytes(), &cfg.bytes(), BPF_ANY)
    }

    /// The route of packets leaving through `ifindex` (upstream or one member's copy).
    pub fn set_route(&self, ifindex: u32, route: &Route) -> Result<(), XdpError> {
        self.update(
            self.routes_fd,
            &ifindex.to_ne_bytes(),
            &route.bytes(),
            BPF_ANY,
        )
    }

    /// Make interface `ifindex` of namespace `ns` member `slot` of the multicast group, with the
    /// egress program rewriting its copies. The kernel resolves a devmap's ifindex in the
    /// namespace of the process writing the entry, so the write happens inside `ns`.
    pub fn add_member(&self, ns: Option<&str>, slot: u32, ifindex: u32) -> Result<(), XdpError> {
        self.add_member_egress(ns, slot, ifindex, false)
    }

    /// [`Self::add_member`] with the empty egress program (`xdp_devmap_pass`) on the member's
    /// copies instead of the rewrite when `empty` (a probe's: the copies then keep the
    /// aggregator's addresses, and what the statistics count per run of the empty program is
    /// their own share on the aggregating core). Rewriting an existing slot replaces it.
    pub fn add_member_egress(
        &self,
        ns: Option<&str>,
        slot: u32,
        ifindex: u32,
        empty: bool,
    ) -> Result<(), XdpError> {
        let egress = if empty {
            self.egress_empty_fd
        } else {
            self.egress_fd
        };
        let mut v = [0u8; 8];
        v[0..4].copy_from_slice(&ifindex.to_ne_bytes());
        v[4..8].copy_from_slice(&egress.to_ne_bytes());
        let (lib, fd, key) = (self.lib, self.members_fd, slot.to_ne_bytes());
        // SAFETY: a devmap of u32 keys and `struct bpf_devmap_val` (8 bytes) values
        let rc = in_netns(ns, move || unsafe {
            (lib.map_update_elem)(fd, key.as_ptr().cast(), v.as_ptr().cast(), BPF_ANY)
        })?;
        libbpf::check("bpf_map_update_elem", rc).map(|_| ())
    }

    /// Make member `m` of a [`crate::netns::Star`] (aggregator namespace `aggregator`) member
    /// `slot` of the multicast group: its link's aggregator end in the devmap, and the route that
    /// rewrites its copies to the member's address and [`crate::group::RESULT_PORT`]. Returns the
    /// link's interface index.
    pub fn add_star_member(
        &self,
        aggregator: &str,
        slot: u32,
        m: &crate::netns::Member,
    ) -> Result<u32, XdpError> {
        let idx = netns::ifindex(Some(aggregator), &m.port)?;
        self.add_member(Some(aggregator), slot, idx)?;
        self.set_route(
            idx,
            &Route {
                dst_mac: netns::mac(Some(&m.namespace), "eth0")?,
                src_mac: netns::mac(Some(aggregator), &m.port)?,
                dst_ip: m.ip,
                src_ip: m.gateway,
                dst_port: crate::group::RESULT_PORT,
            },
        )?;
        Ok(idx)
    }

    /// Attach the aggregation program to `interface` in namespace `ns`.
    pub fn attach(
        &mut self,
        ns: Option<&str>,
        interface: &str,
        mode: AttachMode,
    ) -> Result<u32, XdpError> {
        let a = Attachment::new(self.aggregate_fd, ns, interface, mode)?;
        let idx = a.ifindex;
        self.attachments.push(a);
        Ok(idx)
    }

    /// Configure this instance as a worker's Gradient Receiver (its `slots` map then holds the
    /// aggregates the worker received).
    pub fn configure_receiver(&self, cfg: &ReceiverConfig) -> Result<(), XdpError> {
        if cfg.segments == 0 || cfg.segments > self.segments {
            return Err(XdpError::Config(format!(
                "a receiver of {} segments in a map of {}",
                cfg.segments, self.segments
            )));
        }
        self.update(self.config_fd, &0u32.to_ne_bytes(), &cfg.bytes(), BPF_ANY)
    }

    /// Attach the Gradient Receiver program to a worker's `interface` in namespace `ns`.
    pub fn attach_receiver(
        &mut self,
        ns: Option<&str>,
        interface: &str,
        mode: AttachMode,
    ) -> Result<u32, XdpError> {
        let a = Attachment::new(self.receive_fd, ns, interface, mode)?;
        let idx = a.ifindex;
        self.attachments.push(a);
        Ok(idx)
    }

    /// Algorithm 2, lines 8-13, on a receiver's map: the segments of `round` without the
    /// multicast signal.
    pub fn receiver_missing(&self, round: u32) -> Result<Vec<u32>, XdpError> {
        Ok(proto::receiver_missing(&self.slots()?, round))
    }

    /// Attach the pass-through program (a veth peer that must run NAPI for native XDP_TX and
    /// redirects into its link).
    pub fn attach_pass(
        &mut self,
        ns: Option<&str>,
        interface: &str,
        mode: AttachMode,
    ) -> Result<u32, XdpError> {
        let a = Attachment::new(self.pass_fd, ns, interface, mode)?;
        let idx = a.ifindex;
        self.attachments.push(a);
        Ok(idx)
    }

    /// Detach every program this aggregator attached.
    pub fn detach_all(&mut self) {
        self.attachments.clear();
    }

    pub fn attachments(&self) -> &[Attachment] {
        &self.attachments
    }

    /// One segment's slot, read under its spin lock (`BPF_F_LOCK`).
    pub fn slot(&self, segment: u32) -> Result<Slot, XdpError> {
        let mut v = [0u8; SLOT_LEN];
        self.lookup(self.slots_fd, &segment.to_ne_bytes(), &mut v, BPF_F_LOCK)?;
        Ok(Slot::from_value(&v))
    }

    pub fn slots(&self) -> Result<Vec<Slot>, XdpError> {
        (0..self.segments).map(|s| self.slot(s)).collect()
    }

    pub fn stats(&self) -> Result<Stats, XdpError> {
        let mut c = [0u64; 9];
        for (i, x) in c.iter_mut().enumerate() {
            let mut v = [0u8; 8];
            self.lookup(self.stats_fd, &(i as u32).to_ne_bytes(), &mut v, 0)?;
            *x = u64::from_ne_bytes(v);
        }
        Ok(Stats {
            aggregated: c[0],
            duplicate: c[1],
            stale: c[2],
            results: c[3],
            fetch_served: c[4],
            fetch_miss: c[5],
            bad: c[6],
            rx_stored: c[7],
            rx_notify: c[8],
        })
    }

    /// Run time and run count of this object's programs (aggregation, egress rewrite, receiver,
    /// pass-through) as the kernel counts them while a [`RunStats`] guard is alive (otherwise
    /// they stay where they were). Read from `/proc/self/fdinfo` of each program's fd.
    pub fn run_time(&self) -> Result<ProgramTime, XdpError> {
        Self::fds_run_time(&[
            self.aggregate_fd,
            self.egress_fd,
            self.receive_fd,
            self.pass_fd,
        ])
    }

    /// [`Self::run_time`] of the aggregating node's own programs only: the aggregation program
    /// and the egress rewrite that runs on every copy of a broadcast aggregate; not the
    /// receiver or the pass-through program, which run at the members (on veth a native-mode
    /// peer needs the pass-through program to receive redirected frames at all).
    pub fn aggregator_run_time(&self) -> Result<ProgramTime, XdpError> {
        Self::fds_run_time(&[self.aggregate_fd, self.egress_fd])
    }

    /// [`Self::run_time`] of one program.
    pub fn program_run_time(&self, prog: Program) -> Result<ProgramTime, XdpError> {
        Self::fds_run_time(&[match prog {
            Program::Aggregate => self.aggregate_fd,
            Program::Receive => self.receive_fd,
            Program::Pass => self.pass_fd,
            Program::Drop => self.drop_fd,
        }])
    }

    /// [`Self::run_time`] of the egress program on the broadcast copies (the rewrite, or the
    /// empty one where [`Self::add_member_egress`] put it).
    pub fn egress_run_time(&self) -> Result<ProgramTime, XdpError> {
        Self::fds_run_time(&[self.egress_fd, self.egress_empty_fd])
    }

    fn fds_run_time(fds: &[i32]) -> Result<ProgramTime, XdpError> {
        let mut t = ProgramTime::default();
        for &fd in fds {
            let p = format!("/proc/self/fdinfo/{fd}");
            let text =
                std::fs::read_to_string(&p).map_err(|e| XdpError::Config(format!("{p}: {e}")))?;
            let field = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            };
            // kernels without run-time accounting in fdinfo (before 5.1) report nothing
            t.nanos += field("run_time_ns:").unwrap_or(0);
            t.runs += field("run_cnt:").unwrap_or(0);
        }
        Ok(t)
    }

    /// Run one of this object's programs on `frame` (a whole Ethernet frame) `repeat` times in
    /// the kernel (`BPF_PROG_TEST_RUN` without live frames: a redirect or transmit is only a
    /// return value, nothing leaves). The maps are this object's, so an aggregation run changes
    /// its slots and counters as a received packet would. The kernel does not restore the
    /// frame's bytes between repetitions, and the program's state carries over: a repeat of a
    /// gradient packet is a duplicate of itself.
    pub fn test_run(&self, prog: Program, frame: &[u8], repeat: u32) -> Result<TestRun, XdpError> {
        self.test_run_with(prog, frame, repeat, 0)
    }

    /// One `BPF_PROG_TEST_RUN` of `prog` on `frame` with live frames
    /// (`BPF_F_TEST_XDP_LIVE_FRAMES`, Linux 5.18): the kernel sets up a page pool for the call,
    /// copies the frame into a page of it (once per page; the pages are recycled within the call),
    /// runs the program on the page as a driver's receive path would, and carries its verdict
    /// out: a drop returns the page to the pool, a redirect really happens (a devmap broadcast
    /// clones the frame to every member, runs the devmap egress program on each copy and
    /// transmits them, flushed at the end of the batch), a pass hands the frame to the network
    /// stack of the ingress device (the loopback device of the caller's namespace here). One
    /// repetition: the frame's bytes are the same in every repetition of a call, so a repeat of a
    /// gradient packet would be a duplicate of itself. The kernel reports no return value in this
    /// mode (`retval` is 0); the duration (ns) covers the page's allocation, the program and the
    /// verdict's work, the pool's setup and teardown not.
    pub fn test_run_live(&self, prog: Program, frame: &[u8]) -> Result<TestRun, XdpError> {
        self.test_run_live_repeated(prog, frame, 1)
    }

    /// [`Self::test_run_live`] `repeat` times in one call (one batch of up to 64 frames at a
    /// time, all with `frame`'s bytes: a repeated gradient packet is a duplicate of itself).
    pub fn test_run_live_repeated(
        &self,
        prog: Program,
        frame: &[u8],
        repeat: u32,
    ) -> Result<TestRun, XdpError> {
        self.test_run_with(prog, frame, repeat, libbpf::BPF_F_TEST_XDP_LIVE_FRAMES)
    }

    fn test_run_with(
        &self,
        prog: Program,
        frame: &[u8],
        repeat: u32,
        flags: u32,
    ) -> Result<TestRun, XdpError> {
        let fd = match prog {
            Program::Aggregate => self.aggregate_fd,
            Program::Receive => self.receive_fd,
            Program::Pass => self.pass_fd,
            Program::Drop => self.drop_fd,
        };
        let len = u32::try_from(frame.len())
            .map_err(|_| XdpError::Config(format!("a frame of {} bytes", frame.len())))?;
        let repeat = std::os::raw::c_int::try_from(repeat.max(1))
            .map_err(|_| XdpError::Config(format!("{repeat} repetitions")))?;
        let mut o = libbpf::TestRunOpts {
            sz: std::mem::size_of::<libbpf::TestRunOpts>(),
            data_in: frame.as_ptr().cast(),
            data_out: std::ptr::null_mut(),
            data_size_in: len,
            data_size_out: 0,
            ctx_in: std::ptr::null(),
            ctx_out: std::ptr::null_mut(),
            ctx_size_in: 0,
            ctx_size_out: 0,
            retval: 0,
            repeat,
            duration: 0,
            flags,
            cpu: 0,
            batch_size: 0,
        };
        // SAFETY: a program fd of this object; the options struct is libbpf's layout with its
        // size in `sz`, `data_in` points at `len` readable bytes and no output buffer is given
        let rc = unsafe { (self.lib.prog_test_run_opts)(fd, &mut o) };
        libbpf::check("bpf_prog_test_run_opts", rc)?;
        Ok(TestRun {
            retval: o.retval,
            duration_ns: o.duration,
        })
    }

    /// Algorithm 2, lines 1-6, on the live map: the segments of `round` that lack `worker`.
    pub fn missing_from(&self, round: u32, worker: u8) -> Result<Vec<u32>, XdpError> {
        Ok(proto::aggregation_missing(&self.slots()?, round, worker))
    }
}

impl Drop for Aggregator {
    fn drop(&mut self) {
        self.attachments.clear();
        // SAFETY: our object, closed once
        unsafe { (self.lib.object_close)(self.obj) };
    }
}

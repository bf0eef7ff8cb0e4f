//! The Aggregation Service program's own cost per packet, timed in the kernel with
//! `BPF_PROG_TEST_RUN` (no veth, no sender, no BPF run-time statistics).
//!
//! How: a freshly loaded object, configured as a multicast aggregator of `members` members,
//! is handed whole gradient frames one at a time, as a receive queue would: round after round,
//! every member's packet of one segment (the segments taken in turn, as a sender's batches walk
//! a round), so the first packet of a round stores its gradients and the last one adds its own,
//! completes the slot and copies the aggregate into the frame (the broadcast is only a return
//! value here). Each frame is one test run of one repetition: the kernel keeps neither the
//! frame's bytes nor the slot's bitmap apart between repetitions, so a repeated gradient packet
//! is a duplicate of itself and takes the program's cheapest path. Right after each aggregation
//! run the empty program (`xdp_pass`) runs on the same frame: its time is the floor of a test run
//! (the loop's bottom-half toggling and the timer reads around one run), which is subtracted.
//! The result per round is the mean over the round's packets of (aggregation run - floor run);
//! the median over rounds is the cost and the 10th and 90th percentiles its spread. The
//! counters are checked afterwards: every packet aggregated, one aggregate per round.
//!
//! What it leaves out: the devmap egress program that rewrites each broadcast copy (the kernel
//! does not test-run devmap programs), and the cache state of a packet that another core or a
//! NIC wrote: the kernel copies the frame into a fresh page just before the run, so its bytes
//! are in this core's cache.

use crate::aggregator::{Aggregator, Config, Forward, Program};
use crate::proto::{GRADS, Packet};
use crate::{XdpError, group};

/// `XDP_DROP`, `XDP_REDIRECT`.
const XDP_DROP: u32 = 1;
const XDP_REDIRECT: u32 = 4;

/// Ethernet (14), IPv4 (20) and UDP (8) headers before the ALEPH packet.
pub const FRAME_HEADERS: usize = 14 + 20 + 8;

/// An IPv4/UDP Ethernet frame to `port` carrying `payload`. The addresses are arbitrary
/// (the program reads none of them); the IPv4 checksum is filled in.
pub fn frame(port: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; FRAME_HEADERS + payload.len()];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (20 + 8 + payload.len()) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 2]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 1]);
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&40_000u16.to_be_bytes());
    udp[2..4].copy_from_slice(&port.to_be_bytes());
    udp[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f[FRAME_HEADERS..].copy_from_slice(payload);
    f
}

/// The `q`-quantile (0..=1) of `v` by linear interpolation between order statistics (the
/// "type 7" definition of Hyndman and Fan 1996, numpy's default); `None` when `v` is empty.
pub fn quantile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let h = (s.len() - 1) as f64 * q;
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    Some(s[lo] + (h - lo as f64) * (s[hi] - s[lo]))
}

/// How a test run hands the program its frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TestRunMode {
    /// The kernel copies the frame into a fresh buffer for each call and only returns the
    /// program's verdict (the default `BPF_PROG_TEST_RUN`); the floor is the empty program
    /// `xdp_pass` on the same frame.
    #[default]
    Copied,
    /// Live frames (`BPF_F_TEST_XDP_LIVE_FRAMES`): each call's frame is a page of a page pool,
    /// as a driver's receive path hands it over, and the verdict's work is carried out (a drop
    /// recycles the page, the last member's redirect broadcasts the aggregate to the members'
    /// links); the floor is the empty program `xdp_drop` on the same frame
    /// ([`crate::Aggregator::test_run_live`]).
    Live,
}

impl TestRunMode {
    pub const ALL: [TestRunMode; 2] = [TestRunMode::Copied, TestRunMode::Live];

    /// The name a spec's parameter gives it.
    pub fn name(self) -> &'static str {
        match self {
            TestRunMode::Copied => "copied",
            TestRunMode::Live => "live",
        }
    }

    pub fn from_name(name: &str) -> Option<TestRunMode> {
        TestRunMode::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// The program's cost as test runs time it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TestRunCost {
    /// Median over rounds of the per-packet aggregation time less the floor (ns).
    pub net_ns: f64,
    /// 10th and 90th percentiles of the same (ns).
    pub net_p10_ns: f64,
    pub net_p90_ns: f64,
    /// Median time of a round's first packet (stores the gradients) and last packet (adds,
    /// completes the slot and writes the aggregate into the frame), floor included (ns).
    pub store_ns: f64,
    pub complete_ns: f64,
    /// Median time of the empty program's test runs (ns).
    pub floor_ns: f64,
    /// Rounds timed; packets are `rounds x members`.
    pub rounds: u32,
    pub members: usize,
    /// Runs of the empty program that the kernel's BPF run-time statistics counted while timing:
    /// non-zero when some process held the statistics on, whose clock reads are then in every
    /// run timed (and in the floor).
    pub stats_counted_runs: u64,
    /// With the statistics on: what they counted per run of the aggregation program and of the
    /// floor program in these test runs (ns, nothing subtracted); `None` when they were off.
    pub counted_ns: Option<f64>,
    pub counted_floor_ns: Option<f64>,
}

/// Time the aggregation program over `rounds` rounds of `members` members (2..=32) cycling over
/// `segments` slots, as described in the module's documentation (each slot's members one after
/// the other: [`aggregation_cost_in_blocks`] with blocks of 1).
pub fn aggregation_cost(
    members: usize,
    segments: u32,
    rounds: u32,
) -> Result<TestRunCost, XdpError> {
    aggregation_cost_in_blocks(members, segments, rounds, 1)
}

/// [`aggregation_cost`] with the frames in blocks of `block` consecutive slots: the first
/// member's packets of the block's slots, then the second member's of the same slots, and so
/// on, as a receive path hands a member's packets over in batches (a NAPI poll takes up to 64 of
/// one queue). With a block of 1 a slot's last packet finds the slot where its first packet
/// left it a microsecond earlier; with larger blocks `block - 1` other slots are touched in
/// between. The rounds (slots completed) are still counted one per slot.
pub fn aggregation_cost_in_blocks(
    members: usize,
    segments: u32,
    rounds: u32,
    block: u32,
) -> Result<TestRunCost, XdpError> {
    if !(2..=32).contains(&members) || segments == 0 || rounds == 0 || block == 0 {
        return Err(XdpError::Config(format!(
            "{members} members (2..=32), {segments} segments, {rounds} rounds and blocks of \
             {block}"
        )));
    }
    let agg = Aggregator::load(segments)?;
    let job = 1;
    agg.configure(&Config {
        job,
        full_mask: if members == 32 {
            u32::MAX
        } else {
            (1u32 << members) - 1
        },
        forward: Forward::Multicast,
        port: group::PORT,
    })?;
    aggregation_cost_on(&agg, job, members, rounds, block, 1)
}

/// [`aggregation_cost_in_blocks`] on an aggregator already loaded and configured (`job`,
/// `members` members multicast on [`group::PORT`]), over all of its slots, from round
/// `first_round` on (above every round its slots hold, else the packets are stale): the same
/// object and map a [`group::Group`] aggregates with in place.
pub fn aggregation_cost_on(
    agg: &Aggregator,
    job: u16,
    members: usize,
    rounds: u32,
    block: u32,
    first_round: u32,
) -> Result<TestRunCost, XdpError> {
    aggregation_cost_on_mode(
        agg,
        job,
        members,
        rounds,
        block,
        first_round,
        TestRunMode::Copied,
    )
}

/// [`aggregation_cost_on`] with the frames handed over as `mode` says. With live frames the
/// kernel reports no verdict, so the counters alone check that every packet was aggregated and
/// every round completed; the floor is [`Program::Drop`]. The duration of a live run covers the
/// verdict's work too, so for the last member of a round (a redirect: the broadcast's copies,
/// their egress program and transmission) the net time holds more than the program; with the
/// statistics on, [`TestRunCost::counted_ns`] is the program alone as they count it.
pub fn aggregation_cost_on_mode(
    agg: &Aggregator,
    job: u16,
    members: usize,
    rounds: u32,
    block: u32,
    first_round: u32,
    mode: TestRunMode,
) -> Result<TestRunCost, XdpError> {
    let segments = agg.segments();
    if !(2..=32).contains(&members) || segments == 0 || rounds == 0 || block == 0 {
        return Err(XdpError::Config(format!(
            "{members} members (2..=32), {segments} segments, {rounds} rounds and blocks of \
             {block}"
        )));
    }
    let floor_prog = match mode {
        TestRunMode::Copied => Program::Pass,
        TestRunMode::Live => Program::Drop,
    };
    let pass0 = agg.program_run_time(floor_prog)?;
    let agg0 = agg.program_run_time(Program::Aggregate)?;
    let s0 = agg.stats()?;
    let mut grads = [0i32; GRADS];
    let (mut net, mut first, mut last, mut floor) = (
        Vec::with_capacity(rounds as usize),
        Vec::with_capacity(rounds as usize),
        Vec::with_capacity(rounds as usize),
        Vec::with_capacity(rounds as usize * members),
    );
    let mut sums = Vec::with_capacity(block as usize);
    let mut r0 = 0u32;
    while r0 < rounds {
        // the block: consecutive slots of one round (it does not wrap into the next round)
        let k = block.min(rounds - r0).min(segments - r0 % segments);
        sums.clear();
        sums.resize(k as usize, 0.0);
        for w in 0..members {
            for j in 0..k {
                let r = r0 + j;
                // round numbers from 1 (or above what the slots hold): a fresh slot is at round
                // 0, which a packet of round 0 would join
                let (round, segment) = (first_round + r / segments, r % segments);
                for (i, g) in grads.iter_mut().enumerate() {
                    *g = (i as i32 + 1) * (w as i32 + 1) + r as i32;
                }
                let f = frame(
                    group::PORT,
                    &Packet::gradient(job, w as u8, round, segment, grads).emit(),
                );
                let a = match mode {
                    TestRunMode::Copied => agg.test_run(Program::Aggregate, &f, 1)?,
                    TestRunMode::Live => agg.test_run_live(Program::Aggregate, &f)?,
                };
                let want = if w + 1 == members {
                    XDP_REDIRECT
                } else {
                    XDP_DROP
                };
                // a live run reports no verdict (the counters below check the work)
                if mode == TestRunMode::Copied && a.retval != want {
                    return Err(XdpError::Config(format!(
                        "the aggregation program returned {} for member {w} of round {round} \
                         segment {segment}, {want} expected",
                        a.retval
                    )));
                }
                let p = match mode {
                    TestRunMode::Copied => agg.test_run(Program::Pass, &f, 1)?,
                    TestRunMode::Live => agg.test_run_live(Program::Drop, &f)?,
                };
                floor.push(f64::from(p.duration_ns));
                sums[j as usize] += f64::from(a.duration_ns) - f64::from(p.duration_ns);
                if w == 0 {
                    first.push(f64::from(a.duration_ns));
                } else if w + 1 == members {
                    last.push(f64::from(a.duration_ns));
                }
            }
        }
        net.extend(sums.iter().map(|s| s / members as f64));
        r0 += k;
    }
    let s1 = agg.stats()?;
    let packets = u64::from(rounds) * members as u64;
    let (added, results) = (s1.aggregated - s0.aggregated, s1.results - s0.results);
    if added != packets || results != u64::from(rounds) {
        return Err(XdpError::Config(format!(
            "test runs aggregated {added} of {packets} packets and emitted {results} of {rounds} \
             aggregates"
        )));
    }
    let q = |v: &[f64], p: f64| quantile(v, p).unwrap_or(f64::NAN);
    let floor_counted = agg.program_run_time(floor_prog)?.since(pass0);
    let agg_counted = agg.program_run_time(Program::Aggregate)?.since(agg0);
    let per_run =
        |t: crate::ProgramTime| (t.runs > 0 && t.nanos > 0).then(|| t.nanos as f64 / t.runs as f64);
    Ok(TestRunCost {
        net_ns: q(&net, 0.5),
        net_p10_ns: q(&net, 0.1),
        net_p90_ns: q(&net, 0.9),
        store_ns: q(&first, 0.5),
        complete_ns: q(&last, 0.5),
        floor_ns: q(&floor, 0.5),
        rounds,
        members,
        stats_counted_runs: floor_counted.runs,
        counted_ns: per_run(agg_counted),
        counted_floor_ns: per_run(floor_counted),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_layout_and_checksum() {
        let f = frame(group::PORT, &[7u8; 528]);
        assert_eq!(f.len(), 570);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 556);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), group::PORT);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 536);
        // a correct header sums to 0xffff with its checksum in it (RFC 1071)
        let mut sum: u32 = f[14..34]
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
        assert_eq!(f[42..], [7u8; 528]);
    }

    #[test]
    fn quantiles() {
        let v = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(quantile(&v, 0.5), Some(3.0));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&v, 1.0), Some(5.0));
        // numpy.quantile([1, 2, 3, 4, 5], 0.1) = 1.4
        assert!((quantile(&v, 0.1).unwrap() - 1.4).abs() < 1e-12);
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&v, 1.5), None);
    }
}

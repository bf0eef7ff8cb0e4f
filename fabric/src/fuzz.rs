//! The shared part of the endpoint fuzz bodies (each system crate's `fuzz` module; the
//! cargo-fuzz targets under `fuzz/` and stable smoke tests call those): a fuzzer's bytes read as
//! a schedule of hostile frames, and [`Scheduled`], an endpoint wrapper that hands them to its
//! node among the real frames of a run on the sim fabric.
//!
//! No dependency beyond the crate (no proptest): it builds quickly with sanitizers. The
//! randomised proptest counterparts (drawn junk, `testing::Hostile`) are in `testing`.

use crate::fault::Faults;
use crate::sim::{LinkConfig, NodeConfig, SimFabric};
use crate::{Endpoint, Nanos, NodeId, Transmit};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock};

/// What a scheduled frame is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// The fuzzer's own bytes.
    Raw,
    /// A valid frame of a clean run of the same configuration with bytes flipped.
    Flip,
    /// A valid frame of a clean run cut short.
    Cut,
    /// A valid frame of a clean run, unchanged, at another time.
    Replay,
}

/// One hostile frame: to `node`, claiming to come from `from`, handed over just before the
/// node's `before`-th real frame (after the run when the node gets fewer).
#[derive(Debug, Clone)]
pub struct Inject {
    pub node: usize,
    pub from: NodeId,
    pub before: u32,
    pub kind: Kind,
    pub bytes: Vec<u8>,
}

/// The most frames one input schedules (a run with more says nothing new and runs slower).
pub const MAX_INJECTS: usize = 64;

/// A fuzzer's bytes read from the front; the field is what is left.
pub struct Cursor<'a>(pub &'a [u8]);

impl Cursor<'_> {
    /// The next byte, or none when the input has ended.
    pub fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    /// The next two bytes, little-endian, or none when fewer are left.
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }
}

/// The schedule the fuzzer's `data` spells for a run of `nodes` nodes whose clean run put the
/// frames `corpus` on its links. Per frame: a byte (kind: low two bits; target node: the rest,
/// modulo `nodes`), a byte for the claimed sender (0: `u32::MAX`, 1-3: ids just past the last
/// node, else an id in range), two bytes for `before`, then by kind: Raw a two-byte length (at
/// most 2048, cut to what is left) and the bytes; Flip a two-byte corpus index, a count of flips
/// (1-4) and per flip a two-byte offset and a nonzero xor byte; Cut a two-byte index and a
/// two-byte length; Replay a two-byte index. Input that ends early ends the schedule.
pub fn schedule(data: &[u8], nodes: usize, corpus: &[Vec<u8>]) -> Vec<Inject> {
    let mut c = Cursor(data);
    let mut out = Vec::new();
    let nodes = nodes.max(1);
    while out.len() < MAX_INJECTS {
        let Some(head) = c.u8() else { break };
        let Some(f) = c.u8() else { break };
        let Some(before) = c.u16() else { break };
        let from = match f {
            0 => u32::MAX,
            1..=3 => (nodes + f as usize - 1) as NodeId,
            _ => (f as usize % nodes) as NodeId,
        };
        let node = (head >> 2) as usize % nodes;
        let corpus_frame = |i: u16| -> Option<&Vec<u8>> {
            if corpus.is_empty() {
                None
            } else {
                Some(&corpus[i as usize % corpus.len()])
            }
        };
        let (kind, bytes) = match head & 3 {
            0 => {
                let Some(len) = c.u16() else { break };
                let len = (len as usize % 2049).min(c.0.len());
                let (b, rest) = c.0.split_at(len);
                c.0 = rest;
                (raw_kind(b, corpus), b.to_vec())
            }
            1 => {
                let Some(i) = c.u16() else { break };
                let Some(n) = c.u8() else { break };
                let Some(frame) = corpus_frame(i) else { break };
                let mut f = frame.clone();
                for _ in 0..1 + n % 4 {
                    let (Some(at), Some(x)) = (c.u16(), c.u8()) else {
                        break;
                    };
                    if !f.is_empty() {
                        let k = at as usize % f.len();
                        f[k] ^= x.max(1);
                    }
                }
                (Kind::Flip, f)
            }
            2 => {
                let (Some(i), Some(cut)) = (c.u16(), c.u16()) else {
                    break;
                };
                let Some(frame) = corpus_frame(i) else { break };
                let cut = cut as usize % frame.len().max(1);
                (Kind::Cut, frame[..cut].to_vec())
            }
            _ => {
                let Some(i) = c.u16() else { break };
                let Some(frame) = corpus_frame(i) else { break };
                (Kind::Replay, frame.clone())
            }
        };
        out.push(Inject {
            node,
            from,
            before: before as u32,
            kind,
            bytes,
        });
    }
    out
}

/// How far into a frame [`raw_kind`] compares raw bytes with the clean frames: the Ethernet
/// header and the next 10 bytes (P4SGD's values start at byte 26, so a frame with forged values
/// keeps little more than this of a clean one).
const FRAME_HEAD: usize = 24;

/// What raw bytes are: a clean run's frame byte for byte is a [`Kind::Replay`]; bytes whose
/// opening (the first 24 bytes, at least 14 of them) keeps at least half of a clean frame's, the
/// rest changed, are that frame with bytes flipped, a [`Kind::Flip`]; anything else is
/// [`Kind::Raw`], the fuzzer's own bytes, which every system must refuse or survive exactly. A
/// fuzzer that starts from real frames forges, within seconds, a frame of a protocol with no
/// check over its values or its addresses (changed values, more of them, another EtherType or
/// destination address the endpoints do not look at): that is those systems' documented finding
/// about flipped frames, so it is read as one (fuzz/CAMPAIGN.md).
fn raw_kind(bytes: &[u8], corpus: &[Vec<u8>]) -> Kind {
    if corpus.iter().any(|f| f.as_slice() == bytes) {
        return Kind::Replay;
    }
    let derived = corpus.iter().any(|f| {
        let n = bytes.len().min(f.len()).min(FRAME_HEAD);
        n >= 14
            && 2 * bytes[..n]
                .iter()
                .zip(&f[..n])
                .filter(|(a, b)| a == b)
                .count()
                >= n
    });
    if derived { Kind::Flip } else { Kind::Raw }
}

/// An endpoint whose scheduled frames arrive before the given real frames; what is left after
/// the run goes in with [`Scheduled::finish`].
pub struct Scheduled<N> {
    pub inner: N,
    /// This node's frames, in the order they arrive.
    pending: std::collections::VecDeque<Inject>,
    /// Real frames received so far.
    real: u32,
    /// Scheduled frames handed over so far.
    pub injected: u64,
}

impl<N: Endpoint> Scheduled<N> {
    /// Wrap `inner` (node `index` of the run) with its share of `schedule`.
    pub fn new(inner: N, index: usize, schedule: &[Inject]) -> Scheduled<N> {
        let mut mine: Vec<Inject> = schedule
            .iter()
            .filter(|s| s.node == index)
            .cloned()
            .collect();
        mine.sort_by_key(|s| s.before);
        Scheduled {
            inner,
            pending: mine.into(),
            real: 0,
            injected: 0,
        }
    }

    /// Hand over the frames the run did not reach, at `now` (see [`deliver`]). Returns the
    /// frames sent.
    pub fn finish(&mut self, now: Nanos) -> usize {
        let late: Vec<Inject> = self.pending.drain(..).collect();
        self.injected += late.len() as u64;
        deliver(&mut self.inner, now, &late)
    }

    /// The node, the frames the run did not reach, and the count handed over so far.
    pub fn into_parts(self) -> (N, Vec<Inject>, u64) {
        (self.inner, self.pending.into(), self.injected)
    }
}

/// Hand `frames` to `ep` at `now`, draining what it sends after each (bounded: one frame may
/// not start a flood). Returns the frames sent.
pub fn deliver<E: Endpoint + ?Sized>(ep: &mut E, now: Nanos, frames: &[Inject]) -> usize {
    frames.iter().map(|s| feed(ep, now, s.from, &s.bytes)).sum()
}

/// Hand `frame` to `ep` and drain what it sends (bounded: one frame may not start a flood).
/// Returns the frames sent.
pub fn feed<E: Endpoint + ?Sized>(ep: &mut E, now: Nanos, from: NodeId, frame: &[u8]) -> usize {
    ep.handle_packet(now, from, frame);
    let mut sent = 0;
    while ep.poll_transmit(now).is_some() {
        sent += 1;
        assert!(
            sent < 100_000,
            "endpoint {} floods after one frame",
            ep.id()
        );
    }
    sent
}

impl<N: Endpoint> Endpoint for Scheduled<N> {
    fn id(&self) -> NodeId {
        self.inner.id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        while self.pending.front().is_some_and(|s| s.before <= self.real) {
            if let Some(s) = self.pending.pop_front() {
                self.inner.handle_packet(now, s.from, &s.bytes);
                self.injected += 1;
            }
        }
        self.real = self.real.saturating_add(1);
        self.inner.handle_packet(now, from, frame)
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.inner.poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.inner.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.inner.handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }
    fn recycle(&mut self, buf: Vec<u8>) {
        self.inner.recycle(buf)
    }
}

/// A body's input split into its first byte, read as an index below `n` (modulo `n`: the system
/// or variant it drives), and the rest; none for an empty input.
pub fn pick(data: &[u8], n: usize) -> Option<(usize, &[u8])> {
    let (&first, rest) = data.split_first()?;
    Some((first as usize % n, rest))
}

/// A sim fabric for a fuzz run: `nodes` with no host costs, `switch` the switch's id, links as
/// `link`, no faults beyond the schedule's frames.
pub fn sim_fabric<N: Endpoint>(nodes: Vec<N>, switch: NodeId, link: LinkConfig) -> SimFabric<N> {
    let n = nodes.len();
    let cfgs = vec![
        NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns: 0
        };
        n
    ];
    SimFabric::new(nodes, cfgs, switch, link, Faults::default())
}

/// Frames of a clean run, in the order put on links.
pub type Corpus = Arc<Vec<Vec<u8>>>;

/// A per-process cache of clean runs' frames, by a body's own key (system, variant).
pub type Corpora<K> = OnceLock<Mutex<HashMap<K, Corpus>>>;

/// The frames `cache` holds for `key`, made by `make` the first time (under the cache's lock).
pub fn cached<K: Hash + Eq>(
    cache: &Corpora<K>,
    key: K,
    make: impl FnOnce() -> Vec<Vec<u8>>,
) -> Corpus {
    let m = cache.get_or_init(Default::default);
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    m.entry(key).or_insert_with(|| Arc::new(make())).clone()
}

/// Run `f` until `done` holds or `max_ns` passes, recording every frame put on its links.
/// Returns whether `done` held and the frames, in order.
pub fn tapped_run<N: Endpoint>(
    f: &mut SimFabric<N>,
    max_ns: Nanos,
    done: impl Fn(&[N]) -> bool,
) -> (bool, Vec<Vec<u8>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    f.set_tap(Box::new(move |_, _, _, frame| {
        g.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(frame.to_vec())
    }));
    let finished = f.run_until(max_ns, done).finished;
    let frames = std::mem::take(&mut *got.lock().unwrap_or_else(|e| e.into_inner()));
    (finished, frames)
}

/// A clean run's frame as the tap saw it: sender, receiver and bytes.
pub type Tapped = (NodeId, NodeId, Vec<u8>);

/// [`tapped_run`], keeping each frame's sender and receiver (the frames are the same, in the same
/// order): what [`seeds`] builds from.
pub fn addressed_run<N: Endpoint>(
    f: &mut SimFabric<N>,
    max_ns: Nanos,
    done: impl Fn(&[N]) -> bool,
) -> (bool, Vec<Tapped>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    f.set_tap(Box::new(move |_, from, to, frame| {
        g.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((from, to, frame.to_vec()))
    }));
    let finished = f.run_until(max_ns, done).finished;
    let frames = std::mem::take(&mut *got.lock().unwrap_or_else(|e| e.into_inner()));
    (finished, frames)
}

/// Seed inputs for an endpoint body (the files under `fuzz/seeds/<target>/` that a campaign
/// starts from), for the system the first byte `pick` selects, in a run of `nodes` nodes whose
/// clean run put the frames `run` on its links ([`addressed_run`]). Six frames spread over the
/// run, each to the node that got it, claimed from its real sender and placed just before that
/// node got it (its place among the node's frames): as raw bytes (so the fuzzer mutates real
/// headers and payloads), replayed, cut to half its length, with a header byte and a payload byte
/// flipped, and as raw bytes after the run. Named by what they hold.
pub fn seeds(pick: u8, nodes: usize, run: &[Tapped]) -> Vec<(&'static str, Vec<u8>)> {
    // the sender byte that [`schedule`] reads as `id`
    let from_byte = |id: NodeId| (4..=255u8).find(|f| *f as usize % nodes.max(1) == id as usize);
    let n = run.len().min(usize::from(u16::MAX));
    let picked: Vec<usize> = (0..6)
        .map(|k| k * n.saturating_sub(1) / 5)
        .filter(|&j| j < n && run[j].1 < 64 && run[j].2.len() <= 2048 && !run[j].2.is_empty())
        .collect();
    // frame j's place among the frames its receiver got
    let place = |j: usize| {
        let to = run[j].1;
        run[..j].iter().filter(|t| t.1 == to).count().min(0xffff) as u16
    };
    let entry = |kind: u8, j: usize, before: u16, rest: &[u8]| -> Option<Vec<u8>> {
        Some(frame(
            kind,
            run[j].1 as u8,
            from_byte(run[j].0)?,
            before,
            rest,
        ))
    };
    let index = |j: usize| (j as u16).to_le_bytes();
    let mut out: Vec<(&'static str, Vec<u8>)> = Vec::new();
    let mut add = |name: &'static str, make: &dyn Fn(usize) -> Option<Vec<u8>>| {
        let mut input = vec![pick];
        for &j in &picked {
            if let Some(e) = make(j) {
                input.extend(e);
            }
        }
        if input.len() > 1 {
            out.push((name, input));
        }
    };
    let raw = |j: usize, before: u16| {
        let b = &run[j].2;
        let mut rest = (b.len() as u16).to_le_bytes().to_vec();
        rest.extend(b);
        entry(0, j, before, &rest)
    };
    add("raw", &|j| raw(j, place(j)));
    add("replay", &|j| entry(3, j, place(j), &index(j)));
    add("cut", &|j| {
        let half = (run[j].2.len() / 2) as u16;
        entry(
            2,
            j,
            place(j),
            &[&index(j)[..], &half.to_le_bytes()].concat(),
        )
    });
    add("flip", &|j| {
        let len = run[j].2.len() as u16;
        let mut rest = index(j).to_vec();
        // two flips: a header byte and the payload's fifth-last byte
        rest.push(1);
        rest.extend(16u16.to_le_bytes());
        rest.push(0x01);
        rest.extend(len.saturating_sub(5).to_le_bytes());
        rest.push(0x80);
        entry(1, j, place(j), &rest)
    });
    add("after_the_run", &|j| raw(j, u16::MAX));
    out
}

/// The seed files of a cargo-fuzz target, `dir` (`fuzz/seeds/<target>/`): with the environment
/// variable `INABENCH_WRITE_SEEDS` set they are first written anew from `make` (name, input);
/// then every file is run through `body`, the target's body, which must accept it. Returns the
/// inputs, for the caller to check what they cover. Panics on a missing or empty folder.
pub fn check_seeds(
    dir: &std::path::Path,
    make: impl FnOnce() -> Vec<(String, Vec<u8>)>,
    body: impl Fn(&[u8]),
) -> Vec<Vec<u8>> {
    if std::env::var_os("INABENCH_WRITE_SEEDS").is_some() {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("the seed folder");
        for (name, input) in make() {
            std::fs::write(dir.join(name), input).expect("a seed file");
        }
    }
    run_inputs(dir, body)
}

/// Every file in `dir`, in name order, through `body` (a target's body: crashes a campaign found
/// are kept as files under `fuzz/regressions/<target>/` and replayed so). Returns the inputs.
/// Panics on a missing or empty folder.
pub fn run_inputs(dir: &std::path::Path, body: impl Fn(&[u8])) -> Vec<Vec<u8>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (write the seeds with INABENCH_WRITE_SEEDS=1)",
                dir.display()
            )
        })
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no seeds", dir.display());
    files
        .iter()
        .map(|f| {
            let input = std::fs::read(f).expect("a seed file");
            body(&input);
            input
        })
        .collect()
}

/// Each of `nodes` (node `i` of the run) wrapped with its share of `plan`.
pub fn scheduled<N: Endpoint>(nodes: Vec<N>, plan: &[Inject]) -> Vec<Scheduled<N>> {
    nodes
        .into_iter()
        .enumerate()
        .map(|(i, node)| Scheduled::new(node, i, plan))
        .collect()
}

/// [`Scheduled::finish`] on every node at `now`, panicking (a flood) where a node answers its
/// late frames with more than one frame per node of the run (`name` names the run in the
/// message). Returns the hostile frames handed over in all, during and after the run.
pub fn finish_all<N: Endpoint>(nodes: &mut [Scheduled<N>], now: Nanos, name: &str) -> u64 {
    let n = nodes.len();
    let mut injected = 0;
    for node in nodes.iter_mut() {
        let had = node.injected;
        let sent = node.finish(now);
        let late = (node.injected - had) as usize;
        assert!(
            sent <= late * n,
            "{name} node {}: {sent} frames sent for {late} frames after the run",
            node.id()
        );
        injected += node.injected;
    }
    injected
}

/// One scheduled frame in [`schedule`]'s encoding: `kind` (0 raw, 1 flip, 2 cut, 3 replay) to
/// `node` from the sender byte `from`, before real frame `before`, then the kind's `rest`.
pub fn frame(kind: u8, node: u8, from: u8, before: u16, rest: &[u8]) -> Vec<u8> {
    let mut v = vec![(node << 2) | kind, from];
    v.extend(before.to_le_bytes());
    v.extend(rest);
    v
}

/// The stable smoke tests' schedule of every kind: for each of `picks` systems (the input's
/// first byte) and each target node below `nodes`, `body` gets the pick followed by the frames
/// `frames(node)` spells.
pub fn every_kind(body: impl Fn(&[u8]), picks: usize, nodes: u8, frames: impl Fn(u8) -> Vec<u8>) {
    for s in 0..picks {
        for node in 0..nodes {
            let mut input = vec![s as u8];
            input.extend(frames(node));
            body(&input);
        }
    }
}

/// The stable smoke tests' seeded random inputs: `count` inputs of 0-299 bytes from SplitMix64
/// seed 23, the first byte of the `k`-th set to `k` modulo `picks` (the system it picks).
pub fn seeded(body: impl Fn(&[u8]), picks: usize, count: u64) {
    let mut g = inabench_rng::SplitMix64::new(23);
    for k in 0..count {
        let len = (g.next_u64() % 300) as usize;
        let mut input: Vec<u8> = (0..len).map(|_| g.next_u64() as u8).collect();
        if let Some(b) = input.first_mut() {
            *b = (k % picks as u64) as u8;
        }
        body(&input);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_reads_every_kind_and_stops_where_the_input_ends() {
        let corpus = vec![vec![1u8, 2, 3, 4], vec![9u8; 8]];
        let data = [
            // raw, node 1, from u32::MAX, before 2, three bytes
            (1 << 2),
            0,
            2,
            0,
            3,
            0,
            7,
            8,
            9,
            // flip, node 0, from 1 -> id 3 (3 nodes), before 0, frame 1, two flips
            1,
            1,
            0,
            0,
            1,
            0,
            1,
            0,
            0,
            0xff,
            9,
            0,
            0,
            // cut, node 2, from 5 -> 2, before 1, frame 0 to length 2
            (2 << 2) | 2,
            5,
            1,
            0,
            0,
            0,
            2,
            0,
            // replay, cut short: no index
            3,
            4,
            0,
        ];
        let s = schedule(&data, 3, &corpus);
        assert_eq!(s.len(), 3);
        assert_eq!(
            (s[0].kind, s[0].node, s[0].from, s[0].before),
            (Kind::Raw, 1, u32::MAX, 2)
        );
        assert_eq!(s[0].bytes, vec![7, 8, 9]);
        assert_eq!((s[1].kind, s[1].node, s[1].from), (Kind::Flip, 0, 3));
        // offset 0 xor 0xff, offset 9 % 8 = 1 xor 0 -> 1
        assert_eq!(s[1].bytes, vec![9 ^ 0xff, 9 ^ 1, 9, 9, 9, 9, 9, 9]);
        assert_eq!(
            (s[2].kind, s[2].node, s[2].from, s[2].before),
            (Kind::Cut, 2, 2, 1)
        );
        assert_eq!(s[2].bytes, vec![1, 2]);
    }

    /// Records what reaches it.
    struct Log(Vec<(NodeId, Vec<u8>)>);
    impl Endpoint for Log {
        fn id(&self) -> NodeId {
            0
        }
        fn handle_packet(&mut self, _: Nanos, from: NodeId, frame: &[u8]) {
            self.0.push((from, frame.to_vec()))
        }
        fn poll_transmit(&mut self, _: Nanos) -> Option<Transmit> {
            None
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            None
        }
        fn handle_timeout(&mut self, _: Nanos) {}
    }

    #[test]
    fn scheduled_frames_arrive_before_the_named_real_frame_and_the_rest_at_the_end() {
        let inj = |before, b: u8| Inject {
            node: 0,
            from: 7,
            before,
            kind: Kind::Raw,
            bytes: vec![b],
        };
        let mut n = Scheduled::new(Log(vec![]), 0, &[inj(1, 11), inj(0, 10), inj(5, 15)]);
        n.handle_packet(0, 1, &[1]);
        n.handle_packet(0, 1, &[2]);
        assert_eq!(n.injected, 2);
        n.finish(9);
        let got: Vec<u8> = n.inner.0.iter().map(|(_, f)| f[0]).collect();
        assert_eq!(got, vec![10, 1, 11, 2, 15]);
        assert_eq!(n.injected, 3);
    }

    /// Raw bytes equal to a clean frame are a replay, and within four bytes of one a flip (a
    /// documented finding about those kinds covers them); other bytes stay raw.
    #[test]
    fn raw_bytes_that_copy_a_clean_frame_are_read_as_what_they_are() {
        let clean: Vec<u8> = (1..=80).collect();
        let corpus = vec![clean.clone(), vec![9u8; 16]];
        assert_eq!(raw_kind(&clean, &corpus), Kind::Replay);
        // a clean frame's opening with bytes changed, then other bytes, longer or shorter
        let mut forged = clean[..40].to_vec();
        forged[12] = 0x87;
        forged[2] ^= 0x20;
        forged.extend([0u8; 60]);
        assert_eq!(raw_kind(&forged, &corpus), Kind::Flip);
        assert_eq!(raw_kind(&clean[..14], &corpus), Kind::Flip);
        // most of the opening changed: the fuzzer's own bytes
        let junk: Vec<u8> = clean
            .iter()
            .enumerate()
            .map(|(i, b)| if i % 3 == 0 { *b } else { !b })
            .collect();
        assert_eq!(raw_kind(&junk, &corpus), Kind::Raw);
        assert_eq!(
            raw_kind(&clean[..13], &corpus),
            Kind::Raw,
            "too short to tell"
        );
        assert_eq!(raw_kind(&[], &corpus), Kind::Raw);
    }

    /// Seeds read back through [`schedule`] as what their names say, each frame to the node that
    /// got it, from its sender, just before that node got it.
    #[test]
    fn seeds_read_back_as_the_frames_they_were_built_from() {
        // 3 nodes; node 2 is the switch
        let run: Vec<Tapped> = (0..12u8)
            .map(|i| {
                let (from, to) = if i % 2 == 0 {
                    (NodeId::from(i % 4 / 2), 2)
                } else {
                    (2, NodeId::from(i % 4 / 2))
                };
                (from, to, vec![i; 20 + usize::from(i)])
            })
            .collect();
        let corpus: Vec<Vec<u8>> = run.iter().map(|t| t.2.clone()).collect();
        let seeds = seeds(4, 3, &run);
        let names: Vec<&str> = seeds.iter().map(|s| s.0).collect();
        assert_eq!(names, ["raw", "replay", "cut", "flip", "after_the_run"]);
        let picked = [0usize, 2, 4, 6, 8, 11];
        for (name, input) in &seeds {
            assert_eq!(input[0], 4, "{name}: the pick");
            let plan = schedule(&input[1..], 3, &corpus);
            assert_eq!(plan.len(), picked.len(), "{name}");
            for (s, &j) in plan.iter().zip(&picked) {
                let (from, to, bytes) = &run[j];
                assert_eq!((s.node, s.from), (*to as usize, *from), "{name} frame {j}");
                let place = run[..j].iter().filter(|t| t.1 == *to).count() as u32;
                let before = if *name == "after_the_run" {
                    u32::from(u16::MAX)
                } else {
                    place
                };
                assert_eq!(s.before, before, "{name} frame {j}");
                let (kind, want) = match *name {
                    "cut" => (Kind::Cut, bytes[..bytes.len() / 2].to_vec()),
                    "flip" => {
                        let mut f = bytes.clone();
                        f[16] ^= 1;
                        let at = f.len() - 5;
                        f[at] ^= 0x80;
                        (Kind::Flip, f)
                    }
                    _ => (Kind::Replay, bytes.clone()),
                };
                assert_eq!((s.kind, &s.bytes), (kind, &want), "{name} frame {j}");
            }
        }
    }
}

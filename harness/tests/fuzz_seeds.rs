//! Seeds of the 17 wire-parser fuzz targets and the testbed target (issue #40, item 9), under
//! `fuzz/seeds/<target>/`. The wire targets' are real frames of clean runs, cut at the layer each
//! parser reads, written by this test with `INABENCH_WRITE_SEEDS=1`; the testbed target's are
//! testbed files (written by hand, checked here to read); the spec target's are the specs under
//! `experiments/` themselves (fuzz/campaign.sh, fuzz/CAMPAIGN.md).
//!
//! The frames come from the committed seeds of the endpoint targets (`*_endpoints/<system>-raw`,
//! built by each system crate from a clean run's frames), and ALEPH's packets from `aleph_slots`:
//! per system the first and a middle frame (and, for a layer neither has, such as an ACK's AETH,
//! the first frame of any system that has it), cut at Ethernet (ethernet, roce_frame), IPv4
//! (ipv4, icrc), UDP (udp), the BTH and each extension header of RoCE frames (bth, reth, aeth,
//! immdt), and the protocol's own header (netreduce, switchml, atp, libra, p4sgd, luwu, aleph);
//! `pcap` gets a capture of each system's frames.

use inabench_wire::{ib, roce};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn seeds_dir(target: &str) -> PathBuf {
    repo().join("fuzz/seeds").join(target)
}

/// The frames a schedule's raw entries carry (`inabench_fabric::fuzz::schedule`'s encoding: a
/// head byte whose low two bits are 0, the sender byte, two bytes `before`, a two-byte length and
/// the bytes), after the first byte `skip` bytes in; stops at the first entry of another kind.
fn raw_entries(input: &[u8], skip: usize, header: usize, len_at: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = skip;
    while at + header <= input.len() {
        if input[at] & 3 != 0 {
            break;
        }
        let len = usize::from(u16::from_le_bytes([
            input[at + len_at],
            input[at + len_at + 1],
        ]));
        let Some(bytes) = input.get(at + header..at + header + len) else {
            break;
        };
        out.push(bytes.to_vec());
        at += header + len;
    }
    out
}

/// Per system (the endpoint seed's name), the clean-run frames its `-raw` seed holds.
fn clean_frames() -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut out = BTreeMap::new();
    for target in [
        "ina_endpoints",
        "libra_endpoints",
        "p4sgd_endpoints",
        "luwu_endpoints",
    ] {
        let dir = seeds_dir(target);
        for e in std::fs::read_dir(&dir)
            .expect("the endpoint seeds")
            .flatten()
        {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(system) = name.strip_suffix("-raw") else {
                continue;
            };
            let input = std::fs::read(e.path()).expect("a seed");
            // [pick] then entries: head, from, before (2), length (2), bytes
            let frames = raw_entries(&input, 1, 6, 4);
            assert!(!frames.is_empty(), "{name}: no frame");
            out.insert(system.to_string(), frames);
        }
    }
    // ALEPH's UDP packets: `aleph_slots`' raw entries are [0, at (2), length (2), bytes]
    let slots = std::fs::read(seeds_dir("aleph_slots").join("duplicate")).expect("aleph seed");
    let packets = raw_entries(&slots, 0, 5, 3);
    assert!(!packets.is_empty(), "aleph: no packet");
    out.insert("aleph".to_string(), packets);
    out
}

/// Where a frame's layers start: (target, offset) for each layer it has.
fn layers(system: &str, frame: &[u8]) -> Vec<(&'static str, usize)> {
    let mut out = Vec::new();
    if system == "aleph" {
        // a UDP payload already
        out.push(("aleph", 0));
        return out;
    }
    out.push(("ethernet", 0));
    out.push(("roce_frame", 0));
    // an IPv4 header after Ethernet's (ATP's frames carry EtherType 0x0700, the others 0x0800);
    // P4SGD's protocols sit on Ethernet itself (0x88B5, 0x88B6)
    let version_ihl = frame.get(14).copied().unwrap_or(0);
    let ip = version_ihl >> 4 == 4 && version_ihl & 0x0f >= 5 && frame.len() >= 34;
    let ihl = usize::from(version_ihl & 0x0f) * 4;
    if ip {
        out.push(("ipv4", 14));
        out.push(("icrc", 14));
    }
    let header = if !ip {
        14
    } else if frame[14 + 9] != 17 {
        // straight over IP (ATP: protocol 253)
        14 + ihl
    } else {
        let udp = 14 + ihl;
        out.push(("udp", udp));
        let payload = udp + 8;
        if frame.get(udp + 2..udp + 4) == Some(&4791u16.to_be_bytes()) {
            out.push(("bth", payload));
            let Some(layout) = frame.get(payload).and_then(|op| ib::layout(*op).ok()) else {
                return out;
            };
            let mut at = payload + ib::BTH_LEN;
            for (has, target, len) in [
                (layout.reth, "reth", ib::RETH_LEN),
                (layout.aeth, "aeth", ib::AETH_LEN),
                (layout.immdt, "immdt", ib::IMMDT_LEN),
            ] {
                if has {
                    out.push((target, at));
                    at += len;
                }
            }
            at
        } else {
            payload
        }
    };
    let own = match system {
        "netreduce" => Some("netreduce"),
        "switchml" | "switchml_rdma" => Some("switchml"),
        "atp" => Some("atp"),
        s if s.starts_with("libra") || s == "ps_lite" => Some("libra"),
        s if s.starts_with("p4sgd") || s.contains("sync") => Some("p4sgd"),
        s if s.starts_with("push_pull") => Some("luwu"),
        _ => None,
    };
    if let Some(t) = own
        && header < frame.len()
    {
        out.push((t, header));
    }
    out
}

/// Every wire target's seeds: (target, file name, bytes).
fn wire_seeds() -> Vec<(String, String, Vec<u8>)> {
    let mut out = Vec::new();
    for (system, frames) in clean_frames() {
        // the first frame and one from the middle of the run
        let picked: Vec<(usize, &Vec<u8>)> = [0, frames.len() / 2]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|i| (i, &frames[i]))
            .collect();
        for (i, frame) in &picked {
            for (target, at) in layers(&system, frame) {
                out.push((
                    target.to_string(),
                    format!("{system}-{i}"),
                    frame[at..].to_vec(),
                ));
            }
        }
        if system != "aleph" {
            let mut w = inabench_wire::pcap::PcapWriter::new(Vec::new()).expect("pcap");
            for (k, f) in frames.iter().enumerate() {
                w.write_packet(1_000 * k as u64, f).expect("a record");
            }
            out.push(("pcap".to_string(), system.clone(), w.into_inner()));
        }
    }
    // a layer no picked frame has (an ACK's AETH, an ImmDt): the first frame of any system
    // that has it
    for (system, frames) in clean_frames() {
        for (i, frame) in frames.iter().enumerate() {
            for (target, at) in layers(&system, frame) {
                if !out.iter().any(|(t, _, _)| t == target) {
                    out.push((
                        target.to_string(),
                        format!("{system}-{i}"),
                        frame[at..].to_vec(),
                    ));
                }
            }
        }
    }
    // one file per content
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|(t, _, b)| seen.insert((t.clone(), b.clone())));
    out
}

/// Every wire target has seeds, each passes its body (no panic), and the frames parse where the
/// seed says they do: whole frames as Ethernet, RoCE frames through `roce_frame`'s parser.
#[test]
fn the_wire_targets_seeds_pass_their_bodies() {
    let made = wire_seeds();
    for (target, body) in inabench_wire::fuzz::TARGETS {
        let dir = seeds_dir(target);
        let mine: Vec<(String, Vec<u8>)> = made
            .iter()
            .filter(|(t, _, _)| t == target)
            .map(|(_, n, b)| (n.clone(), b.clone()))
            .collect();
        assert!(!mine.is_empty(), "{target}: no seed made");
        let inputs = inabench_fabric::fuzz::check_seeds(&dir, || mine, body);
        assert!(!inputs.is_empty(), "{target}");
    }
    let roce: Vec<&Vec<u8>> = made
        .iter()
        .filter(|(t, _, _)| t == "roce_frame")
        .map(|(_, _, b)| b)
        .filter(|b| roce::FrameRepr::parse_with(b, roce::IcrcCheck::Ignore).is_ok())
        .collect();
    assert!(
        roce.len() >= 4,
        "{} RoCE frames among the seeds",
        roce.len()
    );
    for target in [
        "bth",
        "reth",
        "netreduce",
        "switchml",
        "libra",
        "p4sgd",
        "luwu",
        "aleph",
    ] {
        let n = made.iter().filter(|(t, _, _)| t == target).count();
        assert!(n >= 2, "{target}: {n} seeds");
    }
}

/// The testbed target's seeds are testbeds that read (so the fuzzer starts past the parser, in
/// the checks), and the spec target's are the experiments' specs.
#[test]
fn the_testbed_seeds_read() {
    let dir = seeds_dir("testbed");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("testbed seeds").flatten() {
        let text = std::fs::read_to_string(e.path()).expect("a seed");
        inabench_core::testbed::Testbed::from_yaml(&e.path(), &text)
            .unwrap_or_else(|err| panic!("{}: {err}", e.path().display()));
        n += 1;
    }
    assert!(n >= 3, "{n} testbed seeds");
}

//! A short fuzz run on the stable toolchain: every cargo-fuzz target's body
//! (`inabench_wire::fuzz::TARGETS`, the same functions `fuzz/fuzz_targets/` calls) over a few
//! thousand seeded random inputs and mutations of valid packets, so a parser that panics fails
//! the ordinary test run. The long runs are `cargo +nightly fuzz run <target>` (README).

use inabench_wire::ina::{self, aleph, libra, luwu, p4sgd};
use inabench_wire::pcap::PcapWriter;
use inabench_wire::{ethernet, node};

/// xorshift64*: a fixed sequence, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Valid packets of every format the targets parse, to mutate.
fn seeds() -> Vec<Vec<u8>> {
    let mut s = Vec::new();
    let mut lb = vec![0u8; libra::Repr::LEN + 16];
    libra::Repr {
        kind: libra::Kind::Result,
        retransmit: false,
        worker: 1,
        seq: 2,
        aux: 3,
        pairs: 2,
    }
    .emit(&mut lb[..])
    .expect("emit");
    s.push(lb.clone());
    let mut pb = vec![0u8; 46];
    p4sgd::Repr {
        bitmap: 1,
        slot: 2,
        round: 3,
        kind: p4sgd::Kind::Aggregate,
        count: 8,
    }
    .emit(&mut pb[..])
    .expect("emit");
    s.push(pb);
    let mut wb = vec![0u8; luwu::Repr::LEN + 12];
    luwu::Repr {
        kind: luwu::Kind::Grad,
        src: 1,
        max: false,
        seq: 9,
        credit: 0,
        count: 3,
    }
    .emit(&mut wb[..])
    .expect("emit");
    s.push(wb.clone());
    let mut ab = vec![0u8; aleph::PACKET_LEN];
    aleph::Repr {
        job: 1,
        kind: aleph::Kind::Gradient,
        worker: 2,
        round: 3,
        segment: 4,
    }
    .emit(&mut ab[..])
    .expect("emit");
    s.push(ab);
    s.push(
        aleph::ControlRepr {
            job: 1,
            kind: aleph::ControlKind::Done,
            worker: 2,
            round: 3,
            segment: 64,
        }
        .to_bytes()
        .to_vec(),
    );
    s.push(vec![0, 0, 0, 1, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8]);
    let mut nb = vec![0u8; ina::NetReduceHeader::LEN + 8];
    ina::NetReduceHeader {
        ring_id: 1,
        rank: 2,
        msg_id: 3,
        msg_len: 4,
    }
    .emit(&mut nb[..])
    .expect("emit");
    s.push(nb);
    // whole Ethernet/IPv4/UDP frames around the UDP payloads, and a capture of them
    let mut frames = Vec::new();
    for (port, payload) in [(libra::UDP_PORT, &lb), (luwu::UDP_PORT, &wb)] {
        let hdr = ethernet::HEADER_LEN + 20 + 8;
        let mut f = vec![0u8; hdr + payload.len()];
        node::emit(&mut f, 2, 0, 1, port, payload.len()).expect("frame");
        f[hdr..].copy_from_slice(payload);
        frames.push(f);
    }
    let mut w = PcapWriter::new(Vec::new()).expect("pcap");
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(i as u64 * 1000, f).expect("record");
    }
    s.extend(frames);
    s.push(w.into_inner());
    s
}

fn mutate(r: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + r.below(4) {
        match r.below(5) {
            0 if !b.is_empty() => {
                let i = r.below(b.len());
                b[i] ^= 1 << r.below(8);
            }
            1 if !b.is_empty() => {
                let i = r.below(b.len());
                b[i] = [0, 1, 0x7f, 0x80, 0xff][r.below(5)];
            }
            2 => b.truncate(r.below(b.len() + 1)),
            3 => b.extend((0..r.below(16)).map(|_| r.next() as u8)),
            _ if b.len() >= 4 => {
                // a length-like field set to something large
                let i = r.below(b.len() - 3);
                b[i..i + 4].copy_from_slice(&(r.next() as u32 | 0x8000_0000).to_be_bytes());
            }
            _ => {}
        }
    }
    b
}

#[test]
fn every_fuzz_target_survives_seeded_random_and_mutated_inputs() {
    let seeds = seeds();
    let start = std::time::Instant::now();
    let mut runs = 0usize;
    for (name, body) in inabench_wire::fuzz::TARGETS {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
        for i in 0..10_000 {
            let input = if i % 2 == 0 {
                let n = r.below(if i % 10 == 0 { 1200 } else { 80 });
                (0..n).map(|_| r.next() as u8).collect()
            } else {
                let seed = &seeds[r.below(seeds.len())];
                mutate(&mut r, seed)
            };
            body(&input);
            runs += 1;
        }
        for s in &seeds {
            body(s);
        }
    }
    assert_eq!(runs, 10_000 * inabench_wire::fuzz::TARGETS.len());
    eprintln!("{runs} inputs in {:?}", start.elapsed());
}

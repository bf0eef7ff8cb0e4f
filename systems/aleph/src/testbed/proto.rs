//! Sans-IO pieces of the testbed's data planes: the TCP aggregation service's chunk framing and
//! summing state machine, the ring all-reduce schedule, and the deterministic gradients every run
//! checks its aggregates against. Nothing here touches a socket, a thread or a clock.
//!
//! Gradients are Q15.16 fixed-point `i32`s summed with wrapping addition, exactly as the XDP
//! program of drivers/xdp sums them (`inabench_xdp::proto`), so every system's aggregate can be
//! compared bit for bit with one reference.

use inabench_wire::ina::aleph::chunk;
use std::collections::HashMap;

/// Gradients per TCP chunk (64 KiB of payload). Choice where the paper is silent: its TCP
/// program's message size is not given; BytePS partitions tensors into chunks so that pushes
/// pipeline, and 64 KiB keeps many chunks in flight at the scaled-down gradient sizes.
pub const CHUNK_GRADS: usize = chunk::MAX_GRADS;
/// Bytes of a chunk header: chunk index, gradient count (the layout is
/// [`inabench_wire::ina::aleph::chunk`]'s).
pub const CHUNK_HEADER: usize = chunk::Repr::LEN;

/// Errors of the framing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("chunk of {0} gradients (at most {CHUNK_GRADS})")]
    TooLong(usize),
    #[error("chunk {index} of {len} gradients does not fit a gradient of {total} gradients")]
    OutOfRange {
        index: u32,
        len: usize,
        total: usize,
    },
    #[error("member {0} is not part of this aggregation")]
    Member(usize),
    #[error("member {member} sent chunk {index} twice")]
    Duplicate { member: usize, index: u32 },
}

/// The deterministic gradient of worker `w` in iteration `iter`: `len` values spread over the
/// whole `i32` range (so the wrapping sum is exercised).
pub fn gradient(w: usize, iter: u32, len: usize) -> Vec<i32> {
    let mut x = (w as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (u64::from(iter) + 1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 16) as i32
        })
        .collect()
}

/// The element-wise wrapping sum of the workers' gradients.
pub fn reference(workers: usize, iter: u32, len: usize) -> Vec<i32> {
    let mut acc = vec![0i32; len];
    for w in 0..workers {
        for (a, g) in acc.iter_mut().zip(gradient(w, iter, len)) {
            *a = a.wrapping_add(g);
        }
    }
    acc
}

/// Number of chunks of a gradient of `len` values.
pub fn chunks(len: usize) -> usize {
    len.div_ceil(CHUNK_GRADS)
}

/// The range of chunk `i`.
pub fn chunk_range(len: usize, i: usize) -> std::ops::Range<usize> {
    let start = (i * CHUNK_GRADS).min(len);
    start..((i + 1) * CHUNK_GRADS).min(len)
}

/// Encode one chunk: `[index u32][count u32][count x i32]`, big-endian.
pub fn encode(index: u32, grads: &[i32]) -> Result<Vec<u8>, FrameError> {
    let h = chunk::Repr {
        index,
        count: u32::try_from(grads.len()).map_err(|_| FrameError::TooLong(grads.len()))?,
    };
    let mut b = vec![0u8; CHUNK_HEADER];
    h.emit(&mut b[..])
        .map_err(|_| FrameError::TooLong(grads.len()))?;
    b.reserve(4 * grads.len());
    for g in grads {
        b.extend_from_slice(&g.to_be_bytes());
    }
    Ok(b)
}

/// Decode a chunk header: `(index, count)`; a count over [`CHUNK_GRADS`] is refused before the
/// body is read.
pub fn decode_header(h: &[u8; CHUNK_HEADER]) -> Result<(u32, usize), FrameError> {
    let r = chunk::Repr::parse(h)
        .map_err(|_| FrameError::TooLong(u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize))?;
    Ok((r.index, r.count as usize))
}

/// Decode a chunk body.
pub fn decode_body(b: &[u8]) -> Vec<i32> {
    chunk::grads(b).collect()
}

/// The aggregation service's state for one iteration: per chunk, the running sum and which
/// members have contributed. A chunk is emitted once, when its last member's part arrives.
#[derive(Debug)]
pub struct Summer {
    members: usize,
    len: usize,
    partial: HashMap<u32, (Vec<i32>, Vec<bool>)>,
    done: Vec<bool>,
}

impl Summer {
    /// `members` contributors (an aggregator's own gradient counts as one) of `len` gradients.
    pub fn new(members: usize, len: usize) -> Summer {
        Summer {
            members,
            len,
            partial: HashMap::new(),
            done: vec![false; chunks(len)],
        }
    }

    /// Add member `m`'s chunk `index`; returns the aggregate when it is complete.
    pub fn add(
        &mut self,
        m: usize,
        index: u32,
        grads: &[i32],
    ) -> Result<Option<Vec<i32>>, FrameError> {
        if m >= self.members {
            return Err(FrameError::Member(m));
        }
        let range = chunk_range(self.len, index as usize);
        if index as usize >= self.done.len() || range.len() != grads.len() {
            return Err(FrameError::OutOfRange {
                index,
                len: grads.len(),
                total: self.len,
            });
        }
        if self.done[index as usize] {
            return Err(FrameError::Duplicate { member: m, index });
        }
        let members = self.members;
        let (acc, seen) = self
            .partial
            .entry(index)
            .or_insert_with(|| (vec![0; grads.len()], vec![false; members]));
        if seen[m] {
            return Err(FrameError::Duplicate { member: m, index });
        }
        seen[m] = true;
        for (a, g) in acc.iter_mut().zip(grads) {
            *a = a.wrapping_add(*g);
        }
        if seen.iter().all(|s| *s) {
            self.done[index as usize] = true;
            return Ok(self.partial.remove(&index).map(|(acc, _)| acc));
        }
        Ok(None)
    }

    /// Whether every chunk has been emitted.
    pub fn complete(&self) -> bool {
        self.done.iter().all(|d| *d)
    }
}

/// Ring all-reduce (Horovod): the part of the gradient worker `rank` of `n` sends and the part it
/// receives in `step` (0..2(n-1)); the first n-1 steps reduce-scatter (the received part is
/// added), the rest all-gather (the received part is copied).
pub fn ring_step(rank: usize, n: usize, step: usize) -> (usize, usize) {
    let s = step % (n - 1).max(1);
    if step < n - 1 {
        ((rank + n - s) % n, (rank + 2 * n - s - 1) % n)
    } else {
        ((rank + 1 + n - s) % n, (rank + n - s) % n)
    }
}

/// The range of ring part `p` of `n` in a gradient of `len` values.
pub fn ring_part(len: usize, n: usize, p: usize) -> std::ops::Range<usize> {
    let base = len / n;
    let extra = len % n;
    let start = p * base + p.min(extra);
    start..start + base + usize::from(p < extra)
}

/// Run the ring schedule in memory (the reference for the network version).
pub fn ring_in_memory(grads: &[Vec<i32>]) -> Vec<Vec<i32>> {
    let n = grads.len();
    let mut data: Vec<Vec<i32>> = grads.to_vec();
    if n < 2 {
        return data;
    }
    let len = data[0].len();
    for step in 0..2 * (n - 1) {
        let sent: Vec<Vec<i32>> = (0..n)
            .map(|r| data[r][ring_part(len, n, ring_step(r, n, step).0)].to_vec())
            .collect();
        for (r, mine) in data.iter_mut().enumerate() {
            let from = (r + n - 1) % n;
            let (send_p, _) = ring_step(from, n, step);
            let (_, recv_p) = ring_step(r, n, step);
            debug_assert_eq!(send_p, recv_p);
            let range = ring_part(len, n, recv_p);
            for (d, s) in mine[range].iter_mut().zip(&sent[from]) {
                *d = if step < n - 1 { d.wrapping_add(*s) } else { *s };
            }
        }
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_schedule_sums_exactly() {
        for n in [2, 3, 5, 8] {
            let len = 1000 + n;
            let g: Vec<Vec<i32>> = (0..n).map(|w| gradient(w, 3, len)).collect();
            let out = ring_in_memory(&g);
            let want = reference(n, 3, len);
            for o in &out {
                assert_eq!(o, &want, "n = {n}");
            }
        }
    }

    #[test]
    fn summer_emits_each_chunk_once_and_refuses_duplicates() {
        let len = CHUNK_GRADS + 10;
        let mut s = Summer::new(2, len);
        let a = gradient(0, 1, len);
        let b = gradient(1, 1, len);
        assert_eq!(s.add(0, 1, &a[chunk_range(len, 1)]), Ok(None));
        assert!(matches!(
            s.add(0, 1, &a[chunk_range(len, 1)]),
            Err(FrameError::Duplicate { .. })
        ));
        let got = s.add(1, 1, &b[chunk_range(len, 1)]).unwrap().unwrap();
        assert_eq!(got, reference(2, 1, len)[chunk_range(len, 1)].to_vec());
        assert!(!s.complete());
        assert!(s.add(2, 0, &a[chunk_range(len, 0)]).is_err());
        assert!(s.add(0, 0, &a[..5]).is_err());
        s.add(0, 0, &a[chunk_range(len, 0)]).unwrap();
        s.add(1, 0, &b[chunk_range(len, 0)]).unwrap().unwrap();
        assert!(s.complete());
        let e = encode(7, &[1, -2, 3]).unwrap();
        // the bytes this module's own encoder produced before the layout moved to the wire crate
        assert_eq!(
            e.iter().map(|x| format!("{x:02x}")).collect::<String>(),
            "000000070000000300000001fffffffe00000003"
        );
        let e = encode(7, &a[..3]).unwrap();
        let h: [u8; 8] = e[..8].try_into().unwrap();
        assert_eq!(decode_header(&h), Ok((7, 3)));
        assert_eq!(decode_body(&e[8..]), a[..3].to_vec());
    }
}

//! The ring all-reduce over any [`HostTransport`], written once: worker `me` of `n` WRITEs (with
//! immediate = the step) from its sending QP into its successor's receiving QP, and reads its
//! predecessor's WRITEs on its receiving QP. The vector is `n` chunks; `n - 1` reduce-scatter
//! steps (send the running sum of chunk `me - s`, add the predecessor's chunk `me - 1 - s`) and
//! `n - 1` all-gather steps (pass the finished chunks on), each step's data in its own slot of
//! both buffers (slot `s` at `s x chunk bytes`), int32 values big-endian, sums wrapping. Every
//! completion is checked: each WRITE acknowledged in order, each receive a WRITE with immediate
//! of the chunk's bytes with immediate = step.
//!
//! [`RingAllReduce::progress`] never blocks: a blocking caller (the verbs rig's `ring_worker`)
//! calls it until done; a sans-IO host ([`crate::soft::SoftHost`]) after every event.

use crate::{Completion, CompletionKind, HostTransport};

/// Why the ring stopped.
#[derive(Debug, thiserror::Error)]
pub enum RingError<E: std::error::Error> {
    #[error("the transport refused a call: {0}")]
    Transport(#[source] E),
    #[error("step {step}: {what} completion {got:?}")]
    Completion {
        step: u32,
        what: &'static str,
        got: Completion,
    },
    #[error("{values} values do not split into {n} chunks of whole values of at least one")]
    Values { values: usize, n: usize },
    #[error("worker {me} of a ring of {n} (a ring needs at least 2 workers)")]
    Rank { me: usize, n: usize },
}

/// One worker's ring all-reduce.
#[derive(Debug, Clone)]
pub struct RingAllReduce {
    n: usize,
    me: usize,
    per_chunk: usize,
    acc: Vec<i32>,
    /// Steps whose data arrived (and was folded in).
    received: u32,
    /// Steps whose WRITE was posted.
    posted: u32,
    /// WRITEs completed.
    sent: u32,
}

impl RingAllReduce {
    /// Worker `me` of `n` all-reducing `values` (`n` chunks of equal length).
    pub fn new(
        n: usize,
        me: usize,
        values: Vec<i32>,
    ) -> Result<RingAllReduce, RingError<std::convert::Infallible>> {
        if n < 2 || me >= n {
            return Err(RingError::Rank { me, n });
        }
        if values.is_empty() || !values.len().is_multiple_of(n) {
            return Err(RingError::Values {
                values: values.len(),
                n,
            });
        }
        Ok(RingAllReduce {
            n,
            me,
            per_chunk: values.len() / n,
            acc: values,
            received: 0,
            posted: 0,
            sent: 0,
        })
    }

    /// WRITEs each way: 2 (n - 1).
    pub fn steps(&self) -> u32 {
        2 * (self.n as u32 - 1)
    }

    /// Bytes of one step's message (a chunk of int32 values).
    pub fn chunk_bytes(&self) -> u32 {
        (self.per_chunk * 4) as u32
    }

    /// Bytes each QP's buffer needs: a slot per step.
    pub fn region_bytes(&self) -> usize {
        self.steps() as usize * self.chunk_bytes() as usize
    }

    /// Post a receive per step (wr_id = step) on the receiving QP: before the predecessor
    /// learns where to write.
    pub fn post_receives<T: HostTransport>(&self, recv: &mut T) -> Result<(), T::Error> {
        (0..self.steps()).try_for_each(|s| recv.post_recv(u64::from(s)))
    }

    /// Steps whose data arrived.
    pub fn received(&self) -> u32 {
        self.received
    }

    /// WRITEs completed.
    pub fn sent(&self) -> u32 {
        self.sent
    }

    pub fn done(&self) -> bool {
        self.received == self.steps() && self.sent == self.steps()
    }

    /// The reduced vector once done.
    pub fn result(&self) -> Option<&[i32]> {
        self.done().then_some(&self.acc[..])
    }

    /// The chunk sent at step `s` (from `me`) or received at step `s` (from `me`'s predecessor).
    fn chunk_of(&self, from: usize, s: u32) -> usize {
        let (n, s) = (self.n, s as usize);
        if s < n - 1 {
            (from + n - s % n) % n
        } else {
            (from + 1 + n - (s - (n - 1)) % n) % n
        }
    }

    /// Do what can be done now: post the next WRITE once its data is ready, take the sending
    /// QP's completions, fold in what the predecessor wrote. `Ok(true)` once done.
    pub fn progress<T: HostTransport>(
        &mut self,
        send: &mut T,
        recv: &mut T,
    ) -> Result<bool, RingError<T::Error>> {
        let steps = self.steps();
        let cb = self.chunk_bytes() as usize;
        let pc = self.per_chunk;
        loop {
            if self.posted == self.received && self.posted < steps {
                let s = self.posted;
                let out = self.chunk_of(self.me, s);
                let slot = &mut send.buf_mut()[s as usize * cb..(s as usize + 1) * cb];
                for (w, x) in slot
                    .chunks_exact_mut(4)
                    .zip(&self.acc[out * pc..(out + 1) * pc])
                {
                    w.copy_from_slice(&x.to_be_bytes());
                }
                send.post_write(u64::from(s), s as u64 * cb as u64, cb as u32, Some(s))
                    .map_err(RingError::Transport)?;
                self.posted += 1;
            }
            for c in send.poll(16).map_err(RingError::Transport)? {
                if c.wr_id != u64::from(self.sent)
                    || c.error.is_some()
                    || c.kind != CompletionKind::Write
                {
                    return Err(RingError::Completion {
                        step: self.sent,
                        what: "send",
                        got: c,
                    });
                }
                self.sent += 1;
            }
            let Some(c) = recv.poll(1).map_err(RingError::Transport)?.pop() else {
                break;
            };
            let s = self.received;
            let want = Completion {
                wr_id: u64::from(s),
                kind: CompletionKind::RecvWriteImm,
                error: None,
                byte_len: cb as u32,
                imm: Some(s),
            };
            if c != want || s >= steps {
                return Err(RingError::Completion {
                    step: s,
                    what: "receive",
                    got: c,
                });
            }
            let pred = (self.me + self.n - 1) % self.n;
            let inc = self.chunk_of(pred, s);
            let data = &recv.buf()[s as usize * cb..(s as usize + 1) * cb];
            let reduce = (s as usize) < self.n - 1;
            for (x, w) in self.acc[inc * pc..(inc + 1) * pc]
                .iter_mut()
                .zip(data.chunks_exact(4))
            {
                let y = i32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                *x = if reduce { x.wrapping_add(y) } else { y };
            }
            self.received += 1;
        }
        Ok(self.done())
    }
}

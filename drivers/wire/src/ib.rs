//! InfiniBand transport headers as RoCEv2 carries them: BTH, RETH, AETH and ImmDt, with the
//! RC and UC opcodes (IBA Vol. 1, Sec. 9.2-9.3).

use crate::{Error, be16, be24, be32, need, put16, put24, put32};

pub const BTH_LEN: usize = 12;
pub const RETH_LEN: usize = 16;
pub const AETH_LEN: usize = 4;
pub const IMMDT_LEN: usize = 4;
/// The default partition key.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// Opcodes: transport in the top three bits (RC 000, UC 001), operation in the low five.
pub mod opcode {
    pub const RC: u8 = 0x00;
    pub const UC: u8 = 0x20;
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0a;
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    pub const ACKNOWLEDGE: u8 = 0x11;
}

/// Which extension headers follow the BTH for an opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub reth: bool,
    pub aeth: bool,
    pub immdt: bool,
}

/// The header layout of an opcode, or an error for opcodes this suite does not speak.
pub fn layout(op: u8) -> Result<Layout, Error> {
    use opcode::*;
    let transport = op & 0xe0;
    let operation = op & 0x1f;
    if transport != RC && transport != UC {
        return Err(Error::Unsupported("transport (only RC and UC)"));
    }
    let l = |reth, aeth, immdt| Ok(Layout { reth, aeth, immdt });
    match operation {
        SEND_FIRST | SEND_MIDDLE | SEND_LAST | SEND_ONLY | WRITE_MIDDLE | WRITE_LAST => {
            l(false, false, false)
        }
        SEND_LAST_IMM | SEND_ONLY_IMM | WRITE_LAST_IMM => l(false, false, true),
        WRITE_FIRST | WRITE_ONLY => l(true, false, false),
        WRITE_ONLY_IMM => l(true, false, true),
        ACKNOWLEDGE if transport == RC => l(false, true, false),
        _ => Err(Error::Unsupported("opcode")),
    }
}

/// Base Transport Header.
#[derive(Debug, Clone)]
pub struct Bth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Bth<T> {
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        need("BTH", buffer.as_ref().len(), BTH_LEN)?;
        Ok(Bth { buffer })
    }

    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[1] & 0x80 != 0
    }

    pub fn migreq(&self) -> bool {
        self.buffer.as_ref()[1] & 0x40 != 0
    }

    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[1] >> 4) & 0x3
    }

    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[1] & 0x0f
    }

    pub fn pkey(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[4] & 0x80 != 0
    }

    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[4] & 0x40 != 0
    }

    pub fn dest_qp(&self) -> u32 {
        be24(self.buffer.as_ref(), 5)
    }

    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[8] & 0x80 != 0
    }

    pub fn psn(&self) -> u32 {
        be24(self.buffer.as_ref(), 9)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthRepr {
    pub opcode: u8,
    pub solicited: bool,
    pub migreq: bool,
    pub pad_count: u8,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    /// 24 bits
    pub dest_qp: u32,
    pub ack_req: bool,
    /// 24 bits
    pub psn: u32,
}

impl BthRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Bth<T>) -> Result<BthRepr, Error> {
        if p.tver() != 0 {
            return Err(Error::Malformed("BTH transport version"));
        }
        Ok(BthRepr {
            opcode: p.opcode(),
            solicited: p.solicited(),
            migreq: p.migreq(),
            pad_count: p.pad_count(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<(), Error> {
        need("BTH buffer", b.len(), BTH_LEN)?;
        if self.dest_qp > 0xff_ffff || self.psn > 0xff_ffff || self.pad_count > 3 {
            return Err(Error::Malformed("BTH field out of range"));
        }
        b[0] = self.opcode;
        b[1] =
            (u8::from(self.solicited) << 7) | (u8::from(self.migreq) << 6) | (self.pad_count << 4);
        put16(b, 2, self.pkey);
        b[4] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        put24(b, 5, self.dest_qp);
        b[8] = u8::from(self.ack_req) << 7;
        put24(b, 9, self.psn);
        Ok(())
    }
}

/// RDMA Extended Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RethRepr {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

impl RethRepr {
    pub fn parse(b: &[u8]) -> Result<RethRepr, Error> {
        need("RETH", b.len(), RETH_LEN)?;
        let va = (u64::from(be32(b, 0)) << 32) | u64::from(be32(b, 4));
        Ok(RethRepr {
            va,
            rkey: be32(b, 8),
            dma_len: be32(b, 12),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<(), Error> {
        need("RETH buffer", b.len(), RETH_LEN)?;
        put32(b, 0, (self.va >> 32) as u32);
        put32(b, 4, self.va as u32);
        put32(b, 8, self.rkey);
        put32(b, 12, self.dma_len);
        Ok(())
    }
}

/// The AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syndrome {
    /// ACK with the responder's credit count (5 bits).
    Ack {
        credits: u8,
    },
    /// Receiver not ready, with the RNR timer (5 bits).
    RnrNak {
        timer: u8,
    },
    Nak(NakCode),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NakCode {
    PsnSequenceError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    InvalidRdRequest,
}

/// ACK Extended Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AethRepr {
    pub syndrome: Syndrome,
    /// Message sequence number, 24 bits.
    pub msn: u32,
}

impl AethRepr {
    pub fn parse(b: &[u8]) -> Result<AethRepr, Error> {
        need("AETH", b.len(), AETH_LEN)?;
        let s = b[0];
        let low = s & 0x1f;
        let syndrome = match s >> 5 {
            0b000 => Syndrome::Ack { credits: low },
            0b001 => Syndrome::RnrNak { timer: low },
            0b011 => Syndrome::Nak(match low {
                0 => NakCode::PsnSequenceError,
                1 => NakCode::InvalidRequest,
                2 => NakCode::RemoteAccessError,
                3 => NakCode::RemoteOperationalError,
                4 => NakCode::InvalidRdRequest,
                _ => return Err(Error::Malformed("AETH NAK code")),
            }),
            _ => return Err(Error::Malformed("AETH syndrome")),
        };
        Ok(AethRepr {
            syndrome,
            msn: be24(b, 1),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<(), Error> {
        need("AETH buffer", b.len(), AETH_LEN)?;
        if self.msn > 0xff_ffff {
            return Err(Error::Malformed("AETH MSN out of range"));
        }
        b[0] = match self.syndrome {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(code) => {
                0x60 | match code {
                    NakCode::PsnSequenceError => 0,
                    NakCode::InvalidRequest => 1,
                    NakCode::RemoteAccessError => 2,
                    NakCode::RemoteOperationalError => 3,
                    NakCode::InvalidRdRequest => 4,
                }
            }
        };
        put24(b, 1, self.msn);
        Ok(())
    }
}

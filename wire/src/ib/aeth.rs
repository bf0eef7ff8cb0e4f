//! The ACK Extended Transport Header (IBA Vol. 1, Sec. 9.3; 4 bytes): the
//! Syndrome (8 bits) and the Message Sequence Number (24).
//!
//! ```text
//! Syndrome bit 7     reserved, 0
//!          bits 6-5  00 ACK, 01 RNR NAK, 10 reserved, 11 NAK
//!          bits 4-0  ACK: credit count code; RNR NAK: timer code; NAK: the NAK code
//! ```

use crate::{Error, be24, need, put24};

pub const HEADER_LEN: usize = 4;

view!(
    /// A view of an AETH.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        need("AETH", self.buffer.as_ref().len(), HEADER_LEN)
    }

    /// The raw syndrome byte.
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// MSN, 24 bits.
    pub fn msn(&self) -> u32 {
        be24(self.buffer.as_ref(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_syndrome(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }

    /// The low 24 bits of `v`.
    pub fn set_msn(&mut self, v: u32) {
        put24(self.buffer.as_mut(), 1, v);
    }
}

/// What an AETH says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// ACK with the responder's credit count code (5 bits; 31 means "invalid", i.e. no end-to-end
    /// flow control credits are advertised).
    Ack { credits: u8 },
    /// Receiver Not Ready, with the RNR timer code (5 bits).
    RnrNak { timer: u8 },
    /// NAK.
    Nak(NakCode),
}

/// NAK codes (the low five syndrome bits of a NAK; 5 to 31 are reserved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: the responder expected another PSN (go-back-N from the expected one).
    PsnSequenceError,
    /// 1
    InvalidRequest,
    /// 2
    RemoteAccessError,
    /// 3
    RemoteOperationalError,
    /// 4
    InvalidRdRequest,
}

impl NakCode {
    pub const ALL: [NakCode; 5] = [
        NakCode::PsnSequenceError,
        NakCode::InvalidRequest,
        NakCode::RemoteAccessError,
        NakCode::RemoteOperationalError,
        NakCode::InvalidRdRequest,
    ];

    pub fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
        }
    }

    pub fn from_code(c: u8) -> Option<NakCode> {
        NakCode::ALL.get(usize::from(c)).copied()
    }
}

impl Syndrome {
    /// The syndrome byte; a credit count or timer code over 5 bits is `Malformed`.
    pub fn to_byte(self) -> Result<u8, Error> {
        match self {
            Syndrome::Ack { credits } if credits <= 0x1f => Ok(credits),
            Syndrome::RnrNak { timer } if timer <= 0x1f => Ok(0x20 | timer),
            Syndrome::Nak(code) => Ok(0x60 | code.code()),
            _ => Err(Error::Malformed(
                "AETH credit count or RNR timer over 5 bits",
            )),
        }
    }

    pub fn from_byte(s: u8) -> Result<Syndrome, Error> {
        let low = s & 0x1f;
        match s >> 5 {
            0b000 => Ok(Syndrome::Ack { credits: low }),
            0b001 => Ok(Syndrome::RnrNak { timer: low }),
            0b011 => NakCode::from_code(low)
                .map(Syndrome::Nak)
                .ok_or(Error::Malformed("AETH NAK code")),
            _ => Err(Error::Malformed("AETH syndrome")),
        }
    }
}

/// An AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub syndrome: Syndrome,
    /// Message sequence number, 24 bits.
    pub msn: u32,
}

impl Repr {
    /// Parse; a reserved syndrome (bit 7 set, type 10) or NAK code (5-31) is `Malformed`.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        Ok(Repr {
            syndrome: Syndrome::from_byte(p.syndrome())?,
            msn: p.msn(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let b = packet.as_mut();
        need("AETH buffer", b.len(), HEADER_LEN)?;
        if self.msn > super::PSN_MASK {
            return Err(Error::Malformed("AETH MSN over 24 bits"));
        }
        let s = self.syndrome.to_byte()?;
        let mut p = Packet::new_unchecked(b);
        p.set_syndrome(s);
        p.set_msn(self.msn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes() {
        let cases = [
            (0x1f, Syndrome::Ack { credits: 31 }),
            (0x00, Syndrome::Ack { credits: 0 }),
            (0x2e, Syndrome::RnrNak { timer: 14 }),
            (0x60, Syndrome::Nak(NakCode::PsnSequenceError)),
            (0x61, Syndrome::Nak(NakCode::InvalidRequest)),
            (0x62, Syndrome::Nak(NakCode::RemoteAccessError)),
            (0x63, Syndrome::Nak(NakCode::RemoteOperationalError)),
            (0x64, Syndrome::Nak(NakCode::InvalidRdRequest)),
        ];
        for (byte, s) in cases {
            let b = [byte, 0x01, 0x02, 0x03];
            let r = Repr::parse(&b).expect("parse");
            assert_eq!(
                r,
                Repr {
                    syndrome: s,
                    msn: 0x010203
                }
            );
            let mut out = [0u8; 4];
            r.emit(&mut out[..]).expect("emit");
            assert_eq!(out, b);
        }
    }

    #[test]
    fn malformed_are_errors() {
        for s in [0x40u8, 0x5f, 0x65, 0x7f, 0x80, 0xff] {
            assert!(
                matches!(Repr::parse(&[s, 0, 0, 0]), Err(Error::Malformed(_))),
                "{s:#x}"
            );
        }
        for n in 0..HEADER_LEN {
            assert!(matches!(
                Repr::parse(&[0u8; 4][..n]),
                Err(Error::Truncated { .. })
            ));
        }
        let ok = Repr {
            syndrome: Syndrome::Ack { credits: 0 },
            msn: 0,
        };
        let mut out = [0u8; 4];
        for bad in [
            Repr { msn: 1 << 24, ..ok },
            Repr {
                syndrome: Syndrome::Ack { credits: 32 },
                ..ok
            },
            Repr {
                syndrome: Syndrome::RnrNak { timer: 32 },
                ..ok
            },
        ] {
            assert!(matches!(bad.emit(&mut out[..]), Err(Error::Malformed(_))));
        }
        assert!(ok.emit(&mut [0u8; 3][..]).is_err());
    }
}

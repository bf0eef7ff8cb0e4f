//! The Base Transport Header (IBA Vol. 1, Sec. 9.2; 12 bytes):
//!
//! ```text
//! byte 0      OpCode
//! byte 1      SE(7) M(6) PadCnt(5:4) TVer(3:0)
//! bytes 2-3   P_Key
//! byte 4      FECN(7) BECN(6) resv6a(5:0)    (resv8a before IBA's congestion control annex)
//! bytes 5-7   DestQP
//! byte 8      AckReq(7) resv7(6:0)
//! bytes 9-11  PSN
//! ```
//!
//! Reserved bits are written as zero and ignored on receive, as Linux's rxe and Wireshark do.

use crate::{Error, be16, be24, need, put16, put24, set_bit};

pub const HEADER_LEN: usize = 12;

view!(
    /// A view of a BTH.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        need("BTH", self.buffer.as_ref().len(), HEADER_LEN)
    }

    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// SE: the responder should raise a completion event.
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[1] & 0x80 != 0
    }

    /// M: the migration state (1 = migrated; RoCE NICs send 1).
    pub fn migreq(&self) -> bool {
        self.buffer.as_ref()[1] & 0x40 != 0
    }

    /// PadCnt: bytes of pad after the payload to reach a multiple of 4.
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[1] >> 4) & 0x3
    }

    /// TVer: the transport header version, 0.
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[1] & 0x0f
    }

    pub fn pkey(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// FECN: congestion experienced on the way (masked in the ICRC).
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[4] & 0x80 != 0
    }

    /// BECN: congestion notified back to the sender (set in a RoCEv2 CNP).
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[4] & 0x40 != 0
    }

    /// The six reserved bits after FECN and BECN.
    pub fn resv6a(&self) -> u8 {
        self.buffer.as_ref()[4] & 0x3f
    }

    /// DestQP, 24 bits.
    pub fn dest_qp(&self) -> u32 {
        be24(self.buffer.as_ref(), 5)
    }

    /// A: the responder must acknowledge this packet (RC).
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[8] & 0x80 != 0
    }

    /// The seven reserved bits after AckReq.
    pub fn resv7(&self) -> u8 {
        self.buffer.as_ref()[8] & 0x7f
    }

    /// PSN, 24 bits.
    pub fn psn(&self) -> u32 {
        be24(self.buffer.as_ref(), 9)
    }

    /// The bytes after the BTH.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_opcode(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }

    pub fn set_solicited(&mut self, on: bool) {
        set_bit(&mut self.buffer.as_mut()[1], 0x80, on);
    }

    pub fn set_migreq(&mut self, on: bool) {
        set_bit(&mut self.buffer.as_mut()[1], 0x40, on);
    }

    /// The low two bits of `v`.
    pub fn set_pad_count(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[1];
        *b = (*b & !0x30) | ((v & 0x3) << 4);
    }

    /// The low four bits of `v`.
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[1];
        *b = (*b & !0x0f) | (v & 0x0f);
    }

    pub fn set_pkey(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 2, v);
    }

    pub fn set_fecn(&mut self, on: bool) {
        set_bit(&mut self.buffer.as_mut()[4], 0x80, on);
    }

    pub fn set_becn(&mut self, on: bool) {
        set_bit(&mut self.buffer.as_mut()[4], 0x40, on);
    }

    /// The low six bits of `v`.
    pub fn set_resv6a(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[4];
        *b = (*b & 0xc0) | (v & 0x3f);
    }

    /// The low 24 bits of `v`.
    pub fn set_dest_qp(&mut self, v: u32) {
        put24(self.buffer.as_mut(), 5, v);
    }

    pub fn set_ack_req(&mut self, on: bool) {
        set_bit(&mut self.buffer.as_mut()[8], 0x80, on);
    }

    /// The low seven bits of `v`.
    pub fn set_resv7(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[8];
        *b = (*b & 0x80) | (v & 0x7f);
    }

    /// The low 24 bits of `v`.
    pub fn set_psn(&mut self, v: u32) {
        put24(self.buffer.as_mut(), 9, v);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// A BTH. TVer is always 0 (others do not parse); the reserved bits are zero when emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub opcode: u8,
    pub solicited: bool,
    pub migreq: bool,
    /// 0 to 3.
    pub pad_count: u8,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    /// 24 bits.
    pub dest_qp: u32,
    pub ack_req: bool,
    /// 24 bits.
    pub psn: u32,
}

impl Repr {
    /// Parse a BTH (any opcode: see [`super::layout`] for what follows it).
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        if p.tver() != 0 {
            return Err(Error::Malformed("BTH transport version"));
        }
        Ok(Repr {
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

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Emit; a DestQP or PSN over 24 bits or a pad count over 3 is `Malformed`.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let b = packet.as_mut();
        need("BTH buffer", b.len(), HEADER_LEN)?;
        if self.dest_qp > super::QPN_MASK {
            return Err(Error::Malformed("BTH DestQP over 24 bits"));
        }
        if self.psn > super::PSN_MASK {
            return Err(Error::Malformed("BTH PSN over 24 bits"));
        }
        if self.pad_count > 3 {
            return Err(Error::Malformed("BTH pad count over 3"));
        }
        b[..HEADER_LEN].fill(0);
        let mut p = Packet::new_unchecked(b);
        p.set_opcode(self.opcode);
        p.set_solicited(self.solicited);
        p.set_migreq(self.migreq);
        p.set_pad_count(self.pad_count);
        p.set_pkey(self.pkey);
        p.set_fecn(self.fecn);
        p.set_becn(self.becn);
        p.set_dest_qp(self.dest_qp);
        p.set_ack_req(self.ack_req);
        p.set_psn(self.psn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The BTH of a CNP captured on a ConnectX-4 Lx (scapy's test/contrib/roce.uts).
    const CNP_BTH: [u8; 12] = [
        0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn captured_cnp() {
        let r = Repr::parse(&CNP_BTH).expect("parse");
        assert_eq!(r.opcode, 0x81);
        assert!(r.becn && !r.fecn && !r.migreq && !r.solicited && !r.ack_req);
        assert_eq!(
            (r.pkey, r.dest_qp, r.psn, r.pad_count),
            (0xffff, 0x118, 0, 0)
        );
        let mut b = [0xffu8; 12];
        r.emit(&mut b[..]).expect("emit");
        assert_eq!(b, CNP_BTH);
    }

    #[test]
    fn every_field_and_reserved_bits() {
        let mut b = [0u8; 13];
        let mut p = Packet::new_checked(&mut b[..]).expect("view");
        p.set_opcode(0x2b);
        p.set_solicited(true);
        p.set_migreq(true);
        p.set_pad_count(3);
        p.set_pkey(0x8001);
        p.set_fecn(true);
        p.set_becn(true);
        p.set_resv6a(0x3f);
        p.set_dest_qp(0xfe_dcba);
        p.set_ack_req(true);
        p.set_resv7(0x7f);
        p.set_psn(0x12_3456);
        p.payload_mut()[0] = 9;
        assert_eq!(
            b,
            [
                0x2b, 0xf0, 0x80, 0x01, 0xff, 0xfe, 0xdc, 0xba, 0xff, 0x12, 0x34, 0x56, 9
            ]
        );
        let p = Packet::new_checked(&b[..]).expect("view");
        assert_eq!((p.resv6a(), p.resv7(), p.tver()), (0x3f, 0x7f, 0));
        assert_eq!(p.payload(), &[9]);
        // reserved bits are ignored on receive and cleared on emit
        let r = Repr::parse(&p).expect("parse");
        let mut out = [0xaau8; 12];
        r.emit(&mut out[..]).expect("emit");
        assert_eq!(out[4], 0xc0);
        assert_eq!(out[8], 0x80);
    }

    #[test]
    fn malformed_are_errors() {
        for n in 0..HEADER_LEN {
            assert!(matches!(
                Repr::parse(&CNP_BTH[..n]),
                Err(Error::Truncated { .. })
            ));
        }
        let mut b = CNP_BTH;
        b[1] = 0x01;
        assert_eq!(
            Repr::parse(&b),
            Err(Error::Malformed("BTH transport version"))
        );
        let r = Repr::parse(&CNP_BTH).expect("parse");
        let mut out = [0u8; 12];
        for bad in [
            Repr {
                dest_qp: 1 << 24,
                ..r
            },
            Repr { psn: 1 << 24, ..r },
            Repr { pad_count: 4, ..r },
        ] {
            assert!(matches!(bad.emit(&mut out[..]), Err(Error::Malformed(_))));
        }
        assert!(matches!(
            r.emit(&mut [0u8; 11][..]),
            Err(Error::Truncated { .. })
        ));
    }
}

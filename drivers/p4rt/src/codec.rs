//! The gRPC codec of the P4Runtime service and client: tonic-prost's, except that a message that
//! does not decode is `INVALID_ARGUMENT` (gRPC's code for a request the server cannot accept as
//! sent) instead of tonic-prost's `INTERNAL` (which says the server broke). A hostile or broken
//! client's bytes are its error, not the switch's (#40: the P4Runtime server answered malformed
//! protobuf with INTERNAL).

use std::marker::PhantomData;
use tonic::Status;
use tonic::codec::{BufferSettings, DecodeBuf};
use tonic_prost::{ProstDecoder, ProstEncoder};

/// [`tonic_prost::ProstCodec`] with decode errors as `INVALID_ARGUMENT` (used through
/// `codec_path` in build.rs).
#[derive(Debug, Clone)]
pub struct Codec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Codec(PhantomData)
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = Decoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        Decoder(ProstDecoder::default())
    }
}

/// tonic-prost's decoder, its decode errors re-coded.
#[derive(Debug, Clone)]
pub struct Decoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> tonic::codec::Decoder for Decoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(recode)
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}

/// tonic-prost's decoder fails only on a message that does not decode, as `INTERNAL`.
fn recode(s: Status) -> Status {
    if s.code() == tonic::Code::Internal {
        Status::invalid_argument(format!("the message does not decode: {}", s.message()))
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_error_is_invalid_argument_and_other_codes_stay() {
        let e = recode(Status::internal("invalid wire type value: 7"));
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("invalid wire type"), "{}", e.message());
        assert_eq!(
            recode(Status::out_of_range("too big")).code(),
            tonic::Code::OutOfRange
        );
    }
}

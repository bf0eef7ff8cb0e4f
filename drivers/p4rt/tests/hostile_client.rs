//! Valid P4Runtime requests that any client may send (the highest election id on a stream channel
//! is primary; there is no authentication) must not break the software switch for everyone:
//! no panic, no state that stays poisoned after the request, no allocation a request can size
//! (issue #40, item 2). Each sequence runs over gRPC through the crate's client and a raw stub.

use inabench_p4rt::P4rtError;
use inabench_p4rt::client::{Controller, update};
use inabench_p4rt::pb::p4::config::v1::P4Info;
use inabench_p4rt::pb::p4::v1 as p4;
use inabench_p4rt::pb::p4::v1::p4_runtime_client::P4RuntimeClient;
use inabench_p4rt::program::{self, REGISTER, id};
use inabench_p4rt::server::{MAX_REGISTER_CELLS, SoftSwitch, spawn_local};
use p4::entity::Entity as E;
use p4::update::Type as T;

const DEVICE: u64 = 1;
const ELECTION: (u64, u64) = (0, 1000);

fn reg() -> u32 {
    id(REGISTER, 0)
}

/// SwitchML's P4Info with its first register resized to `size` cells.
fn info_with_register(size: i32) -> P4Info {
    let mut info = program::switchml(4).p4info();
    let r = info
        .registers
        .iter_mut()
        .find(|r| r.preamble.as_ref().is_some_and(|p| p.id == reg()))
        .expect("the first register");
    r.size = size;
    info
}

fn cell(index: i64, value: u8) -> p4::Update {
    update(
        T::Modify,
        E::RegisterEntry(p4::RegisterEntry {
            register_id: reg(),
            index: Some(p4::Index { index }),
            data: Some(p4::P4Data {
                data: Some(p4::p4_data::Data::Bitstring(vec![value])),
            }),
        }),
    )
}

fn read_cell(index: Option<i64>) -> p4::Entity {
    p4::Entity {
        entity: Some(E::RegisterEntry(p4::RegisterEntry {
            register_id: reg(),
            index: index.map(|index| p4::Index { index }),
            data: None,
        })),
    }
}

fn cell_value(entities: &[p4::Entity], index: i64) -> Option<Vec<u8>> {
    entities.iter().find_map(|e| match &e.entity {
        Some(E::RegisterEntry(r)) if r.index.as_ref().map(|i| i.index) == Some(index) => {
            match r.data.as_ref().and_then(|d| d.data.as_ref()) {
                Some(p4::p4_data::Data::Bitstring(b)) => Some(b.clone()),
                _ => None,
            }
        }
        _ => None,
    })
}

/// A pipeline set with an explicit action, through the raw stub (the client's `set_pipeline`
/// always verifies and commits).
async fn set_pipeline(
    addr: &str,
    action: p4::set_forwarding_pipeline_config_request::Action,
    info: P4Info,
) -> Result<(), tonic::Status> {
    let mut raw = P4RuntimeClient::connect(format!("http://{addr}"))
        .await
        .expect("raw stub connects");
    raw.set_forwarding_pipeline_config(p4::SetForwardingPipelineConfigRequest {
        device_id: DEVICE,
        election_id: Some(p4::Uint128 {
            high: ELECTION.0,
            low: ELECTION.1,
        }),
        action: action as i32,
        config: Some(p4::ForwardingPipelineConfig {
            p4info: Some(info),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .map(|_| ())
}

fn code(e: P4rtError) -> tonic::Code {
    match e {
        P4rtError::Rpc { status, .. } => status.code(),
        other => panic!("not an RPC error: {other}"),
    }
}

/// The switch still answers everyone: a second controller arbitrates, reads and gets the
/// pipeline (none of them `INTERNAL`).
async fn still_serves(addr: &str) {
    let mut other = Controller::connect(addr, DEVICE, (0, 1))
        .await
        .map(Some)
        .or_else(|e| match e {
            // a lower election id is refused primacy, which is an answer, not a poisoned state
            P4rtError::NotPrimary(_) => Ok(None),
            e => Err(e),
        })
        .expect("a new client arbitrates");
    if let Some(c) = other.as_mut() {
        c.get_pipeline().await.expect("get pipeline");
    }
    let mut raw = P4RuntimeClient::connect(format!("http://{addr}"))
        .await
        .expect("raw stub connects");
    raw.read(p4::ReadRequest {
        device_id: DEVICE,
        entities: vec![read_cell(Some(0))],
        ..Default::default()
    })
    .await
    .expect("a read after the sequence");
}

/// D2 of the audit: a register grown by RECONCILE_AND_COMMIT, then a write past its old size,
/// panicked while holding the state lock, and every later request failed ("poisoned").
#[tokio::test]
async fn a_register_grown_by_reconcile_takes_writes_and_nothing_is_poisoned() {
    let (sw, _dp) = SoftSwitch::new(DEVICE);
    let addr = spawn_local(sw.clone()).await.expect("serve").to_string();
    let mut c = Controller::connect(&addr, DEVICE, ELECTION)
        .await
        .expect("primary");
    use p4::set_forwarding_pipeline_config_request::Action as A;
    set_pipeline(&addr, A::VerifyAndCommit, info_with_register(4))
        .await
        .expect("4 cells");
    c.write(vec![cell(1, 7)]).await.expect("write cell 1");
    set_pipeline(&addr, A::ReconcileAndCommit, info_with_register(1000))
        .await
        .expect("reconcile to 1000 cells");
    c.write(vec![cell(500, 9)]).await.expect("write cell 500");
    let got = c
        .read(vec![read_cell(None)])
        .await
        .expect("read the whole register");
    assert_eq!(got.len(), 1000);
    // reconcile keeps the state the new pipeline still has
    assert_eq!(cell_value(&got, 1), Some(vec![7]));
    assert_eq!(cell_value(&got, 500), Some(vec![9]));
    assert_eq!(cell_value(&got, 2), Some(vec![0]));
    // shrinking drops the cells past the new size; a write there is out of range
    set_pipeline(&addr, A::ReconcileAndCommit, info_with_register(100))
        .await
        .expect("reconcile to 100 cells");
    let e = c.write(vec![cell(500, 1)]).await.expect_err("past the end");
    assert_eq!(code(e), tonic::Code::OutOfRange);
    assert_eq!(sw.register(reg(), 1), Some(vec![7]));
    assert_eq!(sw.register(reg(), 500), None);
    still_serves(&addr).await;
}

/// D3 of the audit: a register of 2^31-1 cells was allocated in full at the first write (a
/// 51.5 GB allocation aborted the process), and a whole-register read enumerated every cell.
/// A pipeline over the stated cap is refused with RESOURCE_EXHAUSTED; one at the cap takes
/// writes and reads without allocating the cells it never wrote.
#[tokio::test]
async fn a_huge_register_is_refused_and_the_switch_lives_on() {
    let (sw, _dp) = SoftSwitch::new(DEVICE);
    let addr = spawn_local(sw.clone()).await.expect("serve").to_string();
    let mut c = Controller::connect(&addr, DEVICE, ELECTION)
        .await
        .expect("primary");
    use p4::set_forwarding_pipeline_config_request::Action as A;
    let e = set_pipeline(&addr, A::VerifyAndCommit, info_with_register(i32::MAX))
        .await
        .expect_err("2^31-1 cells");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
    assert!(e.message().contains("cells"), "{e}");
    // the refused pipeline did not replace anything: still no pipeline, writes say so
    let e = c.write(vec![cell(0, 1)]).await.expect_err("no pipeline");
    assert_eq!(code(e), tonic::Code::FailedPrecondition);

    // the biggest register the cap allows beside SwitchML's other 99 registers of 4 cells
    let big = MAX_REGISTER_CELLS - 99 * 4;
    set_pipeline(&addr, A::VerifyAndCommit, info_with_register(big as i32))
        .await
        .expect("at the cap");
    c.write(vec![cell(big - 1, 3), cell(0, 2)])
        .await
        .expect("writes at both ends");
    let got = c.read(vec![read_cell(Some(big - 1))]).await.expect("read");
    assert_eq!(cell_value(&got, big - 1), Some(vec![3]));
    // the same attack by a write past the end, and a negative index
    for i in [big, -1, i64::from(i32::MAX)] {
        let e = c.write(vec![cell(i, 1)]).await.expect_err("out of range");
        assert_eq!(code(e), tonic::Code::OutOfRange);
    }
    still_serves(&addr).await;
}

/// Raw request bytes, as a broken or hostile client sends them; the answer's bytes are ignored.
#[derive(Default)]
struct RawCodec;

struct RawEncoder;
struct RawDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(buf, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = ();
    type Error = tonic::Status;
    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<()>, tonic::Status> {
        let n = bytes::Buf::remaining(buf);
        bytes::Buf::advance(buf, n);
        Ok(Some(()))
    }
}

/// Bytes that are not a protobuf message (a field with wire type 7, which does not exist) are the
/// client's error, INVALID_ARGUMENT, and the switch goes on serving; a well-formed request on the
/// same path is answered as before (NOT_FOUND or PERMISSION_DENIED for a stranger: not INTERNAL).
#[tokio::test]
async fn a_request_that_does_not_decode_is_invalid_argument() {
    let (sw, _dp) = SoftSwitch::new(DEVICE);
    let addr = spawn_local(sw.clone()).await.expect("serve").to_string();
    let _c = Controller::connect(&addr, DEVICE, ELECTION)
        .await
        .expect("primary");
    use p4::set_forwarding_pipeline_config_request::Action as A;
    set_pipeline(&addr, A::VerifyAndCommit, info_with_register(4))
        .await
        .expect("4 cells");
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    for (path, junk) in [
        ("/p4.v1.P4Runtime/Write", vec![0x0f, 0x01]),
        ("/p4.v1.P4Runtime/Read", vec![0x0f, 0x01]),
        (
            "/p4.v1.P4Runtime/SetForwardingPipelineConfig",
            vec![0x0a, 0xff],
        ),
    ] {
        let mut g = tonic::client::Grpc::new(channel.clone());
        g.ready().await.expect("ready");
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
        let r = match path.as_str() {
            "/p4.v1.P4Runtime/Read" => g
                .server_streaming(tonic::Request::new(junk), path.clone(), RawCodec)
                .await
                .map(|_| ()),
            _ => g
                .unary(tonic::Request::new(junk), path.clone(), RawCodec)
                .await
                .map(|_| ()),
        };
        let e = r.expect_err("junk is refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{path}: {e}");
    }
    still_serves(&addr).await;
}

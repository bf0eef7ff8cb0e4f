//! The body of the cargo-fuzz target `p4rt` (fuzz/fuzz_targets/p4rt.rs), here so that the
//! stable test run drives it too (tests/fuzz_smoke.rs): arbitrary bytes decoded as P4Runtime
//! requests and handed to the software switch's handlers, which must never panic; a request
//! that does not carry the primary controller's election id must never change the switch.
//! Not part of the crate's API.
//!
//! The handlers are called directly (no gRPC transport, no runtime): none of them awaits, so one
//! poll finishes each. The switch starts with a primary controller (election id [`PRIMARY`] on
//! a stream channel) and SwitchML's pipeline, so well-formed writes reach the table, register
//! and multicast code.

use crate::pb::p4::v1 as p4;
use crate::pb::p4::v1::p4_runtime_server::P4Runtime;
use crate::server::SoftSwitch;
use prost::Message;
use std::future::Future;
use std::task::{Context, Poll, Waker};
use tonic::Request;

/// The device id of the fuzzed switch.
pub const DEVICE: u64 = 1;
/// The primary controller's election id.
pub const PRIMARY: (u64, u64) = (0, 5);

fn ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a P4Runtime handler awaited"),
    }
}

fn primary() -> Option<p4::Uint128> {
    Some(p4::Uint128 {
        high: PRIMARY.0,
        low: PRIMARY.1,
    })
}

/// A fresh switch with a primary controller and SwitchML's pipeline.
fn switch() -> SoftSwitch {
    let (sw, _dataplane) = SoftSwitch::new(DEVICE);
    sw.add_controller(PRIMARY);
    let info = crate::program::switchml(4).p4info();
    let set = p4::SetForwardingPipelineConfigRequest {
        device_id: DEVICE,
        election_id: primary(),
        action: p4::set_forwarding_pipeline_config_request::Action::VerifyAndCommit as i32,
        config: Some(p4::ForwardingPipelineConfig {
            p4info: Some(info.clone()),
            ..Default::default()
        }),
        ..Default::default()
    };
    ready(sw.set_forwarding_pipeline_config(Request::new(set)))
        .expect("the fuzz switch takes SwitchML's pipeline");
    sw
}

/// The first byte picks the request, the rest is its protobuf encoding.
pub fn p4rt(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let sw = switch();
    match pick % 5 {
        0 => {
            let Ok(req) = p4::WriteRequest::decode(rest) else {
                return;
            };
            let authorized = req.device_id == DEVICE && req.election_id == primary();
            let before = sw.contents();
            let r = ready(sw.write(Request::new(req)));
            if !authorized {
                assert!(
                    r.is_err(),
                    "a write without the primary's election id passed"
                );
                assert_eq!(sw.contents(), before, "a refused write changed the switch");
            }
        }
        1 => {
            // the same updates from the primary: they reach the table and register code
            let Ok(mut req) = p4::WriteRequest::decode(rest) else {
                return;
            };
            req.device_id = DEVICE;
            req.election_id = primary();
            let entities: Vec<p4::Entity> = req
                .updates
                .iter()
                .filter_map(|u| u.entity.clone())
                .collect();
            let _ = ready(sw.write(Request::new(req)));
            let _ = ready(sw.read(Request::new(p4::ReadRequest {
                device_id: DEVICE,
                entities,
                ..Default::default()
            })));
        }
        2 => {
            if let Ok(req) = p4::ReadRequest::decode(rest) {
                let _ = ready(sw.read(Request::new(req)));
            }
        }
        3 => {
            let Ok(req) = p4::SetForwardingPipelineConfigRequest::decode(rest) else {
                return;
            };
            let authorized = req.device_id == DEVICE && req.election_id == primary();
            let before = sw.contents();
            let r = ready(sw.set_forwarding_pipeline_config(Request::new(req)));
            if !authorized {
                assert!(
                    r.is_err(),
                    "a pipeline set without the primary's election id passed"
                );
                assert_eq!(sw.contents(), before, "a refused set changed the switch");
            }
        }
        _ => {
            if let Ok(req) = p4::GetForwardingPipelineConfigRequest::decode(rest) {
                let _ = ready(sw.get_forwarding_pipeline_config(Request::new(req)));
            }
        }
    }
}

/// One request of a sequence: the first byte picks it, two bytes (little-endian) give the length
/// of its protobuf encoding, which follows.
fn frames(mut data: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (&pick, rest) = data.split_first()?;
        let len = match rest {
            [a, b, ..] => usize::from(u16::from_le_bytes([*a, *b])),
            _ => 0,
        };
        let rest = rest.get(2..).unwrap_or(&[]);
        let (body, tail) = rest.split_at(len.min(rest.len()));
        data = tail;
        Some((pick, body))
    })
}

/// Encode a sequence for [`p4rt_sequence`] (seed corpora and tests).
pub fn encode_sequence(requests: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (pick, body) in requests {
        let len = u16::try_from(body.len()).unwrap_or(u16::MAX);
        out.push(*pick);
        out.extend(len.to_le_bytes());
        out.extend(&body[..usize::from(len)]);
    }
    out
}

/// Request kinds of [`p4rt_sequence`], by `pick % 6`.
pub const SEQ_WRITE: u8 = 0;
pub const SEQ_READ: u8 = 1;
pub const SEQ_SET_PIPELINE: u8 = 2;
pub const SEQ_GET_PIPELINE: u8 = 3;
pub const SEQ_ARBITRATE: u8 = 4;
pub const SEQ_WRITE_AS_IS: u8 = 5;

/// The body of the cargo-fuzz target `p4rt_sequence`: a sequence of requests to ONE switch, so
/// that state one request leaves (a pipeline, written cells, a new primary) meets the next
/// (issue #40: a register grown by RECONCILE_AND_COMMIT, then written past its old size, needs
/// two requests). Writes and pipeline sets carry the primary's election id (except
/// [`SEQ_WRITE_AS_IS`]); [`SEQ_ARBITRATE`] adds a controller with the election id in its first
/// 16 bytes. After every request the switch must still answer a read of its pipeline
/// (FAILED_PRECONDITION or OK, never INTERNAL): no state outlives a request broken.
pub fn p4rt_sequence(data: &[u8]) {
    let sw = switch();
    let mut election = primary();
    for (pick, body) in frames(data).take(64) {
        match pick % 6 {
            SEQ_WRITE => {
                if let Ok(mut req) = p4::WriteRequest::decode(body) {
                    req.device_id = DEVICE;
                    req.election_id = election;
                    let _ = ready(sw.write(Request::new(req)));
                }
            }
            SEQ_READ => {
                if let Ok(mut req) = p4::ReadRequest::decode(body) {
                    req.device_id = DEVICE;
                    let _ = ready(sw.read(Request::new(req)));
                }
            }
            SEQ_SET_PIPELINE => {
                if let Ok(mut req) = p4::SetForwardingPipelineConfigRequest::decode(body) {
                    req.device_id = DEVICE;
                    req.election_id = election;
                    let _ = ready(sw.set_forwarding_pipeline_config(Request::new(req)));
                }
            }
            SEQ_GET_PIPELINE => {
                if let Ok(mut req) = p4::GetForwardingPipelineConfigRequest::decode(body) {
                    req.device_id = DEVICE;
                    let _ = ready(sw.get_forwarding_pipeline_config(Request::new(req)));
                }
            }
            SEQ_ARBITRATE => {
                let mut id = [0u8; 16];
                let n = body.len().min(16);
                id[..n].copy_from_slice(&body[..n]);
                let (high, low) = (
                    u64::from_le_bytes(id[..8].try_into().unwrap_or_default()),
                    u64::from_le_bytes(id[8..].try_into().unwrap_or_default()),
                );
                sw.add_controller((high, low));
                // whoever now holds the highest id speaks for the later requests
                election = sw
                    .primary_election()
                    .map(|(high, low)| p4::Uint128 { high, low });
            }
            _ => {
                if let Ok(req) = p4::WriteRequest::decode(body) {
                    let _ = ready(sw.write(Request::new(req)));
                }
            }
        }
        let r = ready(sw.get_forwarding_pipeline_config(Request::new(
            p4::GetForwardingPipelineConfigRequest {
                device_id: DEVICE,
                response_type: 0,
            },
        )));
        if let Err(e) = r {
            assert_ne!(e.code(), tonic::Code::Internal, "the switch broke: {e}");
        }
    }
}

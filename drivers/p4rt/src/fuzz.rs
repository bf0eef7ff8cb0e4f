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

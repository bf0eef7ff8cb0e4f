//! The P4Runtime driver: what the suite uses to program a Tofino (or our software switch, which
//! serves the same service). Connect, become primary on the stream channel, push a pipeline,
//! write and read entities, send packet-outs and receive packet-ins.

use crate::P4rtError;
use crate::pb::p4::config::v1::P4Info;
use crate::pb::p4::v1 as p4;
use crate::pb::p4::v1::p4_runtime_client::P4RuntimeClient;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

fn rpc(rpc: &'static str) -> impl Fn(tonic::Status) -> P4rtError {
    move |status| P4rtError::Rpc {
        rpc,
        status: Box::new(status),
    }
}

/// How long [`Controller::connect`] waits for the TCP connection, and then for the switch to
/// open the stream channel and answer the arbitration.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one request (a pipeline push, a write, a read) may take once connected.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A controller session with one device.
pub struct Controller {
    client: P4RuntimeClient<Channel>,
    pub device_id: u64,
    pub election_id: (u64, u64),
    stream_tx: mpsc::Sender<p4::StreamMessageRequest>,
    inbound: tonic::Streaming<p4::StreamMessageResponse>,
}

impl Controller {
    /// Connect to `addr` (`host:port`), open the stream channel and ask to be primary with
    /// `election_id`; fails if another controller holds a higher one.
    pub async fn connect(
        addr: &str,
        device_id: u64,
        election_id: (u64, u64),
    ) -> Result<Controller, P4rtError> {
        Self::connect_within(addr, device_id, election_id, CONNECT_TIMEOUT).await
    }

    /// [`Controller::connect`] with another deadline for connecting and arbitrating (a switch
    /// that accepts the connection and never answers is an error naming its address, never a
    /// wait without end).
    pub async fn connect_within(
        addr: &str,
        device_id: u64,
        election_id: (u64, u64),
        deadline: Duration,
    ) -> Result<Controller, P4rtError> {
        let timed_out = || P4rtError::Timeout {
            addr: addr.to_string(),
            what: "open the stream channel and answer the arbitration",
            after: deadline,
        };
        tokio::time::timeout(deadline, Self::open(addr, device_id, election_id, deadline))
            .await
            .map_err(|_| timed_out())?
    }

    async fn open(
        addr: &str,
        device_id: u64,
        election_id: (u64, u64),
        deadline: Duration,
    ) -> Result<Controller, P4rtError> {
        let uri = if addr.contains("://") {
            addr.to_string()
        } else {
            format!("http://{addr}")
        };
        let connect_error = |source| P4rtError::Connect {
            addr: addr.to_string(),
            source,
        };
        let channel = tonic::transport::Endpoint::from_shared(uri)
            .map_err(connect_error)?
            .connect_timeout(deadline)
            .timeout(REQUEST_TIMEOUT)
            .connect()
            .await
            .map_err(connect_error)?;
        let mut client = P4RuntimeClient::new(channel);
        let closed = || P4rtError::Closed {
            addr: addr.to_string(),
        };
        let (stream_tx, rx) = mpsc::channel(64);
        let mut inbound = client
            .stream_channel(ReceiverStream::new(rx))
            .await
            .map_err(rpc("StreamChannel"))?
            .into_inner();
        stream_tx
            .send(p4::StreamMessageRequest {
                update: Some(p4::stream_message_request::Update::Arbitration(
                    p4::MasterArbitrationUpdate {
                        device_id,
                        role: None,
                        election_id: Some(p4::Uint128 {
                            high: election_id.0,
                            low: election_id.1,
                        }),
                        status: None,
                    },
                )),
            })
            .await
            .map_err(|_| closed())?;
        // the switch answers with the arbitration result
        loop {
            let msg = inbound
                .next()
                .await
                .ok_or_else(closed)?
                .map_err(rpc("StreamChannel"))?;
            if let Some(p4::stream_message_response::Update::Arbitration(a)) = msg.update {
                let status = a.status.unwrap_or_default();
                if status.code != 0 {
                    return Err(P4rtError::NotPrimary(status.message));
                }
                break;
            }
        }
        Ok(Controller {
            client,
            device_id,
            election_id,
            stream_tx,
            inbound,
        })
    }

    fn election(&self) -> Option<p4::Uint128> {
        Some(p4::Uint128 {
            high: self.election_id.0,
            low: self.election_id.1,
        })
    }

    /// Verify, save and commit a pipeline.
    pub async fn set_pipeline(
        &mut self,
        p4info: P4Info,
        device_config: Vec<u8>,
        cookie: u64,
    ) -> Result<(), P4rtError> {
        let req = p4::SetForwardingPipelineConfigRequest {
            device_id: self.device_id,
            role: String::new(),
            election_id: self.election(),
            action: p4::set_forwarding_pipeline_config_request::Action::VerifyAndCommit as i32,
            config: Some(p4::ForwardingPipelineConfig {
                p4info: Some(p4info),
                p4_device_config: device_config,
                cookie: Some(p4::forwarding_pipeline_config::Cookie { cookie }),
            }),
        };
        self.client
            .set_forwarding_pipeline_config(req)
            .await
            .map_err(rpc("SetForwardingPipelineConfig"))?;
        Ok(())
    }

    /// The device's P4Info and cookie.
    pub async fn get_pipeline(&mut self) -> Result<p4::ForwardingPipelineConfig, P4rtError> {
        use p4::get_forwarding_pipeline_config_request::ResponseType;
        self.get_config(ResponseType::P4infoAndCookie).await
    }

    /// The device config the pipeline was set with (the target-specific binary).
    pub async fn get_device_config(&mut self) -> Result<Vec<u8>, P4rtError> {
        use p4::get_forwarding_pipeline_config_request::ResponseType;
        Ok(self
            .get_config(ResponseType::DeviceConfigAndCookie)
            .await?
            .p4_device_config)
    }

    async fn get_config(
        &mut self,
        response_type: p4::get_forwarding_pipeline_config_request::ResponseType,
    ) -> Result<p4::ForwardingPipelineConfig, P4rtError> {
        let r = self
            .client
            .get_forwarding_pipeline_config(p4::GetForwardingPipelineConfigRequest {
                device_id: self.device_id,
                response_type: response_type as i32,
            })
            .await
            .map_err(rpc("GetForwardingPipelineConfig"))?;
        Ok(r.into_inner().config.unwrap_or_default())
    }

    /// Apply updates as one batch.
    pub async fn write(&mut self, updates: Vec<p4::Update>) -> Result<(), P4rtError> {
        let req = p4::WriteRequest {
            device_id: self.device_id,
            role: String::new(),
            election_id: self.election(),
            updates,
            atomicity: 0,
        };
        self.client.write(req).await.map_err(rpc("Write"))?;
        Ok(())
    }

    /// Read entities (wildcards as P4Runtime defines them).
    pub async fn read(&mut self, entities: Vec<p4::Entity>) -> Result<Vec<p4::Entity>, P4rtError> {
        let mut s = self
            .client
            .read(p4::ReadRequest {
                device_id: self.device_id,
                role: String::new(),
                entities,
            })
            .await
            .map_err(rpc("Read"))?
            .into_inner();
        let mut out = Vec::new();
        while let Some(r) = s.next().await {
            out.extend(r.map_err(rpc("Read"))?.entities);
        }
        Ok(out)
    }

    pub async fn capabilities(&mut self) -> Result<String, P4rtError> {
        Ok(self
            .client
            .capabilities(p4::CapabilitiesRequest {})
            .await
            .map_err(rpc("Capabilities"))?
            .into_inner()
            .p4runtime_api_version)
    }

    pub async fn packet_out(
        &mut self,
        payload: Vec<u8>,
        metadata: Vec<(u32, Vec<u8>)>,
    ) -> Result<(), P4rtError> {
        self.stream_tx
            .send(p4::StreamMessageRequest {
                update: Some(p4::stream_message_request::Update::Packet(p4::PacketOut {
                    payload,
                    metadata: metadata
                        .into_iter()
                        .map(|(metadata_id, value)| p4::PacketMetadata { metadata_id, value })
                        .collect(),
                })),
            })
            .await
            .map_err(|_| P4rtError::StreamClosed)
    }

    /// The next packet-in (other stream messages are skipped).
    pub async fn packet_in(&mut self) -> Result<Vec<u8>, P4rtError> {
        loop {
            let msg = self
                .inbound
                .next()
                .await
                .ok_or(P4rtError::StreamClosed)?
                .map_err(rpc("StreamChannel"))?;
            if let Some(p4::stream_message_response::Update::Packet(p)) = msg.update {
                return Ok(p.payload);
            }
        }
    }
}

/// An INSERT/MODIFY/DELETE of `entity`.
pub fn update(kind: p4::update::Type, entity: p4::entity::Entity) -> p4::Update {
    p4::Update {
        r#type: kind as i32,
        entity: Some(p4::Entity {
            entity: Some(entity),
        }),
    }
}

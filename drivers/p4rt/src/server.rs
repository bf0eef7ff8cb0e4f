//! The software switch's P4Runtime server. It keeps what a P4Runtime target keeps: the primary
//! controller chosen by election id on the stream channels, the forwarding pipeline config
//! (P4Info and device config), table entries, register cells and multicast groups, and it hands
//! every packet-out to its data plane (a channel the software switch reads) and sends packet-ins
//! to the primary. Writes are checked against the P4Info: unknown ids, wrong widths, duplicate
//! or missing entries and out-of-range register indices are errors with the canonical codes.

use crate::pb::google::rpc::Status as RpcStatus;
use crate::pb::p4::config::v1::P4Info;
use crate::pb::p4::v1 as p4;
use crate::pb::p4::v1::p4_runtime_server::{P4Runtime, P4RuntimeServer};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

/// A packet the controller sent into the data plane.
#[derive(Debug, Clone, PartialEq)]
pub struct PacketOut {
    pub payload: Vec<u8>,
    pub metadata: Vec<(u32, Vec<u8>)>,
}

/// A register's written cells by index (cells never written read as 0): memory follows the
/// writes, never the declared size.
type Cells = BTreeMap<i64, Vec<u8>>;

/// A switch's contents: pipeline config, tables, registers, multicast groups.
pub(crate) type Contents = (
    Option<p4::ForwardingPipelineConfig>,
    HashMap<u32, BTreeMap<Vec<u8>, p4::TableEntry>>,
    HashMap<u32, Cells>,
    BTreeMap<u32, p4::MulticastGroupEntry>,
);

/// The most register cells a pipeline may declare, all registers together (1 Mi cells: a
/// Tofino's register memory is a few MB). A larger P4Info is refused with RESOURCE_EXHAUSTED.
pub const MAX_REGISTER_CELLS: i64 = 1 << 20;

/// The most entries a table holds: its P4Info `size`, and never more than this (nor more than
/// this for a table that declares no size). A full table answers RESOURCE_EXHAUSTED.
pub const MAX_TABLE_ENTRIES: i64 = 1 << 16;

/// The most multicast groups, and the most replicas in one group.
pub const MAX_MULTICAST_GROUPS: usize = 1 << 12;
pub const MAX_REPLICAS: usize = 1 << 10;

/// A stream channel's outbound queue.
type Outbound = mpsc::Sender<Result<p4::StreamMessageResponse, Status>>;

#[derive(Default)]
struct State {
    device_id: u64,
    config: Option<p4::ForwardingPipelineConfig>,
    /// table id -> entries keyed by (match, priority) encoding
    tables: HashMap<u32, BTreeMap<Vec<u8>, p4::TableEntry>>,
    /// register id -> written cells
    registers: HashMap<u32, Cells>,
    groups: BTreeMap<u32, p4::MulticastGroupEntry>,
    /// stream id -> (its election id once it arbitrated, its outbound queue)
    streams: HashMap<u64, (Option<(u64, u64)>, Outbound)>,
    next_stream: u64,
}

impl State {
    fn primary(&self) -> Option<(u64, u64)> {
        self.streams.values().filter_map(|(e, _)| *e).max()
    }

    fn p4info(&self) -> Result<&P4Info, Status> {
        self.config
            .as_ref()
            .and_then(|c| c.p4info.as_ref())
            .ok_or_else(|| Status::failed_precondition("no forwarding pipeline config is set"))
    }

    fn check_primary(&self, election: Option<&p4::Uint128>) -> Result<(), Status> {
        let e = election.map(|u| (u.high, u.low));
        match (self.primary(), e) {
            (Some(p), Some(e)) if p == e => Ok(()),
            _ => Err(Status::permission_denied(
                "only the primary controller may write (its election id must be the highest on a stream channel)",
            )),
        }
    }

    /// Tell every stream whether it is primary.
    fn announce(&self) {
        let primary = self.primary();
        for (e, tx) in self.streams.values() {
            let Some(e) = e else { continue };
            let ok = Some(*e) == primary;
            let p = primary.unwrap_or((0, 0));
            let msg = p4::StreamMessageResponse {
                update: Some(p4::stream_message_response::Update::Arbitration(
                    p4::MasterArbitrationUpdate {
                        device_id: self.device_id,
                        role: None,
                        election_id: Some(p4::Uint128 {
                            high: p.0,
                            low: p.1,
                        }),
                        status: Some(RpcStatus {
                            code: if ok { 0 } else { 6 },
                            message: if ok {
                                "primary".into()
                            } else {
                                "a controller with a higher election id is primary".into()
                            },
                            details: vec![],
                        }),
                    },
                )),
            };
            let _ = tx.try_send(Ok(msg));
        }
    }

    fn apply(&mut self, u: &p4::Update) -> Result<(), Status> {
        let ty = p4::update::Type::try_from(u.r#type).unwrap_or(p4::update::Type::Unspecified);
        let entity = u
            .entity
            .as_ref()
            .and_then(|e| e.entity.as_ref())
            .ok_or_else(|| Status::invalid_argument("an update without an entity"))?;
        // a field borrow, disjoint from the tables and registers written below (no copy)
        let info = self
            .config
            .as_ref()
            .and_then(|c| c.p4info.as_ref())
            .ok_or_else(|| Status::failed_precondition("no forwarding pipeline config is set"))?;
        match entity {
            p4::entity::Entity::TableEntry(t) => {
                let table = info
                    .tables
                    .iter()
                    .find(|x| x.preamble.as_ref().is_some_and(|p| p.id == t.table_id))
                    .ok_or_else(|| {
                        Status::not_found(format!("no table with id {:#x}", t.table_id))
                    })?;
                for m in &t.r#match {
                    let f = table
                        .match_fields
                        .iter()
                        .find(|f| f.id == m.field_id)
                        .ok_or_else(|| {
                            Status::invalid_argument(format!("no match field {}", m.field_id))
                        })?;
                    let bytes = match &m.field_match_type {
                        Some(p4::field_match::FieldMatchType::Exact(e)) => e.value.len(),
                        Some(p4::field_match::FieldMatchType::Lpm(l)) => l.value.len(),
                        Some(p4::field_match::FieldMatchType::Ternary(t)) => t.value.len(),
                        None => return Err(Status::invalid_argument("a match without a value")),
                    };
                    if bytes == 0 || bytes > (f.bitwidth as usize).div_ceil(8) {
                        return Err(Status::invalid_argument(format!(
                            "match field {} is {} bits, the value has {bytes} bytes",
                            f.name, f.bitwidth
                        )));
                    }
                }
                if let Some(p4::table_action::Type::Action(a)) =
                    t.action.as_ref().and_then(|a| a.r#type.as_ref())
                {
                    use crate::pb::p4::config::v1::action_ref::Scope;
                    let Some(r) = table.action_refs.iter().find(|r| r.id == a.action_id) else {
                        return Err(Status::invalid_argument(format!(
                            "action {:#x} is not an action of this table",
                            a.action_id
                        )));
                    };
                    let (only, want) = if t.is_default_action {
                        (Scope::TableOnly, "a match entry's only")
                    } else {
                        (Scope::DefaultOnly, "the default entry's only")
                    };
                    if r.scope == only as i32 {
                        return Err(Status::invalid_argument(format!(
                            "action {:#x} is {want} in this table",
                            a.action_id
                        )));
                    }
                }
                // the default entry (P4Runtime's is_default_action): no match and no priority,
                // only modified (it always exists; a MODIFY without an action resets it to the
                // program's, none here); kept under the empty key, which no match entry's key
                // (its matches and 4 priority bytes) is
                if t.is_default_action {
                    if !t.r#match.is_empty() || t.priority != 0 {
                        return Err(Status::invalid_argument(
                            "a default entry has no match fields and no priority",
                        ));
                    }
                    if ty != p4::update::Type::Modify {
                        return Err(Status::invalid_argument(
                            "a table's default entry is only modified (INSERT and DELETE are for match entries)",
                        ));
                    }
                    let entries = self.tables.entry(t.table_id).or_default();
                    if t.action.is_some() {
                        entries.insert(Vec::new(), t.clone());
                    } else {
                        entries.remove(&Vec::new());
                    }
                    return Ok(());
                }
                if table.match_fields.is_empty() {
                    return Err(Status::invalid_argument(format!(
                        "table {:#x} has no match fields: it holds its default entry only",
                        t.table_id
                    )));
                }
                let mut key = Vec::new();
                for m in &t.r#match {
                    key.extend(prost::Message::encode_to_vec(m));
                }
                key.extend(t.priority.to_be_bytes());
                let capacity = match table.size {
                    s if s > 0 => s.min(MAX_TABLE_ENTRIES),
                    _ => MAX_TABLE_ENTRIES,
                } as usize;
                let entries = self.tables.entry(t.table_id).or_default();
                match ty {
                    p4::update::Type::Insert => {
                        if entries.contains_key(&key) {
                            return Err(Status::already_exists("the entry exists"));
                        }
                        if entries.len() >= capacity {
                            return Err(Status::resource_exhausted(format!(
                                "table {:#x} is full ({capacity} entries)",
                                t.table_id
                            )));
                        }
                        entries.insert(key, t.clone());
                    }
                    p4::update::Type::Modify => {
                        let e = entries
                            .get_mut(&key)
                            .ok_or_else(|| Status::not_found("no such entry"))?;
                        *e = t.clone();
                    }
                    p4::update::Type::Delete => {
                        entries
                            .remove(&key)
                            .ok_or_else(|| Status::not_found("no such entry"))?;
                    }
                    p4::update::Type::Unspecified => {
                        return Err(Status::invalid_argument("an update without a type"));
                    }
                }
            }
            p4::entity::Entity::RegisterEntry(r) => {
                if ty != p4::update::Type::Modify {
                    return Err(Status::invalid_argument(
                        "register entries are only modified",
                    ));
                }
                let reg = info
                    .registers
                    .iter()
                    .find(|x| x.preamble.as_ref().is_some_and(|p| p.id == r.register_id))
                    .ok_or_else(|| {
                        Status::not_found(format!("no register with id {:#x}", r.register_id))
                    })?;
                let width = register_bits(reg);
                let index =
                    r.index.as_ref().map(|i| i.index).ok_or_else(|| {
                        Status::invalid_argument("a register write needs an index")
                    })?;
                if index < 0 || index >= i64::from(reg.size) {
                    return Err(Status::out_of_range(format!(
                        "index {index} of a register of {} cells",
                        reg.size
                    )));
                }
                let Some(p4::p4_data::Data::Bitstring(b)) =
                    r.data.as_ref().and_then(|d| d.data.as_ref())
                else {
                    return Err(Status::invalid_argument(
                        "register data must be a bitstring",
                    ));
                };
                if b.len() > (width as usize).div_ceil(8) {
                    return Err(Status::invalid_argument(format!(
                        "a {width}-bit register cell cannot hold {} bytes",
                        b.len()
                    )));
                }
                self.registers
                    .entry(r.register_id)
                    .or_default()
                    .insert(index, b.clone());
            }
            p4::entity::Entity::PacketReplicationEngineEntry(p) => {
                let Some(p4::packet_replication_engine_entry::Type::MulticastGroupEntry(g)) =
                    &p.r#type
                else {
                    return Err(Status::invalid_argument(
                        "only multicast groups are supported",
                    ));
                };
                let exists = self.groups.contains_key(&g.multicast_group_id);
                match ty {
                    p4::update::Type::Insert if exists => {
                        return Err(Status::already_exists("the group exists"));
                    }
                    p4::update::Type::Insert | p4::update::Type::Modify => {
                        if ty == p4::update::Type::Modify && !exists {
                            return Err(Status::not_found("no such group"));
                        }
                        if !exists && self.groups.len() >= MAX_MULTICAST_GROUPS {
                            return Err(Status::resource_exhausted(format!(
                                "the switch holds at most {MAX_MULTICAST_GROUPS} multicast groups"
                            )));
                        }
                        if g.replicas.len() > MAX_REPLICAS {
                            return Err(Status::resource_exhausted(format!(
                                "a multicast group holds at most {MAX_REPLICAS} replicas, not {}",
                                g.replicas.len()
                            )));
                        }
                        self.groups.insert(g.multicast_group_id, g.clone());
                    }
                    p4::update::Type::Delete => {
                        self.groups
                            .remove(&g.multicast_group_id)
                            .ok_or_else(|| Status::not_found("no such group"))?;
                    }
                    p4::update::Type::Unspecified => {
                        return Err(Status::invalid_argument("an update without a type"));
                    }
                }
            }
        }
        Ok(())
    }

    fn read(&self, e: &p4::Entity) -> Result<Vec<p4::Entity>, Status> {
        let info = self.p4info()?;
        let wrap = |x: p4::entity::Entity| p4::Entity { entity: Some(x) };
        Ok(match e.entity.as_ref() {
            Some(p4::entity::Entity::TableEntry(t)) => self
                .tables
                .iter()
                .filter(|(id, _)| t.table_id == 0 || **id == t.table_id)
                .flat_map(|(_, es)| es.values())
                // a table's default entry is read when asked for (is_default_action), never
                // by a wildcard read of its match entries
                .filter(|x| x.is_default_action == t.is_default_action)
                .filter(|x| t.r#match.is_empty() || x.r#match == t.r#match)
                .map(|x| wrap(p4::entity::Entity::TableEntry(x.clone())))
                .collect(),
            Some(p4::entity::Entity::RegisterEntry(r)) => {
                let mut out = Vec::new();
                for reg in &info.registers {
                    let Some(id) = reg.preamble.as_ref().map(|p| p.id) else {
                        continue;
                    };
                    if r.register_id != 0 && r.register_id != id {
                        continue;
                    }
                    let cells = self.registers.get(&id);
                    let range: Vec<i64> = match &r.index {
                        Some(i) => vec![i.index],
                        None => (0..i64::from(reg.size)).collect(),
                    };
                    for i in range {
                        if i < 0 || i >= i64::from(reg.size) {
                            return Err(Status::out_of_range(format!(
                                "index {i} of {} cells",
                                reg.size
                            )));
                        }
                        let v = cells
                            .and_then(|c| c.get(&i))
                            .cloned()
                            .unwrap_or_else(|| vec![0]);
                        out.push(wrap(p4::entity::Entity::RegisterEntry(p4::RegisterEntry {
                            register_id: id,
                            index: Some(p4::Index { index: i }),
                            data: Some(p4::P4Data {
                                data: Some(p4::p4_data::Data::Bitstring(v)),
                            }),
                        })));
                    }
                }
                out
            }
            Some(p4::entity::Entity::PacketReplicationEngineEntry(p)) => {
                let want = match &p.r#type {
                    Some(p4::packet_replication_engine_entry::Type::MulticastGroupEntry(g)) => {
                        g.multicast_group_id
                    }
                    None => 0,
                };
                self.groups
                    .values()
                    .filter(|g| want == 0 || g.multicast_group_id == want)
                    .map(|g| {
                        wrap(p4::entity::Entity::PacketReplicationEngineEntry(
                            p4::PacketReplicationEngineEntry {
                                r#type: Some(
                                    p4::packet_replication_engine_entry::Type::MulticastGroupEntry(
                                        g.clone(),
                                    ),
                                ),
                            },
                        ))
                    })
                    .collect()
            }
            None => Vec::new(),
        })
    }
}

/// A pipeline's declared sizes within the switch's stated caps: register sizes 1 or more and
/// [`MAX_REGISTER_CELLS`] in all, table sizes not negative.
fn check_sizes(info: &P4Info) -> Result<(), Status> {
    let mut cells = 0i64;
    for r in &info.registers {
        let name = r.preamble.as_ref().map_or("", |p| p.name.as_str());
        if r.size < 1 {
            return Err(Status::invalid_argument(format!(
                "register `{name}` has {} cells",
                r.size
            )));
        }
        cells += i64::from(r.size);
    }
    if cells > MAX_REGISTER_CELLS {
        return Err(Status::resource_exhausted(format!(
            "the pipeline declares {cells} register cells; this switch holds at most {MAX_REGISTER_CELLS}"
        )));
    }
    if let Some(t) = info.tables.iter().find(|t| t.size < 0) {
        return Err(Status::invalid_argument(format!(
            "table `{}` has size {}",
            t.preamble.as_ref().map_or("", |p| p.name.as_str()),
            t.size
        )));
    }
    Ok(())
}

fn register_bits(r: &crate::pb::p4::config::v1::Register) -> i32 {
    use crate::pb::p4::config::v1::{p4_bitstring_like_type_spec, p4_data_type_spec};
    match r.type_spec.as_ref().and_then(|t| t.type_spec.as_ref()) {
        Some(p4_data_type_spec::TypeSpec::Bitstring(b)) => match &b.type_spec {
            Some(p4_bitstring_like_type_spec::TypeSpec::Bit(b)) => b.bitwidth,
            None => 32,
        },
        None => 32,
    }
}

/// The software switch's P4Runtime service.
#[derive(Clone)]
pub struct SoftSwitch {
    state: Arc<Mutex<State>>,
    dataplane: mpsc::UnboundedSender<PacketOut>,
}

impl SoftSwitch {
    /// A switch with device id `device_id`; packet-outs arrive on the returned receiver.
    pub fn new(device_id: u64) -> (SoftSwitch, mpsc::UnboundedReceiver<PacketOut>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            SoftSwitch {
                state: Arc::new(Mutex::new(State {
                    device_id,
                    ..State::default()
                })),
                dataplane: tx,
            },
            rx,
        )
    }

    /// The switch state. No request handler panics while holding it; should one ever, the
    /// poison is cleared here so that one request's failure does not outlive it (every later
    /// request, from any client, would otherwise fail).
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, Status> {
        Ok(self.state.lock().unwrap_or_else(|poisoned| {
            self.state.clear_poison();
            poisoned.into_inner()
        }))
    }

    fn check_device(&self, id: u64) -> Result<(), Status> {
        let d = self.lock()?.device_id;
        if id != d {
            return Err(Status::not_found(format!(
                "no device {id} (this switch is device {d})"
            )));
        }
        Ok(())
    }

    /// Send a packet to the primary controller.
    pub fn packet_in(&self, payload: Vec<u8>) -> bool {
        let Ok(s) = self.lock() else { return false };
        let Some(p) = s.primary() else { return false };
        s.streams
            .values()
            .filter(|(e, _)| *e == Some(p))
            .any(|(_, tx)| {
                tx.try_send(Ok(p4::StreamMessageResponse {
                    update: Some(p4::stream_message_response::Update::Packet(p4::PacketIn {
                        payload: payload.clone(),
                        metadata: vec![],
                    })),
                }))
                .is_ok()
            })
    }

    /// What the switch holds (pipeline config, tables, registers, multicast groups), to tell
    /// whether a request changed it (the fuzz target's check that a refused request did not).
    pub(crate) fn contents(&self) -> Option<Contents> {
        let s = self.lock().ok()?;
        Some((
            s.config.clone(),
            s.tables.clone(),
            s.registers.clone(),
            s.groups.clone(),
        ))
    }

    /// A controller that arbitrated with election id `e` on a stream channel whose responses
    /// nobody reads (the fuzz target's primary, without a transport).
    pub(crate) fn add_controller(&self, e: (u64, u64)) {
        let Ok(mut s) = self.lock() else { return };
        let (tx, _) = mpsc::channel(1);
        s.next_stream += 1;
        let id = s.next_stream;
        s.streams.insert(id, (Some(e), tx));
    }

    /// The primary controller's election id (the fuzz target's sequences follow it).
    pub(crate) fn primary_election(&self) -> Option<(u64, u64)> {
        self.lock().ok()?.primary()
    }

    /// A register cell as the data plane sees it (None: never written).
    pub fn register(&self, id: u32, index: usize) -> Option<Vec<u8>> {
        let index = i64::try_from(index).ok()?;
        self.lock().ok()?.registers.get(&id)?.get(&index).cloned()
    }

    /// Serve on `listener` until the future is dropped.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
    ) -> Result<(), tonic::transport::Error> {
        tonic::transport::Server::builder()
            .add_service(P4RuntimeServer::new(self))
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
    }
}

/// Bind 127.0.0.1:0 and serve `switch` on a background task; returns the address.
pub async fn spawn_local(switch: SoftSwitch) -> std::io::Result<SocketAddr> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(switch.serve(l));
    Ok(addr)
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl P4Runtime for SoftSwitch {
    async fn write(
        &self,
        req: Request<p4::WriteRequest>,
    ) -> Result<Response<p4::WriteResponse>, Status> {
        let r = req.into_inner();
        self.check_device(r.device_id)?;
        let mut s = self.lock()?;
        s.check_primary(r.election_id.as_ref())?;
        for u in &r.updates {
            s.apply(u)?;
        }
        Ok(Response::new(p4::WriteResponse {}))
    }

    type ReadStream = BoxStream<p4::ReadResponse>;

    async fn read(
        &self,
        req: Request<p4::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let r = req.into_inner();
        self.check_device(r.device_id)?;
        let s = self.lock()?;
        let mut entities = Vec::new();
        for e in &r.entities {
            entities.extend(s.read(e)?);
        }
        let out = tokio_stream::iter(vec![Ok(p4::ReadResponse { entities })]);
        Ok(Response::new(Box::pin(out)))
    }

    async fn set_forwarding_pipeline_config(
        &self,
        req: Request<p4::SetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::SetForwardingPipelineConfigResponse>, Status> {
        let r = req.into_inner();
        self.check_device(r.device_id)?;
        let mut s = self.lock()?;
        s.check_primary(r.election_id.as_ref())?;
        use p4::set_forwarding_pipeline_config_request::Action as A;
        let action = A::try_from(r.action).unwrap_or(A::Unspecified);
        let config = r
            .config
            .ok_or_else(|| Status::invalid_argument("no config"))?;
        let info = config
            .p4info
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("no p4info"))?;
        let mut ids = std::collections::HashSet::new();
        let all = info
            .tables
            .iter()
            .filter_map(|t| t.preamble.as_ref())
            .chain(info.actions.iter().filter_map(|a| a.preamble.as_ref()))
            .chain(info.registers.iter().filter_map(|r| r.preamble.as_ref()));
        for p in all {
            if p.id == 0 || !ids.insert(p.id) {
                return Err(Status::invalid_argument(format!(
                    "the p4info's id {:#x} ({}) is zero or used twice",
                    p.id, p.name
                )));
            }
        }
        check_sizes(info)?;
        match action {
            A::Verify => {}
            A::VerifyAndSave | A::VerifyAndCommit => {
                s.config = Some(config);
                s.tables.clear();
                s.registers.clear();
                s.groups.clear();
            }
            A::ReconcileAndCommit => {
                // keep what the new pipeline still has: tables and registers by id, cells
                // below the register's new size
                let sizes: HashMap<u32, i64> = info
                    .registers
                    .iter()
                    .filter_map(|r| Some((r.preamble.as_ref()?.id, i64::from(r.size))))
                    .collect();
                let tables: std::collections::HashSet<u32> = info
                    .tables
                    .iter()
                    .filter_map(|t| Some(t.preamble.as_ref()?.id))
                    .collect();
                s.registers.retain(|id, cells| {
                    let Some(&size) = sizes.get(id) else {
                        return false;
                    };
                    cells.retain(|i, _| *i < size);
                    true
                });
                s.tables.retain(|id, _| tables.contains(id));
                s.config = Some(config);
            }
            A::Commit | A::Unspecified => {
                return Err(Status::invalid_argument("unsupported pipeline action"));
            }
        }
        Ok(Response::new(p4::SetForwardingPipelineConfigResponse {}))
    }

    async fn get_forwarding_pipeline_config(
        &self,
        req: Request<p4::GetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::GetForwardingPipelineConfigResponse>, Status> {
        let r = req.into_inner();
        self.check_device(r.device_id)?;
        let s = self.lock()?;
        let c = s
            .config
            .clone()
            .ok_or_else(|| Status::failed_precondition("no forwarding pipeline config is set"))?;
        use p4::get_forwarding_pipeline_config_request::ResponseType as T;
        let c = match T::try_from(r.response_type).unwrap_or(T::All) {
            T::All => c,
            T::CookieOnly => p4::ForwardingPipelineConfig {
                cookie: c.cookie,
                ..Default::default()
            },
            T::P4infoAndCookie => p4::ForwardingPipelineConfig {
                p4info: c.p4info,
                cookie: c.cookie,
                ..Default::default()
            },
            T::DeviceConfigAndCookie => p4::ForwardingPipelineConfig {
                p4_device_config: c.p4_device_config,
                cookie: c.cookie,
                ..Default::default()
            },
        };
        Ok(Response::new(p4::GetForwardingPipelineConfigResponse {
            config: Some(c),
        }))
    }

    type StreamChannelStream = BoxStream<p4::StreamMessageResponse>;

    async fn stream_channel(
        &self,
        req: Request<Streaming<p4::StreamMessageRequest>>,
    ) -> Result<Response<Self::StreamChannelStream>, Status> {
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(256);
        let id = {
            let mut s = self.lock()?;
            s.next_stream += 1;
            let id = s.next_stream;
            s.streams.insert(id, (None, tx.clone()));
            id
        };
        let me = self.clone();
        tokio::spawn(async move {
            while let Some(msg) = inbound.next().await {
                let Ok(msg) = msg else { break };
                match msg.update {
                    Some(p4::stream_message_request::Update::Arbitration(a)) => {
                        let Ok(mut s) = me.lock() else { break };
                        if a.device_id != s.device_id {
                            let _ = tx.try_send(Err(Status::not_found(format!(
                                "no device {}",
                                a.device_id
                            ))));
                            continue;
                        }
                        let e = a.election_id.map_or((0, 0), |u| (u.high, u.low));
                        if let Some(entry) = s.streams.get_mut(&id) {
                            entry.0 = Some(e);
                        }
                        s.announce();
                    }
                    Some(p4::stream_message_request::Update::Packet(p)) => {
                        let primary = me
                            .lock()
                            .map(|s| {
                                s.primary().is_some()
                                    && s.streams.get(&id).and_then(|x| x.0) == s.primary()
                            })
                            .unwrap_or(false);
                        if primary {
                            let _ = me.dataplane.send(PacketOut {
                                payload: p.payload,
                                metadata: p
                                    .metadata
                                    .into_iter()
                                    .map(|m| (m.metadata_id, m.value))
                                    .collect(),
                            });
                        } else {
                            let _ = tx.try_send(Ok(p4::StreamMessageResponse {
                                update: Some(p4::stream_message_response::Update::Error(
                                    p4::StreamError {
                                        canonical_code: 7,
                                        message: "packet-out from a non-primary controller".into(),
                                        ..Default::default()
                                    },
                                )),
                            }));
                        }
                    }
                    None => {}
                }
            }
            // the stream ended: forget it, and tell the others who is primary now
            if let Ok(mut s) = me.lock() {
                s.streams.remove(&id);
                s.announce();
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn capabilities(
        &self,
        _req: Request<p4::CapabilitiesRequest>,
    ) -> Result<Response<p4::CapabilitiesResponse>, Status> {
        Ok(Response::new(p4::CapabilitiesResponse {
            p4runtime_api_version: crate::API_VERSION.into(),
        }))
    }
}

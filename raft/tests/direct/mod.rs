//! A raft network of direct calls between the rafts of one process, for the tests that run
//! many groups: each request goes through its wire encoding, as over a real network, a raft
//! reaches only its own group on other nodes, and one that is down is unreachable.

use bloomkv_raft::{GroupId, NodeId, Raft, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;

/// Where a test keeps its running rafts.
pub trait Lookup: Clone + Send + Sync + 'static {
    /// The raft of `group` on `node`, or `None` while that node is down.
    fn raft(&self, group: GroupId, node: NodeId) -> Option<Raft>;
}

/// One group's network: the factory openraft asks for connections.
#[derive(Clone)]
pub struct GroupNetwork<L> {
    pub group: GroupId,
    pub rafts: L,
}

pub struct Connection<L> {
    group: GroupId,
    target: NodeId,
    rafts: L,
}

impl<L: Lookup> RaftNetworkFactory<TypeConfig> for GroupNetwork<L> {
    type Network = Connection<L>;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection<L> {
        Connection { group: self.group, target, rafts: self.rafts.clone() }
    }
}

// The errors are openraft's network errors, returned by value as its traits want them.
#[allow(clippy::result_large_err)]
type RpcResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

#[allow(clippy::result_large_err)]
impl<L: Lookup> Connection<L> {
    fn target<E: std::error::Error>(&self) -> RpcResult<Raft, E> {
        let down = || std::io::Error::new(std::io::ErrorKind::NotConnected, "node is down");
        self.rafts
            .raft(self.group, self.target)
            .ok_or_else(|| RPCError::Unreachable(Unreachable::new(&down())))
    }

    fn wire<T: serde::Serialize + serde::de::DeserializeOwned, E: std::error::Error>(
        value: T,
    ) -> RpcResult<T, E> {
        let bytes =
            serde_json::to_vec(&value).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        serde_json::from_slice(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))
    }
}

impl<L: Lookup> RaftNetwork<TypeConfig> for Connection<L> {
    async fn append_entries(
        &mut self,
        req: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        let raft = self.target()?;
        let resp = raft.append_entries(Self::wire(req)?).await;
        resp.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        req: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let raft = self.target()?;
        let resp = raft.install_snapshot(Self::wire(req)?).await;
        resp.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        req: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        let raft = self.target()?;
        let resp = raft.vote(Self::wire(req)?).await;
        resp.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

//! The replicated name index: the S3 API's names as part of the metadata
//! service's Raft state machine. Every op is a Raft entry (committed by a
//! quorum of the 1, 3 or 5 members, then applied on each); reads wait for a
//! read index from the leader, so a PUT acknowledged on one node is seen by
//! a GET or LIST on any other member right after.

use super::MetaService;
use crate::map::{Command, Outcome};
use futures_util::future::BoxFuture;
use std::sync::{Arc, RwLock};
use strata_names::{NameError, NameIndex, NameOp, NameState};

/// [`NameIndex`] through the metadata service of a member node.
pub struct RaftNames(Arc<MetaService>);

impl RaftNames {
    /// Over this node's metadata service.
    pub fn new(meta: Arc<MetaService>) -> Self {
        Self(meta)
    }
}

impl NameIndex for RaftNames {
    fn apply(&self, op: NameOp) -> BoxFuture<'_, Result<strata_names::Outcome, NameError>> {
        Box::pin(async move {
            let (out, index) = self.0.propose_indexed(Command::Names(op)).await.map_err(|e| NameError::Unavailable(e.to_string()))?;
            // Applied on the leader; wait for it here too, so this node's
            // next read sees its own write.
            self.0.wait_applied(index).await;
            match out {
                Outcome::Names(r) => r,
                other => Err(NameError::Unavailable(format!("unexpected outcome {other:?}"))),
            }
        })
    }

    fn barrier(&self) -> BoxFuture<'_, Result<(), NameError>> {
        Box::pin(async move {
            let index = self.0.read_index().await.map_err(|e| NameError::Unavailable(e.to_string()))?;
            self.0.wait_applied(index).await;
            Ok(())
        })
    }

    fn state(&self) -> &RwLock<NameState> {
        self.0.names()
    }

    fn kind(&self) -> &'static str {
        "raft"
    }
}

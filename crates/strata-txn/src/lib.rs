//! Týr's transactions on striped blobs (Matri et al., SC16): byte-range
//! writes, appends and in-place atomic adds, multiversion concurrency
//! control with the blob's version managers, and multi-blob ACID
//! transactions committed along a chain of participants.
//!
//! A Týr blob is named by a string and striped in chunks over the rows
//! of the cluster's tract locator table (chunk `i` of blob `g` lives on
//! the row FDS gives tract `i`); its version managers are the replicas of
//! the row of its metadata tract. Every committed write makes a new
//! version of each chunk it touches and of the blob's record, keyed by
//! the commit sequence its decider assigned.
//!
//! - [`model`]: ids, items, operations, chain steps and decisions, and
//!   the envelope they travel and are stored in.
//! - [`store`]: what a participant keeps on an engine replica of its row.
//! - [`participant`]: a row primary's part of the commit chain.
//! - [`client`]: [`TxnClient`] and [`Transaction`].
//! - [`gc`]: the version garbage collector (superseded versions go when
//!   the blob's version manager says no reader uses them, or a read lease
//!   after their successor became visible).
//! - [`history`]: a checker of transaction histories for Adya's anomalies.
//!
//! docs/transactions.md gives the protocol and its correctness argument.
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-format, strata-engine, strata-cluster, strata-client; never the
//! router, RPC, the server, the node crate, the tract crate or axum.

pub mod client;
pub mod error;
pub mod gc;
pub mod history;
pub mod model;
pub mod participant;
pub mod store;

pub use client::{Transaction, TxnClient};
pub use error::TxnError;
pub use model::{TxnId, guid_of};
pub use participant::{Mode, Participant};

/// The header of a version-manager read (`POST /txn/vm-read`) naming the
/// transaction it is made for (its id in hex): the version manager counts
/// the blob version it answers as in use until the transaction is decided
/// (or the read lease ends). A read without it is a read outside a
/// transaction.
pub const TXN_HEADER: &str = "x-strata-txn";

//! Replica RPCs between nodes (docs/formats.md, "Replica RPCs").
//!
//! Every message is one frame (`strata_format::frame`) POSTed to
//! `/rpc/v1/<name>`. The frame's payload is a `u32` header length, the
//! postcard header, then raw blob bytes when the message carries data, so
//! the data is neither copied into nor parsed by postcard, and the frame's
//! CRC32C covers it. Every answer carries the answering node's map epoch, so
//! a caller with an older map learns that it must refresh.
//!
//! Frames travel through `strata-net`; the server side is a function from
//! a frame to a frame, which the node's HTTP port calls.
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-format, strata-engine, strata-net; never the cluster map, the
//! router, the server, or an HTTP crate.

mod client;
mod server;
mod wire;

pub use client::{RpcClient, RpcError};
pub use server::{ReplicaHost, RwFuture, RwHost, serve};
pub use wire::*;

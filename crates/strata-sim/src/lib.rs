//! The placement simulator: reproduces the papers' placement experiments on
//! the same `strata-placement` code the cluster uses, writing CSV, an SVG plot
//! and a summary for each. Deterministic: the same parameters give the same
//! results on every machine.
//!
//! Must not depend on: storage, networking or the server.
//!
//! Layer rule (checked by the test command): may use strata-placement;
//! never the engine, an async runtime or an HTTP crate.

pub mod ambry_rebalance;
pub mod fds_locator;
pub mod kinesis_balance;
mod output;
pub mod overprovision;

pub use output::{Output, write_outputs};

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Writing results failed.
    #[error("writing {path}: {source}")]
    Io {
        /// File.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Drawing a plot failed.
    #[error("plotting {path}: {detail}")]
    Plot {
        /// File.
        path: String,
        /// Cause.
        detail: String,
    },
}

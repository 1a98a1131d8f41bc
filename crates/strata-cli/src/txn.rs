//! `strata txn`: Týr's transactions from the command line: a whole
//! transaction given as JSON (`run`), and single operations (each its own
//! transaction) through the client library.

use crate::commands::Common;
use crate::size::parse_size;
use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::sync::Arc;
use strata_txn::TxnClient;

#[derive(clap::Subcommand, Debug)]
pub enum TxnCmd {
    /// Runs a transaction given as JSON (a file, or - for standard input):
    /// {"ops": [{"op": "read"|"write"|"append"|"add"|"size", "blob": ..., ...}]} (README).
    Run(RunArgs),
    /// Reads bytes of a blob (one blob version, outside a transaction).
    Read(ReadArgs),
    /// Appends a file to a blob; prints the offset it landed at.
    Append(AppendArgs),
    /// Adds to the little-endian 64-bit integer at an offset of a blob, on the server.
    Add(AddArgs),
    /// What this node's participant holds, its mode and timeouts.
    Status(Common),
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The transaction's JSON, or - for standard input.
    pub file: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct BlobArgs {
    /// The blob's name.
    #[arg(long)]
    pub blob: String,
    /// Chunk size of a blob this command creates.
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    pub chunk_size: u64,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct ReadArgs {
    /// First byte.
    #[arg(long, default_value_t = 0)]
    pub offset: u64,
    /// Bytes (the rest of the blob when absent).
    #[arg(long)]
    pub len: Option<u64>,
    /// Where to write them (- for standard output).
    #[arg(short, long, default_value = "-")]
    pub output: String,
    #[command(flatten)]
    pub blob: BlobArgs,
}

#[derive(clap::Args, Debug)]
pub struct AppendArgs {
    /// The file to append (- for standard input).
    pub file: String,
    #[command(flatten)]
    pub blob: BlobArgs,
}

#[derive(clap::Args, Debug)]
pub struct AddArgs {
    /// Offset of the integer.
    #[arg(long)]
    pub offset: u64,
    /// The amount (negative subtracts).
    #[arg(long, allow_hyphen_values = true)]
    pub delta: i64,
    #[command(flatten)]
    pub blob: BlobArgs,
}

async fn client(b: &BlobArgs) -> Result<Arc<TxnClient>> {
    Ok(TxnClient::connect(std::slice::from_ref(&b.common.server), &b.common.auth.options()?, b.chunk_size).await?)
}

fn input(file: &str) -> Result<Vec<u8>> {
    if file == "-" {
        let mut b = Vec::new();
        std::io::stdin().read_to_end(&mut b)?;
        return Ok(b);
    }
    std::fs::read(file).with_context(|| format!("reading {file}"))
}

pub async fn run(c: TxnCmd) -> Result<()> {
    match c {
        TxnCmd::Run(a) => {
            let body: serde_json::Value = serde_json::from_slice(&input(&a.file)?).context("the transaction is not JSON")?;
            let v = a.common.client()?.post_json("/txn", &body).await?;
            println!("{}", if a.common.json { v.to_string() } else { serde_json::to_string_pretty(&v)? });
        }
        TxnCmd::Read(a) => {
            let c = client(&a.blob).await?;
            let len = match a.len {
                Some(n) => n,
                None => c.size(&a.blob.blob).await?.saturating_sub(a.offset),
            };
            let data = c.read(&a.blob.blob, a.offset, len).await?;
            if a.output == "-" {
                std::io::stdout().write_all(&data)?;
            } else {
                std::fs::write(&a.output, &data).with_context(|| format!("writing {}", a.output))?;
            }
        }
        TxnCmd::Append(a) => {
            let c = client(&a.blob).await?;
            let data = input(&a.file)?;
            let mut t = c.begin();
            let at = t.append(&a.blob.blob, &data).await?;
            let seq = t.commit().await?;
            println!("{} bytes appended to {} at offset {at} (commit {seq})", data.len(), a.blob.blob);
        }
        TxnCmd::Add(a) => {
            let c = client(&a.blob).await?;
            let mut t = c.begin();
            t.add(&a.blob.blob, a.offset, a.delta)?;
            let seq = t.commit().await?;
            println!("added {} at offset {} of {} (commit {seq})", a.delta, a.offset, a.blob.blob);
        }
        TxnCmd::Status(common) => {
            let v = common.client()?.json(http::Method::GET, "/admin/txn").await?;
            println!("{}", if common.json { v.to_string() } else { serde_json::to_string_pretty(&v)? });
        }
    }
    Ok(())
}

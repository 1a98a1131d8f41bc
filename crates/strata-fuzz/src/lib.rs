//! Fuzz targets for every parser of untrusted bytes, and a mutation fuzzer
//! that runs on the stable toolchain.
//!
//! Owns: the list of targets (one per parser: log records, index files,
//! frames, RPC messages, chunk lists, damage lists, fixed headers, the
//! cluster map codec, read-only store chunk and metadata files, blob ids,
//! policies, HTTP request heads and native headers, SigV4 scopes, S3
//! tagging headers, SigV4 signatures as the HTTP port checks them, route
//! classification, credentials files, cluster secret files, audit log
//! lines, the name index's log and snapshot payloads), their seed corpus (valid encodings made here, plus the
//! files under `corpus/<target>/`), and the fuzzer: seeded byte-level
//! mutations (bit flips, interesting integers, insertions, deletions,
//! truncations, splices of two seeds) of the corpus, each input run under
//! `catch_unwind`. A target passes if no input panics; parsers must answer
//! bad bytes with an error. The test command runs a short, seeded slice
//! (`tests/fuzz.rs`); `strata fuzz --seconds N` is the long mode.
//! A `broken` target that panics on an input three mutations from its seed
//! keeps the fuzzer honest: it must be found.
//!
//! Depends on the crates whose parsers it drives; nothing depends on it but
//! the `strata` binary.
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-format, strata-auth, strata-cluster, strata-kv, strata-names,
//! strata-rpc, strata-s3, strata-server, strata-node; never the CLI.

use rand::{Rng, SeedableRng};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod seeds;
mod targets;

/// One parser under test.
pub struct Target {
    /// Its name (and the folder of its corpus).
    pub name: &'static str,
    /// Runs the parser over one input; must not panic.
    pub run: fn(&[u8]),
    /// Valid inputs to mutate from.
    pub seeds: fn() -> Vec<Vec<u8>>,
}

/// Every target, the deliberately broken one last.
pub fn targets() -> Vec<Target> {
    targets::all()
}

/// The target named `name`.
pub fn target(name: &str) -> Option<Target> {
    targets().into_iter().find(|t| t.name == name)
}

/// The checked-in corpus folder of a target.
pub fn corpus_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(name)
}

/// A target's seeds: made in code, and any files in its corpus folder.
pub fn corpus(t: &Target) -> Vec<Vec<u8>> {
    let mut out = (t.seeds)();
    if let Ok(dir) = std::fs::read_dir(corpus_dir(t.name)) {
        let mut files: Vec<_> = dir.flatten().map(|e| e.path()).collect();
        files.sort();
        out.extend(files.iter().filter_map(|p| std::fs::read(p).ok()));
    }
    if out.is_empty() {
        out.push(Vec::new());
    }
    out
}

/// How long a run goes on.
#[derive(Debug, Clone, Copy)]
pub enum Budget {
    /// This many inputs (the seeds first).
    Inputs(u64),
    /// Until this much time has passed.
    Time(Duration),
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    /// The target.
    pub target: &'static str,
    /// Inputs run.
    pub inputs: u64,
    /// The first input that panicked, with the panic's message.
    pub crash: Option<(Vec<u8>, String)>,
}

/// Mutates `input` 1 to 4 times; `other` is another seed to splice in.
pub fn mutate(rng: &mut rand::rngs::StdRng, input: &[u8], other: &[u8]) -> Vec<u8> {
    const INTERESTING: [u64; 10] = [0, 1, 2, 0x7f, 0x80, 0xff, 0xffff, 0xffff_ffff, u64::MAX, 1 << 31];
    let mut b = input.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let len = b.len();
        match rng.random_range(0..9) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                b[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.random_range(0..len);
                b[i] = rng.random();
            }
            2 if len > 0 => {
                // An interesting integer, little-endian, 1 to 8 bytes wide.
                let width = [1usize, 2, 4, 8][rng.random_range(0..4)];
                let i = rng.random_range(0..len);
                let v = INTERESTING[rng.random_range(0..INTERESTING.len())].to_le_bytes();
                for (k, byte) in v.iter().take(width).enumerate() {
                    if let Some(slot) = b.get_mut(i + k) {
                        *slot = *byte;
                    }
                }
            }
            3 => {
                let i = rng.random_range(0..=len);
                let n = rng.random_range(1..=16);
                let ins: Vec<u8> = (0..n).map(|_| rng.random()).collect();
                b.splice(i..i, ins);
            }
            4 if len > 0 => {
                let i = rng.random_range(0..len);
                let n = rng.random_range(1..=(len - i).min(64));
                b.drain(i..i + n);
            }
            5 if len > 0 => b.truncate(rng.random_range(0..len)),
            6 if len > 0 => {
                // Duplicate a range in place.
                let i = rng.random_range(0..len);
                let n = rng.random_range(1..=(len - i).min(64));
                let copy = b[i..i + n].to_vec();
                b.splice(i..i, copy);
            }
            7 if !other.is_empty() => {
                // Splice: our head, the other's tail.
                let cut = rng.random_range(0..=len);
                let from = rng.random_range(0..other.len());
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
            _ => {
                let i = rng.random_range(0..=len);
                b.insert(i, rng.random());
            }
        }
    }
    b
}

/// Runs `t` over its seeds and then mutations of them, seeded by `seed`,
/// until `budget` is spent or an input panics.
pub fn fuzz(t: &Target, budget: Budget, seed: u64) -> Report {
    let corpus = corpus(t);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let start = Instant::now();
    let mut inputs = 0u64;
    let done = |inputs: u64| match budget {
        Budget::Inputs(n) => inputs >= n,
        Budget::Time(d) => inputs.is_multiple_of(64) && start.elapsed() >= d,
    };
    let mut next = 0usize;
    while !done(inputs) {
        let input = if next < corpus.len() {
            next += 1;
            corpus[next - 1].clone()
        } else {
            let a = &corpus[rng.random_range(0..corpus.len())];
            let b = &corpus[rng.random_range(0..corpus.len())];
            // Now and then mutate a mutation, to get further from the seeds.
            let once = mutate(&mut rng, a, b);
            if rng.random_bool(0.3) { mutate(&mut rng, &once, b) } else { once }
        };
        inputs += 1;
        if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| (t.run)(&input))) {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            return Report { target: t.name, inputs, crash: Some((input, msg)) };
        }
    }
    Report { target: t.name, inputs, crash: None }
}

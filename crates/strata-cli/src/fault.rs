//! `strata fault`: the fault-injection suite. Each seeded round runs a
//! workload of puts (chunked ones too), deletes and compactions against a
//! real `strata server` child process, kills it with SIGKILL at a random
//! moment, injects faults into its data directory — bytes flipped in sealed
//! and active log segments and in index files, a write torn at a random
//! offset of a record — restarts it, and checks every acknowledged blob:
//! the same bytes, or an integrity error (500 `BlobCorrupt`); never 404,
//! never other bytes; every acknowledged delete holds. On a small tmpfs
//! (`--disk`, as root) the disk fills up again and again, and the workload
//! frees it by deleting and compacting.
//!
//! `--broken` injects a fault that loses acknowledged data (it cuts every
//! log in half), which the checker must report: the suite's own test runs
//! it and expects a failure.

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strata_client::{Client, ClientError, PutArgs};

#[derive(clap::Args, Debug)]
pub struct FaultArgs {
    /// Rounds to run.
    #[arg(long, default_value_t = 200)]
    pub rounds: u64,
    /// Seed of the schedule (workload, kill moments, faults); random if unset.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run on a tmpfs of this size (needs root), so the disk fills up.
    #[arg(long, value_parser = crate::size::parse_size)]
    pub disk: Option<u64>,
    /// Where the data goes (default: a temporary directory, removed after a pass).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Inject a fault that loses acknowledged data: the checker must fail.
    #[arg(long)]
    pub broken: bool,
    /// Print every fault injected (file and offset).
    #[arg(long)]
    pub verbose: bool,
}

/// What the suite counted.
#[derive(Debug, Default, Clone, serde::Serialize)]
struct Counts {
    rounds: u64,
    acknowledged_puts: u64,
    acknowledged_deletes: u64,
    verified_reads: u64,
    lost: u64,
    wrong: u64,
    resurrected: u64,
    corrupt: u64,
    repaired: u64,
    segment_flips: u64,
    index_flips: u64,
    torn_writes: u64,
    full_disk_events: u64,
    kills: u64,
}

/// An acknowledged blob: its content seed and length, and how many bytes
/// had been flipped when it was written (one flipped later may damage it;
/// one written after the last flip never is).
type Blob = (u64, usize, u64);

/// Acknowledged state.
#[derive(Default)]
struct Acked {
    live: BTreeMap<String, Blob>,
    /// Deleted blobs, with the flips before their delete.
    deleted: Vec<(String, u64)>,
    /// Deletes whose answer never came: deleted or intact, nothing else.
    uncertain: BTreeMap<String, Blob>,
}

/// Deterministic, self-checking blob content.
fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A `strata server` child.
struct Server {
    child: Child,
    client: Client,
}

impl Server {
    fn start(data: &Path, log: &Path) -> Result<Self> {
        std::fs::create_dir_all(data)?;
        let exe = std::env::current_exe().context("finding the strata binary")?;
        let mut child = Command::new(exe)
            .args(["server", "--data-dir"])
            .arg(data)
            .args(["--listen", "127.0.0.1:0", "--s3-listen", "off", "--partitions", "2", "--chunk-size", "256KiB", "--segment-size", "1MiB"])
            .args(["--tail-cache", "0", "--write-cache", "8MiB", "--compaction-interval-secs", "1", "--scrub-interval-secs", "0"])
            .env("STRATA_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::OpenOptions::new().create(true).append(true).open(log)?))
            .spawn()
            .context("starting strata server")?;
        let stdout = child.stdout.take().context("server stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            for _ in lines {}
        });
        let first = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Some(Ok(l))) => l,
            answer => {
                if std::env::var_os("STRATA_FAULT_KEEP_HUNG").is_some() {
                    eprintln!("leaving the server that did not start running: pid {}", child.id());
                    std::mem::forget(child);
                    anyhow::bail!("the server did not start");
                }
                // Exited (how: a signal leaves nothing in the log), or hung.
                let how = match answer {
                    Err(_) => "no banner within 120 s".to_string(),
                    Ok(_) => format!("it exited: {:?}", child.wait()),
                };
                let _ = child.kill();
                let log = std::fs::read_to_string(log).unwrap_or_default();
                anyhow::bail!("the server did not start ({how}; data in {}); its log ends:\n{}", data.display(), &log[log.len().saturating_sub(3000)..]);
            }
        };
        let url = first.split_whitespace().find(|w| w.starts_with("http://")).context("the banner names no URL")?.to_string();
        // The server wrote its admin key before its banner.
        let creds = strata_auth::credentials::load(&data.join("admin.credentials"))?;
        Ok(Self { child, client: Client::with_options(&url, &strata_client::ClientOptions { credentials: Some(creds), ..Default::default() }) })
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Where the log's bytes end, past every record, quarantined ones too: a
/// torn write after it touches nothing acknowledged. A walk by the headers'
/// lengths stops at a damaged header, so the last non-zero byte bounds it
/// too, with a gap of zeros after it (a record's last CRC byte can be zero;
/// recovery reads zeros after the last record as space filled ahead).
fn records_end(bytes: &[u8]) -> usize {
    let mut pos = strata_format::headers::SEGMENT_HEADER_BYTES;
    while pos < bytes.len() {
        match strata_format::record::peek_len(&bytes[pos..]) {
            Ok(len) if pos + len as usize <= bytes.len() => pos += len as usize,
            _ => break,
        }
    }
    let last_nonzero = bytes.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
    pos.max(last_nonzero + 8)
}

/// Every log segment and index file of the data directory, by partition:
/// (sealed segments, the active one, index files).
fn files(data: &Path) -> Vec<(Vec<PathBuf>, PathBuf, Vec<PathBuf>)> {
    let mut out = Vec::new();
    let Ok(parts) = std::fs::read_dir(data.join("partitions")) else { return out };
    for p in parts.flatten() {
        let mut logs = Vec::new();
        let mut idx = Vec::new();
        for f in std::fs::read_dir(p.path()).into_iter().flatten().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.starts_with("seg-") && name.ends_with(".log") {
                logs.push(f.path());
            } else if name.starts_with("seg-") && name.ends_with(".idx") {
                idx.push(f.path());
            }
        }
        logs.sort();
        if let Some(active) = logs.pop() {
            out.push((logs, active, idx));
        }
    }
    out.sort();
    out
}

fn flip_in(path: &Path, from: usize, to: usize, rng: &mut impl Rng) -> Result<bool> {
    let mut bytes = std::fs::read(path)?;
    let to = to.min(bytes.len());
    if to <= from {
        return Ok(false);
    }
    let at = rng.random_range(from..to);
    bytes[at] ^= 1 << rng.random_range(0..8);
    std::fs::write(path, bytes)?;
    if VERBOSE.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("flipped a bit of {} at {at}", path.display());
    }
    Ok(true)
}

static VERBOSE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Injects this round's faults into a stopped server's data directory.
fn inject(data: &Path, rng: &mut impl Rng, counts: &mut Counts, broken: bool) -> Result<()> {
    let parts = files(data);
    if parts.is_empty() {
        return Ok(());
    }
    if broken {
        // Loses acknowledged data on purpose: cuts every log, active and
        // sealed, of every partition in the middle, as if acknowledged bytes
        // had never reached the disk. Every log, because any one may hold
        // nothing a read needs: a compaction may have just left an active
        // log empty or holding only tombstones, or left a sealed one whose
        // records were all copied on. And nothing else this round: a flip
        // would excuse the blobs the cut damaged as bitrot the store
        // reported (the checker accepts a corrupt report for a blob written
        // before a flip).
        let header = strata_format::headers::SEGMENT_HEADER_BYTES;
        let cut = |path: &Path| -> Result<bool> {
            let bytes = std::fs::read(path)?;
            let end = bytes.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
            if end <= header + 100 {
                return Ok(false);
            }
            std::fs::OpenOptions::new().write(true).open(path)?.set_len((header + (end - header) / 2) as u64)?;
            eprintln!("broken on purpose: cut {} in half", path.display());
            Ok(true)
        };
        let mut any = false;
        for (sealed, active, _) in &parts {
            for log in sealed.iter().chain(std::iter::once(active)) {
                any |= cut(log)?;
            }
        }
        if !any {
            anyhow::bail!("broken mode: no log holds data to cut");
        }
        return Ok(());
    }
    let (sealed, active, idx) = &parts[rng.random_range(0..parts.len())];
    // Where the acknowledged records end, before any flip: a flip can make
    // the walk stop earlier, and a torn write there would overwrite
    // acknowledged bytes, which is no crash's doing.
    let end = records_end(&std::fs::read(active)?);
    if rng.random_bool(0.3) && !sealed.is_empty() {
        let seg = &sealed[rng.random_range(0..sealed.len())];
        let len = std::fs::metadata(seg)?.len() as usize;
        if flip_in(seg, strata_format::headers::SEGMENT_HEADER_BYTES, len, rng)? {
            counts.segment_flips += 1;
        }
    }
    if rng.random_bool(0.3) && flip_in(active, strata_format::headers::SEGMENT_HEADER_BYTES, end, rng)? {
        counts.segment_flips += 1;
    }
    if rng.random_bool(0.2) && !idx.is_empty() {
        let f = &idx[rng.random_range(0..idx.len())];
        let len = std::fs::metadata(f)?.len() as usize;
        if flip_in(f, 0, len, rng)? {
            counts.index_flips += 1;
        }
    }
    // A write torn at a random offset of a record, after the last one
    // (what a crash leaves of an unacknowledged batch).
    if rng.random_bool(0.4) {
        let key = strata_types::Key::new(strata_types::KeyKind::Blob, &rng.random::<[u8; 16]>()).context("a key")?;
        let data = content(rng.random(), rng.random_range(1..4000));
        let (prefix, crc) = strata_format::record::encode_put(u64::MAX / 2, 1, &key, &strata_format::PutProps::default(), "", &data)?;
        let mut rec = prefix;
        rec.extend_from_slice(&data);
        rec.extend_from_slice(&crc);
        let cut = rng.random_range(1..rec.len());
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(active)?;
        // On a full disk the torn write itself may not fit: that is a crash
        // that left nothing, which is fine too.
        if f.write_all_at(&rec[..cut], end as u64).is_ok() {
            counts.torn_writes += 1;
            if VERBOSE.load(std::sync::atomic::Ordering::Relaxed) {
                eprintln!("tore a write of {} bytes after {cut} at {end} of {}", rec.len(), active.display());
            }
        }
    }
    Ok(())
}

/// One round's workload on `workers` concurrent clients, until the kill.
async fn workload(client: Client, acked: Arc<Mutex<Acked>>, seed: u64, counts: Arc<Mutex<Counts>>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for _ in 0..60 {
        let live = acked.lock().map(|a| a.live.len()).unwrap_or(0);
        let roll: f64 = rng.random();
        if roll < 0.05 {
            if client.json(http::Method::POST, "/admin/compact").await.is_err() {
                return;
            }
            continue;
        }
        if roll < 0.25 || live > 250 {
            let victim = acked.lock().ok().and_then(|mut a| {
                let n = a.live.len();
                (n > 0).then(|| rng.random_range(0..n)).and_then(|i| a.live.keys().nth(i).cloned()).and_then(|id| a.live.remove_entry(&id))
            });
            let Some((id, blob)) = victim else { continue };
            match client.delete(&id).await {
                Ok(()) => {
                    let flips = counts.lock().map(|c| c.segment_flips).unwrap_or(0);
                    if let Ok(mut a) = acked.lock() {
                        a.deleted.push((id, flips));
                    }
                    if let Ok(mut c) = counts.lock() {
                        c.acknowledged_deletes += 1;
                    }
                }
                Err(_) => {
                    if let Ok(mut a) = acked.lock() {
                        a.uncertain.insert(id, blob);
                    }
                    return;
                }
            }
            continue;
        }
        let len = if rng.random_ratio(1, 10) { rng.random_range(300_000..700_000) } else { rng.random_range(100..120_000) };
        let s: u64 = rng.random();
        match client.put_bytes(content(s, len), &PutArgs::default()).await {
            Ok(r) => {
                let flips = counts.lock().map(|c| c.segment_flips).unwrap_or(0);
                if let Ok(mut a) = acked.lock() {
                    a.live.insert(r.id, (s, len, flips));
                }
                if let Ok(mut c) = counts.lock() {
                    c.acknowledged_puts += 1;
                }
            }
            Err(ClientError::Api { status: 507, .. }) => {
                if let Ok(mut c) = counts.lock() {
                    c.full_disk_events += 1;
                }
                // Free space the way a user would: delete, then compact.
                let ids: Vec<String> = acked.lock().map(|a| a.live.keys().take(20).cloned().collect()).unwrap_or_default();
                for id in ids {
                    let blob = acked.lock().ok().and_then(|mut a| a.live.remove(&id));
                    match client.delete(&id).await {
                        Ok(()) => {
                            let flips = counts.lock().map(|c| c.segment_flips).unwrap_or(0);
                            if let Ok(mut a) = acked.lock() {
                                a.deleted.push((id, flips));
                            }
                        }
                        Err(_) => {
                            if let (Ok(mut a), Some(b)) = (acked.lock(), blob) {
                                a.uncertain.insert(id, b);
                            }
                            return;
                        }
                    }
                }
                if client.json(http::Method::POST, "/admin/compact").await.is_err() {
                    return;
                }
            }
            Err(ClientError::Api { .. }) => {}
            Err(_) => return,
        }
    }
}

/// The chunk size the suite's server uses.
const CHUNK_BYTES: usize = 256 << 10;

/// Reads a chunked blob a chunk at a time: every chunk must come back
/// whole or answer an integrity error, and at least one the latter.
async fn check_pieces(client: &Client, id: &str, seed: u64, len: usize) -> Result<(), String> {
    let want = content(seed, len);
    let mut damaged = 0;
    for start in (0..len).step_by(CHUNK_BYTES) {
        let end = (start + CHUNK_BYTES).min(len) - 1;
        let got = match client.get(id, Some(&format!("bytes={start}-{end}"))).await {
            Ok(r) => r.bytes().await,
            Err(e) => Err(e),
        };
        match got {
            Ok(b) if b[..] == want[start..=end] => {}
            Err(ClientError::Api { status: 500, code, .. }) if code == "BlobCorrupt" => damaged += 1,
            other => return Err(format!("blob {id}, bytes {start}-{end}: {:?}", other.map(|b| b.len()))),
        }
    }
    if damaged == 0 {
        return Err(format!("blob {id}: its response was cut short, yet every chunk reads back whole"));
    }
    Ok(())
}

/// Checks every acknowledged blob and delete; retires blobs found corrupt
/// (deleting them) so later rounds do not count them again.
async fn verify(client: &Client, acked: &Mutex<Acked>, counts: &mut Counts) -> Vec<String> {
    let mut failures = Vec::new();
    let (live, deleted, uncertain) = match acked.lock() {
        Ok(a) => (a.live.clone(), a.deleted.clone(), a.uncertain.clone()),
        Err(_) => return vec!["the acknowledged set was poisoned".into()],
    };
    let mut retire = Vec::new();
    // Damage with no flipped byte since the blob was written (or deleted)
    // is a false alarm.
    let flips = counts.segment_flips;
    let false_alarm = |id: &str, since: u64, failures: &mut Vec<String>| {
        if since == flips {
            failures.push(format!("blob {id} reported corrupt, yet no byte was flipped since it was written"));
        }
    };
    for (id, (seed, len, since)) in &live {
        counts.verified_reads += 1;
        match client.get_bytes(id).await {
            Ok(b) if b[..] == content(*seed, *len)[..] => {}
            Ok(b) => {
                counts.wrong += 1;
                failures.push(format!("blob {id} came back with other bytes ({} of {len})", b.len()));
            }
            Err(ClientError::Api { status: 500, code, .. }) if code == "BlobCorrupt" => {
                counts.corrupt += 1;
                false_alarm(id, *since, &mut failures);
                retire.push(id.clone());
            }
            // A chunked blob whose later chunk is damaged: the response was
            // cut short of its length. Each chunk's range must then answer
            // its bytes or an integrity error, and one the latter.
            Err(ClientError::Transport(_)) => match check_pieces(client, id, *seed, *len).await {
                Ok(()) => {
                    counts.corrupt += 1;
                    false_alarm(id, *since, &mut failures);
                    retire.push(id.clone());
                }
                Err(f) => {
                    counts.lost += 1;
                    failures.push(f);
                }
            },
            Err(e) => {
                counts.lost += 1;
                failures.push(format!("acknowledged blob {id} lost: {e}"));
            }
        }
    }
    let mut redelete = Vec::new();
    for (id, since) in &deleted {
        counts.verified_reads += 1;
        match client.get_bytes(id).await {
            Err(ClientError::Api { status: 410, .. }) => {}
            Err(ClientError::Api { status: 500, code, .. }) if code == "BlobCorrupt" => {
                counts.corrupt += 1;
                false_alarm(id, *since, &mut failures);
                redelete.push(id.clone());
            }
            Ok(_) => {
                counts.resurrected += 1;
                failures.push(format!("deleted blob {id} is back"));
            }
            Err(e) => {
                counts.lost += 1;
                failures.push(format!("the delete of {id} was lost: {e}"));
            }
        }
    }
    for (id, (seed, len, _)) in &uncertain {
        match client.get_bytes(id).await {
            Ok(b) if b[..] == content(*seed, *len)[..] => {}
            Err(ClientError::Api { status: 410, .. }) => {}
            Err(ClientError::Api { status: 500, code, .. }) if code == "BlobCorrupt" => counts.corrupt += 1,
            Err(ClientError::Transport(_)) if check_pieces(client, id, *seed, *len).await.is_ok() => counts.corrupt += 1,
            other => failures.push(format!("blob {id} with an unanswered delete: {:?}", other.map(|b| b.len()))),
        }
    }
    // A damaged tombstone is rewritten by deleting again.
    for id in redelete {
        if let Err(e) = client.delete(&id).await {
            failures.push(format!("deleting again the deleted blob {id} whose tombstone is damaged: {e}"));
        }
    }
    // Damaged blobs are retired by deleting them (allowed on damage).
    for id in retire {
        match client.delete(&id).await {
            Ok(()) => {
                if let Ok(mut a) = acked.lock()
                    && a.live.remove(&id).is_some()
                {
                    a.deleted.push((id, flips));
                }
            }
            Err(e) => failures.push(format!("deleting the damaged blob {id}: {e}")),
        }
    }
    // Deletes verified once are settled; keep a bounded sample.
    if let Ok(mut a) = acked.lock() {
        let n = a.deleted.len();
        a.deleted.drain(..n.saturating_sub(200));
        a.uncertain.clear();
    }
    failures
}

/// Mounts a tmpfs of `bytes` at `dir`; unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, bytes: u64) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let ok = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"]).arg(dir).status().is_ok_and(|s| s.success());
        anyhow::ensure!(ok, "mounting a {bytes}-byte tmpfs at {} failed (--disk needs root)", dir.display());
        Ok(Self(dir.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

pub async fn run(a: FaultArgs) -> Result<()> {
    let seed = a.seed.unwrap_or_else(rand::random);
    VERBOSE.store(a.verbose, std::sync::atomic::Ordering::Relaxed);
    let tmp = tempfile::tempdir().context("a temporary directory")?;
    let root = a.dir.clone().unwrap_or_else(|| tmp.path().to_owned());
    let _disk = match a.disk {
        Some(bytes) => Some(Tmpfs::mount(&root.join("disk"), bytes)?),
        None => None,
    };
    let data = if a.disk.is_some() { root.join("disk").join("node") } else { root.join("node") };
    println!(
        "fault suite: {} rounds, seed {seed} (--seed {seed} replays it){}",
        a.rounds,
        a.disk.map(|b| format!(", on a {b}-byte tmpfs")).unwrap_or_default()
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let acked = Arc::new(Mutex::new(Acked::default()));
    let counts = Arc::new(Mutex::new(Counts::default()));
    let mut failures = Vec::new();
    let bar = indicatif::ProgressBar::new(a.rounds);
    bar.set_style(indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} rounds {msg}").unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()));
    for round in 0..a.rounds {
        let mut server = Server::start(&data, &root.join("server.log"))?;
        let mut c = counts.lock().map(|c| c.clone()).unwrap_or_default();
        let found = verify(&server.client, &acked, &mut c).await;
        if let Ok(mut g) = counts.lock() {
            *g = c;
        }
        if !found.is_empty() {
            failures.extend(found.into_iter().map(|f| format!("round {round}: {f}")));
            break;
        }
        // The workload, and a kill at a random moment inside it.
        let workers: Vec<_> = (0..3).map(|_| tokio::spawn(workload(server.client.clone(), acked.clone(), rng.random(), counts.clone()))).collect();
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..250))).await;
        server.kill9();
        for w in workers {
            let _ = w.await;
        }
        let mut c = counts.lock().map(|c| c.clone()).unwrap_or_default();
        if a.verbose {
            eprintln!("round {round}: killed");
        }
        c.kills += 1;
        c.rounds += 1;
        inject(&data, &mut rng, &mut c, a.broken && round + 1 == a.rounds.min(3))?;
        bar.set_message(format!("{} acked, {} corrupt, {} lost", c.acknowledged_puts, c.corrupt, c.lost + c.wrong));
        if let Ok(mut g) = counts.lock() {
            *g = c;
        }
        bar.inc(1);
        drop(server);
    }
    // The last round's faults, checked.
    if failures.is_empty() {
        let server = Server::start(&data, &root.join("server.log"))?;
        let mut c = counts.lock().map(|c| c.clone()).unwrap_or_default();
        failures.extend(verify(&server.client, &acked, &mut c).await.into_iter().map(|f| format!("final check: {f}")));
        if let Ok(mut g) = counts.lock() {
            *g = c;
        }
    }
    bar.finish_and_clear();
    let c = counts.lock().map(|c| c.clone()).unwrap_or_default();
    println!("{:<22} {:>10}", "rounds", c.rounds);
    for (name, v) in [
        ("kills (SIGKILL)", c.kills),
        ("acknowledged puts", c.acknowledged_puts),
        ("acknowledged deletes", c.acknowledged_deletes),
        ("verified reads", c.verified_reads),
        ("segment bytes flipped", c.segment_flips),
        ("index bytes flipped", c.index_flips),
        ("torn writes", c.torn_writes),
        ("full-disk events", c.full_disk_events),
        ("corrupt (reported)", c.corrupt),
        ("repaired", c.repaired),
        ("lost", c.lost),
        ("wrong bytes", c.wrong),
        ("resurrected", c.resurrected),
    ] {
        println!("{name:<22} {v:>10}");
    }
    if failures.is_empty() {
        println!("PASS: every acknowledged blob read back identical or was reported corrupt");
        return Ok(());
    }
    for f in failures.iter().take(20) {
        eprintln!("{f}");
    }
    anyhow::bail!("FAIL: {} problems (seed {seed})", failures.len())
}

//! Change capture end to end (docs/events.md): a real Apache Kafka broker
//! (KRaft mode, its jars from Maven Central through `scripts/kafka.sh`, on
//! Debian's Java) receives the events of thousands of mixed S3 operations
//! while the server is killed with SIGKILL at random points and the broker
//! is stopped and restarted; then the topic must hold every acknowledged
//! operation's event, in order per bucket, and nothing for an operation
//! that was never attempted or did not take effect.
//!
//! `STRATA_EVENTS_OPS` sets the number of operations (10,000 by default);
//! `STRATA_TEST_SEED` the kill points (printed, to replay a failure).
//! Skips, saying so, only where Java is missing.

mod common;

use common::{Node, pyenv, workspace};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOPIC: &str = "strata-events";

/// A single-node KRaft broker in a directory of its own.
struct Broker {
    dir: PathBuf,
    libs: PathBuf,
    port: u16,
    child: Option<Child>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

fn java(libs: &Path) -> Command {
    let mut c = Command::new("java");
    c.args(["-Xmx512m", "-Xss1m", "-XX:+UseSerialGC", "-cp"]).arg(format!("{}/*", libs.display()));
    c
}

impl Broker {
    fn start(dir: &Path, libs: &Path) -> Self {
        let (port, controller) = (free_port(), free_port());
        std::fs::create_dir_all(dir).unwrap();
        let props = dir.join("server.properties");
        std::fs::write(
            &props,
            format!(
                "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{controller}\n\
                 listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
                 advertised.listeners=PLAINTEXT://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n\
                 listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\nlog.dirs={}\n\
                 offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n\
                 group.initial.rebalance.delay.ms=0\nauto.create.topics.enable=false\n",
                dir.join("logs").display()
            ),
        )
        .unwrap();
        let out = java(libs).args(["kafka.tools.StorageTool", "format", "-t", "c3RyYXRhLWV2ZW50cy0x", "-c"]).arg(&props).output().expect("run java");
        assert!(out.status.success(), "formatting the broker's storage failed: {}", String::from_utf8_lossy(&out.stderr));
        let mut b = Self { dir: dir.to_owned(), libs: libs.to_owned(), port, child: None };
        b.run();
        b
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn run(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("broker.log")).unwrap();
        let child = java(&self.libs)
            .arg("kafka.Kafka")
            .arg(self.dir.join("server.properties"))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start the broker");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(90);
        while std::net::TcpStream::connect(self.addr()).is_err() {
            assert!(Instant::now() < deadline, "the Kafka broker did not start; see {}", self.dir.join("broker.log").display());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGTERM and wait: the broker shuts down cleanly.
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The broker's jars, fetched once by `scripts/kafka.sh`.
fn kafka_libs() -> PathBuf {
    let out = Command::new(workspace().join("scripts/kafka.sh")).arg("fetch").output().expect("run scripts/kafka.sh");
    assert!(out.status.success(), "scripts/kafka.sh fetch failed: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Every record of the topic, partition by partition, in offset order.
async fn consume(addr: &str) -> BTreeMap<i32, Vec<serde_json::Value>> {
    use rskafka::client::partition::UnknownTopicHandling;
    let client = rskafka::client::ClientBuilder::new(vec![addr.to_owned()]).build().await.expect("connect to Kafka");
    let topics = client.list_topics().await.expect("list topics");
    let topic = topics.iter().find(|t| t.name == TOPIC).expect("Strata created the topic");
    let mut out = BTreeMap::new();
    for &p in &topic.partitions {
        let pc = client.partition_client(TOPIC, p, UnknownTopicHandling::Retry).await.expect("partition client");
        let mut offset = 0i64;
        let mut records = Vec::new();
        loop {
            let (batch, high) = pc.fetch_records(offset, 1..4_000_000, 500).await.expect("fetch");
            for r in &batch {
                let v: serde_json::Value = serde_json::from_slice(r.record.value.as_deref().unwrap_or_default()).expect("a record is one JSON event");
                records.push(v);
                offset = r.offset + 1;
            }
            if offset >= high {
                break;
            }
        }
        out.insert(p, records);
    }
    out
}

/// What the driver's op `i` is, as the event that reports it would say:
/// (type, bucket, key).
fn expected(i: u64) -> (&'static str, String, String) {
    let bucket = format!("ev{}", (i / 10) % 4);
    match i % 10 {
        6 => ("s3:ObjectCreated:Copy", bucket, format!("c{i}")),
        7 => ("s3:ObjectRemoved:Delete", bucket, format!("k{}", i - 4)),
        8 => ("s3:ObjectTagging:Put", bucket, format!("k{}", i - 8)),
        _ => ("s3:ObjectCreated:Put", bucket, format!("k{i}")),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_holds_every_acknowledged_operation_through_kill9_and_a_broker_restart() {
    if Command::new("java").arg("-version").output().is_err() {
        println!("SKIPPED: Java is missing (Debian: apt-get install openjdk-17-jre-headless); the Kafka broker needs it");
        return;
    }
    let total: u64 = std::env::var("STRATA_EVENTS_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let seed: u64 = std::env::var("STRATA_TEST_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random::<u64>);
    println!("STRATA_TEST_SEED={seed} STRATA_EVENTS_OPS={total}");
    let mut rng = seed;
    let mut next = move |lo: u64, hi: u64| {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        lo + (rng >> 33) % (hi - lo)
    };
    let dir = tempfile::tempdir().unwrap();
    let libs = kafka_libs();
    let mut broker = Broker::start(&dir.path().join("kafka"), &libs);
    let data = dir.path().join("data");
    let log = dir.path().join("ops.log");
    let mut node = Node::start(&data, &["--s3-listen", "127.0.0.1:0"]).await;
    let (ok, out) = node.cli(&["events", "target", "add", "kafka", "--kafka", &broker.addr(), "--topic", TOPIC, "--all"]);
    assert!(ok, "adding the Kafka target failed: {out}");

    // Rounds of the driver; all but the last end in a SIGKILL of the server
    // at a random point. The broker is stopped during the second round and
    // started again during the fourth, so events pile up in the outbox
    // across a crash and must all come out once it is back.
    let mut round = 0;
    let mut kills = 0;
    loop {
        round += 1;
        let mut driver = s3_driver(&node).await.arg("run").arg(&log).arg(total.to_string()).spawn().expect("run the driver");
        if round == 2 {
            broker.stop();
        }
        if round == 4 {
            broker.run();
        }
        let kill_at = Instant::now() + Duration::from_millis(next(1_000, 5_000));
        let finished = loop {
            if let Some(status) = driver.try_wait().expect("driver") {
                break Some(status);
            }
            if kills < 4 && Instant::now() >= kill_at {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        match finished {
            Some(status) => {
                assert!(status.success(), "the driver failed: {status}");
                break;
            }
            None => {
                node.kill9();
                kills += 1;
                let status = driver.wait().expect("driver exits");
                assert!(status.code() == Some(3) || status.success(), "the driver failed: {status}");
                node = Node::start(&data, &["--s3-listen", "127.0.0.1:0"]).await;
            }
        }
    }
    if broker.child.is_none() {
        broker.run();
    }
    println!("{kills} kills; every op attempted");

    // Wait for the sender to catch up.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let st = node.client.json(http::Method::GET, "/admin/events").await.expect("events status");
        let t = &st["targets"][0];
        if t["pending"].as_u64() == Some(0) && st["produced"].as_u64() > Some(0) {
            break;
        }
        assert!(Instant::now() < deadline, "events were never all delivered: {st}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // What the driver attempted and what was acknowledged.
    let text = std::fs::read_to_string(&log).unwrap();
    let (mut attempted, mut acked) = (BTreeSet::new(), BTreeSet::new());
    for line in text.lines() {
        let (tag, n) = line.split_once(' ').expect("a log line");
        let n: u64 = n.parse().expect("an op number");
        match tag {
            "A" => {
                attempted.insert(n);
            }
            "K" => {
                acked.insert(n);
            }
            _ => {}
        }
    }
    assert_eq!(attempted.len() as u64, total, "every op is attempted once (one cut off by a crash is not retried)");
    let topic = consume(&broker.addr()).await;
    let listed = dir.path().join("keys.txt");
    let status = s3_driver(&node).await.arg("list").arg(&listed).status().expect("list keys");
    assert!(status.success(), "listing the buckets failed");
    let present: BTreeSet<String> = std::fs::read_to_string(&listed).unwrap().lines().map(str::to_owned).collect();
    let run = Run { attempted, acked, present };
    match check(&run, &topic) {
        Ok(summary) => println!("{summary}"),
        Err(e) => panic!("{e}"),
    }
    // The checker's broken modes: the same topic with an acknowledged op's
    // event taken out, with two of a bucket's events swapped, and with an
    // event no op made; each must be caught.
    let mut copies = BTreeMap::<String, usize>::new();
    for e in topic.values().flatten() {
        *copies.entry(e["id"].as_str().unwrap_or("").to_owned()).or_default() += 1;
    }
    let once = |e: &serde_json::Value| copies.get(e["id"].as_str().unwrap_or("")) == Some(&1);
    let acked_put = |e: &serde_json::Value| {
        e["type"] == "s3:ObjectCreated:Put"
            && once(e)
            && e["subject"]["key"].as_str().and_then(|k| k[1..].parse().ok()).is_some_and(|i: u64| run.acked.contains(&i))
    };
    let (p, records) = topic.iter().find(|(_, r)| r.iter().filter(|e| acked_put(e)).count() > 3).expect("a partition with acknowledged puts' events");
    let at = records.iter().position(acked_put).expect("an acknowledged put's event");
    let mut lost = topic.clone();
    lost.get_mut(p).unwrap().remove(at);
    assert!(check(&run, &lost).is_err_and(|e| e.contains("no event")), "the check missed a lost event");
    let mut swapped = topic.clone();
    let r = swapped.get_mut(p).unwrap();
    let (i, j) = (1..r.len())
        .find_map(|j| {
            (0..j)
                .find(|&i| {
                    r[i]["source"] == "names"
                        && r[j]["source"] == "names"
                        && r[i]["subject"]["bucket"] == r[j]["subject"]["bucket"]
                        && r[i]["type"] != "strata:BucketCreated"
                        && once(&r[i])
                        && once(&r[j])
                })
                .map(|i| (i, j))
        })
        .expect("two events of a bucket");
    r.swap(i, j);
    assert!(check(&run, &swapped).is_err_and(|e| e.contains("after a later")), "the check missed events out of order");
    let mut invented = topic.clone();
    let mut fake = records[at].clone();
    fake["id"] = serde_json::json!("meta/names/999999999");
    fake["subject"]["key"] = serde_json::json!(format!("k{}", total + 10));
    invented.get_mut(p).unwrap().push(fake);
    assert!(check(&run, &invented).is_err_and(|e| e.contains("never attempted")), "the check missed an event for no op");
    drop(node);
}

/// What the driver did, and what the buckets hold after.
struct Run {
    attempted: BTreeSet<u64>,
    acked: BTreeSet<u64>,
    present: BTreeSet<String>,
}

/// Checks the topic against the run: every acknowledged op's event there,
/// none for an op never attempted or cut off before taking effect, one
/// event per change, each bucket's in one partition in op and seq order.
fn check(run: &Run, topic: &BTreeMap<i32, Vec<serde_json::Value>>) -> Result<String, String> {
    let events: usize = topic.values().map(Vec::len).sum();
    // Each event by its first copy; an op is found by its (type, bucket, key).
    let mut first: BTreeMap<String, (i32, usize)> = BTreeMap::new();
    let mut by_op: BTreeMap<(String, String, String), Vec<u64>> = BTreeMap::new();
    let mut duplicates = 0;
    for (p, records) in topic {
        for (at, e) in records.iter().enumerate() {
            let id = e["id"].as_str().ok_or("an event without an id")?.to_owned();
            if first.contains_key(&id) {
                duplicates += 1;
                continue;
            }
            first.insert(id, (*p, at));
            if e["v"] != 1 {
                return Err(format!("not schema version 1: {e}"));
            }
            // The S3 API's data blobs: their own records, checked by the native test.
            if e["source"] != "names" {
                if !e["type"].as_str().is_some_and(|t| t.starts_with("strata:Blob")) {
                    return Err(format!("a partition's event that is not a blob record: {e}"));
                }
                continue;
            }
            let kind = e["type"].as_str().unwrap_or("").to_owned();
            let bucket = e["subject"]["bucket"].as_str().unwrap_or("").to_owned();
            if strata_events::partition_of(&bucket, topic.len()) != *p as usize {
                return Err(format!("bucket {bucket}'s event in partition {p}, not its own"));
            }
            if kind == "strata:BucketCreated" {
                continue;
            }
            let key = e["subject"]["key"].as_str().unwrap_or("").to_owned();
            if e["who"].as_str().is_none_or(|w| w.is_empty()) {
                return Err(format!("an S3 event without its access key: {e}"));
            }
            by_op.entry((kind, bucket, key)).or_default().push(e["seq"].as_u64().unwrap_or(0));
        }
    }
    let ops: BTreeMap<(String, String, String), u64> = run
        .attempted
        .iter()
        .map(|&i| {
            let (k, b, key) = expected(i);
            ((k.to_owned(), b, key), i)
        })
        .collect();
    for (op, seqs) in &by_op {
        if !ops.contains_key(op) {
            return Err(format!("an event for an operation never attempted: {op:?}"));
        }
        if seqs.len() != 1 {
            return Err(format!("one change, one event: {op:?} has {seqs:?}"));
        }
    }
    // Every acknowledged op's event is there (a delete only if what it
    // deletes had been put: S3 answers a delete of nothing as a success).
    let mut missing = Vec::new();
    for &i in &run.acked {
        let (k, b, key) = expected(i);
        if i % 10 == 7 && !run.acked.contains(&(i - 4)) && !by_op.contains_key(&("s3:ObjectCreated:Put".to_owned(), b.clone(), key.clone())) {
            continue;
        }
        if !by_op.contains_key(&(k.to_owned(), b, key)) {
            missing.push(i);
        }
    }
    if !missing.is_empty() {
        return Err(format!("{} acknowledged ops have no event, the first {:?}", missing.len(), &missing[..missing.len().min(10)]));
    }
    // An op cut off by a crash has an event only if it took effect: the
    // object it put is there now (or a later delete of it was attempted).
    let mut cut_off_with_event = 0;
    for &i in run.attempted.difference(&run.acked) {
        let (k, b, key) = expected(i);
        if !by_op.contains_key(&(k.to_owned(), b.clone(), key.clone())) {
            continue;
        }
        cut_off_with_event += 1;
        let deleted_later = i % 10 == 3 && run.attempted.contains(&(i + 4));
        if matches!(i % 10, 0..=6 | 9) && !run.present.contains(&format!("{b}/{key}")) && !deleted_later {
            return Err(format!("op {i} was cut off and has an event, but {b}/{key} is not there"));
        }
    }
    // In order per bucket: each bucket's ops ran one after another, so the
    // first copies of their events are in op order, and so are their seqs.
    for (p, records) in topic {
        let mut last_seq = BTreeMap::<String, u64>::new();
        let mut last_op = BTreeMap::<String, u64>::new();
        for (at, e) in records.iter().enumerate() {
            let id = e["id"].as_str().unwrap_or("");
            if first.get(id) != Some(&(*p, at)) || e["type"] == "strata:BucketCreated" || e["source"] != "names" {
                continue;
            }
            let bucket = e["subject"]["bucket"].as_str().unwrap_or("").to_owned();
            let seq = e["seq"].as_u64().unwrap_or(0);
            let op = ops[&(e["type"].as_str().unwrap_or("").to_owned(), bucket.clone(), e["subject"]["key"].as_str().unwrap_or("").to_owned())];
            if last_seq.get(&bucket).is_some_and(|&s| s >= seq) {
                return Err(format!("bucket {bucket}: seq {seq} after a later one"));
            }
            if last_op.get(&bucket).is_some_and(|&o| o >= op) {
                return Err(format!("bucket {bucket}: op {op}'s event after a later op's"));
            }
            last_seq.insert(bucket.clone(), seq);
            last_op.insert(bucket, op);
        }
    }
    Ok(format!(
        "{} ops attempted, {} acknowledged, {} cut off by a crash ({cut_off_with_event} of those took effect and have their event); {events} records in the topic, {} distinct events, {duplicates} duplicates (at-least-once retries)",
        run.attempted.len(),
        run.acked.len(),
        run.attempted.len() - run.acked.len(),
        first.len()
    ))
}

/// The driver (tests/s3/events.py) against `node`'s S3 port as its admin.
async fn s3_driver(node: &Node) -> Command {
    let line = node.printed("S3 API on").await;
    let endpoint = line.split_whitespace().find(|w| w.starts_with("http://")).expect("S3 URL").to_owned();
    let keys = node.printed("AWS_ACCESS_KEY_ID=").await;
    let field = |name: &str| keys.split_whitespace().find_map(|w| w.strip_prefix(name)).expect("key printed").to_owned();
    let mut c = Command::new(pyenv().join("bin/python"));
    c.arg(workspace().join("crates/strata-cli/tests/s3/events.py"))
        .env("STRATA_S3", endpoint)
        .env("AWS_ACCESS_KEY_ID", field("AWS_ACCESS_KEY_ID="))
        .env("AWS_SECRET_ACCESS_KEY", field("AWS_SECRET_ACCESS_KEY="));
    c
}

/// A single node in a fresh directory with a JSON-lines target of every
/// event: (the directory, the data directory, the events file, the node).
async fn node_with_file_target() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, Node) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = dir.path().join("events.jsonl");
    let node = Node::start(&data, &[]).await;
    let (ok, text) = node.cli(&["events", "target", "add", "capture", "--file", out.to_str().unwrap(), "--all"]);
    assert!(ok, "{text}");
    (dir, data, out, node)
}

/// Native blob events come from each partition's log: puts and deletes
/// acknowledged before a SIGKILL, before a clean stop and after the
/// restarts are all in the
/// JSON-lines file, each partition's in log order, each naming the key
/// that made it.
#[tokio::test(flavor = "multi_thread")]
async fn every_acknowledged_native_put_and_delete_is_captured_through_kill9() {
    let (_dir, data, out, mut node) = node_with_file_target().await;
    // The sender starts within the reconcile period; events before it are
    // not the target's (a new target starts at the end).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, &'static str)>::new()));
    for round in 0..3 {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for t in 0..8u64 {
            let (client, acked, stop) = (node.client.clone(), acked.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let body = common::content(round * 1_000_000 + t * 10_000 + i, 2048);
                    let Ok(put) = client.put_bytes(body, &strata_client::PutArgs::default()).await else { return };
                    acked.lock().unwrap().push((put.id.clone(), "strata:BlobPut"));
                    if i.is_multiple_of(3) {
                        if client.delete(&put.id).await.is_err() {
                            return;
                        }
                        acked.lock().unwrap().push((put.id, "strata:BlobDeleted"));
                    }
                    i += 1;
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        match round {
            0 => node.kill9(),
            // A clean stop flushes the index: the journal the restarted
            // node rebuilds must still reach back to what the sender had
            // not yet recorded as delivered.
            1 => node.stop(),
            _ => stop.store(true, std::sync::atomic::Ordering::Relaxed),
        }
        for t in tasks {
            t.await.unwrap();
        }
        if round < 2 {
            node = Node::start(&data, &[]).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = node.client.json(http::Method::GET, "/admin/events").await.expect("status");
        let senders = st["blob_senders"].as_array().cloned().unwrap_or_default();
        if !senders.is_empty() && senders.iter().all(|s| s["pending"] == 0) {
            assert_eq!(st["blob_lost"], 0, "no record fell out of a journal: {st}");
            break;
        }
        assert!(Instant::now() < deadline, "blob events never all delivered: {st}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut seen = BTreeSet::new();
    let mut who: BTreeMap<String, String> = BTreeMap::new();
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        let e: serde_json::Value = serde_json::from_str(line).expect("one JSON event a line");
        let source = e["source"].as_str().unwrap().to_owned();
        let seq = e["seq"].as_u64().unwrap();
        if seen.insert(e["id"].as_str().unwrap().to_owned()) {
            // First copies are in log order per partition.
            assert!(last.get(&source).is_none_or(|&s| s < seq), "{source}: {seq} after a later record");
            last.insert(source, seq);
        }
        let op = format!("{} {}", e["subject"]["blob"].as_str().unwrap(), e["type"].as_str().unwrap());
        who.insert(op.clone(), e["who"].as_str().unwrap_or("").to_owned());
        seen.insert(op);
    }
    let acked = acked.lock().unwrap();
    // Each names the key that made it, before the kill and after it (the
    // record holds it: format version 4).
    let admin = strata_auth::credentials::load(&node.credentials()).expect("admin credentials").access_key_id;
    let strangers: Vec<_> = acked.iter().filter_map(|(id, kind)| who.get(&format!("{id} {kind}")).filter(|w| **w != admin)).collect();
    assert!(strangers.is_empty(), "events not naming the admin key {admin}: {:?}", &strangers[..strangers.len().min(5)]);
    assert!(acked.len() > 100, "too few ops to mean anything: {}", acked.len());
    let missing: Vec<_> = acked.iter().filter(|(id, kind)| !seen.contains(&format!("{id} {kind}"))).collect();
    assert!(missing.is_empty(), "{} of {} acknowledged ops have no event: {:?}", missing.len(), acked.len(), &missing[..missing.len().min(5)]);
    println!("{} acknowledged native ops, every one captured", acked.len());
}

/// Read-only store versions: each load, swap and rollback asked for
/// through the admin API is an event with the key that asked, including a
/// swap made right before a SIGKILL (its record is in the same file
/// replace as the swap, so the restarted node sends it).
#[tokio::test(flavor = "multi_thread")]
async fn read_only_store_version_changes_are_captured_through_kill9() {
    let (dir, data, out, mut node) = node_with_file_target().await;
    let def = strata_kv::StoreDef { name: "scores".into(), partitions: 4, replication: 1, chunks: 2 };
    for v in [1u8, 2] {
        let recs: Vec<(Vec<u8>, Vec<u8>)> = (0..200u32).map(|i| (i.to_be_bytes().to_vec(), format!("v{v}:{i}").into_bytes())).collect();
        strata_kv::build_in_memory(&def, recs, &dir.path().join(format!("b{v}")), strata_kv::Duplicates::Fail).unwrap();
    }
    // The store exists before the sender starts, so its history is a source.
    node.client.post_json("/admin/kv/scores", &serde_json::json!({ "partitions": 4, "chunks": 2 })).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let load = |v: u8| serde_json::json!({ "dir": dir.path().join(format!("b{v}")) });
    let n1 = node.client.post_json("/admin/kv/scores/load", &load(1)).await.unwrap()["version"].as_u64().unwrap();
    node.client.post_json("/admin/kv/scores/swap", &serde_json::json!({ "version": n1 })).await.unwrap();
    node.kill9();
    node = Node::start(&data, &[]).await;
    let n2 = node.client.post_json("/admin/kv/scores/load", &load(2)).await.unwrap()["version"].as_u64().unwrap();
    node.client.post_json("/admin/kv/scores/swap", &serde_json::json!({ "version": n2 })).await.unwrap();
    // A refused swap makes no event.
    assert!(node.client.post_json("/admin/kv/scores/swap", &serde_json::json!({ "version": 99 })).await.is_err());
    node.client.post_json("/admin/kv/scores/rollback", &serde_json::json!({})).await.unwrap();
    let want = vec![
        ("strata:StoreVersionLoaded".to_owned(), n1.to_string()),
        ("strata:StoreVersionSwapped".to_owned(), n1.to_string()),
        ("strata:StoreVersionLoaded".to_owned(), n2.to_string()),
        ("strata:StoreVersionSwapped".to_owned(), n2.to_string()),
        ("strata:StoreVersionRolledBack".to_owned(), n1.to_string()),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let mut seen = BTreeSet::new();
        let events: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("one JSON event a line"))
            .filter(|e| e["source"] == "store-scores" && seen.insert(e["id"].as_str().unwrap_or("").to_owned()))
            .collect();
        let got: Vec<(String, String)> =
            events.iter().map(|e| (e["type"].as_str().unwrap_or("").to_owned(), e["subject"]["version_id"].as_str().unwrap_or("").to_owned())).collect();
        if got.len() >= want.len() || Instant::now() > deadline {
            assert_eq!(got, want, "store events in order, once each by id");
            for e in &events {
                assert_eq!(e["subject"]["name"], "scores", "{e}");
                let who = e["who"].as_str().unwrap_or("");
                assert!(!who.is_empty() && who != "strata", "the admin key that asked: {e}");
                assert!(e["time_ms"].as_u64().unwrap_or(0) > 1_600_000_000_000, "{e}");
            }
            let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap_or(0)).collect();
            assert_eq!(seqs, (1..=5).collect::<Vec<u64>>());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

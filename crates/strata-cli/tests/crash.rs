//! Crash test: concurrent puts (chunked ones included) and deletes against a
//! real server killed with SIGKILL at random moments, again and again. After
//! each restart every acknowledged blob must read back byte-identical, every
//! acknowledged delete must hold, and every blob visible in any partition
//! must be complete (nothing unacknowledged is half-visible).

mod common;

use common::{Node, content, self_consistent};
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strata_client::PutArgs;

#[derive(Default, Clone)]
struct Acked {
    live: HashMap<String, (u64, usize)>,
    deleted: Vec<String>,
    /// Deletes whose answer never came (the server died): either outcome is
    /// allowed, but the blob must be intact or deleted, nothing else.
    uncertain: HashMap<String, (u64, usize)>,
}

async fn verify(node: &Node, acked: &Acked) -> (usize, usize) {
    for (id, (seed, len)) in &acked.live {
        let got = node.client.get_bytes(id).await.unwrap_or_else(|e| panic!("acknowledged blob {id} ({len} bytes) unreadable after crash: {e}"));
        assert!(got[..] == content(*seed, *len)[..], "acknowledged blob {id} differs after crash");
    }
    for id in &acked.deleted {
        let e = node.client.get_bytes(id).await.expect_err("acknowledged delete was lost");
        assert!(matches!(e.status(), Some(410)), "deleted blob {id}: {e}");
    }
    for (id, (seed, len)) in &acked.uncertain {
        match node.client.get_bytes(id).await {
            Ok(got) => assert!(got[..] == content(*seed, *len)[..], "blob {id} with an unanswered delete differs"),
            Err(e) => assert!(matches!(e.status(), Some(410)), "blob {id} with an unanswered delete: {e}"),
        }
    }
    // Everything visible must be complete, acknowledged or not.
    let parts = node.client.json(http::Method::GET, "/admin/partitions").await.expect("partitions");
    let mut visible = 0;
    for p in parts.as_array().expect("array") {
        let pid = p["partition"].as_u64().expect("pid");
        let blobs = node.client.json(http::Method::GET, &format!("/admin/partitions/{pid}/blobs")).await.expect("blob list");
        for b in blobs.as_array().expect("array") {
            if b["state"] != "live" || b["kind"] == "Chunk" {
                continue;
            }
            let id = b["id"].as_str().expect("id");
            let got = node.client.get_bytes(id).await.unwrap_or_else(|e| panic!("visible blob {id} unreadable: {e}"));
            assert!(self_consistent(&got), "visible blob {id} is incomplete or corrupt ({} bytes)", got.len());
            visible += 1;
        }
    }
    (acked.live.len(), visible)
}

/// The sum over partitions of an engine counter.
async fn engine_counter(node: &Node, name: &str) -> f64 {
    let resp = node.client.send(http::Method::GET, "/metrics", &[], strata_client::full(bytes::Bytes::new())).await.expect("metrics");
    let body = resp.bytes().await.expect("metrics body");
    let prefix = format!("{name}_total{{");
    String::from_utf8_lossy(&body).lines().filter(|l| l.starts_with(&prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// Bytes of torn log tail the node cut off when it recovered.
async fn torn_bytes_at_recovery(node: &Node) -> f64 {
    engine_counter(node, "strata_engine_torn_bytes_truncated").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let rounds: usize = std::env::var("STRATA_CRASH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let seed: u64 = std::env::var("STRATA_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("crash test seed {seed} (STRATA_CRASH_SEED to replay the workload), {rounds} rounds");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("node");
    // Small chunks and segments so chunking, segment rolls and index flushes all
    // happen; frequent background compaction so crashes can land inside it.
    // Chunks of 256 KiB are written with O_DIRECT through the tail cache,
    // smaller records through the page cache, so crashes land in both.
    let args = ["--chunk-size", "256KiB", "--segment-size", "2MiB", "--compaction-interval-secs", "1", "--disk-reserve", "0"];
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut total_visible = 0;
    let mut torn_bytes = 0.0;
    let mut direct_writes = 0.0;
    for round in 0..rounds {
        let mut node = Node::start(&data, &args).await;
        torn_bytes += torn_bytes_at_recovery(&node).await;
        {
            let a = acked.lock().expect("lock").clone();
            let (n, visible) = verify(&node, &a).await;
            total_visible = visible;
            eprintln!("round {round}: {n} acknowledged blobs verified, {visible} visible blobs complete");
        }
        let mut workers = Vec::new();
        for w in 0..6u64 {
            let client = node.client.clone();
            let acked = acked.clone();
            let wseed = rng.random::<u64>() ^ w;
            workers.push(tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(wseed);
                // Bounded: the kill below ends every worker well before this.
                for _ in 0..10_000 {
                    if rng.random_ratio(1, 8) {
                        let victim = {
                            let mut a = acked.lock().expect("lock");
                            let id = a.live.keys().next().cloned();
                            id.and_then(|id| a.live.remove_entry(&id))
                        };
                        if let Some((id, blob)) = victim {
                            let ok = client.delete(&id).await.is_ok();
                            let mut a = acked.lock().expect("lock");
                            if ok {
                                a.deleted.push(id);
                            } else {
                                a.uncertain.insert(id, blob);
                                return;
                            }
                        }
                        continue;
                    }
                    // Paced so writes are always in flight when the kill lands,
                    // without piling up more data than each round can re-verify.
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    let len = if rng.random_ratio(1, 6) { rng.random_range(64 << 10..600 << 10) } else { rng.random_range(16..20 << 10) };
                    let s: u64 = rng.random();
                    match client.put_bytes(content(s, len), &PutArgs::default()).await {
                        Ok(r) => {
                            acked.lock().expect("lock").live.insert(r.id, (s, len));
                        }
                        Err(_) => return,
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..700))).await;
        direct_writes += engine_counter(&node, "strata_engine_direct_writes").await;
        node.kill9();
        for w in workers {
            let _ = w.await;
        }
    }
    let node = Node::start(&data, &args).await;
    let a = acked.lock().expect("lock").clone();
    let (n, visible) = verify(&node, &a).await;
    eprintln!(
        "final: {n} acknowledged blobs verified, {} deletes held, {} unanswered deletes consistent, {visible} visible blobs complete, {torn_bytes} torn bytes cut at recoveries",
        a.deleted.len(),
        a.uncertain.len()
    );
    assert!(n > 100 && !a.deleted.is_empty() && total_visible > 0, "the workload did too little to mean anything");
    assert!(direct_writes > 0.0, "no write went through the tail cache with O_DIRECT");
}

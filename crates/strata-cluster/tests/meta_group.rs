//! Three metadata members on real sockets, in one process: election,
//! proposals through a follower, leader loss, and a restarted member
//! catching up from its files.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use strata_cluster::meta::{MetaConfig, MetaService};
use strata_cluster::{Command, Outcome};
use tokio::net::TcpListener;
use tokio::sync::RwLock;

type Slot = Arc<RwLock<Option<Arc<MetaService>>>>;

/// Serves Raft frames for whatever service sits in `slot` (none: 503).
async fn serve(listener: TcpListener, slot: Slot) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { return };
        let slot = slot.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let slot = slot.clone();
                async move {
                    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    let meta = slot.read().await.clone();
                    let resp = match meta {
                        None => hyper::Response::builder().status(503).body(Full::new(Bytes::from_static(b"down"))),
                        Some(m) => match m.handle(&body).await {
                            Ok(frame) => hyper::Response::builder().body(Full::new(Bytes::from(frame))),
                            Err(e) => hyper::Response::builder().status(400).body(Full::new(Bytes::from(e))),
                        },
                    };
                    Ok::<_, std::convert::Infallible>(resp.expect("response"))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), svc).await;
        });
    }
}

async fn leader_of(members: &[Slot]) -> Option<u64> {
    for _ in 0..100 {
        for s in members {
            if let Some(m) = s.read().await.as_ref() {
                let st = m.status();
                if st.leader == Some(st.id) {
                    return Some(st.id);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_elect_agree_and_survive_leader_loss() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = BTreeMap::new();
    let mut slots: Vec<Slot> = Vec::new();
    for i in 0..3u64 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        members.insert(i + 1, l.local_addr().unwrap().to_string());
        let slot: Slot = Arc::new(RwLock::new(None));
        tokio::spawn(serve(l, slot.clone()));
        slots.push(slot);
    }
    for i in 0..3u64 {
        let m = MetaService::start(MetaConfig::new(i + 1, dirs[i as usize].path().to_path_buf())).await.unwrap();
        *slots[i as usize].write().await = Some(m);
    }
    let first = slots[0].read().await.clone().unwrap();
    first.initialize(members.clone()).await.unwrap();
    let leader = leader_of(&slots).await.expect("a leader");

    // A proposal through a follower is forwarded and applied everywhere.
    let follower = (1..=3).find(|&i| i != leader).unwrap();
    let f = slots[follower as usize - 1].read().await.clone().unwrap();
    let out = f.propose(Command::AddNode { id: 10, addr: "10.0.0.1:7000".into(), zone: "z1".into(), rack: "r1".into() }).await.unwrap();
    assert_eq!(out, Outcome::Applied { epoch: 1 });
    // A refused command is an outcome, not a failure, and changes nothing.
    let out = f.propose(Command::AddNode { id: 10, addr: "10.0.0.2:7000".into(), zone: "z1".into(), rack: "r1".into() }).await.unwrap();
    assert!(matches!(out, Outcome::Refused(_)), "{out:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    for s in &slots {
        let m = s.read().await.clone().unwrap();
        assert_eq!(m.map().epoch, 1, "member {} lags", m.status().id);
        assert!(m.map().nodes.contains_key(&10));
    }

    // The leader goes away; the other two elect a new one and keep going.
    let old = slots[leader as usize - 1].write().await.take().unwrap();
    old.shutdown().await;
    drop(old);
    let new_leader = leader_of(&slots).await.expect("a new leader");
    assert_ne!(new_leader, leader);
    let m = slots[new_leader as usize - 1].read().await.clone().unwrap();
    let out = m.propose(Command::AddDisk { node: 10, path: "/d0".into(), capacity_bytes: 1 << 40 }).await.unwrap();
    assert_eq!(out, Outcome::Applied { epoch: 2 });

    // The old leader restarts from its files and catches up.
    let back = MetaService::start(MetaConfig::new(leader, dirs[leader as usize - 1].path().to_path_buf())).await.unwrap();
    *slots[leader as usize - 1].write().await = Some(back.clone());
    for _ in 0..100 {
        if back.map().epoch == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(back.map().epoch, 2);
    assert_eq!(*back.map(), *m.map());
    for s in &slots {
        if let Some(m) = s.read().await.clone() {
            m.shutdown().await;
        }
    }
}

/// A cluster change that says who asked makes its event in the names'
/// outbox in the same entry, on every replay: only while a target of every
/// event exists, never for a refused command, and with the identity and time
/// the command carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_changes_make_their_events_in_the_same_entry() {
    let dir = tempfile::tempdir().unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let slot: Slot = Arc::new(RwLock::new(None));
    tokio::spawn(serve(l, slot.clone()));
    let m = MetaService::start(MetaConfig::new(1, dir.path().to_path_buf())).await.unwrap();
    *slot.write().await = Some(m.clone());
    m.initialize(BTreeMap::from([(1, addr)])).await.unwrap();
    leader_of(std::slice::from_ref(&slot)).await.expect("a leader");
    let add = |id: u64| Command::AddNode { id, addr: format!("10.0.0.{id}:7000"), zone: "z1".into(), rack: "r1".into() };
    let events = |m: &MetaService| -> Vec<(String, Option<String>, Option<String>, u64)> {
        let n = m.names().read().unwrap();
        n.outbox.events.iter().map(|e| (e.kind.clone(), e.name.clone(), e.who.clone(), e.time_ms)).collect()
    };

    // No target: nothing is recorded.
    assert!(matches!(m.propose(add(1).by(Some("AK1".into()), 100)).await.unwrap(), Outcome::Applied { .. }));
    assert!(events(&m).is_empty());
    let target = strata_names::NameOp::SetEventTarget { name: "t".into(), spec: Some("{}".into()), all: true, now_ms: 1 };
    m.propose(Command::Names(target)).await.unwrap();
    assert!(matches!(m.propose(add(2).by(Some("AK1".into()), 200)).await.unwrap(), Outcome::Applied { .. }));
    // Refused (node 2 exists): no event.
    assert!(matches!(m.propose(add(2).by(Some("AK1".into()), 250)).await.unwrap(), Outcome::Refused(_)));
    let down = Command::SetNodeState { node: 2, state: strata_cluster::NodeState::Down { since_ms: 300 } };
    m.propose(down.clone().by_system(300)).await.unwrap();
    // Already down: no second event.
    m.propose(down.by_system(310)).await.unwrap();
    m.propose(Command::SetNodeState { node: 2, state: strata_cluster::NodeState::Up }.by_system(400)).await.unwrap();
    let want = vec![
        ("strata:NodeAdded".to_owned(), Some("2".to_owned()), Some("AK1".to_owned()), 200),
        ("strata:NodeDown".to_owned(), Some("2".to_owned()), Some("strata".to_owned()), 300),
        ("strata:NodeUp".to_owned(), Some("2".to_owned()), Some("strata".to_owned()), 400),
    ];
    assert_eq!(events(&m), want);

    // A restart replays the log (or loads the snapshot): the same events.
    m.shutdown().await;
    drop(m);
    *slot.write().await = None;
    let back = MetaService::start(MetaConfig::new(1, dir.path().to_path_buf())).await.unwrap();
    *slot.write().await = Some(back.clone());
    for _ in 0..100 {
        if events(&back) == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(events(&back), want);
    back.shutdown().await;
}

//! The orphan sweep's model test: S3 puts, overwrites, deletes, multipart
//! uploads and native chunked puts race each other, clock jumps and sweep
//! passes on one real node (files, the writer thread, the name index),
//! with operations cut off at random points as a process dying would leave
//! them. After every schedule, each acknowledged native blob, each named
//! object and each part of an open upload must read back whole; and once
//! the grace period has passed, no orphan may be left. Half the schedules
//! keep versions, whose older objects the sweep must spare too. The same schedules
//! with a deliberately broken sweep must lose data, or the test proves
//! nothing.

use crate::{S3Options, StrataS3};
use futures_util::StreamExt;
use rand::{Rng, SeedableRng};
use s3s::S3;
use s3s::dto::*;
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use strata_names::{EmbeddedIndex, NameIndex, NameOp};
use strata_node::Sweeper;
use strata_router::{BlobData, Router, RouterConfig};
use strata_types::{BlobId, BlobKind, Clock, ManualClock};

const GRACE_MS: u64 = 100_000;
const CHUNK: usize = 1024;
const KEYS: usize = 6;

/// Polls a future at most `polls` times: what a process killed mid-way
/// leaves behind (tasks it spawned run on, as their writes would have
/// reached the disk).
struct Cut<F: Future> {
    fut: Pin<Box<F>>,
    polls: usize,
}

impl<F: Future> Future for Cut<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.polls == 0 {
            return Poll::Ready(None);
        }
        self.polls -= 1;
        self.fut.as_mut().poll(cx).map(Some)
    }
}

async fn maybe_cut<F: Future>(rng: &mut rand::rngs::StdRng, fut: F) -> Option<F::Output> {
    let polls = if rng.random_bool(0.25) { rng.random_range(1..12) } else { usize::MAX };
    Cut { fut: Box::pin(fut), polls }.await
}

/// A body that says what it should hold: `seed u64 | len u64 | bytes`,
/// so any wrong, missing or foreign byte shows.
fn segment(seed: u64, len: usize) -> Vec<u8> {
    let len = len.max(16);
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&seed.to_le_bytes());
    out.extend_from_slice(&(len as u64).to_le_bytes());
    let mut r = rand::rngs::StdRng::seed_from_u64(seed);
    out.extend((16..len).map(|_| r.random::<u8>()));
    out
}

/// Checks that `data` is whole segments back to back.
fn check_segments(data: &[u8]) -> Result<(), String> {
    let mut at = 0;
    while at < data.len() {
        let head = data.get(at..at + 16).ok_or("a segment header is cut short")?;
        let seed = u64::from_le_bytes(head[..8].try_into().map_err(|_| "header")?);
        let len = u64::from_le_bytes(head[8..].try_into().map_err(|_| "header")?) as usize;
        let want = segment(seed, len);
        if data.get(at..at + len) != Some(&want[..]) {
            return Err(format!("the segment at {at} (seed {seed}, {len} bytes) differs"));
        }
        at += len;
    }
    if data.is_empty() { Err("empty".into()) } else { Ok(()) }
}

async fn read_all(router: &Arc<Router>, id: BlobId) -> Result<Vec<u8>, String> {
    let body = router.get(id, None).await.map_err(|e| format!("{id}: {e}"))?;
    match body.data {
        BlobData::Whole(b, _) => Ok(b.to_vec()),
        BlobData::Stream(mut s) => {
            let mut out = Vec::new();
            while let Some(b) = s.next().await {
                out.extend_from_slice(&b.map_err(|e| format!("{id}: {e}"))?);
            }
            Ok(out)
        }
    }
}

fn request<T>(input: T) -> s3s::S3Request<T> {
    s3s::S3Request {
        input,
        method: http::Method::PUT,
        uri: http::Uri::from_static("/"),
        headers: http::HeaderMap::new(),
        extensions: http::Extensions::new(),
        credentials: None,
        region: None,
        service: None,
        trailing_headers: None,
    }
}

fn body(data: Vec<u8>) -> Option<StreamingBlob> {
    Some(StreamingBlob::from(s3s::Body::from(bytes::Bytes::from(data))))
}

struct World {
    router: Arc<Router>,
    names: Arc<dyn NameIndex>,
    s3: Arc<StrataS3>,
    clock: ManualClock,
    sweeper: Arc<Sweeper>,
    /// Native blobs acknowledged to the client.
    native: std::sync::Mutex<Vec<BlobId>>,
}

/// A world whose bucket `b` keeps versions when `versioned` (overwrites
/// and deletes then leave older versions the sweep must spare).
async fn world(dir: &std::path::Path, versioned: bool) -> Arc<World> {
    let clock = ManualClock::new(1_000_000_000);
    let c: Arc<dyn Clock> = Arc::new(clock.clone());
    let store = Arc::new(strata_engine::Store::open(&dir.join("data"), strata_engine::EngineConfig::default(), c.clone()).expect("store"));
    for p in 0..3 {
        store.create_replica(p).expect("replica");
    }
    let config = RouterConfig { chunk_size: CHUNK, orphan_grace_ms: GRACE_MS, ..RouterConfig::default() };
    let router = Arc::new(Router::new(Arc::new(strata_router::LocalView::new(store)), config, c.clone(), Some(7)));
    let names: Arc<dyn NameIndex> = Arc::new(EmbeddedIndex::open(&dir.join("names")).expect("names"));
    names.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).await.expect("bucket");
    if versioned {
        names.apply(NameOp::SetVersioning { bucket: "b".into(), enabled: true }).await.expect("versioning");
    }
    let opts = S3Options { min_part_bytes: 1, ..S3Options::default() };
    let s3 = Arc::new(StrataS3 { router: router.clone(), names: names.clone(), clock: c, opts, observer: None });
    let sweeper = Sweeper::new(router.clone(), Some(names.clone()), None);
    Arc::new(World { router, names, s3, clock, sweeper, native: std::sync::Mutex::new(Vec::new()) })
}

/// One actor's schedule of operations.
async fn actor(w: Arc<World>, seed: u64, steps: usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for step in 0..steps {
        let data_seed = seed * 1_000_000 + step as u64;
        let size = if rng.random_bool(0.5) { rng.random_range(16..CHUNK) } else { rng.random_range(CHUNK..4 * CHUNK) };
        let key = format!("k{}", rng.random_range(0..KEYS));
        match rng.random_range(0..100) {
            0..25 => {
                let put = w.router.put_bytes(strata_router::PutOptions::default(), segment(data_seed, size).into());
                if let Some(Ok(id)) = maybe_cut(&mut rng, put).await {
                    w.native.lock().expect("lock").push(id);
                }
            }
            25..50 => {
                let input =
                    PutObjectInput::builder().bucket("b".into()).key(key).body(body(segment(data_seed, size))).content_length(Some(size.max(16) as i64));
                let input = input.build().expect("input");
                let _ = maybe_cut(&mut rng, w.s3.put_object(request(input))).await;
            }
            50..62 => {
                let input = DeleteObjectInput::builder().bucket("b".into()).key(key).build().expect("input");
                let _ = maybe_cut(&mut rng, w.s3.delete_object(request(input))).await;
            }
            62..80 => multipart(&w, &mut rng, key, data_seed).await,
            80..90 => w.clock.advance(rng.random_range(0..GRACE_MS / 3)),
            90..96 => {
                let _ = w.sweeper.pass().await;
            }
            _ => tokio::task::yield_now().await,
        }
        tokio::task::yield_now().await;
    }
}

/// Starts an upload, puts some parts and completes it, any step maybe cut
/// off (leaving the upload open or the parts unrecorded).
async fn multipart(w: &World, rng: &mut rand::rngs::StdRng, key: String, data_seed: u64) {
    let input = CreateMultipartUploadInput::builder().bucket("b".into()).key(key.clone()).build().expect("input");
    let Some(Ok(out)) = maybe_cut(rng, w.s3.create_multipart_upload(request(input))).await else { return };
    let Some(upload_id) = out.output.upload_id else { return };
    let n = rng.random_range(1..4);
    let mut parts = Vec::new();
    for i in 1..=n {
        let size = rng.random_range(16..3 * CHUNK);
        let input = UploadPartInput::builder()
            .bucket("b".into())
            .key(key.clone())
            .upload_id(upload_id.clone())
            .part_number(i)
            .body(body(segment(data_seed * 10 + i as u64, size)))
            .content_length(Some(size as i64))
            .build()
            .expect("input");
        match maybe_cut(rng, w.s3.upload_part(request(input))).await {
            Some(Ok(out)) => parts.push(CompletedPart { part_number: Some(i), e_tag: out.output.e_tag, ..Default::default() }),
            _ => return,
        }
        if rng.random_bool(0.3) {
            w.clock.advance(rng.random_range(0..GRACE_MS / 3));
        }
        tokio::task::yield_now().await;
    }
    if rng.random_bool(0.2) {
        return; // left open
    }
    let input = CompleteMultipartUploadInput::builder()
        .bucket("b".into())
        .key(key)
        .upload_id(upload_id)
        .multipart_upload(Some(CompletedMultipartUpload { parts: Some(parts) }))
        .build()
        .expect("input");
    let _ = maybe_cut(rng, w.s3.complete_multipart_upload(request(input))).await;
}

/// The blobs the names hold, by the model's own reading of the state (not
/// `NameState::named_blobs`, which the sweep uses: a blob that function
/// forgot must show here as freed while reachable).
fn held<C: FromIterator<BlobId>>(s: &strata_names::NameState) -> C {
    let b = &s.buckets["b"];
    let older = s.versioning.get("b").into_iter().flat_map(|v| v.older.values().flatten().filter_map(|v| v.object.as_ref().map(|o| o.blob)));
    b.objects.values().map(|o| o.blob).chain(b.uploads.values().flat_map(|u| u.parts.values().map(|p| p.blob))).chain(older).collect()
}

/// What must read back: acknowledged native blobs, named objects (older
/// versions too) and the parts of open uploads.
async fn check_reachable(w: &World) -> Result<usize, String> {
    let native = w.native.lock().expect("lock").clone();
    let held: Vec<BlobId> = strata_names::read(&*w.names, held);
    for id in native.iter().chain(&held) {
        let data = read_all(&w.router, *id).await?;
        check_segments(&data).map_err(|e| format!("{id}: {e}"))?;
    }
    Ok(native.len() + held.len())
}

/// Records nothing can reach: chunks no live composite lists, S3 blobs no
/// name, upload or composite holds. Computed from the store, not the sweep.
async fn orphans(w: &World) -> Vec<BlobId> {
    let mut all = Vec::new();
    for p in w.router.all_partitions() {
        all.extend(w.router.list_keys(p).await.expect("list").iter().filter_map(|k| k.blob_id()));
    }
    let mut reachable: HashSet<BlobId> = strata_names::read(&*w.names, held);
    for id in &all {
        if id.kind() == BlobKind::Composite
            && let Ok(chunks) = w.router.chunks_of(*id).await
        {
            reachable.extend(chunks);
        }
    }
    let mut out = Vec::new();
    for id in all {
        if reachable.contains(&id) {
            continue;
        }
        let Ok((owner, _, expiry)) = w.router.provenance(id).await else { continue };
        if expiry != 0 && expiry <= w.clock.now_ms() {
            continue;
        }
        if id.kind() == BlobKind::Chunk || owner == strata_router::S3_OWNER {
            out.push(id);
        }
    }
    out
}

/// Runs one seeded schedule; returns what went wrong, if anything.
async fn schedule(seed: u64, broken: bool) -> Result<(usize, u64), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let w = world(dir.path(), seed.is_multiple_of(2)).await;
    w.sweeper.set_broken(broken);
    let actors: Vec<_> = (0..5).map(|a| tokio::spawn(actor(w.clone(), seed * 100 + a, 40))).collect();
    for a in actors {
        a.await.map_err(|e| e.to_string())?;
    }
    // Let the chunk tasks of cut-off puts finish.
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    check_reachable(&w).await.map_err(|e| format!("seed {seed}, after the race: {e}"))?;
    // Everything is now older than the grace period (and retired objects'
    // minutes are up): two passes free every orphan (composites, then
    // the chunks they listed).
    w.clock.advance(2 * GRACE_MS + 10 * 60 * 1000);
    for _ in 0..2 {
        let st = w.sweeper.pass().await;
        if let Some(why) = st.stopped {
            return Err(format!("seed {seed}: a pass stopped: {why}"));
        }
    }
    let checked = check_reachable(&w).await.map_err(|e| format!("seed {seed}, after the final passes: {e}"))?;
    let left = orphans(&w).await;
    if !left.is_empty() {
        return Err(format!("seed {seed}: {} orphans left after the grace period, e.g. {}", left.len(), left[0]));
    }
    Ok((checked, w.sweeper.totals.freed.load(std::sync::atomic::Ordering::Relaxed)))
}

#[tokio::test]
async fn racing_puts_names_and_sweeps_never_free_a_reachable_blob_and_leave_no_orphan() {
    let (mut checked, mut freed) = (0, 0);
    for seed in 1..=20 {
        let (c, f) = schedule(seed, false).await.unwrap_or_else(|e| panic!("{e}"));
        eprintln!("seed {seed}: {c} checked, {f} freed");
        checked += c;
        freed += f;
    }
    // The schedules must have made orphans for the sweep to free, and
    // reachable blobs for it to spare.
    assert!(freed > 20, "only {freed} orphans freed");
    assert!(checked > 100, "only {checked} reachable blobs checked");
}

#[tokio::test]
async fn a_sweep_that_ignores_the_grace_period_is_caught() {
    let mut caught = 0;
    for seed in 1..=6 {
        if let Err(e) = schedule(seed, true).await {
            eprintln!("broken: {e}");
            caught += 1;
        }
    }
    assert!(caught > 0, "the broken sweep lost nothing in 6 schedules: the model test cannot tell");
}

/// A body whose second frame arrives after the clock has jumped `jump_ms`:
/// a put that takes that long.
fn slow_body(w: &World, data: Vec<u8>, jump_ms: u64) -> impl futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + Unpin + 'static {
    let clock = w.clock.clone();
    let (a, b) = data.split_at(data.len() / 2);
    let (a, b) = (bytes::Bytes::copy_from_slice(a), bytes::Bytes::copy_from_slice(b));
    futures_util::stream::iter([(a, 0), (b, jump_ms)]).map(move |(frame, jump)| {
        clock.advance(jump);
        Ok(frame)
    })
}

#[tokio::test]
async fn a_put_that_outlasts_half_the_grace_period_fails_and_frees_what_it_wrote() {
    let dir = tempfile::tempdir().expect("dir");
    let w = world(dir.path(), false).await;
    // Native chunked put: its composite would name chunks the sweep may be freeing.
    let err = w.router.put_stream(strata_router::PutOptions::default(), slow_body(&w, segment(1, 5 * CHUNK), GRACE_MS / 2 + 1)).await.unwrap_err();
    assert!(matches!(err, strata_router::RouterError::TooSlow(_)), "{err}");
    // Within the limit it succeeds.
    let id = w.router.put_stream(strata_router::PutOptions::default(), slow_body(&w, segment(2, 5 * CHUNK), GRACE_MS / 2 - 1000)).await.expect("put");
    check_segments(&read_all(&w.router, id).await.expect("read")).expect("whole");
    // S3 put: the name is refused and the blob freed.
    let stream = StreamingBlob::wrap(slow_body(&w, segment(3, 3 * CHUNK), GRACE_MS / 2 + 1));
    let input = PutObjectInput::builder().bucket("b".into()).key("slow".into()).body(Some(stream)).content_length(Some(3 * CHUNK as i64));
    let err = w.s3.put_object(request(input.build().expect("input"))).await.unwrap_err();
    assert_eq!(err.code(), &s3s::S3ErrorCode::RequestTimeout);
    assert!(strata_names::read(&*w.names, |s| !s.buckets["b"].objects.contains_key("slow")), "a late name must not be applied");
    // Nothing is left behind for the sweep: the failed puts freed their blobs.
    let mut live = 0;
    for p in w.router.all_partitions() {
        live += w.router.list_keys(p).await.expect("list").len();
    }
    assert_eq!(live, 1 + 5, "only the successful put's composite and chunks remain");
}

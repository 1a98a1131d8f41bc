//! Valid inputs for each target, made with the writers of the same formats,
//! so mutations start from what a real reader sees.

use strata_format::*;
use strata_rpc::*;
use strata_types::{BlobId, BlobKind, Key};

fn blob(n: u8) -> BlobId {
    BlobId::from_parts(BlobKind::Simple, u64::from(n), [n; 16])
}

fn key(n: u8) -> Key {
    blob(n).key()
}

fn props() -> PutProps {
    PutProps { expiry_ms: 1_900_000_000_000, content_type: "text/plain".into(), owner: "strata:s3".into(), meta: vec![("a".into(), "b".into())] }
}

pub(crate) fn record() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for data in [&b""[..], b"hello, world", &[7u8; 300]] {
        let (mut head, crc) = record::encode_put(5, 1_700_000_000_000, &key(1), &props(), "AKSEED", data).expect("encodes");
        head.extend_from_slice(data);
        head.extend_from_slice(&crc);
        out.push(head);
    }
    out.push(record::encode_small(RecordKind::Delete, 6, 1_700_000_000_001, &key(1), 0, "node").expect("encodes"));
    out.push(record::encode_small(RecordKind::TtlUpdate, 7, 1_700_000_000_002, &key(2), 1_800_000_000_000, "").expect("encodes"));
    out
}

pub(crate) fn index_file() -> Vec<Vec<u8>> {
    let entries: Vec<IndexEntry> = (1..=3u8)
        .map(|n| IndexEntry {
            key: key(n),
            kind: if n == 2 { RecordKind::Delete } else { RecordKind::Put },
            expiry_ms: 0,
            lsn: u64::from(n),
            record_offset: 64 + 100 * u64::from(n),
            record_len: 100,
            data_offset: 60,
        })
        .collect();
    vec![index::encode_file(0, 0, 64, 464, &entries), index::encode_file(3, 1, 64, 64, &[])]
}

pub(crate) fn frame() -> Vec<Vec<u8>> {
    vec![frame::encode_frame(0x20, b"payload"), frame::encode_frame(1, b"")]
}

pub(crate) fn rw_session() -> Vec<Vec<u8>> {
    use strata_format::rw_session::{Answer, Request};
    vec![
        Request::Get { key: b"k" }.encode(),
        Request::Put { key: b"k", clock: "1:2@3", value: b"v" }.encode(),
        Request::Delete { key: b"k", clock: "1:2@3" }.encode(),
        Answer::Versions { clock: "1:2@3,2:1@4", versions: vec![("1:2@3", b"a".as_slice()), ("2:1@4", b"b")] }.encode(),
        Answer::Written { clock: "1:1@1" }.encode(),
        Answer::Error { status: 409, code: "ObsoleteVersion", message: "m" }.encode(),
    ]
}

pub(crate) fn rpc_message() -> Vec<Vec<u8>> {
    let k = key(1).as_bytes().to_vec();
    let wp = WireProps { expiry_ms: 0, content_type: "x".into(), owner: String::new(), meta: vec![("k".into(), "v".into())] };
    vec![
        encode_message(KIND_WRITE, &WriteRequest { epoch: 3, partition: 1, op: WireOp::Put { key: k.clone(), props: wp.clone() } }, &[b"data"]),
        encode_message(KIND_WRITE, &WriteRequest { epoch: 3, partition: 1, op: WireOp::Repair { key: k.clone(), props: wp, created_ms: 9 } }, &[b"data"]),
        encode_message(KIND_READ, &ReadRequest { epoch: 3, partition: 1, key: k.clone(), with_data: true }, &[]),
        encode_message(KIND_JOURNAL, &vec![JournalItem { partition: 1, after_lsn: 10, max: 100 }], &[]),
        encode_message(KIND_DIGEST, &DigestRequest { partition: 1, after: Some(k.clone()), max: 10, deep: true }, &[]),
        encode_message(KIND_FETCH, &FetchRequest { partition: 1, keys: vec![k.clone(), k] }, &[]),
        encode_message(KIND_WRITE, &Answer { epoch: 3, result: Ok::<_, WireError>(WireAck { lsn: 4, time_ms: 5 }) }, &[]),
    ]
}

pub(crate) fn chunk_list() -> Vec<Vec<u8>> {
    let chunks = vec![(blob(1), 4096), (blob(2), 4096), (blob(3), 17)];
    let c = strata_types::ContainerRef { account: 3, container: 1 };
    let in_container: Vec<_> = chunks.iter().map(|(id, n)| (id.in_container(c), *n)).collect();
    vec![
        ChunkList { chunk_size: 4096, total_size: 4096 * 2 + 17, chunks }.encode(),
        ChunkList { chunk_size: 4096, total_size: 4096 * 2 + 17, chunks: in_container }.encode(),
    ]
}

pub(crate) fn damage_list() -> Vec<Vec<u8>> {
    let range = |n: u8, key: Option<Key>| DamagedRange {
        segment_id: u64::from(n),
        generation: 1,
        offset: 64,
        len: 200,
        detected_ms: 1_700_000_000_000,
        key,
        after_lsn: 12,
        hides_others: n == 2,
    };
    vec![damage::encode(&[range(1, Some(key(1))), range(2, None)]), damage::encode(&[])]
}

pub(crate) fn fixed_headers() -> Vec<Vec<u8>> {
    vec![
        SegmentHeader { partition: 1, segment_id: 2, generation: 3, incarnation: [4; 16] }.encode(),
        ReplicaMeta { partition: 1, incarnation: [5; 16], created_ms: 6, capacity_bytes: 1 << 30 }.encode(),
        LsnReservation { partition: 1, lsn_limit: 1 << 20 }.encode(),
        CompactionRecord { phase: CompactionPhase::Commit, segment_id: 2, from_generation: 0, to_generation: 1 }.encode(),
    ]
}

pub(crate) fn cluster_map() -> Vec<Vec<u8>> {
    let map = strata_cluster::map::ClusterMap { epoch: 7, ..Default::default() };
    vec![strata_cluster::encode_map(&map)]
}

pub(crate) fn kv_chunk() -> Vec<Vec<u8>> {
    let Ok(dir) = tempfile::tempdir() else { return Vec::new() };
    let Ok(mut w) = strata_kv::ChunkWriter::create(dir.path(), "c") else { return Vec::new() };
    for (prefix, k, v) in [(1u64, &b"a"[..], &b"one"[..]), (1, b"b", b"two"), (0x0102_0304_0506_0708, b"key-1", b"three")] {
        if w.push(prefix, k, v).is_err() {
            return Vec::new();
        }
    }
    if w.finish().is_err() {
        return Vec::new();
    }
    let (Ok(idx), Ok(data)) = (std::fs::read(dir.path().join("c.index")), std::fs::read(dir.path().join("c.data"))) else { return Vec::new() };
    let mut seed = (idx.len() as u16).to_le_bytes().to_vec();
    seed.extend_from_slice(&idx);
    seed.extend_from_slice(&data);
    vec![seed]
}

pub(crate) fn kv_metadata() -> Vec<Vec<u8>> {
    vec![
        br#"{"format":1,"store":{"name":"s","chunks":4,"replication":{"Nodes":2},"required_reads":1},"hash":"md5","node":0,"ring":[0,1],"records":3,"collided_prefixes":0,"files":[{"name":"0_0.index","bytes":40,"crc32c":1}],"checksum":"00"}"#.to_vec(),
        b"{}".to_vec(),
    ]
}

pub(crate) fn blob_id() -> Vec<Vec<u8>> {
    let other = blob(3).in_container(strata_types::ContainerRef { account: 2, container: 5 });
    vec![blob(1).to_bytes().to_vec(), blob(2).to_string().into_bytes(), other.to_bytes().to_vec(), other.to_string().into_bytes()]
}

/// The secret the `sigv4` seeds are signed with.
pub(crate) const FUZZ_SECRET: &str = "fuzz-secret";
/// The time they are checked at (seconds since the epoch).
pub(crate) const FUZZ_NOW: u64 = 1_795_324_022;

pub(crate) fn sigv4() -> Vec<Vec<u8>> {
    let creds = strata_auth::Credentials { access_key_id: "SKFUZZ".into(), secret_access_key: FUZZ_SECRET.into() };
    let scope = strata_auth::Scope { region: "us-east-1", service: "s3" };
    let mut out = Vec::new();
    let id = blob(1).to_string();
    for (method, path, query, extra) in
        [("GET", format!("/{id}"), "", vec![]), ("POST", "/".to_string(), "", vec![("x-strata-ttl", "60")]), ("GET", "/kv/s/a%2Bb".into(), "x=1&a=", vec![])]
    {
        let mut headers: Vec<(&str, &[u8])> = vec![("host", b"127.0.0.1:8080")];
        headers.extend(extra.iter().map(|(k, v)| (*k, v.as_bytes())));
        let view = strata_auth::RequestView { method, path: &path, query, headers: &headers };
        let sig = strata_auth::sigv4::sign(&view, strata_auth::sigv4::UNSIGNED_PAYLOAD, &creds, scope, FUZZ_NOW);
        let target = if query.is_empty() { path.clone() } else { format!("{path}?{query}") };
        let mut head = format!("{method} {target} HTTP/1.1\r\n");
        for (k, v) in &headers {
            head.push_str(&format!("{k}: {}\r\n", String::from_utf8_lossy(v)));
        }
        head.push_str(&format!("x-amz-date: {}\r\nx-amz-content-sha256: {}\r\nauthorization: {}\r\n\r\n", sig.amz_date, sig.content_sha256, sig.authorization));
        out.push(head.into_bytes());
        let presigned = strata_auth::sigv4::presign(&view, &creds, scope, FUZZ_NOW, 3600);
        out.push(format!("{method} {path}?{presigned} HTTP/1.1\r\nhost: 127.0.0.1:8080\r\n\r\n").into_bytes());
    }
    out
}

pub(crate) fn route() -> Vec<Vec<u8>> {
    let id = blob(1).to_string();
    let other = blob(2).in_container(strata_types::ContainerRef { account: 1, container: 1 }).to_string();
    [
        format!("GET /{id}"),
        format!("DELETE /{other}"),
        format!("PUT /{id}/ttl"),
        "POST /".into(),
        "GET /kv/store/a%2F".into(),
        "POST /admin/kv/s/swap".into(),
        "GET /admin/kv/s/live/0_0_0.data".into(),
        "POST /rpc/v1/write".into(),
        "GET /meta/v1/map".into(),
        "GET /health".into(),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect()
}

pub(crate) fn credentials() -> Vec<Vec<u8>> {
    let creds = strata_auth::Credentials { access_key_id: "SKA".into(), secret_access_key: "s/e+cret".into() };
    vec![strata_auth::credentials::render(&creds, "a comment").into_bytes(), b"[profile other]\naws_access_key_id = B\naws_secret_access_key = C\n".to_vec()]
}

pub(crate) fn cluster_secret() -> Vec<Vec<u8>> {
    match strata_auth::ClusterSecret::generate() {
        Ok(s) => vec![s.to_file(), s.ca_cert_pem().as_bytes().to_vec()],
        Err(_) => Vec::new(),
    }
}

pub(crate) fn audit_line() -> Vec<Vec<u8>> {
    let e = strata_server::audit::AuditEntry {
        v: strata_server::audit::VERSION,
        time_ms: 1,
        node: Some(2),
        who: "key:SKA".into(),
        remote: Some("127.0.0.1:9".into()),
        action: "POST /admin/keys".into(),
        detail: Some(serde_json::json!({ "name": "n" })),
        status: 200,
        result: "ok".into(),
    };
    vec![strata_server::audit::encode(&e)]
}

pub(crate) fn name_log() -> Vec<Vec<u8>> {
    use strata_names::{AccessKey, BlobGrant, KvGrant, NameOp, NameState};
    let key = AccessKey { id: "SKA".into(), secret: "s".into(), name: "n".into(), created_ms: 1, admin: false, grants: Default::default() };
    let ops = [
        NameOp::CreateKey { key: key.clone() },
        NameOp::CreateContainer { account: "a".into(), container: "c".into(), now_ms: 1 },
        NameOp::SetBlobGrant {
            id: "SKA".into(),
            container: strata_types::ContainerRef { account: 1, container: 1 },
            grant: BlobGrant { read: true, write: false, delete: true },
        },
        NameOp::SetKvGrant { id: "SKA".into(), store: "s".into(), grant: KvGrant { read: true, admin: false } },
        NameOp::SetKeyExpiry { id: "SKA".into(), expires_ms: 9 },
        NameOp::DeleteBucketAbortingUploads { name: "b".into(), now_ms: 9 },
    ];
    let mut state = NameState::default();
    let mut out = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        if let Ok(b) = postcard::to_allocvec(&(i as u64, &op)) {
            out.push(b);
        }
        let _ = state.apply(op);
    }
    out.extend(postcard::to_allocvec(&(5u64, &state)));
    out.extend(postcard::to_allocvec(&state));
    out
}

pub(crate) fn policy() -> Vec<Vec<u8>> {
    ["one", "all", "majority", "2", "local:2", "local:1"].iter().map(|s| s.as_bytes().to_vec()).collect()
}

pub(crate) fn http_head() -> Vec<Vec<u8>> {
    let id = blob(1).to_string();
    vec![
        format!("GET /{id} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes(),
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n".to_vec(),
        b"GET /kv/store/key HTTP/1.1\r\nConnection: keep-alive\r\n\r\n".to_vec(),
    ]
}

pub(crate) fn native_headers() -> Vec<Vec<u8>> {
    vec![
        b"range: bytes=0-10\nx-strata-ttl: 60\nx-strata-policy: all\ncontent-type: text/plain\nx-strata-owner: me\nx-strata-meta-a: b\nx-strata-container: a/c\n".to_vec(),
        b"range: bytes=-5\nx-strata-ttl: never\nx-strata-policy: local:2\n".to_vec(),
    ]
}

pub(crate) fn s3_scope() -> Vec<Vec<u8>> {
    vec![
        b"authorization: AWS4-HMAC-SHA256 Credential=AK/20261125/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00\n".to_vec(),
        b"host: x\n\nX-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20261125%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Expires=60&X-Amz-Signature=00"
            .to_vec(),
    ]
}

pub(crate) fn s3_tagging() -> Vec<Vec<u8>> {
    vec![b"a=b&c=d%20e".to_vec(), b"k=".to_vec()]
}

pub(crate) fn broken() -> Vec<Vec<u8>> {
    vec![b"BRKN\0\0".to_vec()]
}

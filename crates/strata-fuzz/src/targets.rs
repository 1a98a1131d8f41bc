//! The targets: each runs one parser (and what a reader does next with a
//! value it accepted) over arbitrary bytes.

use crate::Target;
use crate::seeds;
use bytes::Bytes;
use strata_format::{ChunkList, index, record};
use strata_rpc::*;

pub(crate) fn all() -> Vec<Target> {
    vec![
        Target { name: "record", run: record_target, seeds: seeds::record },
        Target { name: "index_file", run: index_file, seeds: seeds::index_file },
        Target { name: "frame", run: frame, seeds: seeds::frame },
        Target { name: "rpc_message", run: rpc_message, seeds: seeds::rpc_message },
        Target { name: "rw_session", run: rw_session, seeds: seeds::rw_session },
        Target { name: "chunk_list", run: chunk_list, seeds: seeds::chunk_list },
        Target { name: "damage_list", run: damage_list, seeds: seeds::damage_list },
        Target { name: "fixed_headers", run: fixed_headers, seeds: seeds::fixed_headers },
        Target { name: "cluster_map", run: cluster_map, seeds: seeds::cluster_map },
        Target { name: "kv_chunk", run: kv_chunk, seeds: seeds::kv_chunk },
        Target { name: "kv_metadata", run: kv_metadata, seeds: seeds::kv_metadata },
        Target { name: "blob_id", run: blob_id, seeds: seeds::blob_id },
        Target { name: "policy", run: policy, seeds: seeds::policy },
        Target { name: "http_head", run: strata_server::fuzz::http_head, seeds: seeds::http_head },
        Target { name: "native_headers", run: native_headers, seeds: seeds::native_headers },
        Target { name: "s3_scope", run: s3_scope, seeds: seeds::s3_scope },
        Target { name: "s3_tagging", run: s3_tagging, seeds: seeds::s3_tagging },
        Target { name: "sigv4", run: sigv4, seeds: seeds::sigv4 },
        Target { name: "route", run: route, seeds: seeds::route },
        Target { name: "credentials", run: credentials, seeds: seeds::credentials },
        Target { name: "cluster_secret", run: cluster_secret, seeds: seeds::cluster_secret },
        Target { name: "audit_line", run: strata_server::fuzz::audit_line, seeds: seeds::audit_line },
        Target { name: "name_log", run: name_log, seeds: seeds::name_log },
        Target { name: "broken", run: broken, seeds: seeds::broken },
    ]
}

/// `b` with its last four bytes replaced by the CRC32C of the rest: a
/// mutation that gets past a trailing checksum to the parsing behind it.
fn resealed(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    if v.len() >= 4 {
        let n = v.len() - 4;
        let crc = strata_format::crc::crc32c(&v[..n]);
        v[n..].copy_from_slice(&crc.to_le_bytes());
    }
    v
}

/// `b` with the CRC of its first `size` bytes put right, at `size - 4`.
fn resealed_at(b: &[u8], size: usize) -> Vec<u8> {
    let mut v = b.to_vec();
    if v.len() >= size {
        let crc = strata_format::crc::crc32c(&v[..size - 4]);
        v[size - 4..size].copy_from_slice(&crc.to_le_bytes());
    }
    v
}

fn rw_session(b: &[u8]) {
    use strata_format::frame::next_frame_len;
    use strata_format::rw_session::{decode_answer, decode_request};
    for b in [b.to_vec(), resealed(b)] {
        let _ = next_frame_len(&b, 1 << 20);
        let _ = decode_request(&b);
        let _ = decode_answer(&b);
    }
}

fn record_target(b: &[u8]) {
    let _ = record::decode(b, true);
    let _ = record::decode(b, false);
    let _ = record::peek_len(b);
    let _ = record::checked_header(b);
    let _ = record::header_key(b);
}

fn index_file(b: &[u8]) {
    index_file_once(b);
    // Body CRC (56..60) and header CRC (60..64) made right.
    if b.len() >= 64 {
        let mut v = b.to_vec();
        let body = strata_format::crc::crc32c(&v[64..]);
        v[56..60].copy_from_slice(&body.to_le_bytes());
        index_file_once(&resealed_at(&v, 64));
    }
}

fn index_file_once(b: &[u8]) {
    if let Ok(h) = index::decode_header(b) {
        for i in 0..(h.entry_count as usize).min(4096) {
            if index::decode_entry(b, &h, i).is_ok() {
                let _ = index::entry_key(b, &h, i);
            }
        }
        let _ = index::decode_bloom(b, &h);
    }
}

fn frame(b: &[u8]) {
    for b in [b, &resealed(b)] {
        let _ = strata_format::frame::frame_len(b);
        let _ = strata_format::frame::decode_frame(b);
    }
}

/// Every message either side of the replica protocol decodes.
fn rpc_message(b: &[u8]) {
    rpc_message_once(b);
    rpc_message_once(&resealed(b));
}

fn rpc_message_once(b: &[u8]) {
    let f = Bytes::copy_from_slice(b);
    let _ = decode_message::<WriteRequest>(KIND_WRITE, &f);
    let _ = decode_message::<ReadRequest>(KIND_READ, &f);
    let _ = decode_message::<Vec<JournalItem>>(KIND_JOURNAL, &f);
    let _ = decode_message::<DigestRequest>(KIND_DIGEST, &f);
    let _ = decode_message::<FetchRequest>(KIND_FETCH, &f);
    let _ = decode_message::<Answer<WireAck>>(KIND_WRITE, &f);
    let _ = decode_message::<Answer<WireRecord>>(KIND_READ, &f);
    let _ = decode_message::<Answer<Vec<JournalAnswer>>>(KIND_JOURNAL, &f);
    let _ = decode_message::<Answer<Vec<WireDigest>>>(KIND_DIGEST, &f);
    let _ = decode_message::<Answer<Vec<Fetched>>>(KIND_FETCH, &f);
    let _ = decode_key(b);
}

fn chunk_list(b: &[u8]) {
    let _ = ChunkList::decode(b);
    let _ = ChunkList::decode(&resealed(b));
}

fn damage_list(b: &[u8]) {
    let _ = strata_format::damage::decode(b);
    let _ = strata_format::damage::decode(&resealed(b));
}

fn fixed_headers(b: &[u8]) {
    use strata_format::headers::*;
    for size in [0, SEGMENT_HEADER_BYTES, LSN_RESERVATION_BYTES, COMPACTION_RECORD_BYTES] {
        let b = if size == 0 { b.to_vec() } else { resealed_at(b, size) };
        let _ = SegmentHeader::decode(&b);
        let _ = ReplicaMeta::decode(&b);
        let _ = LsnReservation::decode(&b);
        let _ = CompactionRecord::decode(&b);
    }
}

fn cluster_map(b: &[u8]) {
    let _ = strata_cluster::codec::decode_map(b);
    let _ = strata_cluster::codec::decode_map(&resealed(b));
}

/// A chunk pair from one input: a u16 (little-endian) length of the index
/// file, the index, then the data file; opened, checked, read.
fn kv_chunk(b: &[u8]) {
    if b.len() < 2 {
        return;
    }
    let split = (u16::from_le_bytes([b[0], b[1]]) as usize).min(b.len() - 2);
    let (idx, data) = b[2..].split_at(split);
    let Ok(dir) = tempfile::tempdir() else { return };
    let (ip, dp) = (dir.path().join("c.index"), dir.path().join("c.data"));
    if std::fs::write(&ip, idx).is_err() || std::fs::write(&dp, data).is_err() {
        return;
    }
    if let Ok(r) = strata_kv::ChunkReader::open(&ip, &dp) {
        let _ = r.check();
        let _ = r.stats();
        for (prefix, key) in [(0u64, &b"k"[..]), (u64::MAX, b"zz"), (0x0102_0304_0506_0708, b"key-1")] {
            for s in [strata_kv::Search::Binary, strata_kv::Search::Interpolation] {
                let _ = r.get(prefix, key, s);
            }
        }
    }
}

fn kv_metadata(b: &[u8]) {
    let _ = strata_kv::Metadata::parse(b, std::path::Path::new("fuzz.metadata"));
}

fn blob_id(b: &[u8]) {
    let _ = strata_types::BlobId::from_bytes(b);
    if let Ok(s) = std::str::from_utf8(b) {
        let _ = strata_types::BlobId::parse(s);
    }
}

fn policy(b: &[u8]) {
    if let Ok(s) = std::str::from_utf8(b) {
        let _ = strata_types::Policy::parse(s);
    }
}

/// Lines `name: value` become headers (the ones `http` accepts).
fn header_map(text: &[u8]) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    for line in text.split(|&c| c == b'\n') {
        let Some(colon) = line.iter().position(|&c| c == b':') else { continue };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(name), http::HeaderValue::from_bytes(value)) {
            h.append(n, v);
        }
    }
    h
}

fn native_headers(b: &[u8]) {
    strata_server::fuzz::native_headers(&header_map(b));
}

/// Headers, a blank line, then the query string.
fn s3_scope(b: &[u8]) {
    let (head, query) = match b.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&b[..i], Some(&b[i + 2..])),
        None => (b, None),
    };
    let query = query.and_then(|q| std::str::from_utf8(q).ok());
    strata_s3::fuzz::scope(&header_map(head), query);
}

fn s3_tagging(b: &[u8]) {
    strata_s3::fuzz::tagging(&String::from_utf8_lossy(b));
}

/// A request head as the HTTP port's authentication sees it: the
/// signature read from the `Authorization` header or a presigned query,
/// then checked (canonical request, string to sign, constant-time compare)
/// against a fixed key at the seeds' time.
fn sigv4(b: &[u8]) {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let (Ok(httparse::Status::Complete(_)), Some(method), Some(target)) = (req.parse(b), req.method, req.path) else { return };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let pairs: Vec<(&str, &[u8])> = req.headers.iter().map(|h| (h.name, h.value)).collect();
    let view = strata_auth::RequestView { method, path, query, headers: &pairs };
    if let Ok(Some(claim)) = strata_auth::sigv4::claim(&view) {
        let key = strata_auth::SigningKey::derive(crate::seeds::FUZZ_SECRET, &claim.date, "us-east-1", "s3");
        let scope = strata_auth::Scope { region: "us-east-1", service: "s3" };
        let _ = strata_auth::sigv4::verify(&claim, &view, &key, scope, crate::seeds::FUZZ_NOW);
    }
}

/// A request line: `METHOD path`.
fn route(b: &[u8]) {
    let (method, path) = match b.iter().position(|&c| c == b' ') {
        Some(i) => (&b[..i], &b[i + 1..]),
        None => (b, &b""[..]),
    };
    strata_server::fuzz::route(method, &String::from_utf8_lossy(path));
}

fn credentials(b: &[u8]) {
    let text = String::from_utf8_lossy(b);
    let _ = strata_auth::credentials::parse(&text, None);
    let _ = strata_auth::credentials::parse(&text, Some("other"));
}

fn cluster_secret(b: &[u8]) {
    let _ = strata_auth::ClusterSecret::parse(b, "fuzz.secret");
    let _ = strata_auth::tls::roots_from_pem(b, "fuzz.pem");
}

/// The name index's files and Raft payloads: a log record `(lsn, op)`, a
/// snapshot `(lsn, state)` and a state, in this version's layout or the
/// one before.
fn name_log(b: &[u8]) {
    let _ = postcard::from_bytes::<(u64, strata_names::NameOp)>(b);
    let _ = strata_names::NameState::decode_with_lsn(b);
    if let Ok(s) = strata_names::NameState::decode(b) {
        // A state that decodes is used: rights are checked against it.
        for key in s.keys.keys().take(4) {
            let _ = s.check(key, strata_names::Right::KvRead("s"), 1);
            let _ = s.check(key, strata_names::Right::BlobRead(strata_types::ContainerRef { account: 1, container: 1 }), 1);
        }
    }
}

/// Deliberately broken: panics one mutation away from its seed, so a
/// fuzzer that does not mutate (or does not catch panics) fails its test.
fn broken(b: &[u8]) {
    if b.len() >= 6 && b.starts_with(b"BRKN") && b[4] != 0 {
        panic!("the broken target's bug: byte 4 is {}", b[4]);
    }
}

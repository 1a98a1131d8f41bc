//! Identities and rights on the HTTP port of a real `strata server`, and
//! TLS for clients: requests without valid credentials are refused with a
//! code and change nothing; a key holds only the rights it was given; a
//! revoked or expired key stops at once; bad signatures, stale times, long
//! presigned URLs, bodies that do not match their signed hash and
//! oversized JSON are refused; administrative actions land in the audit
//! log; a TLS port answers only TLS and a client that trusts its CA.

mod common;

use bytes::Bytes;
use common::{Node, content};
use http::Method;
use std::time::Duration;
use strata_client::{Client, ClientError, Credentials, PutArgs, full};

fn refused(r: Result<impl Sized, ClientError>) -> (u16, String) {
    match r {
        Err(ClientError::Api { status, code, .. }) => (status, code),
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(_) => panic!("expected a refusal, got success"),
    }
}

async fn keys(node: &Node) -> Vec<String> {
    let v = node.client.json(Method::GET, "/admin/keys").await.expect("list keys");
    v.as_array().expect("keys").iter().map(|k| k["access_key_id"].as_str().expect("id").to_owned()).collect()
}

/// A new key with no rights, as its credentials.
async fn new_key(node: &Node, name: &str) -> Credentials {
    let v = node.client.post_json("/admin/keys", &serde_json::json!({ "name": name })).await.expect("create a key");
    Credentials { access_key_id: v["access_key_id"].as_str().expect("id").into(), secret_access_key: v["secret_access_key"].as_str().expect("secret").into() }
}

async fn raw(url: &str, request: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(url.trim_start_matches("http://")).await.expect("connect");
    s.write_all(request.as_bytes()).await.expect("send");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_without_credentials_and_each_key_only_what_it_was_given() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let node = Node::start(&tmp.path().join("n"), &["--partitions", "2"]).await;
    let admin = &node.client;
    let anon = node.anonymous();
    let before = keys(&node).await;

    // The issue's report: anyone could mint an admin key. Now 401, nothing made.
    let mint = anon.post_json("/admin/s3/keys", &serde_json::json!({ "name": "x", "admin": true })).await;
    assert_eq!(refused(mint), (401, "AuthenticationRequired".into()));
    assert_eq!(refused(anon.post_json("/admin/keys", &serde_json::json!({ "admin": true })).await).0, 401);
    assert_eq!(keys(&node).await, before, "a refused request made a key");
    let id = admin.put_bytes(content(1, 5_000), &PutArgs::default()).await.expect("admin put").id;
    for (m, path) in [
        (Method::GET, format!("/{id}")),
        (Method::HEAD, format!("/{id}")),
        (Method::GET, format!("/{id}/info")),
        (Method::DELETE, format!("/{id}")),
        (Method::POST, "/".to_string()),
        (Method::POST, "/admin/cluster/command".to_string()),
        (Method::POST, "/admin/kv/scores/swap".to_string()),
        (Method::POST, "/rpc/v1/write".to_string()),
        (Method::POST, "/raft/v1/append".to_string()),
        (Method::GET, "/metrics".to_string()),
        (Method::GET, "/admin/audit".to_string()),
    ] {
        let r = anon.send(m.clone(), &path, &[], full("{}")).await;
        assert_eq!(refused(r).0, 401, "{m} {path}");
    }
    // A fresh connection's plain GET would take the sendfile fast path: it
    // must not serve an unsigned request either.
    let addr = node.url.trim_start_matches("http://");
    let answer = raw(&node.url, format!("GET /{id} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 401") && !answer.contains("STRT"), "{answer}");
    assert_eq!(admin.get_bytes(&id).await.expect("still there")[..], content(1, 5_000)[..], "nothing changed");
    // The nodes' own endpoints take no key at all, not even an admin's.
    assert_eq!(refused(admin.send(Method::POST, "/rpc/v1/write", &[], full("x")).await), (403, "NodesOnly".into()));
    assert_eq!(refused(admin.send(Method::POST, "/raft/v1/vote", &[], full("x")).await), (403, "NodesOnly".into()));
    // /health stays open, for load balancers.
    anon.json(Method::GET, "/health").await.expect("health is public");

    // A key with no rights: nothing, with 403 and a message naming the right.
    let nobody = node.client_as(new_key(&node, "nobody").await);
    assert_eq!(refused(nobody.delete(&id).await), (403, "AccessDenied".into()));
    assert!(admin.info(&id).await.is_ok(), "the refused delete deleted");
    match nobody.get_bytes(&id).await {
        Err(ClientError::Api { status: 403, message, .. }) => assert!(message.contains("read blobs of container default/default"), "{message}"),
        other => panic!("read without the right: {other:?}"),
    }
    assert_eq!(refused(nobody.put_bytes(content(2, 100), &PutArgs::default()).await).0, 403);
    assert_eq!(refused(nobody.post_json("/admin/cluster/command", &serde_json::json!({ "AddNode": {} })).await).0, 403);
    assert_eq!(refused(nobody.post_json("/admin/kv/scores/swap", &serde_json::json!({ "version": 1 })).await).0, 403);
    assert_eq!(refused(nobody.post_json("/admin/keys", &serde_json::json!({ "admin": true })).await).0, 403);
    assert_eq!(refused(nobody.json(Method::GET, "/metrics").await).0, 403);

    // Containers: read, write and delete are separate rights, per container.
    admin.post_json("/admin/containers", &serde_json::json!({ "account": "media", "container": "photos" })).await.expect("container");
    admin.post_json("/admin/containers", &serde_json::json!({ "account": "media", "container": "video" })).await.expect("container");
    let reader_creds = new_key(&node, "reader").await;
    let reader = node.client_as(reader_creds.clone());
    let grant = |who: &str, c: &str, r: bool, w: bool, d: bool| {
        let path = format!("/admin/keys/{who}/containers/media/{c}");
        let body = serde_json::json!({ "read": r, "write": w, "delete": d });
        async move { admin.send(Method::PUT, &path, &[], full(serde_json::to_vec(&body).unwrap())).await.expect("grant") }
    };
    grant(&reader_creds.access_key_id, "photos", true, false, false).await;
    let in_photos = PutArgs { container: Some("media/photos".into()), ..PutArgs::default() };
    let photo = admin.put_bytes(content(3, 300_000), &in_photos).await.expect("put into media/photos").id;
    assert_eq!(photo.len(), 40, "a blob id names its container");
    assert_eq!(reader.get_bytes(&photo).await.expect("read granted")[..], content(3, 300_000)[..]);
    assert_eq!(refused(reader.delete(&photo).await), (403, "AccessDenied".into()));
    assert_eq!(refused(reader.put_bytes(content(4, 16), &in_photos).await).0, 403);
    assert_eq!(refused(reader.get_bytes(&id).await).0, 403, "another container");
    let in_video = PutArgs { container: Some("media/video".into()), ..PutArgs::default() };
    let video = admin.put_bytes(content(5, 10_000), &in_video).await.expect("put into media/video").id;
    assert_eq!(refused(reader.get_bytes(&video).await).0, 403);
    let writer_creds = new_key(&node, "writer").await;
    let writer = node.client_as(writer_creds.clone());
    grant(&writer_creds.access_key_id, "*", true, true, true).await;
    let mine = writer.put_bytes(content(6, 2_000_000), &in_video).await.expect("write granted (chunked)").id;
    assert_eq!(writer.get_bytes(&video).await.expect("read through media/*")[..], content(5, 10_000)[..]);
    writer.delete(&mine).await.expect("delete granted");
    assert_eq!(refused(writer.get_bytes(&id).await).0, 403, "media/* is not default/default");
    let no_such = admin.put_bytes(content(7, 16), &PutArgs { container: Some("media/nope".into()), ..PutArgs::default() }).await;
    assert_eq!(refused(no_such), (404, "NoSuchContainer".into()));

    // Read-only stores: read and admin are separate rights.
    let def = strata_kv::StoreDef { name: "scores".into(), partitions: 2, replication: 1, chunks: 1 };
    let recs: Vec<(Vec<u8>, Vec<u8>)> = (0..50u32).map(|i| (i.to_be_bytes().to_vec(), format!("v:{i}").into_bytes())).collect();
    strata_kv::build_in_memory(&def, recs, &tmp.path().join("b1"), strata_kv::Duplicates::Fail).expect("build");
    admin.post_json("/admin/kv/scores", &serde_json::json!({ "partitions": 2, "chunks": 1 })).await.expect("create store");
    let v = admin.post_json("/admin/kv/scores/load", &serde_json::json!({ "dir": tmp.path().join("b1") })).await.expect("load")["version"].as_u64().expect("v");
    let kv_key = base64_url(&7u32.to_be_bytes());
    let get_kv = |c: Client| {
        let path = format!("/kv/scores/{kv_key}");
        async move { c.send(Method::GET, &path, &[], full(Bytes::new())).await }
    };
    assert_eq!(refused(reader.post_json("/admin/kv/scores/swap", &serde_json::json!({ "version": v })).await).0, 403);
    let listed = admin.json(Method::GET, "/admin/kv").await.expect("stores");
    assert!(listed[0]["live"].is_null(), "the refused swap swapped: {listed}");
    admin.post_json("/admin/kv/scores/swap", &serde_json::json!({ "version": v })).await.expect("admin swaps");
    assert_eq!(refused(get_kv(reader.clone()).await).0, 403);
    admin.send(Method::PUT, &format!("/admin/keys/{}/kv/scores", reader_creds.access_key_id), &[], full(r#"{"read":true}"#)).await.expect("kv grant");
    assert_eq!(&get_kv(reader.clone()).await.expect("kv read granted").bytes().await.expect("value")[..], b"v:7");
    // A fresh connection's kv GET takes the fast path, signed or not.
    assert_eq!(refused(get_kv(node.anonymous()).await).0, 401);
    assert_eq!(&get_kv(reader.to(&node.url)).await.expect("fast path, signed").bytes().await.expect("value")[..], b"v:7");
    assert_eq!(refused(reader.post_json("/admin/kv/scores/rollback", &serde_json::json!({})).await).0, 403);

    // Revoked: at once. Expired: at once.
    admin.send(Method::DELETE, &format!("/admin/keys/{}", writer_creds.access_key_id), &[], full(Bytes::new())).await.expect("revoke");
    assert_eq!(refused(writer.get_bytes(&video).await), (403, "InvalidAccessKeyId".into()));
    let now = strata_types::Clock::now_ms(&strata_types::SystemClock);
    admin
        .send(Method::PUT, &format!("/admin/keys/{}/expiry", reader_creds.access_key_id), &[], full(format!(r#"{{"expires_ms":{now}}}"#)))
        .await
        .expect("expire");
    assert_eq!(refused(reader.get_bytes(&photo).await), (403, "ExpiredToken".into()));
    let short = admin.post_json("/admin/keys", &serde_json::json!({ "name": "brief", "expires_in_secs": 2 })).await.expect("a key that expires");
    let brief = node.client_as(Credentials {
        access_key_id: short["access_key_id"].as_str().expect("id").into(),
        secret_access_key: short["secret_access_key"].as_str().expect("secret").into(),
    });
    assert_eq!(refused(brief.get_bytes(&id).await), (403, "AccessDenied".into()), "valid, without rights");
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    assert_eq!(refused(brief.get_bytes(&id).await), (403, "ExpiredToken".into()));

    // Every administrative action, and the refused attempts at one, in the audit log.
    let audit = admin.json(Method::GET, "/admin/audit?limit=1000").await.expect("audit");
    let entries = audit["entries"].as_array().expect("entries");
    let has = |who: &str, action: &str, result: &str| {
        entries
            .iter()
            .any(|e| e["who"].as_str().is_some_and(|w| w.contains(who)) && e["action"].as_str().is_some_and(|a| a.starts_with(action)) && e["result"] == result)
    };
    assert!(has("anonymous", "POST /admin/s3/keys", "denied"), "{audit}");
    assert!(has(&reader_creds.access_key_id, "POST /admin/kv/scores/swap", "denied"), "{audit}");
    assert!(has("key:", "POST /admin/containers", "ok"), "{audit}");
    let metrics = admin.get_text("/metrics").await.expect("metrics");
    let refusals = |code: &str| {
        metrics.lines().find_map(|l| l.strip_prefix(&format!("strata_auth_refusals_total{{code=\"{code}\"}} "))?.parse::<f64>().ok()).unwrap_or(0.0)
    };
    assert!(refusals("AuthenticationRequired") >= 12.0 && refusals("AccessDenied") >= 5.0, "refusals are counted:\n{metrics}");
    assert!(has("key:", &format!("DELETE /admin/keys/{}", writer_creds.access_key_id), "ok"), "{audit}");
    let created = entries.iter().find(|e| e["action"] == "POST /admin/containers").expect("the container's entry");
    assert_eq!(created["detail"]["account"], "media", "the request body is the detail");
    assert_eq!(audit["damaged_lines"], 0);
    let (ok, out) = node.cli(&["audit", "--limit", "5"]);
    assert!(ok && out.contains("ok"), "{out}");
}

fn base64_url(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_signatures_presigned_urls_signed_bodies_and_body_limits() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let node = Node::start(&tmp.path().join("n"), &["--partitions", "1"]).await;
    let admin = &node.client;
    let creds = strata_auth::credentials::load(&node.credentials()).expect("admin key");
    let id = admin.put_bytes(content(1, 1_000), &PutArgs::default()).await.expect("put").id;
    let host = node.url.trim_start_matches("http://").to_owned();
    let signed_for = |method: &str, path: &str, region: &str, service: &str, secret: &str, now: u64| {
        let headers: [(&str, &[u8]); 1] = [("host", host.as_bytes())];
        let view = strata_auth::RequestView { method, path, query: "", headers: &headers };
        let c = Credentials { access_key_id: creds.access_key_id.clone(), secret_access_key: secret.into() };
        let sig = strata_auth::sigv4::sign(&view, strata_auth::sigv4::UNSIGNED_PAYLOAD, &c, strata_auth::Scope { region, service }, now);
        format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nx-amz-date: {}\r\nx-amz-content-sha256: {}\r\nAuthorization: {}\r\nConnection: close\r\n\r\n",
            sig.amz_date, sig.content_sha256, sig.authorization
        )
    };
    let signed = |method: &str, path: &str, region: &str, secret: &str, now: u64| signed_for(method, path, region, "s3", secret, now);
    let now = strata_types::Clock::now_ms(&strata_types::SystemClock) / 1000;
    let path = format!("/{id}");
    let ok = raw(&node.url, signed("GET", &path, "us-east-1", &creds.secret_access_key, now)).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    for (request, status, code) in [
        (signed("GET", &path, "us-east-1", "not the secret", now), 403, "SignatureDoesNotMatch"),
        (signed("GET", &path, "eu-west-1", &creds.secret_access_key, now), 400, "AuthorizationHeaderMalformed"),
        (signed_for("GET", &path, "us-east-1", "iam", &creds.secret_access_key, now), 400, "AuthorizationHeaderMalformed"),
        (signed("GET", &path, "us-east-1", &creds.secret_access_key, now - 3_600), 403, "RequestTimeTooSkewed"),
        (signed("DELETE", &path, "us-east-1", &creds.secret_access_key, now).replacen("DELETE", "GET", 1), 403, "SignatureDoesNotMatch"),
    ] {
        let answer = raw(&node.url, request).await;
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")) && answer.contains(code), "want {status} {code}: {answer}");
    }
    assert!(admin.info(&id).await.is_ok());

    // Presigned URLs on the native API: until they expire, at most a week.
    let url = admin.presign(&Method::GET, &path, 60).expect("presign");
    // Unsigned requests to whatever URL is given.
    let via_url = |u: String| async move {
        let at = u.find("://").map_or(0, |i| i + 3);
        let (base, rest) = u.split_at(at + u[at..].find('/').expect("a path in the URL"));
        Client::new(base).send(Method::GET, rest, &[], full(Bytes::new())).await
    };
    assert_eq!(&via_url(url.clone()).await.expect("presigned GET").bytes().await.expect("body")[..], &content(1, 1_000)[..]);
    let long = admin.presign(&Method::GET, &path, 8 * 86_400).expect("presign");
    assert_eq!(refused(via_url(long).await), (400, "AuthorizationQueryParametersError".into()));
    let tampered = url.replace(&path, &format!("/{}", admin.put_bytes(content(2, 16), &PutArgs::default()).await.expect("put").id));
    assert_eq!(refused(via_url(tampered).await).0, 403, "a presigned URL is for its own path only");
    let (ok, printed) = node.cli(&["presign", &id, "--expires", "1"]);
    assert!(ok, "{printed}");
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    assert_eq!(refused(via_url(printed.trim().to_owned()).await), (403, "RequestExpired".into()));

    // A body that is not the one signed: refused, nothing stored.
    let blobs_before = admin.json(Method::GET, "/admin/partitions/0/blobs").await.expect("list").as_array().expect("rows").len();
    let body = b"the real body";
    let headers: [(&str, &[u8]); 2] = [("host", host.as_bytes()), ("content-length", b"13")];
    let view = strata_auth::RequestView { method: "POST", path: "/", query: "", headers: &headers };
    let sig = strata_auth::sigv4::sign(
        &view,
        &strata_auth::sigv4::payload_sha256(b"another body!"),
        &creds,
        strata_auth::Scope { region: "us-east-1", service: "s3" },
        now,
    );
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {host}\r\ncontent-length: 13\r\nx-amz-date: {}\r\nx-amz-content-sha256: {}\r\nAuthorization: {}\r\nConnection: close\r\n\r\n{}",
        sig.amz_date,
        sig.content_sha256,
        sig.authorization,
        String::from_utf8_lossy(body)
    );
    let answer = raw(&node.url, request.clone()).await;
    assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("x-amz-content-sha256"), "{answer}");
    let right = request.replace("the real body", "another body!");
    assert!(raw(&node.url, right).await.starts_with("HTTP/1.1 201"), "the body that was signed is taken");
    let blobs_after = admin.json(Method::GET, "/admin/partitions/0/blobs").await.expect("list").as_array().expect("rows").len();
    assert_eq!(blobs_after, blobs_before + 1, "only the matching body was stored");
    // The same for a JSON body, checked before its handler runs.
    let keys_before = keys(&node).await;
    let json_body = br#"{"name":"sneaky","admin":true}"#;
    let len = json_body.len().to_string();
    let headers: [(&str, &[u8]); 2] = [("host", host.as_bytes()), ("content-length", len.as_bytes())];
    let view = strata_auth::RequestView { method: "POST", path: "/admin/keys", query: "", headers: &headers };
    let sig = strata_auth::sigv4::sign(
        &view,
        &strata_auth::sigv4::payload_sha256(br#"{"name":"meek"}"#),
        &creds,
        strata_auth::Scope { region: "us-east-1", service: "s3" },
        now,
    );
    let answer = raw(
        &node.url,
        format!(
            "POST /admin/keys HTTP/1.1\r\nHost: {host}\r\ncontent-length: {len}\r\nx-amz-date: {}\r\nx-amz-content-sha256: {}\r\nAuthorization: {}\r\nConnection: close\r\n\r\n{}",
            sig.amz_date,
            sig.content_sha256,
            sig.authorization,
            String::from_utf8_lossy(json_body)
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(keys(&node).await, keys_before);

    // JSON bodies are bounded.
    // (On a connection of its own: the server answers before reading the
    // body and closes it.)
    let huge = serde_json::json!({ "name": "x".repeat(2 << 20) });
    assert_eq!(refused(admin.to(&node.url).post_json("/admin/keys", &huge).await), (413, "BodyTooLarge".into()));
    assert_eq!(keys(&node).await, keys_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_port_answers_only_clients_that_trust_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("n");
    let node = Node::start(&data, &["--partitions", "1", "--tls-self-signed", "--s3-listen", "127.0.0.1:0"]).await;
    assert!(node.url.starts_with("https://"), "{}", node.url);
    let ca = data.join("tls/cert.pem");
    let roots = strata_auth::tls::roots_from_file(&ca).expect("the self-signed certificate");
    let creds = strata_auth::credentials::load(&node.credentials()).expect("admin key");
    let trusted = Client::with_options(
        &node.url,
        &strata_client::ClientOptions {
            credentials: Some(creds.clone()),
            tls: Some(strata_auth::tls::client_config(roots, None).expect("tls")),
            ..Default::default()
        },
    );
    let id = trusted.put_bytes(content(1, 100_000), &PutArgs::default()).await.expect("put over TLS").id;
    assert_eq!(trusted.get_bytes(&id).await.expect("get over TLS")[..], content(1, 100_000)[..]);
    // The CLI with --ca-file.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["info", &id, "--json", "--server", &node.url, "--ca-file"])
        .arg(&ca)
        .env("STRATA_CREDENTIALS", node.credentials())
        .output()
        .expect("strata info");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A client that does not trust the certificate: no connection at all.
    let stranger = Client::with_options(&node.url, &strata_client::ClientOptions { credentials: Some(creds), ..Default::default() });
    match stranger.get_bytes(&id).await {
        Err(ClientError::Transport(e)) => assert!(e.to_lowercase().contains("certificate"), "{e}"),
        other => panic!("an untrusted certificate was accepted: {other:?}"),
    }
    // Plain HTTP to a TLS port: refused in the handshake, counted.
    let failures = || async {
        let metrics = trusted.get_text("/metrics").await.expect("metrics");
        metrics.lines().find_map(|l| l.strip_prefix("strata_tls_handshake_failures_total ")?.parse::<f64>().ok()).expect("the metric")
    };
    let before = failures().await;
    let port = node.url.trim_start_matches("https://").to_owned();
    let plain = raw(&format!("http://{port}"), format!("GET /health HTTP/1.1\r\nHost: {port}\r\n\r\n")).await;
    assert!(!plain.contains("200 OK"), "{plain}");
    // (The untrusting client's refused handshake may be counted meanwhile.)
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while failures().await < before + 1.0 {
        assert!(std::time::Instant::now() < deadline, "the refused handshake was not counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The S3 port speaks TLS with the same certificate.
    let s3 = node.printed("S3 API on").await;
    assert!(s3.contains("https://"), "{s3}");
}

//! The dependency rules every crate's `//!` header states hold.
//!
//! Each library crate's header carries one sentence
//! `Layer rule (checked by the test command): may use A, B; never X, Y.`
//! "may use" lists every Strata crate it may depend on (or "no Strata
//! crate"); "never" names what it must not depend on, in words this check
//! knows (a phrase it does not know fails the check, so a header cannot
//! claim what nothing checks). The dependencies are `cargo metadata`'s
//! normal (non-dev, non-build) ones. The `strata` binary, at the top, may
//! use anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate as the check sees it.
struct Krate {
    name: String,
    deps: BTreeSet<String>,
    lib: Option<PathBuf>,
}

fn workspace() -> Vec<Krate> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata answers JSON");
    let mut crates = Vec::new();
    for p in meta["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().expect("name").to_string();
        let deps = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| d["name"].as_str().expect("dependency name").to_string())
            .collect();
        let lib = p["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .find(|t| t["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "lib")))
            .map(|t| PathBuf::from(t["src_path"].as_str().expect("src_path")));
        crates.push(Krate { name, deps, lib });
    }
    crates
}

/// The crates a "never" phrase stands for.
fn phrase(words: &str) -> Option<&'static [&'static str]> {
    const HTTP: &[&str] = &["hyper", "hyper-util", "hyper-rustls", "axum", "http", "http-body", "http-body-util", "httparse", "s3s"];
    Some(match words {
        "the engine" | "the blob engine" | "the storage engine" => &["strata-engine"],
        "the router" => &["strata-router"],
        "the server" => &["strata-server"],
        "the cluster map" => &["strata-cluster"],
        "RPC" => &["strata-rpc"],
        "the node crate" => &["strata-node"],
        "the tract crate" => &["strata-tract"],
        "the transaction crate" => &["strata-txn"],
        "the S3 crate" => &["strata-s3"],
        "the CLI" => &["strata-cli"],
        "`strata-client`" => &["strata-client"],
        "an HTTP crate" => HTTP,
        "axum" => &["axum"],
        "an async runtime" => &["tokio", "async-std", "smol"],
        _ => return None,
    })
}

/// The rule a header states: allowed Strata crates, forbidden crates.
fn rule(header: &str) -> Result<(BTreeSet<String>, BTreeSet<String>), String> {
    let text: String = header.lines().filter_map(|l| l.strip_prefix("//!")).map(str::trim).collect::<Vec<_>>().join(" ");
    let marker = "Layer rule (checked by the test command):";
    let start = text.find(marker).ok_or("the header states no layer rule")? + marker.len();
    let rest = &text[start..];
    let end = rest.find(". ").unwrap_or_else(|| rest.trim_end().trim_end_matches('.').len());
    let sentence = rest[..end].trim();
    let (may, never) = sentence.split_once(';').ok_or_else(|| format!("{sentence:?}: want \"may use ...; never ...\""))?;
    let may = may.trim().strip_prefix("may use").ok_or_else(|| format!("{sentence:?}: want \"may use ...\""))?.trim();
    let allowed: BTreeSet<String> =
        if may == "no Strata crate" { BTreeSet::new() } else { may.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect() };
    for a in &allowed {
        if !a.starts_with("strata-") {
            return Err(format!("\"may use\" lists {a:?}, not a Strata crate"));
        }
    }
    let never = never.trim().strip_prefix("never").ok_or_else(|| format!("{sentence:?}: want \"never ...\""))?;
    let mut forbidden = BTreeSet::new();
    for part in never.split(',').flat_map(|p| p.split(" or ")) {
        let words = part.trim().trim_start_matches("or ").trim();
        if words.is_empty() {
            continue;
        }
        let crates = phrase(words).ok_or_else(|| format!("\"never\" names {words:?}, which the check does not know"))?;
        forbidden.extend(crates.iter().map(|c| c.to_string()));
    }
    Ok((allowed, forbidden))
}

/// Every broken rule of `crates`, whose headers `header` reads.
fn violations(crates: &[Krate], header: impl Fn(&Path) -> String) -> Vec<String> {
    let mut found = Vec::new();
    let strata: BTreeSet<&str> = crates.iter().map(|k| k.name.as_str()).collect();
    for k in crates {
        if k.name == "strata-cli" {
            continue; // The binary: the top of the graph.
        }
        let Some(lib) = &k.lib else {
            found.push(format!("{}: no library, so no header to hold its rule", k.name));
            continue;
        };
        let (allowed, forbidden) = match rule(&header(lib)) {
            Ok(r) => r,
            Err(e) => {
                found.push(format!("{}: {e}", k.name));
                continue;
            }
        };
        for a in &allowed {
            if !strata.contains(a.as_str()) {
                found.push(format!("{}: its rule allows {a}, which is not a crate of the workspace", k.name));
            }
        }
        for d in &k.deps {
            if strata.contains(d.as_str()) && !allowed.contains(d) {
                found.push(format!("{} depends on {d}, which its rule does not allow", k.name));
            }
            if forbidden.contains(d) {
                found.push(format!("{} depends on {d}, which its rule forbids", k.name));
            }
        }
    }
    found
}

fn read_header(lib: &Path) -> String {
    std::fs::read_to_string(lib).unwrap_or_default().lines().take_while(|l| l.starts_with("//!")).collect::<Vec<_>>().join("\n")
}

#[test]
fn every_crate_keeps_the_dependency_rule_its_header_states() {
    let crates = workspace();
    assert!(crates.len() >= 15, "the workspace's crates: {}", crates.len());
    let found = violations(&crates, read_header);
    assert!(found.is_empty(), "dependency rules broken:\n  {}", found.join("\n  "));
}

/// The check itself: a dependency a header forbids, one it does not list,
/// a missing rule and an unknown phrase must all be caught.
#[test]
fn the_check_catches_broken_rules() {
    let crates = workspace();
    let mut broken: Vec<Krate> =
        crates.into_iter().filter(|k| ["strata-cluster", "strata-engine", "strata-types", "strata-router"].contains(&k.name.as_str())).collect();
    let mut headers: BTreeMap<PathBuf, String> = broken.iter().filter_map(|k| k.lib.clone()).map(|p| (p.clone(), read_header(&p))).collect();
    for k in &mut broken {
        match k.name.as_str() {
            // hyper inside the cluster crate, as before the transport crate.
            "strata-cluster" => {
                k.deps.insert("hyper".into());
            }
            // The engine reaching up to the router.
            "strata-engine" => {
                k.deps.insert("strata-router".into());
            }
            // A header without its rule.
            "strata-types" => {
                headers.insert(k.lib.clone().expect("lib"), "//! Identifiers.".into());
            }
            // A claim nothing checks.
            "strata-router" => {
                let p = k.lib.clone().expect("lib");
                let h = headers[&p].replace("never the server", "never anything slow");
                headers.insert(p, h);
            }
            _ => {}
        }
    }
    let found = violations(&broken, |p| headers.get(p).cloned().unwrap_or_default());
    let text = found.join("\n");
    assert!(text.contains("strata-cluster depends on hyper, which its rule forbids"), "{text}");
    assert!(text.contains("strata-engine depends on strata-router, which its rule does not allow"), "{text}");
    assert!(text.contains("strata-types: the header states no layer rule"), "{text}");
    assert!(text.contains("strata-router: \"never\" names \"anything slow\""), "{text}");
}

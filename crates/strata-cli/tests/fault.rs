//! The fault-injection suite (`strata fault`), run by the test command: a
//! seeded, bounded slice of 200 rounds of kill -9, flipped bytes in sealed
//! and active segments and index files, torn writes and (as root, on a
//! small tmpfs) a disk that fills up again and again, with every
//! acknowledged blob checked after each round. Longer soak runs:
//! `strata fault --rounds N` (a random seed unless `--seed`).
//! `STRATA_FAULT_ROUNDS` and `STRATA_FAULT_SEED` change this test's slice.

use std::process::Command;

fn fault(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata")).arg("fault").args(args).output().expect("run strata fault");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn two_hundred_seeded_rounds_lose_no_acknowledged_blob() {
    let rounds = std::env::var("STRATA_FAULT_ROUNDS").unwrap_or_else(|_| "200".into());
    let seed = std::env::var("STRATA_FAULT_SEED").unwrap_or_else(|_| "1".into());
    let mut args = vec!["--rounds", &rounds, "--seed", &seed];
    // As root the data lives on a 32 MiB tmpfs, so the disk fills up.
    if is_root() {
        args.extend(["--disk", "32MiB"]);
    } else {
        eprintln!("not root: the suite runs without a full disk");
    }
    let (ok, text) = fault(&args);
    println!("{text}");
    assert!(ok, "the fault suite failed:\n{text}");
    let count = |name: &str| -> u64 { text.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_whitespace().last()?.parse().ok()).unwrap_or(0) };
    assert_eq!(count("rounds"), rounds.parse::<u64>().expect("a number"));
    // The faults happened: a run that injects nothing proves nothing.
    assert!(count("segment bytes flipped") > 0 && count("torn writes") > 0 && count("index bytes flipped") > 0, "{text}");
    assert!(count("acknowledged puts") > 1000, "{text}");
    if is_root() {
        assert!(count("full-disk events") > 0, "the disk never filled:\n{text}");
    }
}

/// The suite's deliberately broken mode cuts every log in half: the checker
/// must catch the loss, as blobs lost (a cut active log's records are gone)
/// or reported corrupt with no byte flipped (a cut sealed segment's index
/// still points past its end).
#[test]
fn the_checker_catches_a_lost_acknowledged_blob() {
    let (ok, text) = fault(&["--rounds", "3", "--seed", "1", "--broken"]);
    assert!(!ok, "the checker missed data lost on purpose:\n{text}");
    let lost = text.lines().find(|l| l.starts_with("lost")).and_then(|l| l.split_whitespace().last()?.parse::<u64>().ok()).unwrap_or(0);
    assert!(text.contains("FAIL") && (lost > 0 || text.contains("yet no byte was flipped")), "{text}");
}

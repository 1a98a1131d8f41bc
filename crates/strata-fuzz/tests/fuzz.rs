//! The short, seeded fuzz run of the test command: every target over its
//! corpus and 3,000 mutations of it, without a panic; and the broken
//! target's bug found, or the fuzzer proves nothing. (`strata fuzz
//! --seconds N` is the long mode.)

use strata_fuzz::{Budget, fuzz, targets};

#[test]
fn no_parser_panics_on_mutated_input() {
    let mut failed = Vec::new();
    for t in targets().into_iter().filter(|t| t.name != "broken") {
        let r = fuzz(&t, Budget::Inputs(3_000), 1);
        if let Some((input, msg)) = r.crash {
            failed.push(format!("{}: {msg} on {} bytes: {:02x?}", r.target, input.len(), &input[..input.len().min(96)]));
        }
    }
    assert!(failed.is_empty(), "parsers panicked:\n{}", failed.join("\n"));
}

#[test]
fn the_fuzzer_finds_the_broken_targets_bug() {
    let t = strata_fuzz::target("broken").expect("the broken target");
    let r = fuzz(&t, Budget::Inputs(3_000), 1);
    let (input, msg) = r.crash.expect("the broken target's bug was not found in 3,000 inputs");
    assert!(msg.contains("broken target's bug") && input.starts_with(b"BRKN"), "{msg}");
}

//! The CLI as a Unix tool: a command whose output is piped into a reader
//! that stops early (`strata partitions | head`) ends quietly.

use std::process::{Command, Stdio};

#[test]
fn a_closed_stdout_pipe_ends_a_command_quietly() {
    let out = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["sim", "kinesis-recovery", "--out"])
        .arg(out.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run strata sim");
    // The reader goes away before the command prints its table.
    drop(child.stdout.take());
    let done = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(done.status.signal(), Some(libc::SIGPIPE), "{:?}: {stderr}", done.status);
}

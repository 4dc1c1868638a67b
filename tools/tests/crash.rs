//! A bounded run of `bloomkv crash-test` (about a minute): a child writing with small
//! memtables to three keyspaces is killed with SIGKILL at random moments, and every reopen
//! must hold exactly the acknowledged writes, batches whole across keyspaces. The long run is
//! documented in `docs/reliability.md`.

use assert_cmd::Command;

/// Runs `bloomkv crash-test` with `args` in a new directory (seed `BLOOMKV_CRASH_SEED`, else
/// 7), asserts it succeeded, and returns its report.
fn crash_test(args: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let seed = std::env::var("BLOOMKV_CRASH_SEED").unwrap_or_else(|_| "7".into());
    let out = Command::new(env!("CARGO_BIN_EXE_bloomkv"))
        .arg("crash-test")
        .args(args)
        .arg("--dir")
        .arg(tmp.path().join("db"))
        .args(["--seed", &seed])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "crash-test {args:?} failed:\n{stdout}\n{stderr}");
    eprintln!("{stdout}");
    stdout
}

#[test]
fn sigkilled_writers_lose_nothing_acknowledged() {
    let stdout = crash_test(&["--cycles", "90", "--seconds", "50", "--max-delay-ms", "1000"]);
    // The run did real work: some cycles, and acknowledged writes to check.
    let cycles: u64 = stdout
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output {stdout}"));
    assert!(cycles >= 5, "{stdout}");
    assert!(!stdout.contains(" 0 acknowledged ops"), "{stdout}");
    assert!(!stdout.contains("(0 with a range delete"), "{stdout}");
    assert!(!stdout.contains(" 0 across keyspaces"), "{stdout}");
}

/// The same through blob files (`crash-test --blobs`): separated values, garbage collection,
/// values over `MAX_VALUE_BYTES`, refused batches, full compactions and checkpoints, each
/// reopen and finished checkpoint verified. Bounded: at most one value over 16 MiB per
/// writer is live, and checkpoints are removed after each cycle.
#[test]
fn sigkilled_writers_through_blob_files_lose_nothing_acknowledged() {
    let stdout =
        crash_test(&["--blobs", "--cycles", "60", "--seconds", "40", "--max-delay-ms", "1500"]);
    let count = |after: &str| -> u64 {
        let at = stdout.find(after).unwrap_or_else(|| panic!("no {after:?} in {stdout}"));
        let n = stdout[..at].split_whitespace().last().and_then(|n| n.parse().ok());
        n.unwrap_or_else(|| panic!("unexpected output {stdout}"))
    };
    assert!(count(" cycles") >= 5, "{stdout}");
    assert!(count(" acknowledged ops") > 0, "{stdout}");
    assert!(count(" full compactions") > 0, "{stdout}");
    assert!(count(" checkpoints checked") > 0, "{stdout}");
    assert_eq!(count(" clean verifies"), count(" cycles"), "{stdout}");
}

#[test]
fn crash_test_refuses_a_non_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("precious"), b"data").unwrap();
    Command::new(env!("CARGO_BIN_EXE_bloomkv"))
        .args(["crash-test", "--cycles", "1", "--dir"])
        .arg(tmp.path())
        .assert()
        .failure();
    assert!(tmp.path().join("precious").exists());
}

//! A bounded run of `bloomkv crash-test` (about a minute): a child writing with small
//! memtables to three keyspaces is killed with SIGKILL at random moments, and every reopen
//! must hold exactly the acknowledged writes, batches whole across keyspaces. The long run is
//! documented in `docs/reliability.md`.

use assert_cmd::Command;

#[test]
fn sigkilled_writers_lose_nothing_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let seed = std::env::var("BLOOMKV_CRASH_SEED").unwrap_or_else(|_| "7".into());
    let out = Command::new(env!("CARGO_BIN_EXE_bloomkv"))
        .args(["crash-test", "--cycles", "90", "--seconds", "50", "--max-delay-ms", "1000"])
        .arg("--dir")
        .arg(&dir)
        .args(["--seed", &seed])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "crash-test failed:\n{stdout}\n{stderr}");
    eprintln!("{stdout}");
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

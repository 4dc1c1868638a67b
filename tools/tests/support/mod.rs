//! What the tests of the `bloomkv` binary share: running it, and comparing its reports with
//! golden files.
//!
//! A golden file, in `tools/tests/golden/`, is a report exactly as the tool prints it, after
//! [`normalize`] has replaced what differs between runs. One file per report (or per
//! transcript of a flag's cases), named for the command and the case.
//!
//! - To add one: call [`golden`] (or [`golden_transcript`]) with a new name, on a database the
//!   test builds without background work (so its files, numbers and sizes are the same at
//!   every run), then run `BLOOMKV_REWRITE=1 cargo test --release -p bloomkv-tools --test tool`
//!   and read the file it writes: it is only right if the report it holds is.
//! - After a deliberate change of a report, the same command rewrites every golden file;
//!   review `git diff tools/tests/golden` like code.
//!
//! Without the variable a report that differs from its file fails the test, with the lines
//! that differ.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs the tool; returns (exit code, stdout, stderr). A missing code (killed by a signal)
/// is returned as -1 so that tests can reject it.
pub fn tool(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bloomkv")).args(args).output().expect("run bloomkv");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Where the expected reports live: one file per report, named for the command and the case.
fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)
}

/// `report` with what legitimately differs between runs replaced by placeholders: the
/// temporary directory everything is made in (`$TMP`), and the tables' creation times, which
/// `inspect` shows as seconds and as a date (`$TIME`). Everything else — file numbers, sizes,
/// sequence numbers, filter figures — is the same at every run for a database built without
/// background work (see `golden_options`).
fn normalize(report: &str, tmp: &Path) -> String {
    let mut out = String::new();
    let tmp = tmp.to_str().expect("a UTF-8 temporary directory");
    for line in report.replace(tmp, "$TMP").lines() {
        let masked = if let Some(at) = line.find("\"creation_time\": ") {
            let end = line[at..].find(',').map_or(line.len(), |e| at + e);
            format!("{}\"creation_time\": \"$TIME\"{}", &line[..at], &line[end..])
        } else if let Some(at) = line.find("\"created\": ") {
            let end = line[at..].find(',').map_or(line.len(), |e| at + e);
            format!("{}\"created\": \"$TIME\"{}", &line[..at], &line[end..])
        } else if line.starts_with("created ") && line.ends_with("s since the Unix epoch)") {
            "created          $TIME".to_string()
        } else {
            line.to_string()
        };
        // Editors strip trailing blanks; they carry nothing a report means.
        out.push_str(masked.trim_end());
        out.push('\n');
    }
    out
}

/// Checks `report` (normalised) against the golden file `name`; with `BLOOMKV_REWRITE=1`
/// (re)writes the file instead. A mismatch fails with the lines that differ.
fn assert_golden(name: &str, report: &str, tmp: &Path) {
    let got = normalize(report, tmp);
    let path = golden_path(name);
    if std::env::var_os("BLOOMKV_REWRITE").is_some_and(|v| v != "0") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        if std::fs::read_to_string(&path).ok().as_deref() != Some(&got) {
            std::fs::write(&path, &got).unwrap();
        }
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{}: {e} (BLOOMKV_REWRITE=1 writes it)", path.display());
    });
    if got != want {
        panic!(
            "{} differs from the report (BLOOMKV_REWRITE=1 rewrites it; review the diff):\n{}",
            path.display(),
            line_diff(&want, &got)
        );
    }
}

/// The lines of `want` and `got` that differ, with two lines of context: `-` expected,
/// `+` got (longest common subsequence), numbered by the lines of the golden file (`+` lines are not in it).
fn line_diff(want: &str, got: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] =
                if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let mut lines: Vec<(char, usize, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            lines.push((' ', i + 1, a[i]));
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            lines.push(('-', i + 1, a[i]));
            i += 1;
        } else {
            lines.push(('+', 0, b[j]));
            j += 1;
        }
    }
    let near = |k: usize| lines[k.saturating_sub(2)..(k + 3).min(lines.len())].iter();
    let mut out = String::new();
    let mut last = None;
    for (k, (c, n, l)) in lines.iter().enumerate() {
        if near(k).any(|l| l.0 != ' ') {
            if last.is_some_and(|l| l + 1 != k) {
                out.push_str("  ...\n");
            }
            let n = if *c == '+' { String::new() } else { n.to_string() };
            out.push_str(&format!("{c} {n:>5} {l}\n"));
            last = Some(k);
        }
    }
    out
}

/// Runs the tool expecting success and checks its output against the golden file `name`.
pub fn golden(name: &str, args: &[&str], tmp: &Path) {
    let (code, out, err) = tool(args);
    assert_eq!(code, 0, "bloomkv {args:?} failed: {err}");
    assert_golden(name, &out, tmp);
}

/// Runs each command (all expected to succeed) and checks the transcript — each command
/// line, then what it printed — against the golden file `name`: for a flag's cases, where one
/// file reads better than one per command.
pub fn golden_transcript(name: &str, commands: &[&[&str]], tmp: &Path) {
    let mut transcript = String::new();
    for args in commands {
        let (code, out, err) = tool(args);
        assert_eq!(code, 0, "bloomkv {args:?} failed: {err}");
        transcript.push_str(&format!("$ bloomkv {}\n{out}", args.join(" ")));
    }
    assert_golden(name, &transcript, tmp);
}

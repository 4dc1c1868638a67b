//! The command scripts' file format, read and written back: a sequence of commands, each
//! followed by `----` and its expected output (up to a blank line, or between two `----` line
//! pairs when the output holds blank lines), comments and blank lines between them kept.
//! Shared by the tree crate's picker and builder scripts and the engine's shape scripts, with
//! the loop that runs a directory of them ([`run_dir`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Runs every `*.txt` script in `dir` (relative to the crate): each file's commands in order on
/// one state from `new_state`, each command's output from `run`. Fails listing every output
/// that differs from the file's; with `BLOOMKV_REWRITE=1` writes the outputs into the files
/// instead (review them with `git diff`).
pub fn run_dir<S>(
    dir: &str,
    mut new_state: impl FnMut() -> S,
    mut run: impl FnMut(&mut S, &[String]) -> String,
) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no cases in {}", dir.display());
    let rewrite = std::env::var_os("BLOOMKV_REWRITE").is_some_and(|v| v != "0");
    let mut failures = String::new();
    for path in &files {
        let content = std::fs::read_to_string(path).unwrap();
        let (cases, trailer) = parse(path, &content);
        let mut state = new_state();
        let mut outputs = Vec::new();
        for c in &cases {
            let got = run(&mut state, &c.text);
            if !rewrite && got != c.expected {
                let rel = path.strip_prefix(root).unwrap_or(path);
                let _ = write!(
                    failures,
                    "\n{}:{}: {}\n--- expected, +++ got\n{}",
                    rel.display(),
                    c.line,
                    c.text[0],
                    diff(&c.expected, &got)
                );
            }
            outputs.push(got);
        }
        if rewrite {
            let new = render(&cases, &outputs, &trailer);
            if new != content {
                std::fs::write(path, new).unwrap();
            }
        }
    }
    assert!(
        failures.is_empty(),
        "outputs differ (BLOOMKV_REWRITE=1 rewrites them; review the diff):{failures}"
    );
}

/// One command of a script, where it was, and the output the file expects of it.
pub struct Case {
    pub line: usize,
    /// The command line and its input lines, as written.
    pub text: Vec<String>,
    pub expected: String,
    /// What precedes the command in the file (comments and blank lines), kept on rewrite.
    preamble: Vec<String>,
}

pub fn parse(path: &Path, content: &str) -> (Vec<Case>, Vec<String>) {
    let lines: Vec<&str> = content.lines().collect();
    let mut cases = Vec::new();
    let mut preamble = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.trim().is_empty() || l.starts_with('#') {
            preamble.push(l.to_string());
            i += 1;
            continue;
        }
        let line = i + 1;
        let mut text = Vec::new();
        while i < lines.len() && lines[i] != "----" {
            text.push(lines[i].to_string());
            i += 1;
        }
        assert!(i < lines.len(), "{}:{line}: command without a `----` line", path.display());
        i += 1;
        let mut expected = Vec::new();
        if lines.get(i) == Some(&"----") {
            // The form for output holding blank lines: it ends at a `----` pair.
            i += 1;
            while i < lines.len() && !(lines[i] == "----" && lines.get(i + 1) == Some(&"----")) {
                expected.push(lines[i]);
                i += 1;
            }
            assert!(i < lines.len(), "{}:{line}: unterminated `----` block", path.display());
            i += 2;
        } else {
            while i < lines.len() && !lines[i].is_empty() {
                expected.push(lines[i]);
                i += 1;
            }
        }
        let expected = expected.iter().map(|l| format!("{l}\n")).collect();
        cases.push(Case { line, text, expected, preamble: std::mem::take(&mut preamble) });
    }
    (cases, preamble)
}

/// The file again, with `outputs` in place of the expectations.
pub fn render(cases: &[Case], outputs: &[String], trailer: &[String]) -> String {
    let mut s = String::new();
    // What follows each case: the next case's preamble and text, or the file's last lines.
    let next = cases.iter().skip(1).map(|c| c.preamble.iter().chain(&c.text).next());
    for ((c, out), next) in cases.iter().zip(outputs).zip(next.chain([trailer.first()])) {
        for l in c.preamble.iter().chain(&c.text) {
            s.push_str(l);
            s.push('\n');
        }
        s.push_str("----\n");
        if out.lines().any(|l| l.is_empty()) {
            let _ = write!(s, "----\n{out}----\n----\n");
        } else {
            s.push_str(out);
            // A blank line ends the output; the next command's preamble may hold it already.
            if next.is_some_and(|l| !l.trim().is_empty()) {
                s.push('\n');
            }
        }
    }
    for l in trailer {
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// A line diff of `want` against `got` (longest common subsequence; outputs are short).
pub fn diff(want: &str, got: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] =
                if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            let _ = writeln!(out, "  {}", a[i]);
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            let _ = writeln!(out, "- {}", a[i]);
            i += 1;
        } else {
            let _ = writeln!(out, "+ {}", b[j]);
            j += 1;
        }
    }
    out
}

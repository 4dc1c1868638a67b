//! The command scripts' file format, read and written back: a sequence of commands, each
//! followed by `----` and its expected output (up to a blank line, or between two `----` line
//! pairs when the output holds blank lines), comments and blank lines between them kept.
//! Shared by the tree crate's picker scripts and the engine's shape scripts.

use std::fmt::Write as _;
use std::path::Path;

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

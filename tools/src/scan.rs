//! `bloomkv scan <db-dir>`: the live keys and values in key order (the merged user view),
//! read through `Db::open_read_only` (no LOCK, nothing written), selected with `--from`
//! (inclusive), `--to` (exclusive), `--prefix` and `--limit`; `--reverse` lists them from the
//! last, `--keys-only` leaves the values out, `--count` prints only how many there are, and
//! `--max-value-bytes` cuts long values short in the listing.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use bloomkv::Readable;
use serde::Serialize;

use crate::common::{self, Bytes, KeyRange, RangeArgs};

/// How much of each value text output shows when `--max-value-bytes` is not given: a line
/// per entry stays readable, and 64 bytes tell most values apart.
const DEFAULT_MAX_VALUE_BYTES: usize = 64;

/// Options of `scan`.
#[derive(clap::Args)]
// The shared `--hex` and `--json`, with what they do in this command in their help.
#[command(mut_arg("hex", |a| a.help("Print keys and values as hex (and read the key options as hex)")))]
#[command(mut_arg("json", |a| a.help("Print one JSON document: {\"count\", \"truncated\", \"entries\": [{\"key\", \"value\", \"value_bytes\", \"value_truncated\"}]}")))]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    #[command(flatten)]
    range: RangeArgs,
    /// List the selected keys from the last down to the first (with --limit N: the last N).
    #[arg(long)]
    reverse: bool,
    /// Print only the keys.
    #[arg(long)]
    keys_only: bool,
    /// Print only the number of selected entries (at most --limit).
    #[arg(long, conflicts_with = "keys_only")]
    count: bool,
    /// Show at most N bytes of each value, followed by … and the value's full length; 0
    /// shows whole values [default: 64, or 0 with --json].
    #[arg(long, value_name = "N")]
    max_value_bytes: Option<usize>,
    #[command(flatten)]
    keyspace: common::KeyspaceArg,
    #[command(flatten)]
    output: common::OutputArgs,
}

#[derive(Serialize)]
struct Pair {
    key: String,
    /// Absent with `--keys-only`; the first `--max-value-bytes` bytes when cut short.
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    /// The whole value's length (absent with `--keys-only`).
    #[serde(skip_serializing_if = "Option::is_none")]
    value_bytes: Option<usize>,
    /// Whether `value` was cut short (absent with `--keys-only`).
    #[serde(skip_serializing_if = "Option::is_none")]
    value_truncated: Option<bool>,
}

#[derive(Serialize)]
struct Report {
    count: u64,
    truncated: bool,
    /// Absent with `--count`.
    #[serde(skip_serializing_if = "Option::is_none")]
    entries: Option<Vec<Pair>>,
}

/// A value as shown: its first `max` bytes (all of it for 0), and whether that cut it.
fn shown_value(fmt: Bytes, value: &[u8], max: usize) -> (String, bool) {
    if max == 0 || value.len() <= max {
        (fmt.show(value), false)
    } else {
        // Cut the bytes, then escape them, so that no escape is cut in half.
        (fmt.show(&value[..max]), true)
    }
}

/// One entry's text line (without the newline).
fn text_line(fmt: Bytes, key: &[u8], value: &[u8], args: &Args, max: usize) -> String {
    if args.keys_only {
        return fmt.quoted(key);
    }
    let (shown, cut) = shown_value(fmt, value, max);
    let shown = if fmt.hex { shown } else { format!("\"{shown}\"") };
    if cut {
        // The marker sits outside the quotes: escaped text never holds `…` (a non-ASCII
        // byte prints as \xNN), so it cannot be mistaken for part of the value.
        format!("{} => {shown}… ({} bytes)", fmt.quoted(key), value.len())
    } else {
        format!("{} => {shown}", fmt.quoted(key))
    }
}

/// Runs `scan`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let fmt = args.output.bytes;
    let json = args.output.json();
    let max = args.max_value_bytes.unwrap_or(if json { 0 } else { DEFAULT_MAX_VALUE_BYTES });
    let range = KeyRange::parse(&args.range, fmt)?;
    let db = common::open_db_read_only(&args.dir)?;
    let ks = args.keyspace.resolve(&db)?;
    let iter: Box<dyn Iterator<Item = _>> = match range.bounds() {
        None => Box::new(std::iter::empty()),
        Some(bounds) if args.reverse => Box::new(ks.range(bounds).rev()),
        Some(bounds) => Box::new(ks.range(bounds)),
    };
    let mut out = common::stdout();
    let mut r =
        Report { count: 0, truncated: false, entries: (!args.count && json).then(Vec::new) };
    let mut written = Ok(());
    for kv in iter {
        let (key, value) = kv?;
        // The bounds are the selection's; this only guards against an iterator that strays.
        if !range.contains(&key) {
            continue;
        }
        if range.limit.is_some_and(|l| r.count >= l) {
            r.truncated = true;
            break;
        }
        r.count += 1;
        if args.count {
            continue;
        }
        if let Some(entries) = &mut r.entries {
            let pair = if args.keys_only {
                Pair { key: fmt.show(&key), value: None, value_bytes: None, value_truncated: None }
            } else {
                let (shown, cut) = shown_value(fmt, &value, max);
                Pair {
                    key: fmt.show(&key),
                    value: Some(shown),
                    value_bytes: Some(value.len()),
                    value_truncated: Some(cut),
                }
            };
            entries.push(pair);
        } else {
            written = writeln!(out, "{}", text_line(fmt, &key, &value, args, max));
            if written.is_err() {
                break;
            }
        }
    }
    if json {
        written = common::write_json(&mut out, &r);
    } else if args.count {
        written = writeln!(out, "{}", r.count);
    }
    common::finish_output(written, &mut out, ExitCode::SUCCESS)
}

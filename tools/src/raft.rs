//! `bloomkv raft <node-dir>`: a bloomkv-raft node's groups — each one's vote, log, applied
//! state, members and key range — and the shard map if the metadata group is there. The
//! reading is `bloomkv_raft::inspect`'s (read-only, safe beside a running node); this file
//! turns its report into text or JSON.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use bloomkv_raft::shard::META_GROUP;
use bloomkv_raft::{GroupReport, NodeId};
use openraft::LogId;
use serde::Serialize;

use crate::common::{self, Bytes};

/// Options of `raft`.
#[derive(clap::Args)]
pub struct Args {
    /// The node's directory (its bloomkv database).
    dir: PathBuf,
    #[command(flatten)]
    output: common::OutputArgs,
}

/// Runs `raft`.
pub fn run(args: &Args) -> bloomkv::Result<ExitCode> {
    let node = bloomkv_raft::inspect(&args.dir)?;
    let fmt = args.output.bytes;
    let report = Report {
        dir: args.dir.display().to_string(),
        groups: node.groups.iter().map(|g| Group::of(g, fmt)).collect(),
    };
    let mut out = common::stdout();
    let written = args.output.write(&mut out, &report, |out, r| print(out, r, fmt));
    common::finish_output(written, &mut out, ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct Report {
    dir: String,
    groups: Vec<Group>,
}

/// A log id: the term of the leader that wrote the entry, and its index.
#[derive(Serialize, Clone, Copy)]
struct Id {
    term: u64,
    index: u64,
}

impl Id {
    fn of(id: &LogId<NodeId>) -> Id {
        Id { term: id.leader_id.term, index: id.index }
    }
}

#[derive(Serialize)]
struct Vote {
    term: u64,
    node: NodeId,
    committed: bool,
}

#[derive(Serialize)]
struct Group {
    id: u64,
    /// The metadata group (whose state machine holds the shard map).
    metadata: bool,
    vote: Option<Vote>,
    committed: Option<Id>,
    purged: Option<Id>,
    log_first: Option<Id>,
    log_last: Option<Id>,
    applied: Option<Id>,
    voters: Vec<NodeId>,
    learners: Vec<NodeId>,
    /// The entry that made the membership above.
    membership_at: Option<Id>,
    range: Option<Range>,
    map: Option<Map>,
    snapshot: Option<Snapshot>,
    installing: Option<String>,
}

#[derive(Serialize)]
struct Range {
    start: String,
    end: Option<String>,
    splits: Vec<Split>,
}

#[derive(Serialize)]
struct Split {
    at: String,
    group: u64,
}

#[derive(Serialize)]
struct Map {
    version: u64,
    shards: Vec<Shard>,
}

#[derive(Serialize)]
struct Shard {
    start: String,
    end: Option<String>,
    group: u64,
    members: Vec<NodeId>,
}

#[derive(Serialize)]
struct Snapshot {
    last: Option<Id>,
    file: String,
    bytes: u64,
}

impl Group {
    fn of(g: &GroupReport, fmt: Bytes) -> Group {
        let membership = g.membership.membership();
        Group {
            id: g.id,
            metadata: g.id == META_GROUP,
            vote: g.vote.map(|v| Vote {
                term: v.leader_id().term,
                node: v.leader_id().voted_for().unwrap_or_default(),
                committed: v.is_committed(),
            }),
            committed: g.committed.as_ref().map(Id::of),
            purged: g.purged.as_ref().map(Id::of),
            log_first: g.log.as_ref().map(|(first, _)| Id::of(first)),
            log_last: g.log.as_ref().map(|(_, last)| Id::of(last)),
            applied: g.applied.as_ref().map(Id::of),
            voters: membership.voter_ids().collect(),
            learners: membership.learner_ids().collect(),
            membership_at: g.membership.log_id().as_ref().map(Id::of),
            range: g.range.as_ref().map(|r| Range {
                start: fmt.show(&r.start),
                end: r.end.as_deref().map(|e| fmt.show(e)),
                splits: r
                    .splits
                    .iter()
                    .map(|(at, group)| Split { at: fmt.show(at), group: *group })
                    .collect(),
            }),
            map: g.map.as_ref().map(|m| Map {
                version: m.version(),
                shards: m
                    .shards()
                    .map(|s| Shard {
                        start: fmt.show(s.start),
                        end: s.end.map(|e| fmt.show(e)),
                        group: s.group,
                        members: s.members.iter().copied().collect(),
                    })
                    .collect(),
            }),
            snapshot: g.snapshot.as_ref().map(|(last, file, bytes)| Snapshot {
                last: last.as_ref().map(Id::of),
                file: file.clone(),
                bytes: *bytes,
            }),
            installing: g.installing.clone(),
        }
    }
}

fn id(id: &Option<Id>) -> String {
    match id {
        Some(Id { term, index }) => format!("{index} (term {term})"),
        None => "none".to_string(),
    }
}

fn ids(ids: &[NodeId]) -> String {
    match ids {
        [] => "none".to_string(),
        ids => ids.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", "),
    }
}

/// A key already shown by `fmt`, quoted as the other reports quote keys (hex stays bare,
/// but for the empty key, the first range's start).
fn quote(fmt: Bytes, shown: &str) -> String {
    match fmt.hex && !shown.is_empty() {
        true => shown.to_string(),
        false => format!("\"{shown}\""),
    }
}

/// `start .. end`; the last range runs to the end of the key space.
fn span(fmt: Bytes, start: &str, end: &Option<String>) -> String {
    match end {
        Some(end) => format!("{} .. {}", quote(fmt, start), quote(fmt, end)),
        None => format!("{} .. end", quote(fmt, start)),
    }
}

fn print(out: &mut common::Out, r: &Report, fmt: Bytes) -> io::Result<()> {
    let n = r.groups.len();
    writeln!(out, "node {}: {n} group{}", r.dir, plural(n))?;
    for g in &r.groups {
        writeln!(out)?;
        match g.metadata {
            true => writeln!(out, "group {} (metadata)", g.id)?,
            false => writeln!(out, "group {}", g.id)?,
        }
        let vote = match &g.vote {
            Some(v) => {
                let state = if v.committed { "committed" } else { "not committed" };
                format!("term {} for node {} ({state})", v.term, v.node)
            }
            None => "none".to_string(),
        };
        writeln!(out, "  vote        {vote}")?;
        let mut log = match (&g.log_first, &g.log_last) {
            (Some(first), Some(last)) => {
                format!("{} .. {}", id(&Some(*first)), id(&Some(*last)))
            }
            _ => "empty".to_string(),
        };
        if g.purged.is_some() {
            log.push_str(&format!("; purged through {}", id(&g.purged)));
        }
        writeln!(out, "  log         {log}")?;
        writeln!(out, "  committed   {}", id(&g.committed))?;
        writeln!(out, "  applied     {}", id(&g.applied))?;
        writeln!(
            out,
            "  members     voters {}; learners {}; as of entry {}",
            ids(&g.voters),
            ids(&g.learners),
            id(&g.membership_at)
        )?;
        match &g.range {
            Some(range) => {
                writeln!(out, "  range       {}", span(fmt, &range.start, &range.end))?;
                for split in &range.splits {
                    let at = quote(fmt, &split.at);
                    writeln!(out, "  split       at {at} made group {}", split.group)?;
                }
            }
            None if !g.metadata => writeln!(out, "  range       every key (none assigned)")?,
            None => {}
        }
        if let Some(s) = &g.snapshot {
            writeln!(out, "  snapshot    through {}: {}, {} bytes", id(&s.last), s.file, s.bytes)?;
        }
        if let Some(file) = &g.installing {
            writeln!(out, "  installing  {file} (a snapshot install did not finish)")?;
        }
        if let Some(map) = &g.map {
            let n = map.shards.len();
            writeln!(out, "  map         version {}, {n} range{}", map.version, plural(n))?;
            let spans: Vec<String> =
                map.shards.iter().map(|s| span(fmt, &s.start, &s.end)).collect();
            let width = spans.iter().map(String::len).max().unwrap_or(0);
            for (s, span) in map.shards.iter().zip(&spans) {
                let members = ids(&s.members);
                writeln!(out, "    {span:width$}  group {} on {members}", s.group)?;
            }
        }
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

//! [`Quiet`]: idle raft groups stop ticking, so a node's idle cost does not grow with its
//! groups, and a node-level liveness check, not a per-group timer, wakes them when a leader
//! dies.
//!
//! openraft wakes every `Raft` each 1.5 heartbeat intervals to send heartbeats (a leader) or
//! check its election timeout (a follower), whether or not anything happened: at 1,024 groups
//! that is most of an idle node's CPU. Here, with only openraft's runtime switch
//! (`Raft::runtime_config().tick`), no consensus code of our own:
//!
//! - a group whose only member is this node, leading it, never ticks: there is no one to
//!   send heartbeats to and no one to elect;
//! - a follower (or learner) stops its election timer while the node it takes for the
//!   group's leader vouches, in answer to a [`Ping`], that it still leads the group in that
//!   term. One ping a round goes to each node leading a group here, whatever the number of
//!   groups; one that goes unanswered (the node is down) or is answered "no" ends the vouch,
//!   and once the last vouch is an election timeout old the timer runs again: with no
//!   heartbeats for that long, the follower campaigns at its next tick;
//! - a leader stops its heartbeats once its log is all applied and every other member has
//!   reported, in its ping, the same term and that same last index applied: nothing is in
//!   flight, and every follower's timer is off. A write (replicated at once, with or without
//!   ticks), a member that lags, a membership change or a term change makes it tick again.
//!   A member that is down sends no report, so its group's leader keeps heartbeating it, as
//!   every group did before, until the member is back or moved away.
//!
//! Safety is raft's whatever the switches say; they decide only when a group spends CPU.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openraft::{BasicNode, RaftMetrics, ServerState};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::{GroupId, NodeId, Raft};

/// What a node tells a node it takes for the leader of some of its groups, once a round.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ping {
    /// The node asking.
    pub from: NodeId,
    /// The groups the asking node follows (or learns) with the asked node as their leader.
    pub groups: Vec<Following>,
}

/// One group a [`Ping`] asks about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Following {
    /// The group.
    pub group: GroupId,
    /// The term the asking replica knows the leader in.
    pub term: u64,
    /// The index of the last entry the asking replica applied.
    pub applied: Option<u64>,
}

/// The answer to a [`Ping`]: which of its groups the answering node leads in the term asked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pong {
    /// The groups it vouches for.
    pub leads: Vec<GroupId>,
}

/// How many groups of a node are quiet, after a round of [`Quiet::round`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuietStats {
    /// Rounds run so far.
    pub rounds: u64,
    /// Groups run here.
    pub groups: usize,
    /// Groups whose raft does not tick: sole members, vouched followers, quiet leaders.
    pub quiet: usize,
}

/// A node's part in keeping its idle groups quiet: what decides each group's ticker, once a
/// round ([`Quiet::round`], every heartbeat interval), from its raft's metrics and the pings
/// exchanged with the groups' leaders. [`crate::ShardNode`] runs one; any host of many
/// `Raft`s can drive its own:
///
/// ```
/// use std::collections::BTreeMap;
/// use bloomkv_raft::{Quiet, Raft};
///
/// async fn one_round(quiet: &Quiet, rafts: &BTreeMap<u64, Raft>) {
///     let pings = quiet.round(rafts.iter().map(|(g, r)| (*g, r)));
///     for (leader, ping) in pings {
///         // Sent to node `leader`, which answers with its own `Quiet::answer`; a ping lost
///         // is as good as an answer of `None`.
///         let answer = None;
///         quiet.vouched(leader, &ping, answer);
///     }
/// }
/// ```
#[derive(Debug)]
pub struct Quiet {
    id: NodeId,
    /// How long a vouch or a report holds: the groups' shortest election timeout.
    holds: Duration,
    state: Mutex<State>,
    stats: watch::Sender<QuietStats>,
}

#[derive(Debug, Default)]
struct State {
    /// Per group led here: per other member, the term and applied index it last reported,
    /// and when.
    reports: HashMap<GroupId, HashMap<NodeId, Report>>,
    /// Per group followed here: the leader and term last vouched for, and when.
    vouches: HashMap<GroupId, (NodeId, u64, Instant)>,
}

#[derive(Debug, Clone, Copy)]
struct Report {
    term: u64,
    applied: Option<u64>,
    at: Instant,
}

impl Quiet {
    /// Node `id`'s, for groups whose election timeouts are at least `election_timeout_min`
    /// (openraft's `Config` field of that name, in milliseconds).
    pub fn new(id: NodeId, election_timeout_min: u64) -> Quiet {
        let holds = Duration::from_millis(election_timeout_min);
        let stats = watch::Sender::new(QuietStats::default());
        Quiet { id, holds, state: Mutex::new(State::default()), stats }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets each group's ticker on or off, and returns the pings to send this round, by the
    /// node each goes to. Run once a heartbeat interval, then [`Quiet::vouched`] with each
    /// ping's answer.
    pub fn round<'a>(
        &self,
        groups: impl IntoIterator<Item = (GroupId, &'a Raft)>,
    ) -> BTreeMap<NodeId, Ping> {
        let now = Instant::now();
        let mut pings: BTreeMap<NodeId, Ping> = BTreeMap::new();
        let mut state = self.lock();
        let rounds = self.stats.borrow().rounds + 1;
        let mut stats = QuietStats { rounds, ..QuietStats::default() };
        let mut led = Vec::new();
        let mut followed = Vec::new();
        for (group, raft) in groups {
            let quiet = {
                let m = raft.metrics();
                let m = m.borrow();
                match (m.state, m.current_leader) {
                    (ServerState::Leader, _) => {
                        led.push(group);
                        self.leader_is_quiet(&m, state.reports.get(&group), now)
                    }
                    (ServerState::Follower | ServerState::Learner, Some(leader))
                        if leader != self.id =>
                    {
                        followed.push(group);
                        let following = Following {
                            group,
                            term: m.current_term,
                            applied: m.last_applied.map(|l| l.index),
                        };
                        let ping = pings.entry(leader).or_default();
                        ping.from = self.id;
                        ping.groups.push(following);
                        state.vouches.get(&group).is_some_and(|&(l, term, at)| {
                            l == leader && term == m.current_term && now - at < self.holds
                        })
                    }
                    _ => false,
                }
            };
            raft.runtime_config().tick(!quiet);
            stats.groups += 1;
            stats.quiet += quiet as usize;
        }
        // What is kept is what a group still in that role here may use.
        let led: std::collections::HashSet<_> = led.into_iter().collect();
        let followed: std::collections::HashSet<_> = followed.into_iter().collect();
        state.reports.retain(|g, _| led.contains(g));
        state.vouches.retain(|g, _| followed.contains(g));
        drop(state);
        self.stats.send_replace(stats);
        pings
    }

    /// Whether this leader's group can stop ticking: see the module's documentation.
    fn leader_is_quiet(
        &self,
        m: &RaftMetrics<NodeId, BasicNode>,
        reports: Option<&HashMap<NodeId, Report>>,
        now: Instant,
    ) -> bool {
        let membership = m.membership_config.membership();
        let last = m.last_log_index;
        if m.last_applied.map(|l| l.index) != last
            || membership.get_joint_config().len() != 1
            || !membership.voter_ids().any(|v| v == self.id)
        {
            return false;
        }
        membership.nodes().all(|(&node, _)| {
            node == self.id
                || reports.and_then(|r| r.get(&node)).is_some_and(|r| {
                    r.term == m.current_term && r.applied == last && now - r.at < self.holds
                })
        })
    }

    /// Answers node `ping.from`'s ping: the groups of it that `raft` (this node's replica of
    /// a group, if it runs one) leads in the term asked. Records what each reported, for
    /// [`Quiet::round`] to decide the leaders' tickers by.
    pub fn answer(&self, ping: &Ping, raft: impl Fn(GroupId) -> Option<Raft>) -> Pong {
        let now = Instant::now();
        let mut leads = Vec::new();
        let mut reports = Vec::new();
        for f in &ping.groups {
            let Some(raft) = raft(f.group) else { continue };
            let leading = {
                let m = raft.metrics();
                let m = m.borrow();
                m.state == ServerState::Leader && m.current_term == f.term
            };
            if leading {
                leads.push(f.group);
                reports.push((f.group, Report { term: f.term, applied: f.applied, at: now }));
            }
        }
        let mut state = self.lock();
        for (group, report) in reports {
            state.reports.entry(group).or_default().insert(ping.from, report);
        }
        Pong { leads }
    }

    /// Takes the answer to a ping this node sent `leader` (`None`: it went unanswered).
    /// The groups it vouches for may stop their election timers; the others run theirs
    /// again from the next round on.
    pub fn vouched(&self, leader: NodeId, ping: &Ping, answer: Option<&Pong>) {
        let now = Instant::now();
        let mut state = self.lock();
        let leads = answer.map_or(&[][..], |a| &a.leads[..]);
        for f in &ping.groups {
            match leads.contains(&f.group) {
                true => {
                    state.vouches.insert(f.group, (leader, f.term, now));
                }
                // Told the leader no longer leads it: no reason to wait out the vouch.
                false if answer.is_some() => {
                    state.vouches.remove(&f.group);
                }
                // Unanswered: the vouch ages out, as the election timeout it stands for.
                false => {}
            }
        }
    }

    /// How many groups were quiet after the last round.
    pub fn stats(&self) -> QuietStats {
        *self.stats.borrow()
    }

    /// [`Quiet::stats`], changing after every round.
    pub fn watch(&self) -> watch::Receiver<QuietStats> {
        self.stats.subscribe()
    }
}

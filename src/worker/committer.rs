//! The committer: the coordinator's reports reach the master from a task of
//! their own, merged per attempt, so that an acknowledged batch is committed
//! within one round trip.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::warn;

use super::checkpoints::Completed;
use super::coordinator::Report;
use super::ledger;
use crate::protocol::{SourceError, TaskSource};
use crate::queue::{AttemptId, WorkerId};

/// Reports of one attempt, merged: the highest commit (offset, and the
/// acknowledged ranges past it), then how it ended.
#[derive(Debug, Default)]
struct Merged {
    commit: Option<(u64, Vec<(u64, u64)>)>,
    end: Option<End>,
}

#[derive(Debug)]
enum End {
    Finish(u64),
    /// Failed: why, and whether for good.
    Fail(String, bool),
    HandBack,
}

impl Merged {
    fn add(&mut self, report: Report) {
        match report {
            Report::Ledger(ledger::Action::Commit { offset, ranges, .. }) => {
                self.commit_rows(offset, ranges);
            }
            Report::Ledger(ledger::Action::Finish { rows, .. }) => {
                self.end = Some(End::Finish(rows))
            }
            Report::Ledger(ledger::Action::Fail {
                offset,
                reason,
                for_good,
                ..
            }) => {
                self.commit_rows(offset, Vec::new());
                self.end = Some(End::Fail(reason, for_good));
            }
            Report::GiveUp { reason, .. } => self.end = Some(End::Fail(reason, false)),
            Report::HandBack { .. } => self.end = Some(End::HandBack),
            Report::Declare
            | Report::Checkpoint { .. }
            | Report::Unsaved(_)
            | Report::UnsavedAtEnd(_) => {}
        }
    }

    /// Adds a commit: acknowledged rows only grow, so the union of the
    /// commits is the newest (whatever order they were merged in).
    fn commit_rows(&mut self, offset: u64, ranges: Vec<(u64, u64)>) {
        let (held, mut union) = self.commit.take().unwrap_or((offset, Vec::new()));
        if offset >= held && !ranges.is_empty() {
            // Reports of an attempt come in order, each holding every row
            // acknowledged before it: the newest is the union.
            self.commit = Some((offset, ranges));
            return;
        }
        let offset = offset.max(held);
        for range in ranges {
            crate::queue::insert_range(&mut union, range);
        }
        union.retain(|r| r.1 > offset);
        self.commit = Some((offset, union));
    }
}

fn attempt_of(report: &Report) -> AttemptId {
    match report {
        Report::Declare
        | Report::Checkpoint { .. }
        | Report::Unsaved(_)
        | Report::UnsavedAtEnd(_) => AttemptId(0),
        Report::Ledger(
            ledger::Action::Commit { attempt, .. }
            | ledger::Action::Finish { attempt, .. }
            | ledger::Action::Fail { attempt, .. },
        )
        | Report::GiveUp { attempt, .. }
        | Report::HandBack { attempt } => *attempt,
    }
}

/// Sends reports to the master as they come: everything pending is merged per
/// attempt (a commit superseded by a later one or by the finish is not sent)
/// and sent at once, attempts side by side; what arrives meanwhile goes in the
/// next round. Ends when the coordinator drops its sender and all is sent.
pub(super) async fn committer(
    source: Arc<dyn TaskSource>,
    worker: WorkerId,
    mut reports: mpsc::UnboundedReceiver<Report>,
    completed: Completed,
    ending: Ending,
) {
    while let Some(first) = reports.recv().await {
        let mut pending: BTreeMap<AttemptId, Merged> = BTreeMap::new();
        let mut records = Vec::new();
        let mut add = |report: Report| match report {
            Report::Declare
            | Report::Checkpoint { .. }
            | Report::Unsaved(_)
            | Report::UnsavedAtEnd(_) => records.push(report),
            report => pending.entry(attempt_of(&report)).or_default().add(report),
        };
        add(first);
        while let Ok(report) = reports.try_recv() {
            add(report);
        }
        // Checkpoint records first, in order: a declaration is durable before
        // the commits that follow it.
        // Of the snapshots of unsaved rows only the newest matters.
        let newest = records
            .iter()
            .rposition(|r| matches!(r, Report::Unsaved(_)));
        for (at, record) in records.into_iter().enumerate() {
            let result = match record {
                Report::Checkpoint { id, pieces } => {
                    let recorded = source.checkpoint(worker, id.clone(), pieces).await;
                    if recorded.is_ok() {
                        completed.set(id);
                    }
                    recorded
                }
                Report::Unsaved(pieces) if Some(at) == newest => {
                    source.unsaved(worker, pieces).await
                }
                Report::Unsaved(_) => Ok(()),
                Report::UnsavedAtEnd(pieces) => source.unsaved_at_end(worker, pieces).await,
                _ => source.declare_checkpoints(worker).await,
            };
            if let Err(e) = result {
                warn!(error = %connectors::Report(&e), "master refused a checkpoint record");
            }
        }
        let ended: Vec<AttemptId> = pending
            .iter()
            .filter(|(_, merged)| merged.end.is_some())
            .map(|(attempt, _)| *attempt)
            .collect();
        let sends = pending.into_iter().map(|(attempt, merged)| {
            let source = source.clone();
            async move { send_merged(source.as_ref(), worker, attempt, merged).await }
        });
        futures::future::join_all(sends).await;
        ending.sent(&ended);
    }
}

async fn send_merged(
    source: &dyn TaskSource,
    worker: WorkerId,
    attempt: AttemptId,
    merged: Merged,
) {
    let result = match merged.end {
        // A finish commits every row of the split.
        Some(End::Finish(rows)) => source.finish(worker, attempt, rows).await,
        end => {
            let committed = match merged.commit {
                Some((offset, ranges)) => source.commit(worker, attempt, offset, ranges).await,
                None => Ok(()),
            };
            match (committed, end) {
                (Ok(()), Some(End::HandBack)) => source.hand_back(worker, attempt).await,
                (Err(e), Some(End::HandBack)) => {
                    warn!(%attempt, error = %connectors::Report(&e), "master refused a commit");
                    source.hand_back(worker, attempt).await
                }
                (Ok(()), Some(End::Fail(reason, for_good))) => source
                    .fail(worker, attempt, reason, for_good)
                    .await
                    .map(|_| ()),
                (Err(e), Some(End::Fail(reason, for_good))) => {
                    // Not committed (a stale lease): still hand the attempt back.
                    warn!(%attempt, error = %connectors::Report(&e), "master refused a commit");
                    source
                        .fail(worker, attempt, reason, for_good)
                        .await
                        .map(|_| ())
                }
                (result, _) => result,
            }
        }
    };
    match result {
        Ok(()) => {}
        // A stale attempt (lease lost meanwhile): its rows will be served again.
        Err(SourceError::Refused { source: e, .. }) => {
            warn!(%attempt, error = %connectors::Report(&e), "master refused a report")
        }
        // The master stayed away past the worker's patience: the lease
        // lapses there and its uncommitted rows are served again.
        Err(e @ SourceError::Unavailable { .. }) => {
            if source.halt().is_some_and(|h| h.reason().is_some()) {
                // The run's error says why, once.
                tracing::debug!(%attempt, error = %connectors::Report(&e), "report not recorded");
            } else {
                tracing::error!(%attempt, error = %connectors::Report(&e), "report not delivered to the master")
            }
        }
    }
}

/// Attempts whose end (finish, failure, hand-back) is on its way to the
/// master: the heartbeats still list them as held until it is sent, or the
/// master, seeing a lease it granted missing, would take it back as one
/// whose reply never reached the worker (and serve its rows again).
#[derive(Debug, Clone, Default)]
pub(super) struct Ending(Arc<std::sync::Mutex<HashSet<AttemptId>>>);

impl Ending {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<AttemptId>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn add(&self, attempt: AttemptId) {
        self.lock().insert(attempt);
    }

    pub(super) fn sent(&self, attempts: &[AttemptId]) {
        let mut ending = self.lock();
        for attempt in attempts {
            ending.remove(attempt);
        }
    }

    /// `held` and the attempts whose end is not sent yet.
    pub(super) fn with(&self, held: &[AttemptId]) -> Vec<AttemptId> {
        let mut listed = held.to_vec();
        listed.extend(self.lock().iter().filter(|a| !held.contains(a)));
        listed
    }
}

//! Group commit: request handlers apply their command to the queue under the
//! lock and wait; one committer thread writes every change applied meanwhile
//! in a single journal append (one fsync, or one object on a store), then
//! tells the waiting handlers their changes are durable. Under load, one
//! append serves many requests instead of one each.
//!
//! A reply is never sent before the changes it depends on are durable: a
//! handler waits for every change applied up to its own, including other
//! requests' changes its answer may have seen.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tracing::error;

use super::journal::{Journal, JournalError};
use super::state::{persist, MasterState};
use crate::task::{Command, Reply};

/// Exit code of a master whose journal cannot be written.
pub const JOURNAL_FAILED: i32 = crate::exit::ERROR as i32;
/// Exit code of a master that found its next journal record written by another.
pub const JOURNAL_TAKEN: i32 = crate::exit::HELD as i32;

/// The handlers' side of the committer.
#[derive(Clone)]
pub struct GroupCommit {
    master: Arc<Mutex<MasterState>>,
    wake: mpsc::Sender<()>,
    durable: watch::Receiver<u64>,
}

impl GroupCommit {
    /// Takes the journal out of `master` and starts the committer thread.
    /// A master without a journal (none taken) commits nothing but still
    /// answers in order.
    pub fn start(master: Arc<Mutex<MasterState>>) -> std::io::Result<GroupCommit> {
        let journal = lock(&master).take_journal();
        let (wake, woken) = mpsc::channel();
        let (durable_tx, durable) = watch::channel(0u64);
        let inner = master.clone();
        std::thread::Builder::new()
            .name("sluice-commit".to_string())
            .spawn(move || committer(inner, journal, woken, durable_tx))?;
        Ok(GroupCommit {
            master,
            wake,
            durable,
        })
    }

    /// Applies `command` and returns its reply once it is durable.
    pub async fn run(&self, command: Command) -> Reply {
        let (reply, needed) = lock(&self.master).apply(command);
        let _ = self.wake.send(());
        let mut durable = self.durable.clone();
        if durable.wait_for(|d| *d >= needed).await.is_err() {
            // The committer is gone: it only leaves by stopping the process.
            error!("journal committer stopped");
            std::process::exit(JOURNAL_FAILED);
        }
        reply
    }

    /// Waits until every change applied so far is durable: the group commit
    /// in progress, and one more for changes whose handlers went away before
    /// their reply (a client that hung up). Used when the master stops.
    pub async fn sync(&self) {
        let needed = lock(&self.master).applied();
        let mut durable = self.durable.clone();
        if *durable.borrow() >= needed {
            return;
        }
        let _ = self.wake.send(());
        if durable.wait_for(|d| *d >= needed).await.is_err() {
            error!("journal committer stopped");
            std::process::exit(JOURNAL_FAILED);
        }
    }

    /// The master state this committer serves.
    pub fn master(&self) -> &Arc<Mutex<MasterState>> {
        &self.master
    }
}

fn lock(master: &Mutex<MasterState>) -> std::sync::MutexGuard<'_, MasterState> {
    master.lock().unwrap_or_else(|e| e.into_inner())
}

/// The committer loop: wait for work, take everything applied, write it once.
fn committer(
    master: Arc<Mutex<MasterState>>,
    mut journal: Option<Box<dyn Journal>>,
    woken: mpsc::Receiver<()>,
    durable: watch::Sender<u64>,
) {
    while woken.recv().is_ok() {
        while woken.try_recv().is_ok() {}
        let (commands, upto, snapshot) = lock(&master).take_pending();
        if let Some(journal) = journal.as_mut() {
            if let Err(e) = persist(journal.as_mut(), &commands, snapshot.as_ref()) {
                // Answering without durability would break the guarantees.
                error!(error = %e, "journal write failed; stopping");
                eprintln!("sluice master: {e}");
                std::process::exit(match e {
                    JournalError::Taken { .. } => JOURNAL_TAKEN,
                    _ => JOURNAL_FAILED,
                });
            }
        }
        durable.send_replace(upto);
    }
}

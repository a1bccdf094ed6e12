//! The journal: every queue command that changed state, written durably
//! before it is answered, replayed after a restart.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use crate::task::{Command, Queue};

/// Errors of a journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Reading or writing failed.
    #[error("journal {path}: {source}")]
    Io {
        /// The journal file.
        path: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// A record in the middle of the journal cannot be read.
    #[error("journal {path} line {line} is corrupt: {reason}")]
    Corrupt {
        /// The journal file.
        path: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The object store holding the state failed.
    #[error("state {location}: {source}")]
    Store {
        /// The object written or read.
        location: String,
        /// The failure.
        #[source]
        source: object_store::Error,
    },
    /// Another master wrote the record this one meant to write: it owns the job now.
    #[error("state {location} was written by another master of this job; this one stops")]
    Taken {
        /// The record both masters wrote.
        location: String,
    },
}

/// What a journal holds: a snapshot of the queue (when one was taken) and the
/// commands recorded after it.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The queue after every command before `commands`.
    pub base: Option<Queue>,
    /// Commands to replay over `base`, in order.
    pub commands: Vec<Command>,
}

/// Where commands are kept.
pub trait Journal: Send {
    /// Appends commands; they are durable when this returns.
    fn append(&mut self, commands: &[Command]) -> Result<(), JournalError>;
    /// What was recorded before this journal was opened.
    fn load(&mut self) -> Result<Loaded, JournalError>;
    /// Records `queue`, which holds every command appended so far, so that
    /// older records can be dropped. Journals without snapshots ignore it.
    fn snapshot(&mut self, _queue: &Queue) -> Result<(), JournalError> {
        Ok(())
    }
    /// Whether this journal would like a snapshot soon regardless of the
    /// record count (an object store counts objects, not records).
    fn wants_snapshot(&self) -> bool {
        false
    }
    /// Where the journal lives, for messages.
    fn describe(&self) -> String;
}

/// A journal in memory (tests, simulations).
#[derive(Debug, Default, Clone)]
pub struct MemoryJournal {
    commands: Vec<Command>,
}

impl Journal for MemoryJournal {
    fn append(&mut self, commands: &[Command]) -> Result<(), JournalError> {
        self.commands.extend_from_slice(commands);
        Ok(())
    }

    fn load(&mut self) -> Result<Loaded, JournalError> {
        Ok(Loaded {
            base: None,
            commands: self.commands.clone(),
        })
    }

    fn describe(&self) -> String {
        "memory".to_string()
    }
}

/// A journal file of JSON lines, synced to disk on every append.
#[derive(Debug)]
pub struct FileJournal {
    path: PathBuf,
    file: File,
}

impl FileJournal {
    /// Opens (or creates) the journal at `path`.
    pub fn open(path: &Path) -> Result<FileJournal, JournalError> {
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(|source| io_err(path, source))?;
        Ok(FileJournal {
            path: path.to_path_buf(),
            file,
        })
    }
}

fn io_err(path: &Path, source: std::io::Error) -> JournalError {
    JournalError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl Journal for FileJournal {
    fn append(&mut self, commands: &[Command]) -> Result<(), JournalError> {
        if commands.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        for command in commands {
            serde_json::to_writer(&mut buf, command).map_err(|e| io_err(&self.path, e.into()))?;
            buf.push(b'\n');
        }
        self.file
            .write_all(&buf)
            .and_then(|_| self.file.sync_data())
            .map_err(|source| io_err(&self.path, source))
    }

    fn load(&mut self) -> Result<Loaded, JournalError> {
        self.read_all().map(|commands| Loaded {
            base: None,
            commands,
        })
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

impl FileJournal {
    /// Reads every record, cutting a torn last line (a crash mid-append).
    pub fn read_all(&mut self) -> Result<Vec<Command>, JournalError> {
        let reader = BufReader::new(File::open(&self.path).map_err(|e| io_err(&self.path, e))?);
        let lines: Vec<String> = reader
            .lines()
            .collect::<Result<_, _>>()
            .map_err(|e| io_err(&self.path, e))?;
        let mut commands = Vec::with_capacity(lines.len());
        let mut good_bytes = 0u64;
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str::<Command>(line) {
                Ok(c) => {
                    commands.push(c);
                    good_bytes += line.len() as u64 + 1;
                }
                // A torn last line: the crash came before its answer was sent.
                Err(_) if i + 1 == lines.len() => {
                    self.file
                        .set_len(good_bytes)
                        .map_err(|e| io_err(&self.path, e))?;
                }
                Err(e) => {
                    return Err(JournalError::Corrupt {
                        path: self.path.display().to_string(),
                        line: i + 1,
                        reason: e.to_string(),
                    })
                }
            }
        }
        Ok(commands)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::WorkerId;

    #[test]
    fn survives_a_torn_last_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal.jsonl");
        let mut j = FileJournal::open(&path).expect("open");
        j.append(&[
            Command::Register {
                now: 1,
                secret: None,
            },
            Command::Heartbeat {
                now: 2,
                worker: WorkerId(1),
            },
        ])
        .expect("append");
        let mut f = OpenOptions::new().append(true).open(&path).expect("reopen");
        f.write_all(b"{\"op\":\"lea").expect("torn write");
        let mut j = FileJournal::open(&path).expect("open again");
        assert_eq!(j.read_all().expect("load").len(), 2);
        j.append(&[Command::Register {
            now: 3,
            secret: None,
        }])
        .expect("append after repair");
        assert_eq!(j.read_all().expect("load").len(), 3);
    }
}

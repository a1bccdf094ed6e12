//! The journal: every queue command that changed state, written durably
//! before it is answered, replayed after a restart.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::queue::{Command, Queue};

/// Errors of a journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Reading or writing failed.
    #[error("journal {path}: {cause}")]
    Io {
        /// The journal file.
        path: String,
        /// The failure.
        cause: std::io::Error,
    },
    /// A record in the middle of the journal cannot be read, or a part of
    /// the state is missing.
    #[error("journal {path} line {line} is corrupt")]
    Corrupt {
        /// The journal file.
        path: String,
        /// 1-based line (0: the whole file).
        line: usize,
        /// What is wrong.
        #[source]
        damage: Damage,
    },
    /// The object store holding the state failed.
    #[error("state {location}: {cause}")]
    Store {
        /// The object written or read.
        location: String,
        /// The failure.
        cause: object_store::Error,
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

/// Commands written to a journal and not yet known to be durable:
/// [`Pending::wait`] makes them so. Waiting on the pendings of several writes
/// at once is allowed (a group committer overlaps them); each covers at
/// least its own write.
#[derive(Debug, Default)]
#[must_use = "written commands are durable only once waited for"]
pub struct Pending {
    /// The file to sync, and its path for messages; `None` when the write
    /// was durable already.
    sync: Option<(Arc<File>, PathBuf)>,
}

impl Pending {
    /// Waits until the commands written are durable.
    pub fn wait(self) -> Result<(), JournalError> {
        match self.sync {
            Some((file, path)) => file.sync_data().map_err(|source| io_err(&path, source)),
            None => Ok(()),
        }
    }
}

/// Where commands are kept.
pub trait Journal: Send {
    /// Appends commands; they are durable when this returns.
    fn append(&mut self, commands: &[Command]) -> Result<(), JournalError>;
    /// Writes commands after those written before; they are durable once the
    /// [`Pending`] returned is waited for. Journals that cannot split the
    /// two append durably here.
    fn write(&mut self, commands: &[Command]) -> Result<Pending, JournalError> {
        self.append(commands)?;
        Ok(Pending::default())
    }
    /// What was recorded before this journal was opened.
    fn load(&mut self) -> Result<Loaded, JournalError>;
    /// Records `queue`, which holds every command appended so far, so that
    /// older records can be dropped (a journal may finish this after it
    /// returns, as long as what it holds stays whole meanwhile). Journals
    /// without snapshots ignore it.
    fn snapshot(&mut self, _queue: Arc<Queue>) -> Result<(), JournalError> {
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
///
/// A record counts once its newline is on disk: [`FileJournal::append`] writes
/// whole lines and syncs them before returning ([`Journal::write`] leaves the
/// sync to its [`Pending`]), and no reply leaves before that. Opening the file therefore cuts whatever follows the last newline (a
/// torn record, or a complete one whose newline never landed: neither was
/// acknowledged), and a bad last line followed by nothing but empty lines (a
/// torn tail). A bad line with records after it is corruption, never skipped.
#[derive(Debug)]
pub struct FileJournal {
    path: PathBuf,
    /// Shared with the [`Pending`]s of writes not yet synced.
    file: Arc<File>,
    /// What the file held when opened, until [`Journal::load`] takes it.
    loaded: Vec<Command>,
}

impl FileJournal {
    /// Opens (or creates) the journal at `path`, cutting a torn tail and
    /// syncing the directory that holds it.
    pub fn open(path: &Path) -> Result<FileJournal, JournalError> {
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .mode(crate::sys::fd::PRIVATE_FILE)
            .open(path)
            .map_err(|source| io_err(path, source))?;
        // A journal an older build left readable by others (it holds
        // worker secrets) is made private too.
        connectors::private::tighten_file(&file, path, "journal");
        if let Some(dir) = path.parent() {
            sync_dir(dir).map_err(|source| io_err(dir, source))?;
        }
        let mut journal = FileJournal {
            path: path.to_path_buf(),
            file: Arc::new(file),
            loaded: Vec::new(),
        };
        journal.loaded = journal.read_all()?;
        Ok(journal)
    }

    /// Reads every record, cutting a torn tail from the file (see [`FileJournal`]).
    pub fn read_all(&mut self) -> Result<Vec<Command>, JournalError> {
        let mut bytes = Vec::new();
        (&*self.file)
            .seek(SeekFrom::Start(0))
            .and_then(|_| (&*self.file).read_to_end(&mut bytes))
            .map_err(|e| io_err(&self.path, e))?;
        let scan = scan(&bytes).map_err(|(line, damage)| JournalError::Corrupt {
            path: self.path.display().to_string(),
            line,
            damage,
        })?;
        if scan.good_len < bytes.len() {
            tracing::warn!(
                journal = %self.path.display(),
                bytes = bytes.len() - scan.good_len,
                what = scan.cut,
                "cutting the unfinished end of the journal (never acknowledged)"
            );
            self.file
                .set_len(scan.good_len as u64)
                .and_then(|_| self.file.sync_all())
                .map_err(|e| io_err(&self.path, e))?;
        }
        Ok(scan.commands)
    }
}

/// The records of a journal file and how much of it to keep.
#[derive(Debug)]
struct Scan {
    commands: Vec<Command>,
    /// Bytes up to and including the last good record's newline.
    good_len: usize,
    /// What follows them, for the log.
    cut: &'static str,
}

/// Parses journal bytes: every newline-terminated line must be a record,
/// except a bad last line followed only by empty lines (a torn tail); the
/// bytes after the last newline are never a record. Errors give the 1-based
/// line and the reason.
/// What is wrong with a damaged journal, snapshot or log object.
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    /// A record (or snapshot) is not the JSON of one: the parser's error,
    /// a foreign one, told in the message.
    #[error("not a record this sluice reads: {0}")]
    Json(serde_json::Error),
    /// An empty line before more records.
    #[error("an empty line")]
    EmptyLine,
    /// A journal between the snapshot's generation and the newest one is missing.
    #[error("missing: the snapshot is of generation {snapshot} and journal {newest} exists")]
    MissingGeneration {
        /// The snapshot's generation.
        snapshot: u64,
        /// The newest journal's generation.
        newest: u64,
    },
    /// An object of the log is missing.
    #[error("log object missing (removed by hand?)")]
    MissingObject,
}

fn scan(bytes: &[u8]) -> Result<Scan, (usize, Damage)> {
    let terminated = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut scan = Scan {
        commands: Vec::new(),
        good_len: 0,
        cut: "",
    };
    for (i, line) in bytes[..terminated]
        .split_inclusive(|&b| b == b'\n')
        .enumerate()
    {
        match serde_json::from_slice::<Command>(line) {
            Ok(command) => {
                scan.commands.push(command);
                scan.good_len += line.len();
            }
            Err(e) => {
                if !is_blank(&bytes[scan.good_len + line.len()..]) {
                    let damage = if is_blank(line) {
                        Damage::EmptyLine
                    } else {
                        Damage::Json(e)
                    };
                    return Err((i + 1, damage));
                }
                scan.cut = if is_blank(line) {
                    "empty lines"
                } else {
                    "a torn last record"
                };
                return Ok(scan);
            }
        }
    }
    let tail = &bytes[terminated..];
    if !tail.is_empty() {
        scan.cut = if serde_json::from_slice::<Command>(tail).is_ok() {
            "a complete record without its newline"
        } else {
            "a torn last record"
        };
    }
    Ok(scan)
}

/// Whether `bytes` hold nothing but ASCII whitespace.
fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

/// Syncs a directory, so that files created, renamed or removed in it stay so
/// after a crash.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(dir)?.sync_all()
}

fn io_err(path: &Path, source: std::io::Error) -> JournalError {
    JournalError::Io {
        path: path.display().to_string(),
        cause: source,
    }
}

impl Journal for FileJournal {
    fn append(&mut self, commands: &[Command]) -> Result<(), JournalError> {
        self.write(commands)?.wait()
    }

    fn write(&mut self, commands: &[Command]) -> Result<Pending, JournalError> {
        if commands.is_empty() {
            return Ok(Pending::default());
        }
        let mut buf = Vec::new();
        for command in commands {
            serde_json::to_writer(&mut buf, command).map_err(|e| io_err(&self.path, e.into()))?;
            buf.push(b'\n');
        }
        (&*self.file)
            .write_all(&buf)
            .map_err(|source| io_err(&self.path, source))?;
        Ok(Pending {
            sync: Some((self.file.clone(), self.path.clone())),
        })
    }

    fn load(&mut self) -> Result<Loaded, JournalError> {
        Ok(Loaded {
            base: None,
            commands: std::mem::take(&mut self.loaded),
        })
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{AttemptId, WorkerId};

    /// Two records as the journal writes them.
    fn good() -> Vec<Command> {
        vec![
            Command::Register {
                now: 1,
                secret: None,
                name: None,
            },
            Command::Heartbeat {
                now: 2,
                worker: WorkerId(1),
                cached: None,
            },
        ]
    }

    /// A journal holding `good()` followed by `tail`, in a fresh directory.
    fn damaged(tail: &[u8]) -> (tempfile::TempDir, PathBuf, u64) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal.jsonl");
        FileJournal::open(&path)
            .expect("open")
            .append(&good())
            .expect("append");
        let good_len = std::fs::metadata(&path).expect("stat").len();
        let mut f = OpenOptions::new().append(true).open(&path).expect("reopen");
        f.write_all(tail).expect("damage");
        (dir, path, good_len)
    }

    /// Opens a damaged journal: it must load `good()`, be cut back to them,
    /// and take a new record on a line of its own that survives a reopen.
    #[track_caller]
    fn assert_cut_and_appendable(path: &Path, good_len: u64) {
        let mut j = FileJournal::open(path).expect("open damaged");
        assert_eq!(j.load().expect("load").commands, good());
        assert_eq!(
            std::fs::metadata(path).expect("stat").len(),
            good_len,
            "cut back to the last newline"
        );
        let next = Command::Register {
            now: 3,
            secret: None,
            name: None,
        };
        j.append(std::slice::from_ref(&next)).expect("append");
        drop(j);
        let mut want = good();
        want.push(next);
        let mut j = FileJournal::open(path).expect("reopen");
        assert_eq!(j.load().expect("load").commands, want);
    }

    #[test]
    fn a_complete_record_without_its_newline_is_cut_not_glued() {
        let (_dir, path, good_len) = damaged(b"{\"op\":\"register\",\"now\":9}");
        assert_cut_and_appendable(&path, good_len);
    }

    #[test]
    fn a_torn_last_record_is_cut() {
        let (_dir, path, good_len) = damaged(b"{\"op\":\"lea");
        assert_cut_and_appendable(&path, good_len);
    }

    #[test]
    fn a_record_torn_inside_a_multibyte_character_is_cut() {
        let fail = Command::Fail {
            now: 4,
            worker: None,
            attempt: AttemptId(7),
            reason: "bad file caf\u{e9}.parquet".to_string(),
            for_good: false,
        };
        let mut bytes = serde_json::to_vec(&fail).expect("json");
        let at = bytes
            .windows(2)
            .position(|w| w == "\u{e9}".as_bytes())
            .expect("the two bytes of é");
        bytes.truncate(at + 1);
        let (_dir, path, good_len) = damaged(&bytes);
        assert_cut_and_appendable(&path, good_len);
    }

    #[test]
    fn empty_trailing_lines_are_cut() {
        let (_dir, path, good_len) = damaged(b"\n\n");
        assert_cut_and_appendable(&path, good_len);
    }

    #[test]
    fn a_torn_last_line_ending_in_a_newline_is_cut() {
        let (_dir, path, good_len) = damaged(b"{\"op\":\"lea\n");
        assert_cut_and_appendable(&path, good_len);
    }

    #[test]
    fn garbage_in_the_middle_is_an_error_naming_file_and_line() {
        let (_dir, path, good_len) = damaged(b"garbage\n{\"op\":\"register\",\"now\":9}\n");
        let err = FileJournal::open(&path).expect_err("corrupt in the middle");
        match &err {
            JournalError::Corrupt { line, .. } => assert_eq!(*line, 3),
            other => panic!("{other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("line 3"), "{text}");
        assert!(
            std::fs::metadata(&path).expect("stat").len() > good_len,
            "nothing cut"
        );
    }

    #[test]
    fn an_empty_line_in_the_middle_is_an_error() {
        let (_dir, path, _) = damaged(b"\n{\"op\":\"register\",\"now\":9}\n");
        let err = FileJournal::open(&path).expect_err("corrupt in the middle");
        assert!(err.to_string().contains("line 3"), "{err}");
    }
}

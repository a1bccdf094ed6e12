//! One cached file on disk: the file's bytes, a CRC-32 of every block of
//! them, the identity it was cached under, and a fixed trailer:
//!
//! ```text
//! [data: size bytes][crc of each BLOCK: u32 LE][identity: utf-8]
//! [identity length: u32][blocks: u32][size: u64][crc of the trailer's parts: u32]["SLCACHE1"]
//! ```
//!
//! An entry is written under a temporary name, synced and renamed into
//! place, so a reader finds a whole entry or none; a torn or altered one
//! fails [`Entry::open`] (trailer) or [`Entry::read`] (a block's checksum)
//! and is never served.

use std::fs::File;
use std::io::{self, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes covered by one checksum.
pub(crate) const BLOCK: u64 = 1 << 20;
/// The last bytes of every entry.
const MAGIC: &[u8; 8] = b"SLCACHE1";
/// Bytes of the fixed trailer after the identity.
const TRAILER: u64 = 4 + 4 + 8 + 4 + 8;

/// Why an entry cannot be served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EntryError {
    /// The file could not be read.
    #[error("cannot read cache entry {path}: {cause}")]
    Io {
        /// The entry.
        path: PathBuf,
        /// What the system said.
        cause: io::Error,
    },
    /// The file is not a whole entry of the expected file.
    #[error("cache entry {path} is damaged: {reason}")]
    Damaged {
        /// The entry.
        path: PathBuf,
        /// What was found wrong.
        reason: String,
    },
}

/// An entry opened and its trailer checked: the checksums of its blocks.
#[derive(Debug)]
pub(crate) struct Entry {
    file: File,
    path: PathBuf,
    size: u64,
    crcs: Vec<u32>,
}

impl Entry {
    /// Opens the entry at `path`, checking that it holds `size` bytes of the
    /// file named `identity` and that its trailer is whole.
    pub(crate) fn open(path: &Path, identity: &str, size: u64) -> Result<Entry, EntryError> {
        let io = |source| EntryError::Io {
            path: path.to_path_buf(),
            cause: source,
        };
        let damaged = |reason: String| EntryError::Damaged {
            path: path.to_path_buf(),
            reason,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < TRAILER {
            return Err(damaged(format!("{len} bytes, shorter than its trailer")));
        }
        let mut trailer = [0u8; TRAILER as usize];
        file.read_exact_at(&mut trailer, len - TRAILER)
            .map_err(io)?;
        if &trailer[20..28] != MAGIC {
            return Err(damaged("no trailer (written only in part?)".into()));
        }
        let id_len = u64::from(u32_at(&trailer, 0));
        let blocks = u64::from(u32_at(&trailer, 4));
        let stored_size = u64::from_le_bytes(trailer[8..16].try_into().unwrap_or_default());
        let trailer_crc = u32_at(&trailer, 16);
        if stored_size != size || blocks != size.div_ceil(BLOCK) {
            return Err(damaged(format!(
                "holds {stored_size} bytes in {blocks} blocks, {size} expected"
            )));
        }
        if len != size + blocks * 4 + id_len + TRAILER {
            return Err(damaged(format!(
                "{len} bytes long, not what its trailer says"
            )));
        }
        let mut meta = vec![0u8; (blocks * 4 + id_len) as usize];
        file.read_exact_at(&mut meta, size).map_err(io)?;
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&meta);
        hasher.update(&trailer[..16]);
        if hasher.finalize() != trailer_crc {
            return Err(damaged("its trailer's checksum does not match".into()));
        }
        let (crcs, id) = meta.split_at((blocks * 4) as usize);
        if id != identity.as_bytes() {
            return Err(damaged(format!(
                "holds {}, not {identity}",
                String::from_utf8_lossy(id)
            )));
        }
        let crcs = crcs.chunks_exact(4).map(|c| u32_at(c, 0)).collect();
        Ok(Entry {
            file,
            path: path.to_path_buf(),
            size,
            crcs,
        })
    }

    /// Bytes `range` of the cached file, every block they touch checked
    /// against its checksum.
    pub(crate) fn read(&self, range: Range<u64>) -> Result<Vec<u8>, EntryError> {
        let end = range.end.min(self.size);
        let start = range.start.min(end);
        let first = start / BLOCK;
        let last = end.div_ceil(BLOCK);
        let from = first * BLOCK;
        let to = (last * BLOCK).min(self.size);
        let mut buf = vec![0u8; (to - from) as usize];
        self.file
            .read_exact_at(&mut buf, from)
            .map_err(|source| EntryError::Io {
                path: self.path.clone(),
                cause: source,
            })?;
        for (i, block) in buf.chunks(BLOCK as usize).enumerate() {
            let index = first as usize + i;
            if crc32fast::hash(block) != self.crcs[index] {
                return Err(EntryError::Damaged {
                    path: self.path.clone(),
                    reason: format!("block {index} does not match its checksum"),
                });
            }
        }
        buf.drain(..(start - from) as usize);
        buf.truncate((end - start) as usize);
        Ok(buf)
    }
}

/// The little-endian `u32` at `at` of `bytes`.
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

/// An entry being written: the file's bytes go to a temporary file, each
/// block's checksum is kept, and [`Writer::finish`] adds the trailer, syncs
/// and renames it into place.
pub(crate) struct Writer {
    file: File,
    temp: PathBuf,
    written: u64,
    block: crc32fast::Hasher,
    in_block: u64,
    crcs: Vec<u32>,
}

impl Writer {
    /// Starts writing at `temp` (created private to its user; an old file
    /// there is replaced).
    pub(crate) fn create(temp: PathBuf) -> io::Result<Writer> {
        let file =
            crate::private::file_options(File::options().write(true).create(true).truncate(true))
                .open(&temp)?;
        Ok(Writer {
            file,
            temp,
            written: 0,
            block: crc32fast::Hasher::new(),
            in_block: 0,
            crcs: Vec::new(),
        })
    }

    /// Appends the file's next bytes.
    pub(crate) fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.written += bytes.len() as u64;
        while !bytes.is_empty() {
            let take = ((BLOCK - self.in_block) as usize).min(bytes.len());
            self.block.update(&bytes[..take]);
            self.in_block += take as u64;
            bytes = &bytes[take..];
            if self.in_block == BLOCK {
                let done = std::mem::replace(&mut self.block, crc32fast::Hasher::new());
                self.crcs.push(done.finalize());
                self.in_block = 0;
            }
        }
        Ok(())
    }

    /// Bytes written so far.
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Ends the entry of the file named `identity`: trailer, sync, rename
    /// to `path`, sync of the directory.
    pub(crate) fn finish(mut self, identity: &str, path: &Path) -> io::Result<()> {
        if self.in_block > 0 {
            let done = std::mem::replace(&mut self.block, crc32fast::Hasher::new());
            self.crcs.push(done.finalize());
        }
        let blocks = u32::try_from(self.crcs.len()).map_err(io::Error::other)?;
        let id_len = u32::try_from(identity.len()).map_err(io::Error::other)?;
        let mut meta: Vec<u8> = self.crcs.iter().flat_map(|c| c.to_le_bytes()).collect();
        meta.extend_from_slice(identity.as_bytes());
        let mut fields = Vec::with_capacity(16);
        fields.extend_from_slice(&id_len.to_le_bytes());
        fields.extend_from_slice(&blocks.to_le_bytes());
        fields.extend_from_slice(&self.written.to_le_bytes());
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&meta);
        hasher.update(&fields);
        self.file.write_all(&meta)?;
        self.file.write_all(&fields)?;
        self.file.write_all(&hasher.finalize().to_le_bytes())?;
        self.file.write_all(MAGIC)?;
        self.file.sync_all()?;
        std::fs::rename(&self.temp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    /// Gives the entry up, removing what was written.
    pub(crate) fn abandon(self) {
        let _ = std::fs::remove_file(&self.temp);
    }
}

/// Bytes an entry of a `size`-byte file named `identity` takes on disk.
#[cfg(test)]
pub(crate) fn disk_bytes(size: u64, identity: &str) -> u64 {
    size + size.div_ceil(BLOCK) * 4 + identity.len() as u64 + TRAILER
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, data: &[u8], identity: &str) -> PathBuf {
        let path = dir.join("entry.bin");
        let mut writer = Writer::create(dir.join("entry.tmp")).unwrap();
        for chunk in data.chunks(7919) {
            writer.write(chunk).unwrap();
        }
        writer.finish(identity, &path).unwrap();
        path
    }

    #[test]
    fn ranges_come_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..(2 * BLOCK + 12345)).map(|i| (i % 251) as u8).collect();
        let path = write(dir.path(), &data, "s3://b/x|10");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            disk_bytes(data.len() as u64, "s3://b/x|10")
        );
        let entry = Entry::open(&path, "s3://b/x|10", data.len() as u64).unwrap();
        for range in [0..10, BLOCK - 3..BLOCK + 3, 5..data.len() as u64, 0..0] {
            let want = &data[range.start as usize..range.end as usize];
            assert_eq!(entry.read(range).unwrap(), want);
        }
    }

    #[test]
    fn a_flipped_byte_or_a_torn_file_is_never_served() {
        let dir = tempfile::tempdir().unwrap();
        let data = vec![7u8; (BLOCK + 100) as usize];
        let path = write(dir.path(), &data, "id");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[BLOCK as usize + 5] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let entry = Entry::open(&path, "id", data.len() as u64).unwrap();
        assert!(entry.read(0..10).is_ok(), "the first block is whole");
        let err = entry.read(0..data.len() as u64).unwrap_err();
        assert!(err.to_string().contains("block 1"), "{err}");

        bytes[BLOCK as usize + 5] ^= 0xff;
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        assert!(Entry::open(&path, "id", data.len() as u64).is_err());
        std::fs::write(&path, &bytes).unwrap();
        assert!(Entry::open(&path, "other", data.len() as u64).is_err());
        assert!(Entry::open(&path, "id", data.len() as u64 + 1).is_err());
        assert!(Entry::open(&path, "id", data.len() as u64).is_ok());
    }
}

//! Batches in shared memory for exec trainers that ask for them.
//!
//! Each trainer process gets a memory file (`memfd_create`) at file descriptor
//! [`SHM_FD`] (`SLUICE_SHM_FD`). A trainer that writes the line `shm` on its ack
//! pipe is from then on sent, for each batch, a zero-row batch on stdin whose
//! message metadata `sluice.shm` is `OFFSET LENGTH`: the bytes at OFFSET in the
//! memory file hold a complete Arrow IPC stream (schema, dictionaries, one record
//! batch, end of stream) that the trainer maps and reads without a copy. Sluice
//! writes each batch once, straight into the mapping.
//!
//! The file is cut into as many slots as batches may be in flight. A slot is
//! reused once its batch is acknowledged (acks come in order), so the memory in use
//! stays bounded by the window; a batch larger than its slot moves the slot to the
//! end of a grown file (the trainer maps the file again when an offset lies beyond
//! what it mapped). A batch's memory is valid until the trainer acknowledges it.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;

use crate::sys::memory::{self, SharedMapping};

/// The trainer's file descriptor for the memory file (`SLUICE_SHM_FD`).
pub(crate) const SHM_FD: RawFd = 4;

/// The metadata key of a batch message pointing into the memory file.
pub(crate) const SHM_KEY: &str = "sluice.shm";

/// Slots start at least this large.
const MIN_SLOT: usize = 1 << 20;

/// Every slot starts on a multiple of this (Arrow's alignment is 8 or 64 bytes).
const ALIGN: usize = 4096;

/// A slot of the memory file.
#[derive(Debug, Clone, Copy)]
struct Slot {
    offset: usize,
    capacity: usize,
}

/// The memory file of one trainer process and the slots its batches use.
pub(crate) struct SharedBatches {
    fd: OwnedFd,
    /// The whole file, mapped shared and writable (the trainer writes it too).
    map: Option<SharedMapping>,
    /// File size.
    len: usize,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// The slot of each batch sent and not yet acknowledged, oldest first
    /// (`None` for a batch sent on stdin).
    sent: VecDeque<Option<usize>>,
}

impl SharedBatches {
    /// A new, empty memory file with `slots` slots (the batches in flight).
    pub fn new(slots: usize) -> io::Result<SharedBatches> {
        let fd = memory::memory_file(c"sluice-batches")?;
        let slots = slots.max(1);
        Ok(SharedBatches {
            fd,
            map: None,
            len: 0,
            slots: vec![
                Slot {
                    offset: 0,
                    capacity: 0
                };
                slots
            ],
            free: (0..slots).rev().collect(),
            sent: VecDeque::new(),
        })
    }

    /// The memory file `fd` a trainer made and handed over (`--attach`),
    /// cut into `slots` slots as [`SharedBatches::new`] does.
    pub fn from_fd(fd: OwnedFd, slots: usize) -> io::Result<SharedBatches> {
        memory::set_len(&fd, 0)?;
        let mut shared = SharedBatches::new(1)?;
        shared.fd = fd;
        let slots = slots.max(1);
        shared.slots = vec![
            Slot {
                offset: 0,
                capacity: 0
            };
            slots
        ];
        shared.free = (0..slots).rev().collect();
        Ok(shared)
    }

    /// The descriptor the child gets at [`SHM_FD`].
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Writes `batch` (as an IPC stream of its `schema`-less self) into a free slot;
    /// returns `(offset, length)`, or `None` when every slot is taken.
    pub fn put(&mut self, batch: &RecordBatch) -> io::Result<Option<(usize, usize)>> {
        let Some(index) = self.free.pop() else {
            return Ok(None);
        };
        if self.slots[index].capacity == 0 {
            let estimate = batch.get_array_memory_size() + 64 * 1024;
            if let Err(error) = self.grow_slot(index, estimate.max(MIN_SLOT)) {
                self.free.push(index);
                return Err(error);
            }
        }
        loop {
            let slot = self.slots[index];
            match self.encode(slot, batch) {
                Ok(length) => {
                    self.sent.push_back(Some(index));
                    return Ok(Some((slot.offset, length)));
                }
                Err(Overflow::Full) => {
                    if let Err(error) = self.grow_slot(index, slot.capacity * 2) {
                        self.free.push(index);
                        return Err(error);
                    }
                }
                Err(Overflow::Io(error)) => {
                    self.free.push(index);
                    return Err(error);
                }
            }
        }
    }

    /// Notes a batch sent on stdin (it holds no slot).
    pub fn sent_on_stdin(&mut self) {
        self.sent.push_back(None);
    }

    /// The oldest batch sent was acknowledged: its slot (if any) is free again.
    pub fn acked(&mut self) {
        if let Some(Some(index)) = self.sent.pop_front() {
            self.free.push(index);
        }
    }

    /// Bytes of the memory file.
    #[cfg(test)]
    fn file_len(&self) -> usize {
        self.len
    }

    fn encode(&mut self, slot: Slot, batch: &RecordBatch) -> Result<usize, Overflow> {
        let map = self.map.as_ref().ok_or(Overflow::Full)?;
        let mut cursor = SlotWriter {
            map,
            slot,
            written: 0,
            full: false,
        };
        let schema = super::ipc::untagged(batch.schema_ref());
        let result = (|| {
            let mut writer = StreamWriter::try_new(&mut cursor, &schema)?;
            let batch = RecordBatch::try_new(schema.clone(), batch.columns().to_vec())?;
            writer.write(&batch)?;
            writer.finish()
        })();
        match result {
            Ok(()) => Ok(cursor.written),
            Err(_) if cursor.full => Err(Overflow::Full),
            Err(error) => Err(Overflow::Io(io::Error::other(error.to_string()))),
        }
    }

    /// Gives slot `index` at least `capacity` bytes at the end of a grown file.
    fn grow_slot(&mut self, index: usize, capacity: usize) -> io::Result<()> {
        let capacity = capacity.next_multiple_of(ALIGN);
        let offset = self.len;
        let len = offset + capacity;
        memory::set_len(&self.fd, len)?;
        self.map = None;
        self.map = Some(SharedMapping::new(self.fd.as_fd(), len)?);
        self.len = len;
        self.slots[index] = Slot { offset, capacity };
        Ok(())
    }
}

enum Overflow {
    Full,
    Io(io::Error),
}

/// Writes into a slot of the mapping (through [`SharedMapping::write_at`], never a
/// slice of it); fails once the slot is full.
struct SlotWriter<'a> {
    map: &'a SharedMapping,
    slot: Slot,
    written: usize,
    full: bool,
}

impl Write for SlotWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let end = self.written + buf.len();
        if end > self.slot.capacity {
            self.full = true;
            return Err(io::Error::new(io::ErrorKind::WriteZero, "slot full"));
        }
        self.map.write_at(self.slot.offset + self.written, buf)?;
        self.written = end;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::ipc::reader::StreamReader;
    use std::sync::Arc;

    fn batch(rows: i64) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows)),
                Arc::new(StringArray::from_iter_values(
                    (0..rows).map(|i| format!("v{i}")),
                )),
            ],
        )
        .expect("batch")
    }

    fn read_back(shared: &SharedBatches, offset: usize, length: usize) -> RecordBatch {
        let map = shared.map.as_ref().expect("mapped");
        let bytes = map.read_at(offset, length).expect("inside the mapping");
        let mut reader = StreamReader::try_new(bytes.as_slice(), None).expect("a stream");
        reader.next().expect("one batch").expect("readable")
    }

    #[test]
    fn slots_are_reused_once_acknowledged_and_grow_for_big_batches() {
        let mut shared = SharedBatches::new(2).expect("memfd");
        let (a, len_a) = shared.put(&batch(10)).expect("put").expect("a slot");
        let (b, _) = shared.put(&batch(10)).expect("put").expect("a slot");
        assert_ne!(a, b);
        assert!(
            shared.put(&batch(10)).expect("put").is_none(),
            "two slots only"
        );
        assert_eq!(read_back(&shared, a, len_a), batch(10));
        shared.acked();
        let (c, len_c) = shared
            .put(&batch(200_000))
            .expect("put")
            .expect("a free slot");
        assert_eq!(read_back(&shared, c, len_c), batch(200_000));
        let size = shared.file_len();
        shared.acked();
        shared.acked();
        for _ in 0..10 {
            let (_, _) = shared.put(&batch(200_000)).expect("put").expect("a slot");
            shared.acked();
        }
        assert!(shared.file_len() <= size * 2, "memory stays bounded");
    }
}

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
//! A trainer that writes `shm message` instead (sluice offers it by setting
//! `SLUICE_SHM_MESSAGES=1`) is sent each batch as a lone record batch message,
//! pointed to by `sluice.shm_message` (`OFFSET LENGTH`): no schema to parse per
//! batch, the trainer reads it with the schema of the stream on stdin. Its body
//! buffers start on 64-byte boundaries, so numpy wraps them as they lie. A schema
//! with dictionary-encoded columns keeps the whole-stream form (`sluice.shm`).
//!
//! The file is cut into as many slots as batches may be in flight. A slot is
//! reused once its batch is acknowledged (acks come in order), so the memory in use
//! stays bounded by the window; a batch larger than its slot moves the slot to the
//! end of a grown file (the trainer maps the file again when an offset lies beyond
//! what it mapped). A batch's memory is valid until the trainer acknowledges it.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};

use arrow::datatypes::{DataType, SchemaRef};
use arrow::ipc::writer::{StreamEncoder, StreamWriter};
use arrow::record_batch::RecordBatch;

use crate::sys::memory::{self, SharedMapping};

pub(crate) use super::protocol::{SHM_KEY, SHM_MESSAGE_KEY};

/// How a batch lies in the memory file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// A whole IPC stream: schema, dictionaries, the batch, end of stream (`shm`).
    Stream,
    /// The record batch message alone (`shm message`).
    Message,
}

impl Form {
    /// The metadata key of the pointer to a batch in this form.
    pub fn key(self) -> &'static str {
        match self {
            Form::Stream => SHM_KEY,
            Form::Message => SHM_MESSAGE_KEY,
        }
    }
}

/// What the trainer asked for on its ack pipe, shared between the thread that
/// reads the pipe and the one that writes batches.
#[derive(Debug, Default)]
pub(crate) struct Asked(AtomicU8);

impl Asked {
    /// Notes the trainer's line `shm` (or `shm message`).
    pub fn set(&self, form: Form) {
        let value = match form {
            Form::Stream => 1,
            Form::Message => 2,
        };
        self.0.store(value, Ordering::Relaxed);
    }

    /// The form asked for, if the trainer asked for shared memory at all.
    pub fn get(&self) -> Option<Form> {
        match self.0.load(Ordering::Relaxed) {
            1 => Some(Form::Stream),
            2 => Some(Form::Message),
            _ => None,
        }
    }
}

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
    /// Encodes lone record batch messages of one schema (the untagged one).
    encoder: Option<(SchemaRef, StreamEncoder)>,
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
            encoder: None,
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

    /// Writes `batch` into a free slot in the form asked for (a lone message only
    /// when its schema has no dictionary); returns `(offset, length, form)`, or
    /// `None` when every slot is taken.
    pub fn put(
        &mut self,
        batch: &RecordBatch,
        asked: Form,
    ) -> io::Result<Option<(usize, usize, Form)>> {
        let Some(index) = self.free.pop() else {
            return Ok(None);
        };
        let form = match asked {
            Form::Message if has_dictionary(batch) => Form::Stream,
            form => form,
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
            let written = match form {
                Form::Stream => self.encode(slot, batch),
                Form::Message => self.encode_message(slot, batch),
            };
            match written {
                Ok(length) => {
                    self.sent.push_back(Some(index));
                    return Ok(Some((slot.offset, length, form)));
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

    /// Writes `batch` as a lone record batch message: its buffers are copied once,
    /// straight from the batch's arrays into the slot.
    fn encode_message(&mut self, slot: Slot, batch: &RecordBatch) -> Result<usize, Overflow> {
        let invalid = |error: arrow::error::ArrowError| Overflow::Io(io::Error::other(error));
        let schema = super::ipc::untagged(batch.schema_ref());
        let encoder = match &mut self.encoder {
            Some((known, encoder)) if *known == schema => encoder,
            other => {
                let mut encoder = StreamEncoder::try_new(&schema).map_err(invalid)?;
                // The first message of a stream is its schema: encode it now, with
                // an empty batch, so that later calls give the batch message alone.
                encoder
                    .encode(&RecordBatch::new_empty(schema.clone()))
                    .map_err(invalid)?;
                &mut other.insert((schema.clone(), encoder)).1
            }
        };
        let batch = RecordBatch::try_new(schema, batch.columns().to_vec()).map_err(invalid)?;
        let buffers = encoder.encode(&batch).map_err(invalid)?;
        let length: usize = buffers.iter().map(|buffer| buffer.len()).sum();
        if length > slot.capacity {
            return Err(Overflow::Full);
        }
        let map = self.map.as_ref().ok_or(Overflow::Full)?;
        let mut at = slot.offset;
        for buffer in &buffers {
            map.write_at(at, buffer.as_slice()).map_err(Overflow::Io)?;
            at += buffer.len();
        }
        Ok(length)
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

/// Whether any column of `batch`, at any depth, is dictionary-encoded.
fn has_dictionary(batch: &RecordBatch) -> bool {
    batch
        .schema_ref()
        .flattened_fields()
        .iter()
        .any(|field| matches!(field.data_type(), DataType::Dictionary(..)))
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
        let (a, len_a, _) = shared
            .put(&batch(10), Form::Stream)
            .expect("put")
            .expect("a slot");
        let (b, _, _) = shared
            .put(&batch(10), Form::Stream)
            .expect("put")
            .expect("a slot");
        assert_ne!(a, b);
        assert!(
            shared.put(&batch(10), Form::Stream).expect("put").is_none(),
            "two slots only"
        );
        assert_eq!(read_back(&shared, a, len_a), batch(10));
        shared.acked();
        let (c, len_c, _) = shared
            .put(&batch(200_000), Form::Stream)
            .expect("put")
            .expect("a free slot");
        assert_eq!(read_back(&shared, c, len_c), batch(200_000));
        let size = shared.file_len();
        shared.acked();
        shared.acked();
        for _ in 0..10 {
            let (_, _, _) = shared
                .put(&batch(200_000), Form::Message)
                .expect("put")
                .expect("a slot");
            shared.acked();
        }
        assert!(shared.file_len() <= size * 2, "memory stays bounded");
    }

    /// A lone message read back the way a trainer does: after the stream's schema.
    fn read_message(shared: &SharedBatches, offset: usize, length: usize) -> RecordBatch {
        let map = shared.map.as_ref().expect("mapped");
        let message = map.read_at(offset, length).expect("inside the mapping");
        let mut stream = Vec::new();
        let schema = batch(1).schema();
        StreamWriter::try_new(&mut stream, &schema).expect("schema message");
        stream.extend_from_slice(&message);
        let mut reader = StreamReader::try_new(stream.as_slice(), None).expect("a stream");
        reader.next().expect("one batch").expect("readable")
    }

    #[test]
    fn a_lone_message_holds_the_batch_with_its_body_aligned_for_numpy() {
        let mut shared = SharedBatches::new(2).expect("memfd");
        for rows in [10, 100_000, 7] {
            let (offset, length, form) = shared
                .put(&batch(rows).slice(1, rows as usize - 1), Form::Message)
                .expect("put")
                .expect("a slot");
            assert_eq!(form, Form::Message);
            let expected = batch(rows).slice(1, rows as usize - 1);
            assert_eq!(read_message(&shared, offset, length), expected);
            // Continuation marker, metadata length, metadata: the body follows on a
            // 64-byte boundary of the file (slots start on page boundaries).
            let map = shared.map.as_ref().expect("mapped");
            let prefix = map.read_at(offset, 8).expect("prefix");
            let metadata = u32::from_le_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]);
            assert_eq!((offset + 8 + metadata as usize) % 64, 0);
            shared.acked();
        }
    }

    #[test]
    fn dictionary_columns_keep_the_whole_stream() {
        use arrow::array::DictionaryArray;
        use arrow::datatypes::Int32Type;
        let values: DictionaryArray<Int32Type> = vec!["a", "b", "a"].into_iter().collect();
        let dictionary = RecordBatch::try_from_iter([("d", Arc::new(values) as _)]).expect("batch");
        let mut shared = SharedBatches::new(1).expect("memfd");
        let (offset, length, form) = shared
            .put(&dictionary, Form::Message)
            .expect("put")
            .expect("a slot");
        assert_eq!(form, Form::Stream);
        assert_eq!(read_back(&shared, offset, length), dictionary);
    }
}

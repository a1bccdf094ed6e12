//! JSON lines: schema inferred from the first records, decoded by name. A
//! broken record is reported at its own line (`line 301 column 21: ...`).

use std::io::BufRead;
use std::sync::Arc;

use arrow::datatypes::Schema;
use arrow::json::reader::infer_json_schema_from_iterator;
use arrow::json::ReaderBuilder;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::stream::BoxStream;

use super::text_io::{decode_blocking, from_io, inspect_head};
use super::{FileFormat, FileInfo, FileRef, FormatOptions, ReadRequest};
use crate::error::{Error, Result};
use crate::split::{Split, SplitRange};
use crate::store::Location;

/// The schema of the first `records` records of `input` (blank lines are
/// skipped, as by arrow's own inference), each parsed on its own line so
/// that a broken one is named by its line number.
fn infer(mut input: impl BufRead, records: usize, display: &str) -> Result<Schema> {
    let mut values = Vec::new();
    let mut line = Vec::new();
    let mut number = 0u64;
    while values.len() < records {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| from_io(display, "json", e))?;
        if n == 0 {
            break;
        }
        number += 1;
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_slice(text)
            .map_err(|e| Error::corrupt(display, "json", at_line(&Place::file(number), &e)))?;
        values.push(value);
    }
    infer_json_schema_from_iterator(values.into_iter().map(Ok))
        .map_err(|e| Error::corrupt(display, "json", e))
}

/// Where a line is: its number in the file, or, in a split that starts
/// past the file's first byte, its number counted from there.
struct Place {
    line: u64,
    from_byte: Option<u64>,
}

impl Place {
    fn file(line: u64) -> Place {
        Place {
            line,
            from_byte: None,
        }
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.from_byte {
            None => write!(f, "line {}", self.line),
            Some(byte) => write!(f, "line {} counted from byte {byte}", self.line),
        }
    }
}

/// A serde_json error on one line, placed in the file (serde_json counts
/// the line it was given as line 1).
fn at_line(place: &Place, e: &serde_json::Error) -> String {
    let text = e.to_string();
    let own = format!(" at line {} column {}", e.line(), e.column());
    let message = text.strip_suffix(&own).unwrap_or(&text);
    if e.column() > 0 {
        format!("{place} column {}: {message}", e.column())
    } else {
        format!("{place}: {message}")
    }
}

/// JSON lines: a schema inferred from the first records, files cut at byte ranges.
pub(super) struct Json;

#[async_trait]
impl FileFormat for Json {
    /// Infers the schema from the first records of the file.
    async fn inspect(
        &self,
        loc: &Location,
        file: &FileRef,
        opts: &FormatOptions,
    ) -> Result<FileInfo> {
        let records = opts.infer_records;
        inspect_head(loc, file, "json", move |input, display| {
            infer(input, records, display).map(Arc::new)
        })
        .await
    }

    /// Streams the rows of a split, decoded into the merged schema.
    fn decode(
        &self,
        loc: &Location,
        split: &Split,
        request: &ReadRequest,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        let schema = request.data_schema.clone();
        let batch_size = request.options.batch_size;
        let display = loc.display(&split.object_path());
        let from_byte = match split.range {
            SplitRange::Bytes { start, .. } if start > 0 => Some(start),
            _ => None,
        };
        decode_blocking(loc, split, "json", move |input, emit| {
            // A number or boolean in a column inferred as a string (Spark's
            // writer puts NaN and Infinity in strings beside numbers) is its
            // text, as Spark reads it.
            let decoder = ReaderBuilder::new(schema)
                .with_batch_size(batch_size)
                .with_coerce_primitive(true)
                .build_decoder()
                .map_err(|e| Error::corrupt(&display, "json", e))?;
            let lines = Lines {
                decoder,
                display: &display,
                from_byte,
            };
            lines.decode(input, emit)
        })
    }
}

/// Decodes a split line by line, so that an error names its line.
struct Lines<'a> {
    decoder: arrow::json::reader::Decoder,
    display: &'a str,
    from_byte: Option<u64>,
}

impl Lines<'_> {
    fn place(&self, line: u64) -> Place {
        Place {
            line,
            from_byte: self.from_byte,
        }
    }

    fn corrupt(&self, what: String, e: impl std::fmt::Display) -> Error {
        Error::corrupt(self.display, "json", format!("{what}: {e}"))
    }

    /// Hands every batch to `emit` (`false` once the consumer has gone).
    fn decode(
        mut self,
        mut input: Box<dyn BufRead + Send>,
        emit: &mut dyn FnMut(Result<RecordBatch>) -> bool,
    ) -> Result<()> {
        let mut line = Vec::new();
        let mut number = 0u64;
        // Where the record being decoded starts (a record may span lines),
        // and the first line of the rows waiting to be flushed.
        let mut record = 1u64;
        let mut batch_first: Option<u64> = None;
        loop {
            line.clear();
            let n = input
                .read_until(b'\n', &mut line)
                .map_err(|e| from_io(self.display, "json", e))?;
            if n == 0 {
                break;
            }
            number += 1;
            if !self.decoder.has_partial_record() {
                record = number;
            }
            let mut rest = &line[..];
            while !rest.is_empty() {
                batch_first.get_or_insert(record);
                let read = self
                    .decoder
                    .decode(rest)
                    .map_err(|e| self.corrupt(self.place(record).to_string(), e))?;
                rest = &rest[read..];
                if !rest.is_empty() {
                    // A whole batch is buffered: hand it on, then go on.
                    let first = batch_first.take().unwrap_or(record);
                    if !self.flush(first, number, emit)? {
                        return Ok(());
                    }
                }
            }
        }
        if self.decoder.has_partial_record() {
            return Err(self.corrupt(
                self.place(record).to_string(),
                "the record does not end: the file ends inside it",
            ));
        }
        let first = batch_first.unwrap_or(record);
        self.flush(first, number, emit)?;
        Ok(())
    }

    /// Flushes the rows of lines `first` to `last`; whether the consumer
    /// is still there.
    fn flush(
        &mut self,
        first: u64,
        last: u64,
        emit: &mut dyn FnMut(Result<RecordBatch>) -> bool,
    ) -> Result<bool> {
        let flushed = self.decoder.flush().map_err(|e| {
            let lines = if first == last {
                self.place(first).to_string()
            } else {
                let from = self
                    .from_byte
                    .map(|byte| format!(" counted from byte {byte}"))
                    .unwrap_or_default();
                format!("a record of lines {first} to {last}{from}")
            };
            self.corrupt(lines, e)
        })?;
        Ok(match flushed {
            Some(batch) => emit(Ok(batch)),
            None => true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(text: &str, batch_size: usize, from_byte: Option<u64>) -> Result<usize> {
        let schema = Arc::new(infer(records(1).as_bytes(), 1000, "x.json")?);
        let decoder = ReaderBuilder::new(schema)
            .with_batch_size(batch_size)
            .build_decoder()
            .expect("decoder");
        let lines = Lines {
            decoder,
            display: "x.json",
            from_byte,
        };
        let mut rows = 0;
        let mut failed = None;
        lines.decode(Box::new(std::io::Cursor::new(text.to_string())), &mut |b| {
            match b {
                Ok(b) => rows += b.num_rows(),
                Err(e) => failed = Some(e),
            }
            true
        })?;
        failed.map_or(Ok(rows), Err)
    }

    fn records(n: u64) -> String {
        (1..=n)
            .map(|i| format!("{{\"id\": {i}, \"x\": 1.5}}\n"))
            .collect()
    }

    #[test]
    fn every_record_is_decoded() {
        assert_eq!(decode(&records(1000), 64, None).expect("decodes"), 1000);
        assert_eq!(decode(&records(7), 7, None).expect("decodes"), 7);
    }

    #[test]
    fn a_broken_record_is_named_by_its_line() {
        // Found while inferring the schema (the first records).
        let mut text = records(300);
        text.push_str("{\"id\": 301, \"x\": 1.}\n");
        text.push_str(&records(5));
        let err = infer(text.as_bytes(), 1000, "x.json").expect_err("broken");
        let message = err.to_string();
        assert!(message.contains("x.json"), "{message}");
        assert!(message.contains("line 301 column 20"), "{message}");
        assert!(!message.contains("line 1 "), "{message}");

        // Found while decoding, past the records inferred from.
        let schema = Arc::new(infer(records(3).as_bytes(), 1000, "x.json").expect("schema"));
        for (broken, batch) in [
            ("{\"id\": 301, \"x\": 1.5", 64),
            ("{\"id\": 301, \"x\": }", 7),
        ] {
            let mut text = records(300);
            text.push_str(broken);
            text.push('\n');
            text.push_str(&records(5));
            let decoder = ReaderBuilder::new(schema.clone())
                .with_batch_size(batch)
                .build_decoder()
                .expect("decoder");
            let lines = Lines {
                decoder,
                display: "x.json",
                from_byte: None,
            };
            let mut failed = None;
            let outcome = lines.decode(Box::new(std::io::Cursor::new(text)), &mut |b| {
                if let Err(e) = b {
                    failed = Some(e);
                }
                true
            });
            let err = outcome.err().or(failed).expect("an error");
            assert!(err.to_string().contains("line 301:"), "{broken}: {err}");
        }
    }

    #[test]
    fn a_record_cut_off_at_the_end_is_named() {
        let mut text = records(3);
        text.push_str("{\"id\": 4, ");
        let err = decode(&text, 64, None).expect_err("cut off");
        assert!(err.to_string().contains("line 4:"), "{err}");
    }

    #[test]
    fn a_split_past_the_first_byte_counts_from_its_start() {
        let mut text = records(2);
        text.push_str("{\"id\": 3, \"x\": }\n");
        let schema = Arc::new(infer(records(1).as_bytes(), 1000, "x.json").expect("schema"));
        let decoder = ReaderBuilder::new(schema)
            .with_batch_size(64)
            .build_decoder()
            .expect("decoder");
        let lines = Lines {
            decoder,
            display: "x.json",
            from_byte: Some(4096),
        };
        let err = lines
            .decode(Box::new(std::io::Cursor::new(text)), &mut |_| true)
            .expect_err("broken");
        assert!(
            err.to_string().contains("line 3 counted from byte 4096"),
            "{err}"
        );
    }
}

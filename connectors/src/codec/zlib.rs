//! Decoder for Hadoop `DefaultCodec` files: zlib streams, possibly several
//! back to back.
//!
//! One task writes a single zlib stream, but Hadoop's `DecompressorStream`
//! carries on into a following stream (as in files joined with `cat`), so
//! this decoder does too. Unlike `flate2::read::ZlibDecoder`, it reports a
//! stream cut off before its end marker as an error instead of a short read.

use std::io::{self, BufRead, BufReader, Read};

use flate2::{Decompress, FlushDecompress, Status};

/// Streaming decoder of one or more concatenated zlib streams.
pub(crate) struct MultiZlibDecoder<R> {
    input: BufReader<R>,
    state: Decompress,
    /// Whether a stream has begun and its end marker has not been seen yet.
    in_stream: bool,
}

impl<R: Read> MultiZlibDecoder<R> {
    /// Decodes `input` as zlib streams until it ends.
    pub(crate) fn new(input: R) -> Self {
        Self {
            input: BufReader::new(input),
            state: Decompress::new(true),
            in_stream: false,
        }
    }

    /// Decodes some of the buffered input into `buf`; returns the bytes
    /// produced, or `None` at the clean end of the input.
    fn step(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let input = self.input.fill_buf()?;
        if input.is_empty() {
            return if self.in_stream {
                Err(invalid("zlib stream ends before its end marker"))
            } else {
                Ok(None)
            };
        }
        self.in_stream = true;
        let (in_before, out_before) = (self.state.total_in(), self.state.total_out());
        let status = self
            .state
            .decompress(input, buf, FlushDecompress::None)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
        let consumed = usize::try_from(self.state.total_in() - in_before).map_err(invalid)?;
        let produced = usize::try_from(self.state.total_out() - out_before).map_err(invalid)?;
        self.input.consume(consumed);
        if status == Status::StreamEnd {
            self.state.reset(true);
            self.in_stream = false;
        } else if consumed == 0 && produced == 0 {
            return Err(invalid("zlib decoder made no progress"));
        }
        Ok(Some(produced))
    }
}

impl<R: Read> Read for MultiZlibDecoder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match self.step(buf)? {
                None => return Ok(0),
                Some(0) => continue,
                Some(produced) => return Ok(produced),
            }
        }
    }
}

fn invalid<E: Into<Box<dyn std::error::Error + Send + Sync>>>(err: E) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, err)
}

//! Lines read from a child process, bounded: a line longer than [`MAX_LINE`] is an error
//! quoting only its start, read no further, so a child cannot make sluice buffer (or
//! print) more than that.

use std::io::{self, BufRead};

/// The longest line sluice reads from a child, without its newline: 4 KiB.
pub(crate) const MAX_LINE: usize = 4096;

/// How many bytes of a line that is too long an error quotes.
const QUOTED: usize = 100;

/// Why no line could be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LineError {
    /// The line went on past the limit; `start` is its first bytes, lossily as UTF-8.
    #[error("a line longer than {limit} bytes, starting {start:?}")]
    TooLong {
        /// The limit it passed.
        limit: usize,
        /// At most its first 100 bytes.
        start: String,
    },
    /// Reading failed: a foreign error, told in the message (a caller that
    /// says whose line it was reading takes the I/O error itself).
    #[error("cannot read a line: {0}")]
    Io(io::Error),
}

/// Reads the next line of at most `limit` bytes (without its `\n`), lossily as UTF-8;
/// `None` at end of input. A last line without a newline counts as a line.
pub(crate) fn read_line(
    reader: &mut impl BufRead,
    limit: usize,
) -> Result<Option<String>, LineError> {
    let mut line = Vec::new();
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(LineError::Io(e)),
        };
        if buf.is_empty() {
            if line.is_empty() {
                return Ok(None);
            }
            break;
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(newline) => (newline, true),
            None => (buf.len(), false),
        };
        if line.len() + take > limit {
            let room = QUOTED.saturating_sub(line.len()).min(take);
            line.extend_from_slice(&buf[..room]);
            line.truncate(QUOTED);
            return Err(LineError::TooLong {
                limit,
                start: String::from_utf8_lossy(&line).into_owned(),
            });
        }
        line.extend_from_slice(&buf[..take]);
        reader.consume(if done { take + 1 } else { take });
        if done {
            break;
        }
    }
    Ok(Some(String::from_utf8_lossy(&line).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of `input` read with `limit`, through a buffer of `capacity` bytes.
    fn lines(input: &[u8], limit: usize, capacity: usize) -> Vec<Result<String, String>> {
        let mut reader = io::BufReader::with_capacity(capacity, input);
        let mut out = Vec::new();
        loop {
            match read_line(&mut reader, limit) {
                Ok(Some(line)) => out.push(Ok(line)),
                Ok(None) => return out,
                Err(e) => {
                    out.push(Err(e.to_string()));
                    return out;
                }
            }
        }
    }

    #[test]
    fn lines_up_to_the_limit_are_read_whatever_the_buffer() {
        for capacity in [1, 3, 4096] {
            let read = lines(b"ack\n\nabcd\nlast", 4, capacity);
            let want = ["ack", "", "abcd", "last"].map(|s| Ok(s.to_string()));
            assert_eq!(read, want, "buffer of {capacity}");
        }
    }

    #[test]
    fn a_line_past_the_limit_quotes_its_first_100_bytes_and_stops() {
        let mut input = b"ack\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 10_000));
        input.extend(b"\nack\n");
        for capacity in [7, 8192] {
            let read = lines(&input, MAX_LINE, capacity);
            assert_eq!(read[0], Ok("ack".to_string()));
            let error = read[1].as_ref().expect_err("too long");
            let quoted = format!("starting \"{}\"", "x".repeat(100));
            assert!(error.contains("longer than 4096 bytes"), "{error}");
            assert!(error.ends_with(&quoted), "{error}");
            assert_eq!(read.len(), 2, "nothing is read past the long line");
        }
    }

    #[test]
    fn a_long_line_without_newline_is_refused_without_reading_it_all() {
        let mut endless = io::Read::take(io::repeat(b'y'), u64::MAX);
        let mut reader = io::BufReader::new(&mut endless);
        let error = read_line(&mut reader, MAX_LINE).expect_err("too long");
        assert!(matches!(&error, LineError::TooLong { start, .. } if start.len() == 100));
    }

    #[test]
    fn invalid_utf8_is_quoted_lossily() {
        let mut input = vec![0xff; 200];
        input.push(b'\n');
        let read = lines(&input, 50, 64);
        let error = read[0].as_ref().expect_err("too long");
        assert!(error.contains('\u{fffd}'), "{error}");
    }
}

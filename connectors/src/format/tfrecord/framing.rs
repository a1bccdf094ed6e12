//! TFRecord framing: each record is its length (8 bytes, little-endian), the
//! masked CRC32C of those 8 bytes, the data, and the masked CRC32C of the
//! data. Both checksums are checked; a mismatch or a record cut short is an
//! error. The records may be compressed whole as TensorFlow's writer does
//! it (`GZIP`: a gzip stream, `ZLIB`: a zlib stream), known from the file's
//! name or, where the name says nothing, from its first bytes.

use std::io::{self, BufRead, Read};

use crate::codec::{self, Codec};

/// CRC-32C (Castagnoli), sixteen bytes a step.
const CASTAGNOLI: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

/// The longest record read: a larger length is taken for damage.
const MAX_RECORD: u64 = 1 << 31;

/// TFRecord's masked CRC32C.
pub(crate) fn masked_crc32c(data: &[u8]) -> u32 {
    CASTAGNOLI
        .checksum(data)
        .rotate_right(15)
        .wrapping_add(0xa282_ead8)
}

/// Why the records of a file cannot be read on.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// Reading failed (a store error, or the decompressor's).
    Io(io::Error),
    /// The framing is damaged.
    Damaged(String),
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Whether `head` starts with a record's length and its checksum.
fn is_framing(head: &[u8]) -> bool {
    head.len() >= 12
        && u32::from_le_bytes([head[8], head[9], head[10], head[11]]) == masked_crc32c(&head[..8])
}

/// Whether `head` starts with a zlib header (deflate, a valid check).
fn is_zlib(head: &[u8]) -> bool {
    head.len() >= 2
        && head[0] & 0x0f == 8
        && head[0] >> 4 <= 7
        && (u16::from(head[0]) << 8 | u16::from(head[1])) % 31 == 0
}

/// The compression of TFRecords whose first bytes are `head`: none when
/// the framing checks out (a length may start with gzip's magic), else gzip
/// by its magic, zlib by its header.
pub(crate) fn codec_of(head: &[u8]) -> Codec {
    if is_framing(head) {
        Codec::None
    } else if head.starts_with(&[0x1f, 0x8b]) {
        Codec::Gzip
    } else if is_zlib(head) {
        Codec::Deflate
    } else {
        Codec::None
    }
}

/// The records of `input`, already decompressed by the codec its name
/// gives (`named`); where the name gives none, by the codec its first bytes
/// show.
pub(crate) fn open(
    mut input: Box<dyn BufRead + Send>,
    named: Codec,
) -> io::Result<Records<Box<dyn BufRead + Send>>> {
    if named != Codec::None {
        return Ok(Records::new(input, named));
    }
    let codec = codec_of(input.fill_buf()?);
    let input: Box<dyn BufRead + Send> = match codec {
        Codec::None => input,
        other => Box::new(io::BufReader::with_capacity(
            256 * 1024,
            codec::decoder(other, Box::new(input)),
        )),
    };
    Ok(Records::new(input, codec))
}

/// Reads records one at a time, checking their framing.
pub(crate) struct Records<R> {
    input: R,
    codec: Codec,
    /// Records read so far.
    pub(crate) count: u64,
    /// Bytes of (decompressed) records read so far.
    pub(crate) offset: u64,
    data: Vec<u8>,
}

impl<R: Read> Records<R> {
    pub(crate) fn new(input: R, codec: Codec) -> Self {
        Records {
            input,
            codec,
            count: 0,
            offset: 0,
            data: Vec::new(),
        }
    }

    /// The compression the records were read through.
    pub(crate) fn codec(&self) -> Codec {
        self.codec
    }

    /// The next record's data; `None` at the end of the records.
    pub(crate) fn next_record(&mut self) -> Result<Option<&[u8]>, FrameError> {
        let mut header = [0u8; 12];
        let got = read_full(&mut self.input, &mut header)?;
        if got == 0 {
            return Ok(None);
        }
        if got < header.len() {
            return Err(self.damaged(format!("cut short in its header ({got} of 12 bytes)")));
        }
        let length = u64::from_le_bytes(header[..8].try_into().unwrap_or_default());
        let stored = u32::from_le_bytes(header[8..].try_into().unwrap_or_default());
        if masked_crc32c(&header[..8]) != stored {
            return Err(self.damaged("the CRC32C of its length does not match".to_string()));
        }
        if length > MAX_RECORD {
            return Err(self.damaged(format!("a length of {length} bytes")));
        }
        // Read as it arrives, so that a file cut short never costs the
        // memory of the length it claims.
        let wanted = length + 4;
        self.data.clear();
        let got = Read::by_ref(&mut self.input)
            .take(wanted)
            .read_to_end(&mut self.data)?;
        if (got as u64) < wanted {
            return Err(self.damaged(format!(
                "cut short ({got} of {length} bytes and the checksum)"
            )));
        }
        let (data, crc) = self.data.split_at(length as usize);
        let stored = u32::from_le_bytes(crc.try_into().unwrap_or_default());
        if masked_crc32c(data) != stored {
            return Err(FrameError::Damaged(format!(
                "record {} (at byte {}{}): the CRC32C of its data does not match",
                self.count + 1,
                self.offset,
                self.decompressed()
            )));
        }
        self.count += 1;
        self.offset += 16 + length;
        Ok(Some(&self.data[..length as usize]))
    }

    fn decompressed(&self) -> &'static str {
        if self.codec == Codec::None {
            ""
        } else {
            " of the decompressed records"
        }
    }

    fn damaged(&self, what: String) -> FrameError {
        FrameError::Damaged(format!(
            "record {} (at byte {}{}): {what}",
            self.count + 1,
            self.offset,
            self.decompressed()
        ))
    }
}

/// Reads until `buf` is full or the input ends; how many bytes were read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;

    use super::*;

    /// `records` framed as TFRecordWriter writes them.
    pub(crate) fn frame(records: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for data in records {
            let length = (data.len() as u64).to_le_bytes();
            out.extend_from_slice(&length);
            out.extend_from_slice(&masked_crc32c(&length).to_le_bytes());
            out.extend_from_slice(data);
            out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
        }
        out
    }

    fn read_all(bytes: Vec<u8>) -> Result<Vec<Vec<u8>>, String> {
        let mut records =
            open(Box::new(io::Cursor::new(bytes)), Codec::None).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        loop {
            match records.next_record() {
                Ok(Some(r)) => out.push(r.to_vec()),
                Ok(None) => return Ok(out),
                Err(FrameError::Damaged(why)) => return Err(why),
                Err(FrameError::Io(e)) => return Err(e.to_string()),
            }
        }
    }

    #[test]
    fn crc32c_check_value() {
        assert_eq!(CASTAGNOLI.checksum(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn records_round_trip_plain_gzip_and_zlib() {
        let records: [&[u8]; 3] = [b"one", b"", b"three"];
        let plain = frame(&records);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&plain).expect("gzip");
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        zlib.write_all(&plain).expect("zlib");
        for (name, bytes, codec) in [
            ("plain", plain.clone(), Codec::None),
            ("gzip", gz.finish().expect("gzip"), Codec::Gzip),
            ("zlib", zlib.finish().expect("zlib"), Codec::Deflate),
        ] {
            assert_eq!(codec_of(&bytes), codec, "{name}");
            let back = read_all(bytes).expect(name);
            assert_eq!(back, records.map(|r| r.to_vec()), "{name}");
        }
    }

    #[test]
    fn any_damage_is_an_error_never_a_panic() {
        let record = super::super::wire::tests::example(&[
            (
                "id",
                3,
                super::super::wire::tests::int64s(&[1, -2, 3], true),
            ),
            ("s", 1, vec![0x0a, 2, b'h', b'i']),
        ]);
        let plain = frame(&[&record, &record]);
        for at in 0..plain.len() {
            for bit in [0x01u8, 0x80] {
                let mut damaged = plain.clone();
                damaged[at] ^= bit;
                assert!(read_all(damaged).is_err(), "byte {at} bit {bit:#x}");
            }
            // Cut short anywhere but between records.
            if at != 0 && at != plain.len() / 2 {
                assert!(read_all(plain[..at].to_vec()).is_err(), "cut at {at}");
            }
        }
        // The record's bytes damaged past their checksum: parsing fails or
        // reads something, and never panics.
        for at in 0..record.len() {
            for bit in 0..8 {
                let mut damaged = record.clone();
                damaged[at] ^= 1 << bit;
                let _ = super::super::wire::parse_record(&damaged);
                let _ = super::super::wire::parse_record(&damaged[..at]);
            }
        }
    }

    #[test]
    fn damage_is_found() {
        let plain = frame(&[b"first", b"second"]);
        // A flipped byte in the second record's data.
        let mut flipped = plain.clone();
        let at = plain.len() - 6;
        flipped[at] ^= 1;
        let why = read_all(flipped).expect_err("a bad CRC");
        assert!(
            why.contains("record 2") && why.contains("CRC32C of its data"),
            "{why}"
        );
        // A flipped byte in the first record's length.
        let mut length = plain.clone();
        length[0] ^= 4;
        let why = read_all(length).expect_err("a bad length CRC");
        assert!(
            why.contains("record 1") && why.contains("its length"),
            "{why}"
        );
        // Cut short, in a header and in the data.
        for cut in [plain.len() - 1, 21 + 5] {
            let why = read_all(plain[..cut].to_vec()).expect_err("truncated");
            assert!(why.contains("cut short"), "{why}");
        }
    }
}

//! SequenceFiles written here as Hadoop's `SequenceFile.Writer` writes them,
//! read back whole and in byte ranges.

use std::io::{Cursor, Write};

use super::header::tests::{header_bytes, SYNC};
use super::header::Header;
use super::records::{seek_sync, Records};
use super::wire::tests::vlong;

/// Writes `records` (key, value) of Text keys and values: uncompressed with
/// a sync marker every `sync_every` bytes, or in blocks of `block` records
/// compressed with zlib.
fn write(records: &[(String, String)], sync_every: usize, block: Option<usize>) -> Vec<u8> {
    write_with(
        records,
        sync_every,
        block,
        ("org.apache.hadoop.io.compress.DefaultCodec", zlib),
    )
}

/// A codec's class and an encoder of its streams.
type Codec<'a> = (&'a str, fn(&[u8]) -> Vec<u8>);

/// The same, blocks compressed with `codec`.
fn write_with(
    records: &[(String, String)],
    sync_every: usize,
    block: Option<usize>,
    (class, encode): Codec<'_>,
) -> Vec<u8> {
    let text = "org.apache.hadoop.io.Text";
    let codec = block.map(|_| (class, true));
    let mut out = header_bytes(text, text, codec);
    let sync = |out: &mut Vec<u8>| {
        out.extend_from_slice(&(-1i32).to_be_bytes());
        out.extend_from_slice(&SYNC);
    };
    let serialize = |s: &str| {
        let mut b = vlong(s.len() as i64);
        b.extend_from_slice(s.as_bytes());
        b
    };
    match block {
        None => {
            let mut last_sync = 0;
            for (k, v) in records {
                if out.len() >= last_sync + sync_every {
                    sync(&mut out);
                    last_sync = out.len();
                }
                let (k, v) = (serialize(k), serialize(v));
                out.extend_from_slice(&((k.len() + v.len()) as i32).to_be_bytes());
                out.extend_from_slice(&(k.len() as i32).to_be_bytes());
                out.extend_from_slice(&k);
                out.extend_from_slice(&v);
            }
        }
        Some(n) => {
            for chunk in records.chunks(n) {
                sync(&mut out);
                out.extend_from_slice(&vlong(chunk.len() as i64));
                let keys: Vec<Vec<u8>> = chunk.iter().map(|(k, _)| serialize(k)).collect();
                let values: Vec<Vec<u8>> = chunk.iter().map(|(_, v)| serialize(v)).collect();
                for part in [keys, values] {
                    let lens: Vec<u8> = part.iter().flat_map(|b| vlong(b.len() as i64)).collect();
                    for buffer in [lens, part.concat()] {
                        let z = encode(&buffer);
                        out.extend_from_slice(&vlong(z.len() as i64));
                        out.extend_from_slice(&z);
                    }
                }
            }
        }
    }
    out
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).expect("zlib");
    enc.finish().expect("zlib")
}

fn records(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("k{i}"), "v".repeat(i % 37) + &i.to_string()))
        .collect()
}

/// The records of bytes `[start, end)` of `file`, as a split reads them.
fn read_range(file: &[u8], start: u64, end: u64) -> Vec<(String, String)> {
    let header = Header::read(&mut &file[..]).expect("header");
    let mut out = Vec::new();
    let (mut key, mut value) = (Vec::new(), Vec::new());
    let mut collect = |mut records: Records<_>| {
        while records.next_into(&mut key, &mut value).expect("record") {
            let t = |b: &[u8]| {
                String::from_utf8(super::writable::text(b).expect("text").to_vec()).expect("utf8")
            };
            out.push((t(&key), t(&value)));
        }
    };
    if start == 0 {
        let input = Cursor::new(file[header.len as usize..].to_vec());
        collect(Records::new(input, header.len, end, &header));
    } else {
        let start = start.max(header.len);
        let input = Cursor::new(file[start as usize..].to_vec());
        if let Some((input, at)) = seek_sync(input, start, &header.sync).expect("seek") {
            let input: Box<dyn std::io::BufRead> = Box::new(input);
            let mut records = Records::new(input, at, end, &header);
            while records.next_into(&mut key, &mut value).expect("record") {
                let t = |b: &[u8]| {
                    String::from_utf8(super::writable::text(b).expect("text").to_vec())
                        .expect("utf8")
                };
                out.push((t(&key), t(&value)));
            }
        }
    }
    out
}

#[test]
fn every_record_is_read_by_exactly_one_range() {
    let all = records(700);
    for (name, file) in [
        ("records", write(&all, 200, None)),
        ("blocks", write(&all, 0, Some(23))),
    ] {
        assert_eq!(read_range(&file, 0, u64::MAX), all, "{name}: whole");
        for split_size in [64, 100, 333, 1000, 4096, 1 << 20] {
            let ranges = crate::split::byte_ranges(file.len() as u64, split_size);
            let joined: Vec<_> = ranges
                .iter()
                .flat_map(|&(s, e)| read_range(&file, s, e))
                .collect();
            assert_eq!(joined.len(), all.len(), "{name}: split size {split_size}");
            assert!(joined == all, "{name}: split size {split_size}");
        }
    }
}

/// Hadoop's ZStandardCodec needs its native library, which no pure-Java
/// writer has: blocks of zstd frames are written here.
#[test]
fn zstd_blocks_read_whole_and_in_ranges() {
    let zstd = |data: &[u8]| zstd::encode_all(data, 3).expect("zstd");
    let all = records(500);
    let file = write_with(
        &all,
        0,
        Some(40),
        ("org.apache.hadoop.io.compress.ZStandardCodec", zstd),
    );
    assert_eq!(read_range(&file, 0, u64::MAX), all);
    let joined: Vec<_> = crate::split::byte_ranges(file.len() as u64, 300)
        .iter()
        .flat_map(|&(s, e)| read_range(&file, s, e))
        .collect();
    assert!(joined == all, "{} records", joined.len());
}

#[test]
fn a_cut_or_altered_file_is_an_error_at_its_offset() {
    let all = records(300);
    for (name, file) in [
        ("records", write(&all, 200, None)),
        ("blocks", write(&all, 0, Some(50))),
    ] {
        let header = Header::read(&mut &file[..]).expect("header");
        let cut = &file[..file.len() - 7];
        let mut records = Records::new(
            Cursor::new(cut[header.len as usize..].to_vec()),
            header.len,
            u64::MAX,
            &header,
        );
        let (mut k, mut v) = (Vec::new(), Vec::new());
        let err = loop {
            match records.next_into(&mut k, &mut v) {
                Ok(true) => continue,
                Ok(false) => panic!("{name}: a cut file read to its end"),
                Err(e) => break e,
            }
        };
        assert!(err.to_string().contains("at byte"), "{name}: {err}");
        // A sync marker altered in the middle.
        let mut altered = file.clone();
        let marker: Vec<u8> = (-1i32).to_be_bytes().iter().chain(&SYNC).copied().collect();
        let at = altered
            .windows(20)
            .enumerate()
            .filter(|(_, w)| *w == marker.as_slice())
            .map(|(i, _)| i)
            .nth(1)
            .expect("a second sync marker");
        altered[at + 10] ^= 0x55;
        let mut records = Records::new(
            Cursor::new(altered[header.len as usize..].to_vec()),
            header.len,
            u64::MAX,
            &header,
        );
        let err = loop {
            match records.next_into(&mut k, &mut v) {
                Ok(true) => continue,
                Ok(false) => panic!("{name}: an altered sync read to its end"),
                Err(e) => break e,
            }
        };
        assert!(err.to_string().contains("sync marker"), "{name}: {err}");
    }
}

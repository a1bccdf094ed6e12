//! The protobuf wire format of `tf.train.Example`, decoded by hand: varints,
//! length-delimited fields, and repeated int64 and float values packed or
//! not. Only what an `Example` holds is understood; unknown fields are
//! passed over, as protobuf readers do. A `SequenceExample` reads as its
//! context's features and its feature lists (each a `Feature` per step).
//!
//! ```text
//! Example        { Features features = 1; }
//! SequenceExample{ Features context = 1; FeatureLists feature_lists = 2; }
//! Features       { map<string, Feature> feature = 1; }   // entries: key = 1, value = 2
//! FeatureLists   { map<string, FeatureList> feature_list = 1; }
//! FeatureList    { repeated Feature feature = 1; }
//! Feature        { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
//!                          Int64List int64_list = 3; } }
//! *List          { repeated <value> value = 1; }
//! ```

use std::fmt;

/// Wire types of protobuf fields.
const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;
const I32: u8 = 5;

/// Why a record is not read: the bytes are not a protobuf message of an
/// `Example`'s shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WireError(pub(crate) &'static str);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a tf.train.Example or SequenceExample: {}", self.0)
    }
}

type Wire<T> = std::result::Result<T, WireError>;

/// The values of one feature of one record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Values<'a> {
    /// An `Int64List`.
    Int64(Vec<i64>),
    /// A `FloatList`.
    Float(Vec<f32>),
    /// A `BytesList`.
    Bytes(Vec<&'a [u8]>),
    /// A `Feature` with none of its lists set.
    Unset,
}

impl Values<'_> {
    /// How many values it holds.
    pub(crate) fn len(&self) -> usize {
        match self {
            Values::Int64(v) => v.len(),
            Values::Float(v) => v.len(),
            Values::Bytes(v) => v.len(),
            Values::Unset => 0,
        }
    }
}

/// Features in the order they were written (a key written twice keeps its
/// last value, as protobuf maps do).
pub(crate) type Example<'a> = Vec<(&'a [u8], Values<'a>)>;

/// One decoded record: an `Example`'s features (a `SequenceExample`'s
/// context), and a `SequenceExample`'s feature lists, a `Feature` a step.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Record<'a> {
    /// The features (the context of a `SequenceExample`).
    pub(crate) features: Example<'a>,
    /// The feature lists, by name, in the order written.
    pub(crate) lists: Vec<(&'a [u8], Vec<Values<'a>>)>,
}

/// A cursor over a protobuf message.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn varint(&mut self) -> Wire<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .bytes
                .get(self.at)
                .ok_or(WireError("a varint runs past the end"))?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(WireError("a varint longer than 10 bytes"))
    }

    /// A field's number and wire type.
    fn tag(&mut self) -> Wire<(u64, u8)> {
        let tag = self.varint()?;
        let number = tag >> 3;
        if number == 0 {
            return Err(WireError("a field numbered 0"));
        }
        Ok((number, (tag & 7) as u8))
    }

    fn take(&mut self, n: usize) -> Wire<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or(WireError("a field runs past the end"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn len_delimited(&mut self) -> Wire<&'a [u8]> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| WireError("a length too large"))?;
        self.take(n)
    }

    fn fixed32(&mut self) -> Wire<[u8; 4]> {
        let b = self.take(4)?;
        Ok([b[0], b[1], b[2], b[3]])
    }

    /// Passes over a field of wire type `wire` (groups are refused).
    fn skip(&mut self, wire: u8) -> Wire<()> {
        match wire {
            VARINT => self.varint().map(drop),
            I64 => self.take(8).map(drop),
            LEN => self.len_delimited().map(drop),
            I32 => self.take(4).map(drop),
            _ => Err(WireError("a field of an unknown wire type")),
        }
    }
}

/// Decodes one serialized `tf.train.Example` or `tf.train.SequenceExample`
/// (the same field 1, `features` or `context`; field 2, `feature_lists`,
/// only in the latter).
pub(crate) fn parse_record(bytes: &[u8]) -> Wire<Record<'_>> {
    let mut message = Reader::new(bytes);
    let mut record = Record::default();
    while !message.done() {
        match message.tag()? {
            (1, LEN) => parse_features(message.len_delimited()?, &mut record.features)?,
            (2, LEN) => parse_feature_lists(message.len_delimited()?, &mut record.lists)?,
            (1 | 2, _) => return Err(WireError("a field of the wrong wire type")),
            (_, wire) => message.skip(wire)?,
        }
    }
    Ok(record)
}

/// Decodes a `FeatureLists` message into `out`.
fn parse_feature_lists<'a>(
    bytes: &'a [u8],
    out: &mut Vec<(&'a [u8], Vec<Values<'a>>)>,
) -> Wire<()> {
    let mut message = Reader::new(bytes);
    while !message.done() {
        match message.tag()? {
            (1, LEN) => {
                let (key, steps) = map_entry(message.len_delimited()?, parse_feature_list)?;
                match out.iter_mut().find(|(k, _)| *k == key) {
                    Some(slot) => slot.1 = steps,
                    None => out.push((key, steps)),
                }
            }
            (1, _) => return Err(WireError("a feature list of the wrong wire type")),
            (_, wire) => message.skip(wire)?,
        }
    }
    Ok(())
}

/// Decodes a `FeatureList`: a `Feature` a step.
fn parse_feature_list(bytes: &[u8]) -> Wire<Vec<Values<'_>>> {
    let mut message = Reader::new(bytes);
    let mut steps = Vec::new();
    while !message.done() {
        match message.tag()? {
            (1, LEN) => steps.push(parse_feature(message.len_delimited()?)?),
            (1, _) => return Err(WireError("a step of the wrong wire type")),
            (_, wire) => message.skip(wire)?,
        }
    }
    Ok(steps)
}

/// Decodes a `Features` message into `out`.
fn parse_features<'a>(bytes: &'a [u8], out: &mut Example<'a>) -> Wire<()> {
    let mut message = Reader::new(bytes);
    while !message.done() {
        match message.tag()? {
            (1, LEN) => {
                let (key, values) = map_entry(message.len_delimited()?, parse_feature)?;
                match out.iter_mut().find(|(k, _)| *k == key) {
                    Some(slot) => slot.1 = values,
                    None => out.push((key, values)),
                }
            }
            (1, _) => return Err(WireError("a feature of the wrong wire type")),
            (_, wire) => message.skip(wire)?,
        }
    }
    Ok(())
}

/// Decodes one entry of a map of messages: its key and its value, read by
/// `parse` (an entry without its value has the value of no bytes).
fn map_entry<'a, T>(bytes: &'a [u8], parse: fn(&'a [u8]) -> Wire<T>) -> Wire<(&'a [u8], T)> {
    let mut message = Reader::new(bytes);
    let mut key: &[u8] = b"";
    let mut values = None;
    while !message.done() {
        match message.tag()? {
            (1, LEN) => key = message.len_delimited()?,
            (2, LEN) => values = Some(parse(message.len_delimited()?)?),
            (1 | 2, _) => return Err(WireError("a map entry of the wrong wire type")),
            (_, wire) => message.skip(wire)?,
        }
    }
    if std::str::from_utf8(key).is_err() {
        return Err(WireError("a feature name that is not UTF-8"));
    }
    let values = match values {
        Some(values) => values,
        None => parse(b"")?,
    };
    Ok((key, values))
}

/// Decodes a `Feature`: the last of its lists that is set.
fn parse_feature(bytes: &[u8]) -> Wire<Values<'_>> {
    let mut message = Reader::new(bytes);
    let mut values = Values::Unset;
    while !message.done() {
        match message.tag()? {
            (1, LEN) => values = Values::Bytes(bytes_list(message.len_delimited()?)?),
            (2, LEN) => values = Values::Float(float_list(message.len_delimited()?)?),
            (3, LEN) => values = Values::Int64(int64_list(message.len_delimited()?)?),
            (1..=3, _) => return Err(WireError("a feature list of the wrong wire type")),
            (_, wire) => message.skip(wire)?,
        }
    }
    Ok(values)
}

fn bytes_list(bytes: &[u8]) -> Wire<Vec<&[u8]>> {
    let mut message = Reader::new(bytes);
    let mut out = Vec::new();
    while !message.done() {
        match message.tag()? {
            (1, LEN) => out.push(message.len_delimited()?),
            (1, _) => return Err(WireError("a bytes value of the wrong wire type")),
            (_, wire) => message.skip(wire)?,
        }
    }
    Ok(out)
}

fn float_list(bytes: &[u8]) -> Wire<Vec<f32>> {
    let mut message = Reader::new(bytes);
    let mut out = Vec::new();
    while !message.done() {
        match message.tag()? {
            (1, LEN) => {
                let packed = message.len_delimited()?;
                if packed.len() % 4 != 0 {
                    return Err(WireError("packed floats not a multiple of 4 bytes"));
                }
                out.extend(
                    packed
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                );
            }
            (1, I32) => out.push(f32::from_le_bytes(message.fixed32()?)),
            (1, _) => return Err(WireError("a float value of the wrong wire type")),
            (_, wire) => message.skip(wire)?,
        }
    }
    Ok(out)
}

fn int64_list(bytes: &[u8]) -> Wire<Vec<i64>> {
    let mut message = Reader::new(bytes);
    let mut out = Vec::new();
    while !message.done() {
        match message.tag()? {
            (1, LEN) => {
                let mut packed = Reader::new(message.len_delimited()?);
                while !packed.done() {
                    out.push(packed.varint()? as i64);
                }
            }
            (1, VARINT) => out.push(message.varint()? as i64),
            (1, _) => return Err(WireError("an int64 value of the wrong wire type")),
            (_, wire) => message.skip(wire)?,
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    pub(crate) fn field(number: u64, body: &[u8], out: &mut Vec<u8>) {
        varint(number << 3 | u64::from(LEN), out);
        varint(body.len() as u64, out);
        out.extend_from_slice(body);
    }

    /// A serialized `Example` of `(name, kind, list body)` features, `kind`
    /// being the `Feature` field number (1 bytes, 2 float, 3 int64).
    pub(crate) fn example(features: &[(&str, u64, Vec<u8>)]) -> Vec<u8> {
        let mut map = Vec::new();
        for (name, kind, list) in features {
            let mut feature = Vec::new();
            field(*kind, list, &mut feature);
            let mut entry = Vec::new();
            field(1, name.as_bytes(), &mut entry);
            field(2, &feature, &mut entry);
            field(1, &entry, &mut map);
        }
        let mut out = Vec::new();
        field(1, &map, &mut out);
        out
    }

    /// An `Int64List` body, packed or one field per value.
    pub(crate) fn int64s(values: &[i64], packed: bool) -> Vec<u8> {
        let mut out = Vec::new();
        if packed {
            let mut body = Vec::new();
            for &v in values {
                varint(v as u64, &mut body);
            }
            field(1, &body, &mut out);
        } else {
            for &v in values {
                varint(1 << 3, &mut out);
                varint(v as u64, &mut out);
            }
        }
        out
    }

    #[test]
    fn packed_and_unpacked_values_decode_alike() {
        for packed in [true, false] {
            let mut floats = Vec::new();
            if packed {
                let body: Vec<u8> = [1.5f32, -2.0]
                    .iter()
                    .flat_map(|f| f.to_le_bytes())
                    .collect();
                field(1, &body, &mut floats);
            } else {
                for f in [1.5f32, -2.0] {
                    varint(1 << 3 | u64::from(I32), &mut floats);
                    floats.extend_from_slice(&f.to_le_bytes());
                }
            }
            let mut strings = Vec::new();
            field(1, b"ab", &mut strings);
            field(1, b"", &mut strings);
            let record = example(&[
                ("id", 3, int64s(&[7, -1, i64::MAX], packed)),
                ("f", 2, floats),
                ("s", 1, strings),
            ]);
            let parsed = parse_record(&record).expect("an Example");
            assert!(parsed.lists.is_empty());
            assert_eq!(
                parsed.features,
                vec![
                    (&b"id"[..], Values::Int64(vec![7, -1, i64::MAX])),
                    (&b"f"[..], Values::Float(vec![1.5, -2.0])),
                    (&b"s"[..], Values::Bytes(vec![b"ab", b""])),
                ],
                "packed {packed}"
            );
        }
    }

    #[test]
    fn unknown_fields_pass_and_bad_bytes_fail() {
        let mut record = example(&[("x", 3, int64s(&[1], true))]);
        // An unknown varint field 9 and fixed64 field 10 at the top level.
        varint(9 << 3, &mut record);
        varint(300, &mut record);
        varint(10 << 3 | u64::from(I64), &mut record);
        record.extend_from_slice(&[0; 8]);
        assert_eq!(parse_record(&record).expect("read").features.len(), 1);
        assert_eq!(parse_record(b"").expect("empty"), Record::default());
        for bad in [
            &b"\x0a\x05ab"[..],
            b"\x0a",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
            b"\x0b",
        ] {
            assert!(matches!(parse_record(bad), Err(WireError(_))), "{bad:?}");
        }
    }

    /// A `FeatureList` body of `Feature`s, each of `kind` with `list` body.
    pub(crate) fn feature_list(steps: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (kind, list) in steps {
            let mut feature = Vec::new();
            field(*kind, list, &mut feature);
            field(1, &feature, &mut out);
        }
        out
    }

    /// A serialized `SequenceExample`: `context` as [`example`]'s features,
    /// and feature lists of `FeatureList` bodies.
    pub(crate) fn sequence_example(
        context: &[(&str, u64, Vec<u8>)],
        lists: &[(&str, Vec<u8>)],
    ) -> Vec<u8> {
        let mut out = example(context);
        let mut map = Vec::new();
        for (name, body) in lists {
            let mut entry = Vec::new();
            field(1, name.as_bytes(), &mut entry);
            field(2, body, &mut entry);
            field(1, &entry, &mut map);
        }
        field(2, &map, &mut out);
        out
    }

    #[test]
    fn sequence_examples_read_as_context_and_steps() {
        let steps = feature_list(&[(3, int64s(&[1, 2], true)), (3, int64s(&[], true))]);
        let record = sequence_example(&[("ctx", 3, int64s(&[9], true))], &[("steps", steps)]);
        let parsed = parse_record(&record).expect("a SequenceExample");
        assert_eq!(parsed.features, vec![(&b"ctx"[..], Values::Int64(vec![9]))]);
        assert_eq!(
            parsed.lists,
            vec![(
                &b"steps"[..],
                vec![Values::Int64(vec![1, 2]), Values::Int64(vec![])]
            )]
        );
    }
}

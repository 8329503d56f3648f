//! The Schema Registry wire format, the only part of Avro and Protobuf
//! records rankflow reads by hand: magic byte 0, the schema id as 4 bytes
//! big-endian, for Protobuf the message indexes (which message of the
//! schema's file the body is: a zigzag-varint count, then that many
//! zigzag-varint indexes, the path through nested messages; the single
//! byte 0 stands for `[0]`, the file's first message), then the body.
//! Pure: the body is decoded by the format's library, against the schema
//! the id names.

use std::fmt;

/// A framed record: the schema id, the message indexes (Protobuf only;
/// `[0]` for the first message) and the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Framed<'a> {
    pub schema_id: u32,
    pub indexes: Vec<usize>,
    pub body: &'a [u8],
}

/// Why a record is not in the wire format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The first byte is not 0 (the record may be plain JSON, or framed otherwise).
    Magic(Option<u8>),
    /// Fewer than the 5 bytes of the magic byte and schema id.
    Short(usize),
    /// The message indexes end early, overflow, or are negative.
    Indexes(&'static str),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Magic(None) => f.write_str("the value is empty, not a Schema Registry frame"),
            FrameError::Magic(Some(b)) => {
                write!(f, "the value starts with byte {b:#04x}, not the Schema Registry frame's magic byte 0")
            }
            FrameError::Short(n) => {
                write!(f, "the value is {n} bytes, shorter than the Schema Registry frame's 5-byte header")
            }
            FrameError::Indexes(why) => write!(f, "the Protobuf message indexes are {why}"),
        }
    }
}

/// The most message indexes a frame may name (nesting deeper than any real schema).
const MAX_INDEXES: u64 = 64;

/// The magic byte and schema id, and what follows them.
fn header(value: &[u8]) -> Result<(u32, &[u8]), FrameError> {
    match value.first() {
        Some(0) => {}
        other => return Err(FrameError::Magic(other.copied())),
    }
    if value.len() < 5 {
        return Err(FrameError::Short(value.len()));
    }
    let id = u32::from_be_bytes([value[1], value[2], value[3], value[4]]);
    Ok((id, &value[5..]))
}

/// An Avro record's frame.
pub fn avro(value: &[u8]) -> Result<Framed<'_>, FrameError> {
    let (schema_id, body) = header(value)?;
    Ok(Framed { schema_id, indexes: Vec::new(), body })
}

/// A Protobuf record's frame, its message indexes read in both forms.
pub fn protobuf(value: &[u8]) -> Result<Framed<'_>, FrameError> {
    let (schema_id, mut rest) = header(value)?;
    let count = zigzag(&mut rest)?;
    if count < 0 || count as u64 > MAX_INDEXES {
        return Err(FrameError::Indexes("a count out of range"));
    }
    let indexes = if count == 0 {
        vec![0]
    } else {
        let mut out = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let i = zigzag(&mut rest)?;
            out.push(usize::try_from(i).map_err(|_| FrameError::Indexes("negative"))?);
        }
        out
    };
    Ok(Framed { schema_id, indexes, body: rest })
}

/// One zigzag varint, taken off the front of `bytes`.
fn zigzag(bytes: &mut &[u8]) -> Result<i64, FrameError> {
    let mut n: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes.split_first().ok_or(FrameError::Indexes("cut short"))?;
        *bytes = rest;
        n |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok((n >> 1) as i64 ^ -((n & 1) as i64));
        }
    }
    Err(FrameError::Indexes("a varint longer than 10 bytes"))
}

/// The frame of `schema_id` and `indexes` (Protobuf; `None` for Avro)
/// around `body`: what a producer's serializer writes, for tests and the
/// sample producer.
pub fn frame(schema_id: u32, indexes: Option<&[usize]>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 8);
    out.push(0);
    out.extend_from_slice(&schema_id.to_be_bytes());
    if let Some(indexes) = indexes {
        if indexes == [0] {
            out.push(0);
        } else {
            put_zigzag(&mut out, indexes.len() as i64);
            for &i in indexes {
                put_zigzag(&mut out, i as i64);
            }
        }
    }
    out.extend_from_slice(body);
    out
}

fn put_zigzag(out: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_avro_frame_is_the_magic_byte_the_big_endian_id_and_the_body() {
        let f = avro(&[0, 0, 0, 1, 2, 0xaa, 0xbb]).unwrap();
        assert_eq!((f.schema_id, f.body), (258, &[0xaa, 0xbb][..]));
        assert_eq!(avro(&[0, 0, 0, 0, 7]).unwrap().body, &[] as &[u8]);
    }

    #[test]
    fn protobuf_message_indexes_are_read_in_both_forms_and_nested() {
        // The single 0 byte: the first message.
        assert_eq!(protobuf(&[0, 0, 0, 0, 9, 0, 0x08]).unwrap().indexes, [0]);
        // Count 1, index 0, written out (zigzag: 1 -> 2, 0 -> 0).
        let f = protobuf(&[0, 0, 0, 0, 9, 2, 0, 0x08, 0x01]).unwrap();
        assert_eq!((f.schema_id, f.indexes.as_slice(), f.body), (9, &[0][..], &[0x08, 0x01][..]));
        // The second message's first nested message: [1, 0].
        assert_eq!(protobuf(&[0, 0, 0, 0, 9, 4, 2, 0]).unwrap().indexes, [1, 0]);
        // An index past 63 takes two bytes (zigzag 64 -> 128).
        assert_eq!(protobuf(&[0, 0, 0, 0, 9, 2, 0x80, 0x01]).unwrap().indexes, [64]);
    }

    #[test]
    fn a_record_not_in_the_wire_format_says_how() {
        assert_eq!(avro(b"{\"a\":1}"), Err(FrameError::Magic(Some(b'{'))));
        assert_eq!(avro(&[]), Err(FrameError::Magic(None)));
        assert_eq!(avro(&[0, 0, 1]), Err(FrameError::Short(3)));
        // Indexes that end early, a negative count or index, a runaway varint.
        for bad in [&[0, 0, 0, 0, 1][..], &[0, 0, 0, 0, 1, 4, 2], &[0, 0, 0, 0, 1, 1], &[0, 0, 0, 0, 1, 2, 1]] {
            assert!(matches!(protobuf(bad), Err(FrameError::Indexes(_))), "{bad:?}");
        }
        assert!(matches!(
            protobuf(&[0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            Err(FrameError::Indexes(_))
        ));
        assert!(FrameError::Magic(Some(b'{')).to_string().contains("0x7b"));
    }

    proptest! {
        #[test]
        fn every_frame_reads_back(id in any::<u32>(), indexes in prop::collection::vec(0usize..5000, 1..6), body in prop::collection::vec(any::<u8>(), 0..40)) {
            let f = frame(id, Some(&indexes), &body);
            let read = protobuf(&f).unwrap();
            prop_assert_eq!((read.schema_id, read.indexes, read.body), (id, indexes, &body[..]));
            let a = frame(id, None, &body);
            prop_assert_eq!(avro(&a).unwrap().body, &body[..]);
        }
    }
}

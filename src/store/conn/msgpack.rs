//! MessagePack as the scripts read it (Redis's `cmsgpack`): integers,
//! strings, booleans, arrays and maps; no binary formats.

fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) -> T {
    r.expect("writing to a Vec cannot fail")
}

pub(in crate::store) fn int(buf: &mut Vec<u8>, n: i64) {
    ok(rmp::encode::write_sint(buf, n));
}

pub(in crate::store) fn str(buf: &mut Vec<u8>, s: &str) {
    ok(rmp::encode::write_str(buf, s));
}

/// A string of raw bytes (a dedupe marker): `cmsgpack` reads no bin formats.
pub(in crate::store) fn bytes_as_str(buf: &mut Vec<u8>, b: &[u8]) {
    ok(rmp::encode::write_str_len(buf, b.len() as u32));
    buf.extend_from_slice(b);
}

pub(in crate::store) fn array_len(buf: &mut Vec<u8>, n: usize) {
    ok(rmp::encode::write_array_len(buf, n as u32));
}

/// A map written entry by entry, its length put in front when finished.
#[derive(Default)]
pub(in crate::store) struct MapWriter {
    body: Vec<u8>,
    len: u32,
}

impl MapWriter {
    fn key(&mut self, k: &str) -> &mut Vec<u8> {
        self.len += 1;
        str(&mut self.body, k);
        &mut self.body
    }
    pub(in crate::store) fn int(&mut self, k: &str, v: i64) {
        int(self.key(k), v);
    }
    pub(in crate::store) fn str(&mut self, k: &str, v: &str) {
        str(self.key(k), v);
    }
    pub(in crate::store) fn bool(&mut self, k: &str, v: bool) {
        ok(rmp::encode::write_bool(self.key(k), v));
    }
    /// A value already encoded.
    pub(in crate::store) fn raw(&mut self, k: &str, v: &[u8]) {
        self.key(k).extend_from_slice(v);
    }
    pub(in crate::store) fn finish(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + 5);
        ok(rmp::encode::write_map_len(&mut out, self.len));
        out.extend_from_slice(&self.body);
        out
    }
}

/// One value read back as text, maps as `{k: v, ...}` and arrays as
/// `[a, ...]`, for tests to compare with what a script reads.
#[cfg(test)]
pub(crate) fn render(rd: &mut &[u8]) -> String {
    use rmp::Marker;
    let marker = rmp::decode::read_marker(rd).expect("a value");
    let int = |m: Marker, rd: &mut &[u8]| -> Option<i64> {
        let mut be = |n: usize| {
            let (head, tail) = rd.split_at(n);
            *rd = tail;
            head.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
        };
        Some(match m {
            Marker::FixPos(n) => i64::from(n),
            Marker::FixNeg(n) => i64::from(n),
            Marker::U8 => be(1) as i64,
            Marker::U16 => be(2) as i64,
            Marker::U32 => be(4) as i64,
            Marker::U64 => be(8) as i64,
            Marker::I8 => be(1) as u8 as i8 as i64,
            Marker::I16 => be(2) as u16 as i16 as i64,
            Marker::I32 => be(4) as u32 as i32 as i64,
            Marker::I64 => be(8) as i64,
            _ => return None,
        })
    };
    if let Some(n) = int(marker, rd) {
        return n.to_string();
    }
    let len = |m: Marker, rd: &mut &[u8]| -> usize {
        let mut be = |n: usize| {
            let (head, tail) = rd.split_at(n);
            *rd = tail;
            head.iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b))
        };
        match m {
            Marker::FixStr(n) | Marker::FixArray(n) | Marker::FixMap(n) => usize::from(n),
            Marker::Str8 => be(1),
            Marker::Str16 | Marker::Array16 | Marker::Map16 => be(2),
            Marker::Str32 | Marker::Array32 | Marker::Map32 => be(4),
            other => panic!("not a length: {other:?}"),
        }
    };
    match marker {
        Marker::True => "true".into(),
        Marker::False => "false".into(),
        Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32 => {
            let n = len(marker, rd);
            let (head, tail) = rd.split_at(n);
            *rd = tail;
            String::from_utf8_lossy(head).into_owned()
        }
        Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => {
            let n = len(marker, rd);
            let items: Vec<String> = (0..n).map(|_| render(rd)).collect();
            format!("[{}]", items.join(", "))
        }
        Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => {
            let n = len(marker, rd);
            let items: Vec<String> = (0..n).map(|_| format!("{}: {}", render(rd), render(rd))).collect();
            format!("{{{}}}", items.join(", "))
        }
        other => panic!("a format the scripts do not read: {other:?}"),
    }
}

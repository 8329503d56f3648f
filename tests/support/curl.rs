//! curl as the client: a client that is not ours, which decodes gzip and br
//! itself (`--compressed`), shows every header (`-i`) and reads streams.

use std::process::Command;

/// One answer as curl saw it.
pub struct Answer {
    pub status: u16,
    /// Header names lowercased, in order, repeated names kept.
    pub headers: Vec<(String, String)>,
    /// The body, decoded if curl was asked to (`--compressed`).
    pub body: Vec<u8>,
}

impl Answer {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Every value of header `name`, joined by ", ", lowercased (`Vary`).
    pub fn joined(&self, name: &str) -> String {
        let values: Vec<&str> = self.headers.iter().filter(|(n, _)| n == name).map(|(_, v)| v.as_str()).collect();
        values.join(", ").to_ascii_lowercase()
    }

    /// The names of the headers starting with `prefix`.
    pub fn names_starting(&self, prefix: &str) -> Vec<&str> {
        self.headers.iter().filter(|(n, _)| n.starts_with(prefix)).map(|(n, _)| n.as_str()).collect()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// `curl -s -i <args> <url>` (10 s at most unless `args` say `--max-time`).
pub fn curl(url: &str, args: &[&str]) -> Answer {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-i"]);
    if !args.contains(&"--max-time") {
        cmd.args(["--max-time", "10"]);
    }
    let out = cmd.args(args).arg(url).output().expect("curl runs");
    parse(&out.stdout)
        .unwrap_or_else(|| panic!("curl {url} {args:?}: no answer ({})", String::from_utf8_lossy(&out.stderr)))
}

fn parse(raw: &[u8]) -> Option<Answer> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Answer { status, headers, body: raw[end + 4..].to_vec() })
}

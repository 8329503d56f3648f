//! Chromium driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: requests on fd 3, answers on fd 4, each a
//! JSON message ended by a NUL byte), for a page that stays open while the
//! test acts (a live page never finishes loading, so `--dump-dom` cannot
//! read it): the test reads what the page shows with `Runtime.evaluate`.

use std::io::{BufRead, BufReader, PipeReader, PipeWriter, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Debian's Chromium.
pub fn chromium_bin() -> &'static str {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|b| Path::new(b).exists())
        .expect("chromium is not installed: scripts/setup.sh --test installs Debian's chromium")
}

/// The flags every test's Chromium runs with: headless, no network of its own.
pub const CHROMIUM_FLAGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
];

/// Chromium as a test drives it: headless, no network of its own, a fresh profile.
pub fn chromium(profile: &Path, args: &[&str]) -> std::process::Output {
    Command::new(chromium_bin())
        .args(CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .expect("run chromium")
}

pub fn cells(dom: &str, table: &str, class: &str) -> Vec<String> {
    let start = dom.find(&format!("<table id=\"{table}\"")).unwrap_or_else(|| panic!("no table {table} in\n{dom}"));
    let body = &dom[start..start + dom[start..].find("</table>").unwrap()];
    body.split(&format!("<td class=\"{class}\""))
        .skip(1)
        .map(|cell| {
            let text = &cell[cell.find('>').unwrap() + 1..];
            text[..text.find("</td>").unwrap()].to_string()
        })
        .collect()
}

/// One headless Chromium with one page open.
pub struct Browser {
    child: Child,
    to: PipeWriter,
    from: BufReader<PipeReader>,
    next_id: u64,
    session: String,
}

impl Browser {
    /// Chromium on a fresh `profile`, with `url` open.
    pub fn open(profile: &Path, url: &str) -> Browser {
        let (child_reads, to) = std::io::pipe().expect("a pipe");
        let (from, child_writes) = std::io::pipe().expect("a pipe");
        let (r, w) = (child_reads.as_raw_fd(), child_writes.as_raw_fd());
        let mut cmd = Command::new(chromium_bin());
        cmd.args(CHROMIUM_FLAGS)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("--remote-debugging-pipe")
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only dup2 runs between fork and exec, which is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("run chromium");
        drop((child_reads, child_writes));
        let mut b = Browser { child, to, from: BufReader::new(from), next_id: 0, session: String::new() };
        let target = b.call("Target.createTarget", json!({ "url": url }), false)["targetId"].clone();
        let attached = b.call("Target.attachToTarget", json!({ "targetId": target, "flatten": true }), false);
        b.session = attached["sessionId"].as_str().expect("a session").to_string();
        b
    }

    /// One DevTools command (on the page's session when `on_page`); its result.
    fn call(&mut self, method: &str, params: Value, on_page: bool) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if on_page {
            msg["sessionId"] = json!(self.session);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to chromium");
        loop {
            let mut buf = Vec::new();
            let n = self.from.read_until(0, &mut buf).expect("read from chromium");
            assert!(n > 0, "chromium closed its DevTools pipe");
            buf.pop();
            let answer: Value = serde_json::from_slice(&buf).expect("a DevTools message");
            if answer["id"] == id {
                assert!(answer.get("error").is_none(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// What `expression` evaluates to in the page now.
    pub fn eval(&mut self, expression: &str) -> Value {
        let params = json!({ "expression": expression, "returnByValue": true });
        self.call("Runtime.evaluate", params, true)["result"]["value"].clone()
    }

    /// Waits until `expression` evaluates to true in the page; panics with
    /// what `show` evaluates to after `timeout`.
    pub fn wait_until(&mut self, expression: &str, show: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.eval(expression) != json!(true) {
            assert!(
                Instant::now() < deadline,
                "not within {timeout:?}: {expression}; the page shows {}",
                self.eval(show)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

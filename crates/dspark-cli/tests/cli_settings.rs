//! Settings through the real `dspark` binary: `dspark settings` shows the precedence (flag >
//! env > file > default) with each value's source, and a running `dspark serve` on a loopback
//! port applies an edited settings file live: the new API key is enforced within 2 s without a
//! restart, an invalid edit keeps the previous settings and says why, and a changed model is
//! logged as needing a restart (a key a flag sets is not the file's to change). The server
//! runs the scripted engine (no model needed).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn dspark(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dspark"));
    c.env("DSPARK_CONFIG", dir.join("config.toml"))
        .env("DSPARK_CACHE", dir.join("cache"))
        .env("HF_HUB_OFFLINE", "1");
    for key in [
        "DSPARK_API_KEY",
        "DSPARK_BACKEND",
        "DSPARK_MODEL",
        "DSPARK_PORT",
    ] {
        c.env_remove(key);
    }
    c
}

/// Replaces the file atomically, as editors do.
fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn settings_shows_each_value_and_its_source() {
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("config.toml"),
        "model = \"from-file\"\nport = 4\nthinking = false\nqueue = 5\n",
    );
    let out = dspark(dir.path())
        .args(["settings", "--json", "--port", "6"])
        .env("DSPARK_MODEL", "from-env")
        .env("DSPARK_QUEUE", "3")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |k: &str| {
        let r = v["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == k)
            .unwrap()
            .clone();
        (
            r["value"].as_str().unwrap_or("").to_string(),
            r["source"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(row("port"), ("6".into(), "flag".into()));
    assert_eq!(row("model"), ("\"from-env\"".into(), "env".into()));
    assert_eq!(row("queue"), ("3".into(), "env".into()));
    assert_eq!(row("thinking"), ("false".into(), "file".into()));
    assert_eq!(row("host"), ("\"127.0.0.1\"".into(), "default".into()));

    // a bad value names where it came from
    let out = dspark(dir.path())
        .args(["settings"])
        .env("DSPARK_PORT", "eighty")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("DSPARK_PORT"));
}

struct Server {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(dir: &Path) -> Server {
        let script = dir.join("script.json");
        std::fs::write(&script, r#"{"rules": [{"reply": "hello"}]}"#).unwrap();
        let mut child = dspark(dir)
            .args(["serve", "--port", "0", "--scripted"])
            .arg(&script)
            .env("DSPARK_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (l2, mut err) = (log.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                l2.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("serve exited before listening")
                .unwrap();
            if let Some(url) = line.strip_prefix("listening on http://") {
                break url.trim().parse().unwrap();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Server { child, addr, log }
    }

    /// The HTTP status of GET /v1/models with `key`.
    fn status(&self, key: &str) -> u16 {
        let mut s = TcpStream::connect(self.addr).unwrap();
        write!(
            s,
            "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        resp.split(' ').nth(1).unwrap().parse().unwrap()
    }

    /// Polls until `cond` holds; returns how long it took (panics after `limit`).
    fn until(&self, limit: Duration, what: &str, cond: impl Fn(&Server) -> bool) -> Duration {
        let t0 = Instant::now();
        while !cond(self) {
            assert!(
                t0.elapsed() < limit,
                "{what} not seen in {limit:?}; log:\n{}",
                self.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        t0.elapsed()
    }
}

#[test]
fn serve_applies_an_edited_api_key_within_two_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    write(&config, "# my settings\napi_key = \"one\"\n");
    let srv = Server::start(dir.path());
    assert_eq!(srv.status("one"), 200);
    assert_eq!(srv.status("two"), 401);

    write(
        &config,
        "# my settings\napi_key = \"two\"\nthinking = false\n",
    );
    let took = srv.until(Duration::from_secs(2), "the new key", |s| {
        s.status("two") == 200
    });
    assert_eq!(
        srv.status("one"),
        401,
        "the old key still works after {took:?}"
    );

    // an invalid edit: logged with its position, the key in force stays
    write(&config, "api_key = \"three\"\nport = \"x\"\n");
    srv.until(Duration::from_secs(5), "the invalid-edit log", |s| {
        s.log
            .lock()
            .unwrap()
            .contains("keeping the previous settings")
    });
    assert!(
        srv.log.lock().unwrap().contains("config.toml:2:8"),
        "{}",
        srv.log.lock().unwrap()
    );
    assert_eq!(srv.status("two"), 200);
    assert_eq!(srv.status("three"), 401);

    // a change that needs a restart is logged; the live part still applies; the port set by
    // a flag (--port 0) beats the file, so changing it in the file changes nothing
    write(&config, "api_key = \"four\"\nport = 1\nmodel = \"other\"\n");
    srv.until(Duration::from_secs(2), "key four", |s| {
        s.status("four") == 200
    });
    srv.until(Duration::from_secs(5), "the restart log", |s| {
        s.log.lock().unwrap().contains("after a restart: model")
    });
    assert!(
        !srv.log.lock().unwrap().contains("port"),
        "{}",
        srv.log.lock().unwrap()
    );
}

//! A real `redis-server` for the Redis tests: on 127.0.0.1, on a free port, without
//! persistence (`--save '' --appendonly no`), killed when dropped.
//!
//! The tests do not skip when `redis-server` is missing: they fail, saying how to install it
//! (`.ci/run` installs Debian's package). Redis's clock cannot be paused, so tests that use
//! this server run on real time with short waits and poll for what they expect within
//! generous bounds (see [`eventually`]).

use std::future::Future;
use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A `redis-server` child process.
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

fn find_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "redis-server is not on PATH: the Redis tests start a real server and do not \
                 skip. Install it (Debian/Ubuntu: `apt-get install redis-server`; `bash .ci/run` \
                 does) and run the tests again."
            )
        })
}

fn free_port() -> u16 {
    StdListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

fn spawn(binary: &Path, port: u16, dir: &Path) -> Child {
    Command::new(binary)
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("could not start {}: {e}", binary.display()))
}

/// Whether a server answers `PING` on `port` (within 500 ms).
pub async fn answers_ping(port: u16) -> bool {
    let attempt = async {
        let s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let request = b"PING\r\n";
        let mut sent = 0;
        while sent < request.len() {
            s.writable().await.ok()?;
            match s.try_write(&request[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return None,
            }
        }
        let mut buf = [0u8; 7];
        let mut got = 0;
        while got < buf.len() {
            s.readable().await.ok()?;
            match s.try_read(&mut buf[got..]) {
                Ok(0) => return None,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return None,
            }
        }
        (&buf == b"+PONG\r\n").then_some(())
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Some(()))
    )
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers `PING`. Panics (failing
    /// the test) if `redis-server` is missing or does not come up within 10 s.
    pub async fn start() -> RedisServer {
        let binary = find_binary();
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!("fusebox-redis-{port}"));
            std::fs::create_dir_all(&dir).expect("a scratch directory for redis-server");
            let mut server = RedisServer {
                child: Some(spawn(&binary, port, &dir)),
                binary: binary.clone(),
                port,
                dir,
            };
            if server.wait_ready().await {
                return server;
            }
            // The port was taken between choosing and binding it: try another.
            server.kill();
        }
        panic!("redis-server did not start on a free port in 5 attempts");
    }

    async fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = &mut self.child
                && let Ok(Some(_)) = child.try_wait()
            {
                return false; // exited: could not bind
            }
            if answers_ping(self.port).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills the server with SIGKILL (`kill -9`: no shutdown, no save) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (`kill -STOP`): it keeps its connections and answers nothing, as
    /// a Redis stuck in a long command or a swap storm would.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server go on (`kill -CONT`).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("a running redis-server");
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Starts the server again on the same port (empty: nothing was saved) and waits until
    /// it answers.
    pub async fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.child = Some(spawn(&self.binary, self.port, &self.dir));
            if self.wait_ready().await {
                return;
            }
            self.kill();
            assert!(
                Instant::now() < deadline,
                "redis-server did not restart on port {}",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `check` every 10 ms until it returns true; panics with `what` after `within`.
/// For tests on real time: bounded, never asserting how long it took.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

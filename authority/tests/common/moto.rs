//! A moto server of a test's own (scripts/lib/moto_server.py, one request
//! at a time), for the DynamoDB engine's fault tests: killed and restarted
//! empty, tables backed up and restored through boto3 (in moto's venv).
//! Needs GRANTID_TEST_MOTO_PYTHON (scripts/lib/services.sh sets it).
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A moto server of the test's own (scripts/lib/moto_server.py, one request
/// at a time), its tables in memory.
pub struct Moto {
    python: String,
    port: u16,
    child: Option<Child>,
}

impl Moto {
    /// `None` without moto (GRANTID_TEST_MOTO_PYTHON, which
    /// scripts/lib/services.sh sets).
    pub fn start(port: u16) -> Option<Moto> {
        let Ok(python) = std::env::var("GRANTID_TEST_MOTO_PYTHON") else {
            if std::env::var("GRANTID_REQUIRE_SERVICES").as_deref() == Ok("1") {
                panic!("GRANTID_TEST_MOTO_PYTHON is not set and GRANTID_REQUIRE_SERVICES=1");
            }
            eprintln!("note: GRANTID_TEST_MOTO_PYTHON is not set (no moto); skipping");
            return None;
        };
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/lib/moto_server.py");
        let child = Command::new(&python)
            .args([script, "127.0.0.1", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Moto {
            python,
            port,
            child: Some(child),
        })
    }

    /// The URL of `table` on this server.
    pub fn url(&self, table: &str) -> String {
        format!(
            "dynamodb://{table}?region=us-east-1&endpoint=http://127.0.0.1:{}",
            self.port
        )
    }

    /// Runs `code` with `ddb`, a boto3 client of this server.
    pub fn boto3(&self, code: &str) -> String {
        let script = format!(
            "import boto3\nddb = boto3.client('dynamodb', region_name='us-east-1', \
             endpoint_url='http://127.0.0.1:{}')\n{code}",
            self.port
        );
        let out = Command::new(&self.python)
            .args(["-c", &script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "boto3: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// SIGKILL, then a new, empty server on the same port.
    pub fn kill_and_restart(mut self) -> Moto {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        Moto::start(self.port).unwrap()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

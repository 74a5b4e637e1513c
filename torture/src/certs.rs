//! Throwaway certificates made with `openssl`: a CA, a server certificate
//! for `localhost` and `127.0.0.1`, and a client certificate, all P-256 and
//! valid for two days. The torture's PostgreSQL over TLS and the deployment
//! fuzzer's `grantid serve --tls-*` use them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files of a throwaway CA and the certificates it signed.
#[derive(Debug, Clone)]
pub struct Certs {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .map_err(|e| format!("openssl: {e} (install openssl)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl {}: {}",
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

const KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

impl Certs {
    /// Makes a CA and a server and a client certificate in `dir`.
    pub fn make(dir: &Path) -> Result<Certs, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut req = vec!["req", "-x509"];
        req.extend(KEY);
        req.extend([
            "-days",
            "2",
            "-subj",
            "/CN=grantid throwaway CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(dir, &req)?;
        let certs = Certs {
            dir: dir.to_owned(),
            ca: dir.join("ca.crt"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
        };
        certs.issue(
            "server",
            "localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )?;
        certs.issue(
            "client",
            "grantid client",
            "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
        )?;
        Ok(certs)
    }

    /// A new key and certificate for the server (a rotation), written
    /// beside the old ones and renamed over them, as a certificate manager
    /// does.
    pub fn renew_server(&self) -> Result<(), String> {
        self.issue(
            "server",
            "localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
    }

    /// `NAME.key` and `NAME.crt` signed by the CA, with the extensions
    /// `ext`; each file written as `.new` and renamed into place.
    fn issue(&self, name: &str, cn: &str, ext: &str) -> Result<(), String> {
        let d = &self.dir;
        let ext_file = d.join(format!("{name}.ext"));
        std::fs::write(&ext_file, ext).map_err(|e| format!("{}: {e}", ext_file.display()))?;
        let (key, csr, crt) = (
            format!("{name}.key.new"),
            format!("{name}.csr"),
            format!("{name}.crt.new"),
        );
        let subj = format!("/CN={cn}");
        let mut req = vec!["req"];
        req.extend(KEY);
        req.extend(["-subj", &subj, "-keyout", &key, "-out", &csr]);
        openssl(d, &req)?;
        let ext_name = format!("{name}.ext");
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &ext_name,
                "-out",
                &crt,
            ],
        )?;
        for (new, at) in [(&key, format!("{name}.key")), (&crt, format!("{name}.crt"))] {
            std::fs::rename(d.join(new), d.join(&at)).map_err(|e| format!("{at}: {e}"))?;
        }
        Ok(())
    }
}

//! The deployment fuzzer's hostile-client check reports a stop only when
//! the hostile client caused it: a served `static:N` without a state file
//! refuses every `grpc://` client from the start (its fleet processes are
//! refused at start too), so its probes are not made.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn a_deployment_that_refuses_every_client_is_not_reported_stopped() {
    let fuzzer = PathBuf::from(env!("CARGO_BIN_EXE_deploy-fuzz"));
    let grantid = fuzzer.with_file_name("grantid");
    if !grantid.exists() {
        assert!(
            std::env::var_os("GRANTID_REQUIRE_SERVICES").is_none(),
            "GRANTID_REQUIRE_SERVICES is set but there is no {}",
            grantid.display()
        );
        eprintln!(
            "skipped: no {} (cargo build -p grantid-cli)",
            grantid.display()
        );
        return;
    }
    for seed in ["1", "3"] {
        let out = Command::new(&fuzzer)
            .args(["--grantid", grantid.to_str().unwrap()])
            .args(["--engines", "grpc-static", "--focus", "hostile"])
            .args(["--seed", seed, "--cases", "1"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let case = text
            .lines()
            .find(|l| l.starts_with(&format!("case seed={seed} engine=grpc-static")))
            .unwrap_or_else(|| panic!("no grpc-static case in:\n{text}"));
        assert!(case.contains("ids=0 "), "{case}");
        assert!(case.contains(" stopped=0"), "{text}");
        assert!(
            text.contains("probes: not made (the control probe was refused) 1"),
            "{text}"
        );
        assert!(out.status.success(), "{text}");
    }
}

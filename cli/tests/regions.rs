//! `--datacenter-bits`, `--datacenter` and `datacenter=N` on the command
//! line (docs/AUTHORITIES.md, "Regions").

use assert_cmd::Command;

fn grantid() -> Command {
    Command::cargo_bin("grantid").unwrap()
}

fn state_url(tag: &str) -> String {
    let dir = std::env::temp_dir().join(format!("grantid-cli-regions-{}", std::process::id()));
    format!("file:{}", dir.join(format!("{tag}.json")).display())
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

const SPLIT: [&str; 2] = ["--datacenter-bits", "5"];

#[test]
fn decode_shows_the_datacenter_and_the_worker_within_it() {
    // Worker 3 of datacenter 17 (value 547) at tick 1000, sequence 9, in
    // 41 / 5 + 5 / 12.
    let id = ((1000u64 << 22) | (547 << 12) | 9).to_string();
    let json = ok(&grantid()
        .args(["decode", "--json", &id])
        .args(SPLIT)
        .output()
        .unwrap());
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(v["worker"], 547);
    assert_eq!(v["datacenter"], 17);
    assert_eq!(v["datacenter_worker"], 3);
    assert_eq!(v["layout"]["datacenter_bits"], 5);
    let table = ok(&grantid()
        .args(["decode", "--format", "table", &id])
        .args(SPLIT)
        .output()
        .unwrap());
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&header[5..], ["datacenter", "dc_worker"]);
    assert_eq!(&row[3..], ["547", "9", "17", "3"]);
    let text = ok(&grantid()
        .args(["decode", &id])
        .args(SPLIT)
        .output()
        .unwrap());
    assert!(
        text.contains("datacenter 17\n") && text.contains("dc_worker  3\n"),
        "{text}"
    );
    // Without a split the table and text keep their columns; JSON says 0.
    let flat = ok(&grantid().args(["decode", "--json", &id]).output().unwrap());
    let v: serde_json::Value = serde_json::from_str(flat.trim()).unwrap();
    assert_eq!(
        (v["datacenter"].as_u64(), v["datacenter_worker"].as_u64()),
        (Some(0), Some(547))
    );
    let flat = ok(&grantid()
        .args(["decode", "-f", "table", &id])
        .output()
        .unwrap());
    assert!(!flat.contains("datacenter"), "{flat}");
}

#[test]
fn next_issues_in_the_urls_datacenter_and_status_shows_it() {
    let url = format!("{}?datacenter=2", state_url("next"));
    let out = ok(&grantid()
        .args([
            "next",
            "-n",
            "3",
            "-f",
            "json",
            "-a",
            &url,
            "--datacenter",
            "2",
        ])
        .args(SPLIT)
        .output()
        .unwrap());
    for line in out.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["datacenter"], 2, "{line}");
        assert_eq!(v["worker"].as_u64().unwrap() >> 5, 2, "{line}");
    }
    let status = ok(&grantid()
        .args(["authority", "status", &url, "-f", "json"])
        .output()
        .unwrap());
    let rows: serde_json::Value = serde_json::from_str(status.trim()).unwrap();
    assert_eq!(rows[0]["datacenter"], 2, "{status}");
    assert!(rows[0]["worker"].as_u64().unwrap() < 32, "{status}");
    let table = ok(&grantid()
        .args(["authority", "status", &url])
        .output()
        .unwrap());
    assert!(table.starts_with("datacenter 2 "), "{table}");
}

#[test]
fn mismatches_are_invalid_arguments() {
    let url = format!("{}?datacenter=2", state_url("mismatch"));
    for (args, needle) in [
        (
            vec!["--datacenter", "1"],
            "authority grants the workers of datacenter 2",
        ),
        (vec!["--datacenter-bits", "11"], "datacenter_bits is 11"),
        (vec![], "no datacenter bits"),
    ] {
        let mut cmd = grantid();
        cmd.args(["next", "-a", &url, "--wait-ms", "2000"])
            .args(&args);
        if args.is_empty() {
            // No --datacenter-bits: the URL's datacenter cannot fit.
        } else if args[0] == "--datacenter" {
            cmd.args(SPLIT);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// The workers `grantid next` issued from, with `args`.
fn workers_of(args: &[&str]) -> Vec<(u64, u64)> {
    let out = ok(&grantid()
        .args(["next", "-n", "3", "-f", "json", "--wait-ms", "3000"])
        .args(args)
        .output()
        .unwrap());
    out.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                v["worker"].as_u64().unwrap(),
                v["datacenter"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_processs_datacenter_restricts_an_authority_url_without_one() {
    // A static worker with a split: worker 3 of the whole field, or of
    // datacenter 1 (35) when the process runs there.
    let mut with = vec!["-a", "static:3", "--namespace", "regions-static"];
    with.extend(SPLIT);
    assert_eq!(workers_of(&with), [(3, 0); 3]);
    with.extend(["--datacenter", "1"]);
    assert_eq!(workers_of(&with), [(35, 1); 3]);
    // Any engine: the file authority grants datacenter 1's workers.
    let url = state_url("process-datacenter");
    let mut file = vec!["-a", url.as_str(), "--datacenter", "1"];
    file.extend(SPLIT);
    for (worker, datacenter) in workers_of(&file) {
        assert_eq!((worker >> 5, datacenter), (1, 1));
    }
}

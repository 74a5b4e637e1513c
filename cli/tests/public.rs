//! `grantid public`, run as a built binary: the key from a file or the
//! environment only, never shown; values from arguments or standard input.

use std::path::PathBuf;

use assert_cmd::Command;

const KEY: &str = "1b1a1918131211100b0a090803020100";
/// conformance/public_ids.json, namespace "paper-key": ID 1 and ID 2.
const ONE: &str = "599xvdwkrhxp9";
const TWO: &str = "652nsmnz62rx8";

fn grantid() -> Command {
    let mut c = Command::cargo_bin("grantid").unwrap();
    c.env_remove("GRANTID_PUBLIC_KEY")
        .env_remove("GRANTID_PUBLIC_KEY_FILE");
    c
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grantid-cli-public-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn encode_and_decode_with_the_key_in_the_environment() {
    let out = grantid()
        .env("GRANTID_PUBLIC_KEY", KEY)
        .args(["public", "encode", "1", "0x2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{ONE}\n{TWO}\n"));
    let out = grantid()
        .env("GRANTID_PUBLIC_KEY", KEY.to_uppercase())
        .args(["public", "decode", &ONE.to_uppercase(), TWO])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1\n2\n");
}

#[test]
fn key_files_hold_hex_or_16_raw_bytes_and_values_come_from_stdin() {
    let dir = scratch("files");
    let hex = dir.join("hex.key");
    std::fs::write(&hex, format!("  {KEY}\n")).unwrap();
    let raw = dir.join("raw.key");
    let bytes: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&KEY[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    std::fs::write(&raw, &bytes).unwrap();
    for file in [&hex, &raw] {
        let out = grantid()
            .args(["public", "encode", "--numeric", "--key-file"])
            .arg(file)
            .write_stdin("1\n\n2\n")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            "6100050306375677641\n7100691882944062376\n"
        );
    }
    let out = grantid()
        .env("GRANTID_PUBLIC_KEY_FILE", &hex)
        .args(["public", "decode", "--numeric", "7100691882944062376"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "2\n");
}

#[test]
fn a_missing_or_bad_key_is_refused_and_never_shown() {
    let out = grantid().args(["public", "encode", "1"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("GRANTID_PUBLIC_KEY"),
        "{}",
        text(&out.stderr)
    );
    // One digit short: refused, and neither the key nor its start is echoed.
    let short = &KEY[1..];
    let dir = scratch("bad");
    let file = dir.join("short.key");
    std::fs::write(&file, short).unwrap();
    for mut cmd in [
        {
            let mut c = grantid();
            c.env("GRANTID_PUBLIC_KEY", short);
            c
        },
        {
            let mut c = grantid();
            c.env("GRANTID_PUBLIC_KEY_FILE", &file);
            c
        },
    ] {
        let out = cmd.args(["public", "encode", "1"]).output().unwrap();
        assert!(!out.status.success());
        let all = text(&out.stdout) + &text(&out.stderr);
        assert!(all.contains("INVALID_ARGUMENT"), "{all}");
        assert!(!all.contains(&short[..10]), "{all}");
    }
    // There is no way to pass the key itself as an argument.
    let out = grantid()
        .args(["public", "encode", "--key", KEY, "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn bad_values_are_invalid_arguments() {
    for (cmd, value) in [
        ("encode", "0"),
        ("encode", "9223372036854775808"),
        ("decode", "8000000000000"),
        ("decode", "599xvdwkrhxpi"),
    ] {
        let out = grantid()
            .env("GRANTID_PUBLIC_KEY", KEY)
            .args(["public", cmd, value])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{cmd} {value}");
        assert!(
            text(&out.stderr).contains("INVALID_ARGUMENT"),
            "{}",
            text(&out.stderr)
        );
        assert!(!text(&out.stderr).contains(KEY));
    }
}

#[test]
fn keygen_writes_a_private_new_file_and_prints_no_key() {
    let dir = scratch("keygen");
    let file = dir.join("ns.key");
    let out = grantid()
        .args(["public", "keygen", "--key-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let key = std::fs::read_to_string(&file).unwrap();
    assert_eq!(key.trim().len(), 32);
    assert!(key.trim().bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(!text(&out.stdout).contains(key.trim()) && !text(&out.stderr).contains(key.trim()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // Never overwritten.
    let again = grantid()
        .args(["public", "keygen", "--key-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), key);
    // The key works both ways.
    let out = grantid()
        .args(["public", "encode", "123456789", "--key-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let public = text(&out.stdout);
    let out = grantid()
        .args(["public", "decode", public.trim(), "--key-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), "123456789\n");
}

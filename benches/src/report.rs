//! Reading criterion's estimates and rendering the summary table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

/// One bench: its median and mean in ns per ID.
#[derive(Debug, Clone, PartialEq)]
pub struct Bench {
    pub median_ns: f64,
    pub mean_ns: f64,
}

/// Everything the summary needs.
#[derive(Debug, Default)]
pub struct Results {
    /// Keyed by `group/function`.
    pub benches: BTreeMap<String, Bench>,
    /// `saturated-fixed.json`, when the fixed-duration run wrote it.
    pub saturated: Option<Value>,
}

/// Reads `<dir>/<group>/<function>/new/{benchmark,estimates}.json` and
/// `<dir>/saturated-fixed.json`.
pub fn load(dir: &Path) -> Result<Results, String> {
    let mut results = Results::default();
    let groups = std::fs::read_dir(dir).map_err(|e| e.to_string())?;
    for group in groups.flatten() {
        let Ok(functions) = std::fs::read_dir(group.path()) else {
            continue;
        };
        for function in functions.flatten() {
            let new = function.path().join("new");
            let (Ok(meta), Ok(est)) = (
                std::fs::read_to_string(new.join("benchmark.json")),
                std::fs::read_to_string(new.join("estimates.json")),
            ) else {
                continue;
            };
            let (id, bench) =
                parse(&meta, &est).map_err(|e| format!("{}: {e}", function.path().display()))?;
            results.benches.insert(id, bench);
        }
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("saturated-fixed.json")) {
        results.saturated =
            Some(serde_json::from_str(&text).map_err(|e| format!("saturated-fixed.json: {e}"))?);
    }
    Ok(results)
}

/// Parses one bench's `benchmark.json` (for its id) and `estimates.json`.
pub fn parse(benchmark_json: &str, estimates_json: &str) -> Result<(String, Bench), String> {
    let meta: Value = serde_json::from_str(benchmark_json).map_err(|e| e.to_string())?;
    let est: Value = serde_json::from_str(estimates_json).map_err(|e| e.to_string())?;
    let id = meta["full_id"]
        .as_str()
        .ok_or("benchmark.json has no full_id")?
        .to_string();
    let point = |name: &str| {
        est[name]["point_estimate"]
            .as_f64()
            .ok_or(format!("estimates.json has no {name}.point_estimate"))
    };
    Ok((
        id,
        Bench {
            median_ns: point("median")?,
            mean_ns: point("mean")?,
        },
    ))
}

const GRANTID: &str = "single/grantid_next_id";
const PEERS: [&str; 5] = [
    "single/atomic_fetch_add",
    "single/atomic_cas",
    "single/uuid_now_v7",
    "single/ulid_new",
    "single/snowflake_real_time_below_cap",
];

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

/// The summary: every bench, grantid against each peer, and the targets.
pub fn render(r: &Results) -> String {
    let mut out = String::new();
    let b = &r.benches;
    let _ = writeln!(out, "| bench | median ns/ID | mean ns/ID | M IDs/s |");
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for (id, x) in b {
        let _ = writeln!(
            out,
            "| {id} | {:.2} | {:.2} | {:.2} |",
            x.median_ns,
            x.mean_ns,
            1e3 / x.median_ns
        );
    }
    if let Some(g) = b.get(GRANTID) {
        let _ = writeln!(
            out,
            "\n| peer (one thread) | peer ns/ID | peer / grantid next_id |"
        );
        let _ = writeln!(out, "|---|---:|---:|");
        for peer in PEERS {
            if let Some(p) = b.get(peer) {
                let _ = writeln!(
                    out,
                    "| {peer} | {:.2} | {:.2}x |",
                    p.median_ns,
                    p.median_ns / g.median_ns
                );
            }
        }
    }
    let _ = writeln!(out, "\n| target | measured | goal | |");
    let _ = writeln!(out, "|---|---:|---:|---|");
    if let (Some(g), Some(cas)) = (b.get(GRANTID), b.get("single/atomic_cas")) {
        let x = g.median_ns / cas.median_ns;
        let _ = writeln!(
            out,
            "| next_id / CAS floor | {x:.2}x | <= 2x | {} |",
            verdict(x <= 2.0)
        );
    }
    if let (Some(one), Some(two)) = (b.get(GRANTID), b.get("two_threads/grantid_next_id")) {
        let x = one.median_ns / two.median_ns;
        let _ = writeln!(
            out,
            "| two threads aggregate / one thread | {x:.2}x | >= 1.7x | {} |",
            verdict(x >= 1.7)
        );
    }
    if let Some(batch) = b.get("batch/grantid_fill_1000_per_id") {
        let x = batch.median_ns;
        let _ = writeln!(
            out,
            "| fill(1000) per ID | {x:.3} ns | <= 1 ns | {} |",
            verdict(x <= 1.0)
        );
    }
    if let Some(s) = &r.saturated {
        for (name, label) in [
            ("grantid_default_layout", "saturated default layout"),
            ("snowflake_real_time", "saturated rs-snowflake (peer)"),
        ] {
            if let Some(f) = s[name]["fraction_of_cap"].as_f64() {
                let ids = s[name]["ids_per_second"].as_f64().unwrap_or(0.0);
                let goal = if name.starts_with("grantid") {
                    verdict(f >= 0.995)
                } else {
                    "-"
                };
                let _ = writeln!(
                    out,
                    "| {label}, fixed run ({ids:.0} IDs/s) | {:.2} % of cap | >= 99.5 % | {goal} |",
                    100.0 * f
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: &str =
        r#"{"group_id":"single","function_id":"atomic_cas","full_id":"single/atomic_cas"}"#;
    const EST: &str = r#"{"mean":{"point_estimate":30.5},"median":{"point_estimate":29.0}}"#;

    #[test]
    fn parses_criterion_files() {
        let (id, b) = parse(META, EST).unwrap();
        assert_eq!(id, "single/atomic_cas");
        assert_eq!((b.median_ns, b.mean_ns), (29.0, 30.5));
        assert!(parse(META, "{}").unwrap_err().contains("median"));
        assert!(parse("{}", EST).unwrap_err().contains("full_id"));
    }

    #[test]
    fn renders_ratios_and_verdicts() {
        let mut r = Results::default();
        let bench = |m: f64| Bench {
            median_ns: m,
            mean_ns: m,
        };
        r.benches.insert("single/atomic_cas".into(), bench(20.0));
        r.benches.insert(GRANTID.into(), bench(50.0));
        r.benches.insert("single/uuid_now_v7".into(), bench(100.0));
        r.benches
            .insert("two_threads/grantid_next_id".into(), bench(25.0));
        r.saturated = Some(serde_json::json!({
            "grantid_default_layout": {"fraction_of_cap": 0.999, "ids_per_second": 4.09e6}
        }));
        let text = render(&r);
        assert!(
            text.contains("| single/uuid_now_v7 | 100.00 | 2.00x |"),
            "{text}"
        );
        assert!(
            text.contains("| next_id / CAS floor | 2.50x | <= 2x | MISSED |"),
            "{text}"
        );
        assert!(text.contains("| 2.00x | >= 1.7x | met |"), "{text}");
        assert!(text.contains("99.90 % of cap"), "{text}");
    }
}

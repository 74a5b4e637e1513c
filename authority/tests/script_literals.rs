//! The rule's numbers that the stores' scripts (SQL, Lua) spell out are
//! Rust's constants: every place a script writes one is listed here, and
//! each must hold the constant's value.

/// In `script` (`name`), every `before` is followed by `value` and `after`,
/// and there is at least one.
fn every_use_is(name: &str, script: &str, before: &str, value: u64, after: &str) {
    let uses: Vec<&str> = script.split(before).skip(1).collect();
    assert!(!uses.is_empty(), "{name}: no {before:?}");
    let want = format!("{value}{after}");
    for rest in uses {
        let line = rest.lines().next().unwrap_or_default();
        assert!(
            rest.starts_with(&want),
            "{name}: {before:?} is followed by {line:?}, not {want:?} (the Rust constant)"
        );
    }
}

#[cfg(feature = "postgres")]
#[test]
fn the_postgres_script_spells_the_rust_constants() {
    use grantid_authority::{DEFAULT_CLOCK_SKEW_MS, DEFAULT_MAX_LEAD_MS, SQL_V1};
    let name = "engines/postgres/v1.sql";
    every_use_is(
        name,
        SQL_V1,
        "setting_ms('grantid.max_lead_ms', ",
        DEFAULT_MAX_LEAD_MS,
        ")",
    );
    every_use_is(
        name,
        SQL_V1,
        "setting_ms('grantid.clock_skew_ms', ",
        DEFAULT_CLOCK_SKEW_MS,
        ")",
    );
    every_use_is(
        name,
        SQL_V1,
        "high_water > v_now + (",
        grantid::rule::FIRST_GRANT_LEAD_MS,
        " + p_tick_ms - 1) / p_tick_ms",
    );
}

#[cfg(feature = "mysql")]
#[test]
fn the_mysql_script_spells_the_rust_constants() {
    every_use_is(
        "engines/mysql/v1.sql",
        grantid_authority::MYSQL_SQL_V1,
        "w_hw > v_now + (",
        grantid::rule::FIRST_GRANT_LEAD_MS,
        " + p_tick_ms - 1) DIV p_tick_ms",
    );
}

#[cfg(feature = "redis")]
#[test]
fn the_redis_script_spells_the_rust_constants() {
    use grantid_authority::{DEFAULT_CLOCK_SKEW_MS, DEFAULT_MAX_LEAD_MS, LUA_V1};
    let name = "engines/redis/v1.lua";
    every_use_is(
        name,
        LUA_V1,
        "tonumber(ARGV[16] or '') or ",
        DEFAULT_MAX_LEAD_MS,
        "\n",
    );
    every_use_is(
        name,
        LUA_V1,
        "tonumber(ARGV[17] or '') or ",
        DEFAULT_CLOCK_SKEW_MS,
        "\n",
    );
    every_use_is(
        name,
        LUA_V1,
        "hw > now + math.ceil(",
        grantid::rule::FIRST_GRANT_LEAD_MS,
        " / tick)",
    );
}

/// The check itself: a script that spells another number is caught.
#[test]
#[should_panic(expected = "not \"7000)\"")]
fn another_number_is_caught() {
    every_use_is(
        "sample",
        "a := setting_ms('x', 7000); b := setting_ms('x', 6000);",
        "setting_ms('x', ",
        7000,
        ")",
    );
}

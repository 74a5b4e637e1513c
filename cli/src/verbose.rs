//! `-v`: the core's events (its `log` records, target `grantid`) on
//! standard error, one line each.

/// Installs the logger for `-v` given `count` times: none at 0; at 1 every
/// event (grants, renewal trouble, lost leases, close); at 2 and more, trace
/// records too.
pub fn init(count: u8) {
    let level = match count {
        0 => return,
        1 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    // env_logger writes to standard error and ignores write failures, so a
    // closed standard error never panics.
    env_logger::Builder::new()
        .filter_level(log::LevelFilter::Off)
        .filter_module("grantid", level)
        .filter_module("grantid_authority", level)
        .init();
}

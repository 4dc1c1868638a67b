//! Test sizes a run can raise through the environment (`BLOOMKV_*`), for longer runs than CI's.

/// The number in the environment variable `name`, or `default` when it is unset or not a
/// number.
pub fn u64_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

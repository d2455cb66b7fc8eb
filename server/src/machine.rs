//! Facts about the machine the server runs on.
//!
//! Read by hand from two Linux files rather than through a crate such as
//! `sysinfo`: the server needs one number, and those crates enumerate
//! processes, disks and networks to give it.

/// The memory this process may use, in bytes: the machine's total, or the
/// cgroup's limit where that is lower (a container). `None` where neither
/// can be read (not Linux).
pub(crate) fn memory_bytes() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| mem_total(&text));
    let limit = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| text.trim().parse::<u64>().ok());
    match (total, limit) {
        (Some(t), Some(l)) => Some(t.min(l)),
        (t, l) => t.or(l),
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_is_read_in_bytes() {
        assert_eq!(mem_total("MemTotal:       24600000 kB\nMemFree: 1 kB\n"), Some(24_600_000 * 1024));
        assert_eq!(mem_total("nothing"), None);
        assert!(memory_bytes().is_some_and(|m| m > 1 << 20), "this Linux machine's memory is known");
    }
}

//! Facts about this machine and the time, for records that say where and when something ran.

use std::time::{SystemTime, UNIX_EPOCH};

/// Stands in for a fact that cannot be read.
pub const UNKNOWN: &str = "unknown";

/// This machine's host name (Linux: /proc/sys/kernel/hostname, else `$HOSTNAME`).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| UNKNOWN.into())
}

/// `YYYY-MM-DDTHH:MM:SSZ` (RFC 3339, UTC).
pub fn iso_timestamp(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = utc_fields(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

pub fn utc_fields(t: SystemTime) -> (i64, u32, u32, u32, u32, u32) {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (H. Hinnant's algorithm): proleptic Gregorian calendar, no time-zone data needed.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    (year, month, day, h as u32, m as u32, s as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_match_known_dates() {
        let t = UNIX_EPOCH + Duration::from_secs(1_796_002_200); // 2026-11-30T01:30:00Z
        assert_eq!(iso_timestamp(t), "2026-11-30T01:30:00Z");
        assert_eq!(iso_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(iso_timestamp(leap), "2000-02-29T00:00:00Z");
    }
}

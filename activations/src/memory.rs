//! Memory available now, to refuse a run whose estimated needs exceed it before anything is allocated.
use candle_core::Device;

/// MemAvailable of /proc/meminfo; `None` where it cannot be read (then nothing is refused).
pub fn host_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text)
}

/// MemAvailable (bytes) of /proc/meminfo text.
pub fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Free memory of a CUDA device; `None` for the CPU (or when it cannot be queried).
#[cfg(feature = "cuda")]
pub fn device_free_bytes(device: &Device) -> Option<u64> {
    let Device::Cuda(cuda) = device else {
        return None;
    };
    let (free, _total) = cuda.cuda_stream().context().mem_get_info().ok()?;
    Some(free as u64)
}

/// Free memory of a CUDA device; `None` for the CPU (or when it cannot be queried).
#[cfg(not(feature = "cuda"))]
pub fn device_free_bytes(_: &Device) -> Option<u64> {
    None
}

/// Bytes in binary units, e.g. "1.5 GiB".
pub fn human(bytes: u128) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// One item of a memory estimate: what it is, the config key that sizes it, its bytes and where.
#[derive(Clone, Debug, PartialEq)]
pub struct Need {
    pub what: &'static str,
    pub key: &'static str,
    pub bytes: u128,
    /// Held in device memory (false: host memory).
    pub on_device: bool,
}

/// The first memory (host, then device) that `needs` exceed, as (the key of its largest item, a message
/// with every number); `None` when everything fits or nothing can be measured.
pub fn shortfall(needs: &[Need], device: &Device) -> Option<(&'static str, String)> {
    for on_device in [false, true] {
        let mine: Vec<&Need> = needs.iter().filter(|p| p.on_device == on_device).collect();
        let need: u128 = mine.iter().map(|p| p.bytes).fold(0, u128::saturating_add);
        let available = if on_device {
            device_free_bytes(device)
        } else {
            host_available_bytes()
        };
        let Some(available) = available else {
            continue;
        };
        if need <= u128::from(available) {
            continue;
        }
        let largest = mine.iter().max_by_key(|p| p.bytes)?.key;
        let items: Vec<String> = mine
            .iter()
            .filter(|p| p.bytes > 0)
            .map(|p| format!("{} ({}) {}", p.what, p.key, human(p.bytes)))
            .collect();
        return Some((
            largest,
            format!(
                "the run needs at least {} of {} memory but {} is available: {}; lower {largest}",
                human(need),
                if on_device { "device" } else { "host" },
                human(u128::from(available)),
                items.join(", ")
            ),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_units_and_shortfall() {
        let text = "MemTotal:       16318412 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(parse_meminfo(text), Some(8_192_000_000));
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 30), "3.0 GiB");
        let need = |bytes| Need {
            what: "x",
            key: "a.b",
            bytes,
            on_device: false,
        };
        if host_available_bytes().is_some() {
            assert!(shortfall(&[need(1 << 100)], &Device::Cpu).is_some());
            assert!(shortfall(&[need(1)], &Device::Cpu).is_none());
        }
    }
}
